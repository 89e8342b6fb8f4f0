package pebble

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/kvarray/kvarray/device"
)

// faultFS injects the error its current rule returns for an operation.
type faultFS struct {
	mu   sync.Mutex
	rule func(op errorfs.Op) error
}

func (f *faultFS) String() string { return "faultFS" }

func (f *faultFS) MaybeError(op errorfs.Op) error {
	f.mu.Lock()
	rule := f.rule
	f.mu.Unlock()
	if rule == nil {
		return nil
	}
	return rule(op)
}

func (f *faultFS) set(rule func(op errorfs.Op) error) {
	f.mu.Lock()
	f.rule = rule
	f.mu.Unlock()
}

// reuseFS gives errorfs a hand with recycled WAL files: its
// ReuseForWrite returns the file unwrapped, so writes to a recycled WAL
// would escape injection.
type reuseFS struct{ vfs.FS }

func (r reuseFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if err := r.Rename(oldname, newname); err != nil {
		return nil, err
	}
	return r.OpenReadWrite(newname, c)
}

func faulty(ff *faultFS) Option { return withFS(reuseFS{errorfs.Wrap(vfs.Default, ff)}) }

// on returns a rule failing the given kinds of operation on files whose
// name ends in suffix.
func on(err error, suffix string, kinds ...errorfs.OpKind) func(errorfs.Op) error {
	return func(op errorfs.Op) error {
		for _, k := range kinds {
			if op.Kind == k && strings.HasSuffix(op.Path, suffix) {
				return err
			}
		}
		return nil
	}
}

// closeWithin fails the test unless Close returns within a bound.
func closeWithin(t *testing.T, d *Device) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- d.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Logf("Close: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close of a faulty device did not return in 20s")
	}
}

// fill stores 256 KiB values until a store fails (memtables fill, so the
// WAL rotates and flushes write tables and the MANIFEST), returning the
// keys acknowledged and the first error.
func fill(t *testing.T, d *Device, prefix string, n int) ([][]byte, error) {
	t.Helper()
	v := random(256 << 10)
	var acked [][]byte
	for i := range n {
		k := fmt.Appendf(nil, "%s-%04d", prefix, i)
		if err := d.Store(t.Context(), k, v); err != nil {
			return acked, err
		}
		acked = append(acked, k)
	}
	return acked, nil
}

// TestWriteFaults: every kind of write error Pebble can meet (the WAL, its
// rotation, a flush's table, the MANIFEST) turns the device failed, or
// read-only for a full disk, with the reason, without a panic, an exit or
// a hang: the write that meets it returns, later writes are refused
// without entering Pebble, and Close returns.
func TestWriteFaults(t *testing.T) {
	eio, enospc, eacces := syscall.EIO, syscall.ENOSPC, syscall.EACCES
	for _, tc := range []struct {
		name    string
		rule    func(errorfs.Op) error
		noSpace bool
	}{
		{"wal write", on(eio, ".log", errorfs.OpFileWrite, errorfs.OpFileWriteAt), false},
		{"wal sync", on(eio, ".log", errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo), false},
		{"wal full", on(enospc, ".log", errorfs.OpFileWrite, errorfs.OpFileWriteAt), true},
		{"wal rotation", on(eacces, ".log", errorfs.OpCreate, errorfs.OpRename), false},
		{"flush table", on(eio, ".sst", errorfs.OpCreate), false},
		{"flush table full", on(enospc, ".sst", errorfs.OpFileWrite, errorfs.OpFileWriteAt), true},
		{"manifest", on(eio, "", errorfs.OpFileSync), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Pebble's small default memtables, so that 50 MiB of stores
			// rotate WALs and flush tables several times.
			untuned = true
			defer func() { untuned = false }()
			ctx := t.Context()
			ff := &faultFS{}
			d, err := Open(t.TempDir(), WithCreate(true), faulty(ff))
			if err != nil {
				t.Fatal(err)
			}
			before, err := fill(t, d, "before", 10)
			if err != nil {
				t.Fatalf("stores before the fault: %v", err)
			}
			if tc.name == "manifest" {
				// Only the MANIFEST: the WAL's syncs go on.
				ff.set(func(op errorfs.Op) error {
					if strings.Contains(op.Path, "MANIFEST") {
						return on(eio, "", errorfs.OpFileSync, errorfs.OpFileWrite)(op)
					}
					return nil
				})
			} else {
				ff.set(tc.rule)
			}
			_, err = fill(t, d, "after", 200)
			if err == nil {
				t.Fatal("200 stores of 256 KiB went through a failing file system")
			}
			want := device.ErrDeviceFailed
			if tc.noSpace {
				want = device.ErrNoSpace
			}
			if !errors.Is(err, want) || !errors.Is(err, device.ErrDeviceFailed) {
				t.Fatalf("store: %v, want %v (and ErrDeviceFailed)", err, want)
			}
			if msg := err.Error(); !strings.Contains(msg, eio.Error()) && !strings.Contains(msg, enospc.Error()) && !strings.Contains(msg, eacces.Error()) {
				t.Errorf("store error does not give the reason: %v", err)
			}
			// Later writes are refused the same way, at once.
			start := time.Now()
			if err := d.Store(ctx, []byte("later"), []byte("v")); !errors.Is(err, want) {
				t.Fatalf("later store: %v, want %v", err, want)
			}
			if err := d.Delete(ctx, []byte("later")); !errors.Is(err, want) {
				t.Fatalf("later delete: %v, want %v", err, want)
			}
			if el := time.Since(start); el > 5*time.Second {
				t.Errorf("refusing two writes took %v", el)
			}
			for _, k := range before {
				_, err := d.Retrieve(ctx, k)
				switch {
				case tc.noSpace && err != nil:
					// A full disk leaves the data readable.
					t.Fatalf("read-only device: Retrieve(%q): %v", k, err)
				case !tc.noSpace && !errors.Is(err, device.ErrDeviceFailed):
					t.Fatalf("failed device: Retrieve(%q): %v, want ErrDeviceFailed", k, err)
				}
			}
			closeWithin(t, d)
		})
	}
}

// TestFullStaysReadable: a device that ran out of space keeps serving
// reads for good: the write parked on purpose is not taken for a stuck
// disk, which Pebble reports after 5 s (here over the time limit).
func TestFullStaysReadable(t *testing.T) {
	ff := &faultFS{}
	d, err := Open(t.TempDir(), WithCreate(true), WithTimeout(time.Second), faulty(ff))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := d.Store(ctx, []byte("key-1"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	ff.set(on(syscall.ENOSPC, ".log", errorfs.OpFileWrite, errorfs.OpFileWriteAt))
	if err := d.Store(ctx, []byte("key-2"), []byte("v")); !errors.Is(err, device.ErrNoSpace) {
		t.Fatalf("store on a full disk: %v, want ErrNoSpace", err)
	}
	time.Sleep(6500 * time.Millisecond)
	if v, err := d.Retrieve(ctx, []byte("key-1")); err != nil || string(v) != "v" {
		t.Fatalf("read from a full device after 6.5 s: %q, %v", v, err)
	}
	closeWithin(t, d)
}

// TestFatalf: Pebble's Fatalf marks the device failed with the reason and
// never returns into Pebble.
func TestFatalf(t *testing.T) {
	d := mustOpen(t, t.TempDir(), WithCreate(true))
	go logger{d.h}.Fatalf("boom %d", 7) // parks for good
	<-d.h.dead
	err := d.Store(t.Context(), []byte("key-1"), []byte("v"))
	if !errors.Is(err, device.ErrDeviceFailed) || !strings.Contains(err.Error(), "boom 7") {
		t.Fatalf("store after Fatalf: %v, want ErrDeviceFailed with the reason", err)
	}
	if _, err := d.Info(t.Context()); !errors.Is(err, device.ErrDeviceFailed) {
		t.Fatalf("Info after Fatalf: %v", err)
	}
	var n int
	if err := d.Iterate(t.Context(), nil, func([]byte) error { n++; return nil }); !errors.Is(err, device.ErrDeviceFailed) {
		t.Fatalf("Iterate after Fatalf: %v", err)
	}
}

// TestStuckDisk: a WAL sync that never returns releases its caller after
// the time limit, with the device failed; Close still returns.
func TestStuckDisk(t *testing.T) {
	ff := &faultFS{}
	d, err := Open(t.TempDir(), WithCreate(true), WithTimeout(300*time.Millisecond), faulty(ff))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	defer close(release)
	ff.set(func(op errorfs.Op) error {
		if strings.HasSuffix(op.Path, ".log") && (op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo) {
			<-release
		}
		return nil
	})
	err = d.Store(t.Context(), []byte("key-1"), []byte("v"))
	if !errors.Is(err, device.ErrDeviceFailed) || !strings.Contains(err.Error(), "time limit") {
		t.Fatalf("store on a stuck disk: %v, want ErrDeviceFailed over the time limit", err)
	}
	closeWithin(t, d)
}

// TestStuckBackgroundWrite: a flush stuck in a table write, with no call
// waiting on it, fails the device once Pebble's disk health check (5 s)
// reports it past the time limit.
func TestStuckBackgroundWrite(t *testing.T) {
	ff := &faultFS{}
	d, err := Open(t.TempDir(), WithCreate(true), WithTimeout(time.Second), faulty(ff))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	defer close(release)
	if err := d.Store(t.Context(), []byte("key-1"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	ff.set(func(op errorfs.Op) error {
		if strings.HasSuffix(op.Path, ".sst") && op.Kind == errorfs.OpFileWrite {
			<-release
		}
		return nil
	})
	go func() { _ = d.db.Flush() }() // stuck for good: not a device call
	select {
	case <-d.h.dead:
	case <-time.After(15 * time.Second):
		t.Fatal("a table write stuck for 15 s did not fail the device")
	}
	if err := d.h.err(); !strings.Contains(err.Error(), "disk stuck") {
		t.Fatalf("failed for another reason: %v", err)
	}
	if _, err := d.Retrieve(t.Context(), []byte("key-1")); !errors.Is(err, device.ErrDeviceFailed) {
		t.Fatalf("read after the disk stuck: %v, want ErrDeviceFailed", err)
	}
	closeWithin(t, d)
}

// TestRemovedDir: the directory removed under a device in use (the
// `rm -rf data/dev1` case) fails the device within a few seconds, under a
// concurrent write load, without a panic.
func TestRemovedDir(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir, WithCreate(true))
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := random(16 << 10)
			for i := 0; !stop.Load() && i < 100000; i++ {
				if err := d.Store(t.Context(), fmt.Appendf(nil, "g%d-%06d", g, i), v); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	// The writers keep creating files while the tree goes, so one
	// RemoveAll can meet a directory that is not empty: repeat it, as a
	// user repeats rm -rf.
	for tries := 0; ; tries++ {
		err := os.RemoveAll(dir)
		if err == nil {
			break
		}
		if tries == 50 {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	deadline := time.Now().Add(10 * time.Second)
	for d.h.err() == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	if d.h.err() == nil {
		t.Fatal("device not failed 10s after its directory was removed")
	}
	for err := range errs {
		if !errors.Is(err, device.ErrDeviceFailed) {
			t.Errorf("store while the directory went: %v, want ErrDeviceFailed", err)
		}
	}
	if err := d.Store(t.Context(), []byte("key-after"), []byte("v")); !errors.Is(err, device.ErrDeviceFailed) {
		t.Fatalf("store after removal: %v", err)
	}
	closeWithin(t, d)
}

// lockDir makes dir refuse new entries to this process: chmod 000, or
// for root, whom modes do not stop, the immutable attribute (chattr +i,
// which stops root too; not every file system has it). It skips the test
// when neither works.
func lockDir(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
		return
	}
	if out, err := exec.Command("chattr", "+i", dir).CombinedOutput(); err != nil {
		t.Skipf("running as root, and chattr +i fails here (%v: %s): nothing stops root from writing", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", dir).Run() })
}

// TestUnwritableDir: a device in use whose directory stops taking new
// files (chmod 000; chattr +i for root) fails when Pebble next needs one,
// with the reason, under a write load, without a panic.
func TestUnwritableDir(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir, WithCreate(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Store(t.Context(), []byte("key-1"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	lockDir(t, dir)
	_, err = fill(t, d, "after", 400)
	if !errors.Is(err, device.ErrDeviceFailed) {
		t.Fatalf("stores into an unwritable directory: %v, want ErrDeviceFailed", err)
	}
	t.Logf("failed with: %v", err)
	closeWithin(t, d)
}

// TestFullFileSystem fills a real 32 MiB tmpfs: the store that meets ENOSPC
// returns ErrNoSpace (and ErrDeviceFailed, so the array counts a failed
// device), later writes are refused at once, every acknowledged value
// still reads back, and Close returns. It needs mount (root); it skips
// with the reason elsewhere.
func TestFullFileSystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v: %s", err, bytes.TrimSpace(out))
	}
	// Lazy: a read-only device keeps its files open until the process ends.
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	d, err := Open(filepath.Join(dir, "dev"), WithCreate(true))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	v := random(64 << 10)
	var acked [][]byte
	var serr error
	for i := range 1000 {
		k := fmt.Appendf(nil, "key-%04d", i)
		if serr = d.Store(ctx, k, v); serr != nil {
			break
		}
		acked = append(acked, k)
	}
	if !errors.Is(serr, device.ErrNoSpace) || !errors.Is(serr, device.ErrDeviceFailed) {
		t.Fatalf("store %d into 32 MiB: %v, want ErrNoSpace and ErrDeviceFailed", len(acked), serr)
	}
	if err := d.Store(ctx, []byte("key-more"), []byte("v")); !errors.Is(err, device.ErrNoSpace) {
		t.Fatalf("later store: %v, want ErrNoSpace", err)
	}
	for _, k := range acked {
		got, err := d.Retrieve(ctx, k)
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("acknowledged %q after the disk filled: %d bytes, %v", k, len(got), err)
		}
	}
	t.Logf("%d values of 64 KiB acknowledged, then: %v", len(acked), serr)
	closeWithin(t, d)
}

// TestRemovedDirUnderReads: reads of values whose tables are open but
// whose blob files are not, after the directory was removed, fail the
// device (Pebble v2.1.7 panics opening such a blob file) and never take
// the process down; every read returns its value or ErrDeviceFailed.
func TestRemovedDirUnderReads(t *testing.T) {
	dir := t.TempDir()
	d := mustOpen(t, dir, WithCreate(true))
	ctx := t.Context()
	v := random(16 << 10)
	const n = 400
	for i := range n {
		if err := d.Store(ctx, fmt.Appendf(nil, "key-%04d", i), v); err != nil {
			t.Fatal(err)
		}
	}
	closeWithin(t, d)
	d = mustOpen(t, dir) // the file cache starts empty
	// Open the tables (a scan of keys reads no value), not the blob
	// files.
	keys := 0
	if err := d.Scan(ctx, nil, nil, false, func(key, _ []byte) error { keys++; return nil }); err != nil || keys != n {
		t.Fatalf("scan of the keys: %d keys, %v", keys, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		got, err := d.Retrieve(ctx, fmt.Appendf(nil, "key-%04d", i))
		if err != nil && !errors.Is(err, device.ErrDeviceFailed) {
			t.Fatalf("read key %d after the directory went: %v, want its value or ErrDeviceFailed", i, err)
		}
		if err == nil && !bytes.Equal(got, v) {
			t.Fatalf("read key %d after the directory went: %d wrong bytes", i, len(got))
		}
	}
	closeWithin(t, d)
}
