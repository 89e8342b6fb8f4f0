package pebble

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
