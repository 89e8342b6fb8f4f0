package pebble

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestGroupCommit: the writes that arrive while a commit syncs wait for
// it (none is acknowledged before its own commit is synced), then all go
// into the next commit, with one WAL sync.
func TestGroupCommit(t *testing.T) {
	var (
		syncs atomic.Int64
		gate  = make(chan struct{})
		held  atomic.Bool
	)
	held.Store(true)
	ff := &faultFS{}
	ff.set(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			if strings.HasSuffix(op.Path, ".log") {
				syncs.Add(1)
				if held.Load() {
					<-gate
				}
			}
		}
		return nil
	})
	d := mustOpen(t, t.TempDir(), WithCreate(true), faulty(ff))
	ctx := t.Context()
	base := syncs.Load()

	const n = 20
	var wg sync.WaitGroup
	var acked atomic.Int64
	store := func(key string) {
		defer wg.Done()
		if err := d.Store(ctx, []byte(key), []byte("v")); err != nil {
			t.Errorf("store %s: %v", key, err)
			return
		}
		acked.Add(1)
	}
	wg.Add(1)
	go store("first")
	waitFor(t, "the first commit to sync", func() bool { return syncs.Load() > base })
	wg.Add(n)
	for i := range n {
		go store(fmt.Sprintf("key-%02d", i))
	}
	waitFor(t, "the writes to join the next group", func() bool {
		d.queue.mu.Lock()
		defer d.queue.mu.Unlock()
		return d.queue.next != nil && d.queue.next.b.Count() == n
	})
	if a := acked.Load(); a != 0 {
		t.Errorf("%d stores acknowledged while the WAL sync was held", a)
	}
	held.Store(false)
	close(gate)
	wg.Wait()
	if got := syncs.Load() - base; got != 2 {
		t.Errorf("%d WAL syncs for a commit and the %d writes that waited for it, want 2", got, n)
	}
	for i := range n {
		if ok, err := d.Exist(ctx, fmt.Appendf(nil, "key-%02d", i)); !ok || err != nil {
			t.Errorf("key-%02d after its store: %v, %v", i, ok, err)
		}
	}
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGroupCommitCrash: concurrent writers keep storing while the machine
// "crashes" (a copy of the file system as it was last synced): every
// store acknowledged before the crash is in the copy.
func TestGroupCommitCrash(t *testing.T) {
	fs := vfs.NewCrashableMem()
	dir := t.TempDir()
	d := mustOpen(t, dir, WithCreate(true), withFS(fs))
	ctx := t.Context()
	const writers = 16
	var (
		mu    sync.Mutex
		acked [][]byte
		stop  atomic.Bool
		wg    sync.WaitGroup
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				k := fmt.Appendf(nil, "w%02d-%06d", w, i)
				if err := d.Store(ctx, k, k); err != nil {
					t.Errorf("store %s: %v", k, err)
					return
				}
				mu.Lock()
				acked = append(acked, k)
				mu.Unlock()
			}
		}()
	}
	waitFor(t, "a thousand stores", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 1000
	})
	mu.Lock()
	before := slices.Clone(acked)
	mu.Unlock()
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	stop.Store(true)
	wg.Wait()

	after := mustOpen(t, dir, WithCreate(true), withFS(crashed))
	for _, k := range before {
		if v, err := after.Retrieve(ctx, k); err != nil || string(v) != string(k) {
			t.Fatalf("%s, acknowledged before the crash: %q, %v", k, v, err)
		}
	}
	t.Logf("%d stores acknowledged before the crash, all there", len(before))
}
