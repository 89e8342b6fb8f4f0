package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvarray/kvarray/array"
)

// TestServeDeviceFaults: `kvarray serve` on its default array (6 Pebble
// devices, hybrid, 2 device faults tolerated) under a write load from
// go-redis clients has one device's directory removed (rm -rf), then
// another's made unwritable (chmod 000, and for root, whom modes do not
// stop, chattr +i). Invariant: the server stays up, no write fails (both
// faults are within the tolerance), every acknowledged value reads back
// byte-exact, both devices end failed, and serve stops cleanly.
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
		deadline := time.Now().Add(time.Minute)
		for start := writes.Load(); writes.Load() < start+n; {
			if time.Now().After(deadline) {
				t.Fatalf("%d writes in a minute, waiting for %d more", writes.Load()-start, n)
			}
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
	locked := os.Geteuid() != 0
	if !locked {
		// Modes do not stop root; the immutable attribute does, where
		// the file system has it.
		if out, err := exec.Command("chattr", "+i", dev3).CombinedOutput(); err != nil {
			t.Logf("root, and chattr +i fails here (%v: %s): device 3 stays writable", err, bytes.TrimSpace(out))
		} else {
			locked = true
			t.Cleanup(func() { _ = exec.Command("chattr", "-i", dev3).Run() })
		}
	}
	// Both devices fail within seconds (each checks its directory every
	// second), while the load goes on.
	admin := s.client(t)
	// A status may wait on a device that is failing right then (its
	// calls wait up to the device's time limit): retried, not fatal.
	state := func(i int) array.DeviceStatus {
		var last error
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); {
			raw, err := admin.Do(ctx, "kvarray.status").Text()
			if err != nil {
				last = err
				continue
			}
			var st array.Status
			if err := json.Unmarshal([]byte(raw), &st); err != nil {
				t.Fatal(err)
			}
			return st.Devices[i]
		}
		t.Fatalf("KVARRAY.STATUS: %v", last)
		return array.DeviceStatus{}
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		if state(1).State == "failed" && (!locked || state(3).State == "failed") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	wait(100)
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
	for _, i := range []int{1, 3} {
		st := state(i)
		t.Logf("device %d: %s (%s)", i, st.State, st.Reason)
		if st.State != "failed" && (i == 1 || locked) {
			t.Errorf("device %d is %s, want failed", i, st.State)
		}
	}
	t.Logf("%d writes, %d keys acknowledged", writes.Load(), len(acked))
	s.stop(t)
}

// TestServeDeviceFull: `kvarray serve` with one Pebble device on a small
// tmpfs that fills up under a write load. Invariant: the full device turns
// full (read-only, not failed) and no write hangs or fails (one device is
// within the tolerance), every acknowledged value reads back byte-exact;
// once the tmpfs is grown (space freed) the device comes back healthy
// while serving, reopened and resynced with no restart (issue 40), every
// value still intact; and serve stops cleanly in bounded time. It needs
// mount (root); it skips with the reason elsewhere.
func TestServeDeviceFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	t.Chdir(dir)
	ctx := context.Background()
	serve(t).stop(t) // creates the default array

	// Move device 5 onto a 48 MiB tmpfs: room for its WALs (preallocated
	// at 18 MiB each) and a little data.
	dev5, moved := filepath.Join(dir, "data", "dev5"), filepath.Join(dir, "dev5.orig")
	if err := os.Rename(dev5, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dev5, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", dev5).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v: %s", err, bytes.TrimSpace(out))
	}
	// Lazy: a read-only device keeps its files open until the process ends.
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dev5).Run() })
	if out, err := exec.Command("cp", "-a", moved+"/.", dev5).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}

	s := serve(t)
	rdb := s.client(t)
	rng := rand.New(rand.NewPCG(5, 5))
	acked := map[string][]byte{}
	full := false
	status := func() array.Status {
		t.Helper()
		raw, err := rdb.Do(ctx, "kvarray.status").Text()
		if err != nil {
			t.Fatal(err)
		}
		var st array.Status
		if err := json.Unmarshal([]byte(raw), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	for i := 0; i < 2000 && !full; i++ {
		k := fmt.Sprintf("key-%04d", i%400)
		v := make([]byte, 100<<10)
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		if err := rdb.Set(ctx, k, v, 0).Err(); err != nil {
			t.Fatalf("SET %s with one device filling up: %v", k, err)
		}
		acked[k] = v
		if i%20 == 19 {
			st := status()
			if st.Devices[5].State == "failed" {
				t.Fatalf("device 5 failed on a full disk, want full: %s", st.Devices[5].Reason)
			}
			full = st.Devices[5].State == "full"
			if full && !strings.Contains(st.Devices[5].Reason, "device full") {
				t.Errorf("device 5 full, but its reason says otherwise: %s", st.Devices[5].Reason)
			}
		}
	}
	if !full {
		status, _ := rdb.Do(ctx, "kvarray.status").Text()
		out, _ := exec.Command("df", dev5).CombinedOutput()
		ls, _ := exec.Command("ls", "-la", dev5).CombinedOutput()
		t.Fatalf("device 5 never turned full on a 48 MiB tmpfs: %s\n%s\n%s", status, out, ls)
	}
	for k, v := range acked {
		got, err := rdb.Get(ctx, k).Bytes()
		if err != nil || !bytes.Equal(got, v) {
			t.Errorf("GET %s: %d bytes, %v; acknowledged %d bytes", k, len(got), err, len(v))
		}
	}
	out, _ := exec.Command("df", "-h", dev5).CombinedOutput()
	t.Logf("%d keys acknowledged, device 5 full\n%s", len(acked), out)

	// Space freed: the tmpfs grows. The automatic resync (every 10 s)
	// finds it, reopens the device and resyncs it; writes go on.
	if out, err := exec.Command("mount", "-o", "remount,size=256m", dev5).CombinedOutput(); err != nil {
		t.Fatalf("grow the tmpfs: %v: %s", err, out)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for i := 0; ; i++ {
		st := status()
		if st.Devices[5].State == "healthy" && st.Devices[5].ResyncKeys == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("device 5 is %s (%d keys to resync) 3 minutes after space was freed: %s", st.Devices[5].State, st.Devices[5].ResyncKeys, st.Devices[5].Reason)
		}
		k := fmt.Sprintf("key-%04d", i%400)
		v := make([]byte, 10<<10)
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		if err := rdb.Set(ctx, k, v, 0).Err(); err != nil {
			t.Fatalf("SET %s while device 5 comes back: %v", k, err)
		}
		acked[k] = v
		time.Sleep(20 * time.Millisecond)
	}
	for k, v := range acked {
		got, err := rdb.Get(ctx, k).Bytes()
		if err != nil || !bytes.Equal(got, v) {
			t.Errorf("after device 5 came back: GET %s: %d bytes, %v; acknowledged %d bytes", k, len(got), err, len(v))
		}
	}
	s.stop(t)
}
