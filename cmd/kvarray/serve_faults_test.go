package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestServeDeviceFaults: `kvarray serve` on its default array (6 Pebble
// devices, hybrid, 2 device faults tolerated) under a write load from
// go-redis clients has one device's directory removed (rm -rf), then
// another's made unreadable (chmod 000, which stops no one when the test
// runs as root). Invariant: the server stays up, no write fails (both
// faults are within the tolerance), every acknowledged value reads back
// byte-exact, and serve stops cleanly.
func TestServeDeviceFaults(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	ctx := context.Background()
	s := serve(t)
	sizes := []int{100, 3 << 10, 20 << 10, 200 << 10}

	const writers = 4
	var (
		stop   atomic.Bool
		wg     sync.WaitGroup
		mu     sync.Mutex
		acked  = map[string][]byte{} // the last acknowledged value of each key
		failed []error
		writes atomic.Int64
	)
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rdb := s.client(t)
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for i := 0; !stop.Load() && i < 100000; i++ {
				// Keys are reused, so overwrites are checked too; each
				// writer has its own keys, so its last ack is the truth.
				k := fmt.Sprintf("w%d-key-%03d", g, i%150)
				v := make([]byte, sizes[rng.IntN(len(sizes))])
				for j := range v {
					v[j] = byte(rng.Uint32())
				}
				err := rdb.Set(ctx, k, v, 0).Err()
				mu.Lock()
				if err != nil {
					failed = append(failed, fmt.Errorf("SET %s: %w", k, err))
				} else {
					acked[k] = v
				}
				mu.Unlock()
				writes.Add(1)
			}
		}()
	}
	wait := func(n int64) {
		for start := writes.Load(); writes.Load() < start+n; {
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait(100)
	// Pebble may create a file while the directory is emptied: retry, as
	// one would rerun rm -rf.
	for i := 0; ; i++ {
		err := os.RemoveAll(filepath.Join(dir, "data", "dev1"))
		if err == nil {
			break
		}
		if i == 20 {
			t.Fatal(err)
		}
	}
	wait(200)
	dev3 := filepath.Join(dir, "data", "dev3")
	if err := os.Chmod(dev3, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dev3, 0o755) })
	wait(200)
	stop.Store(true)
	wg.Wait()

	rdb := s.client(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("server down after the faults: %v", err)
	}
	for _, err := range failed {
		t.Errorf("write within tolerance failed: %v", err)
	}
	for k, v := range acked {
		got, err := rdb.Get(ctx, k).Bytes()
		if err != nil || !bytes.Equal(got, v) {
			t.Errorf("GET %s: %d bytes, %v; acknowledged %d bytes", k, len(got), err, len(v))
		}
	}
	status, err := rdb.Do(ctx, "kvarray.status").Text()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d writes, %d keys acknowledged; status: %.600s", writes.Load(), len(acked), status)
	s.stop(t)
}
