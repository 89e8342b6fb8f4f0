package array

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/pebble"
	"github.com/kvarray/kvarray/mechanism"
)

// smallFS mounts a file system of size bytes at a new directory and
// returns it: ext4 on a loop device, or, where loop devices are not to be
// had, a tmpfs with a size limit. It skips the test when it cannot mount
// either (not root).
func smallFS(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small file system needs root")
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "img")
	loop := func() error {
		f, err := os.Create(img)
		if err != nil {
			return err
		}
		if err := errors.Join(f.Truncate(size), f.Close()); err != nil {
			return err
		}
		if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
			return fmt.Errorf("mkfs.ext4: %v: %s", err, out)
		}
		if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
			return fmt.Errorf("mount -o loop: %v: %s", err, out)
		}
		return nil
	}
	if err := loop(); err != nil {
		t.Logf("no loop mount (%v): a tmpfs instead", err)
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", mnt).CombinedOutput(); err != nil {
			t.Skipf("cannot mount a small file system: %v: %s", err, out)
		}
	}
	// Lazily: the abandoned read-only Pebble instance keeps its files
	// open (its goroutines are parked) until the process exits.
	t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
	return mnt
}

// ballast fills dir's file system until about leave bytes are free, and
// returns the file that holds the space.
func ballast(t *testing.T, dir string, leave int64) string {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	name := filepath.Join(dir, "ballast")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for n := int64(0); n < free-leave; n += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			t.Fatalf("ballast: %v", err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestPebbleDiskFullComesBack: one Pebble device of six on a small file
// system that fills up while the array serves turns full (not failed):
// writes go on, degraded and recorded, reads go on; once space is freed
// the automatic resync reopens the device (its Pebble instance stays
// read-only after ENOSPC) and resyncs it, with no restart of the array;
// every acknowledged value reads back, from the device too.
func TestPebbleDiskFullComesBack(t *testing.T) {
	mnt := smallFS(t, 256<<20)
	root := t.TempDir()
	const full = 2
	dirs := make([]string, 6)
	devs := make([]device.Device, 6)
	for i := range devs {
		dirs[i] = filepath.Join(root, fmt.Sprint(i))
		if i == full {
			dirs[i] = filepath.Join(mnt, "dev")
		}
		d, err := pebble.Open(dirs[i], pebble.WithCreate(true))
		if err != nil {
			t.Fatal(err)
		}
		devs[i] = d
	}
	var mu sync.Mutex
	cur := devs[full]
	reopens := 0
	reopen := func(ctx context.Context, i int) (device.Device, error) {
		mu.Lock()
		defer mu.Unlock()
		_ = cur.Close()
		d, err := pebble.Open(dirs[i])
		if err != nil {
			return nil, err
		}
		cur = d
		reopens++
		return d, nil
	}
	a, err := Create(ctx, devs, everyMechanism(), WithDefault("replication"),
		WithAutoResync(50*time.Millisecond), WithReopen(reopen))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })

	rng := newRand(t)
	want := map[string][]byte{}
	var order []string
	store := func(k int) {
		t.Helper()
		key := fmt.Sprintf("key-%05d", k)
		v := randBytes(rng, 1000+rng.IntN(7000))
		if err := a.Store(ctx, []byte(key), v, Using(fullMechanisms[k%len(fullMechanisms)])); err != nil {
			t.Fatalf("store %s (device %d %v): %v", key, full, a.DeviceState(full), err)
		}
		if _, ok := want[key]; !ok {
			order = append(order, key)
		}
		want[key] = v
	}
	for k := range 300 {
		store(k)
	}
	ballastFile := ballast(t, mnt, 6<<20)
	k := 300
	for ; a.DeviceState(full) != mechanism.Full; k++ {
		if k > 300+20000 {
			t.Fatalf("device %d is %v after 20000 stores on a file system with 6 MiB free", full, a.DeviceState(full))
		}
		store(k)
	}
	t.Logf("device %d full after %d stores", full, k-300)
	for end := k + 200; k < end; k++ {
		store(k)
		store(k % 300) // overwrites of keys the device holds
	}
	for key, v := range want {
		got, err := a.Retrieve(ctx, []byte(key))
		if err != nil || string(got) != string(v) {
			t.Fatalf("device %d full: %s reads %d bytes of %d: %v", full, key, len(got), len(v), err)
		}
	}
	if st := a.DeviceState(full); st != mechanism.Full {
		t.Fatalf("device %d is %v, want full", full, st)
	}

	if err := os.Remove(ballastFile); err != nil {
		t.Fatal(err)
	}
	for ; k < 300+20000 && a.DeviceState(full) != mechanism.Healthy; k++ {
		store(k) // writes go on while it comes back
	}
	waitCaughtUp(t, a, full)
	mu.Lock()
	if reopens == 0 {
		t.Error("the device came back without being opened again")
	}
	mu.Unlock()
	// Every value, with two other devices out of the way: the device's
	// pieces count.
	for _, i := range []int{3, 4} {
		a.SetDeviceState(i, mechanism.Failed)
	}
	for _, key := range order {
		got, err := a.Retrieve(ctx, []byte(key))
		if err != nil || string(got) != string(want[key]) {
			t.Fatalf("device %d back, devices 3 and 4 failed: %s reads %d bytes of %d: %v", full, key, len(got), len(want[key]), err)
		}
	}
}
