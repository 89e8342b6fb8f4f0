package pebble

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	pdb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvarray/kvarray/device"
)

// health is what the device knows about its Pebble instance: healthy,
// read-only (a write hit a full file system), or failed (a write hit
// another error, Pebble gave up, or a call ran over its time limit). It
// only ever gets worse: Pebble cannot carry on after any of these, so the
// device is reopened (a restart, or replace and rebuild) to serve again.
type health struct {
	// park is never closed: goroutines that must not return into Pebble
	// block on it forever.
	park chan struct{}

	mu       sync.Mutex
	dead     chan struct{} // closed once failed
	full     chan struct{} // closed once read-only or failed
	failErr  error         // why failed, wrapping device.ErrDeviceFailed
	writeErr error         // why writes are refused

	// abandoned: the device was closed failed, its database left open
	// (see abandon); every write-side file call of it parks from then on.
	abandoned atomic.Bool
	lock      io.Closer // the directory's lock, once taken
}

// abandon gives up a failed database that cannot be closed (its
// goroutines parked inside Pebble's locks): from now on every write-side
// file call it makes parks before it reaches the directory, and the
// directory's lock is released, so that a new device can be opened at
// the same path in this process (an online replace of a failed device)
// while the old one's goroutines stay parked, touching nothing.
func (h *health) abandon() {
	h.abandoned.Store(true)
	h.mu.Lock()
	l := h.lock
	h.lock = nil
	h.mu.Unlock()
	if l != nil {
		_ = l.Close()
	}
}

// parkIfAbandoned parks a write-side file call of an abandoned database.
func (h *health) parkIfAbandoned() {
	if h.abandoned.Load() {
		<-h.park
	}
}

// onceCloser closes its closer once, whoever asks first (Pebble's Close,
// or abandon).
type onceCloser struct {
	once sync.Once
	c    io.Closer
	err  error
}

func (o *onceCloser) Close() error {
	o.once.Do(func() { o.err = o.c.Close() })
	return o.err
}

func newHealth() *health {
	return &health{park: make(chan struct{}), dead: make(chan struct{}), full: make(chan struct{})}
}

// fail marks the device failed; the first reason is kept.
func (h *health) fail(reason error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failErr != nil {
		return
	}
	h.failErr = fmt.Errorf("failed: %w: %w", reason, device.ErrDeviceFailed)
	if h.writeErr == nil {
		h.writeErr = h.failErr
		close(h.full)
	}
	close(h.dead)
}

// noSpace makes the device read-only: every later write is refused with
// device.ErrFull and device.ErrNoSpace, also wrapping
// device.ErrDeviceFailed so that a caller that knows nothing of ErrFull
// counts it as a failed device (a write within its tolerance still
// succeeds) rather than as a refused value; the array marks it full.
func (h *health) noSpace(reason error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.writeErr != nil {
		return
	}
	h.writeErr = fmt.Errorf("read-only: %w: %w: %w: %w", reason, device.ErrFull, device.ErrNoSpace, device.ErrDeviceFailed)
	close(h.full)
}

// err returns why the device failed, or nil.
func (h *health) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failErr
}

// writeable returns why writes are refused, or nil.
func (h *health) writeable() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.writeErr
}

// trouble records a file system error met while Pebble was writing and
// parks the calling goroutine for good. Returning the error would let
// Pebble act on it, and Pebble answers most write errors with a panic or
// a Fatalf (rotateWAL, the commit pipeline, the manifest), unwinding
// through its own locks: the process dies or Pebble's state breaks. A
// parked goroutine keeps Pebble's state as it was; callers waiting on it
// are released by the device's watchdog, which sees the device failed.
func (h *health) trouble(op, name string, err error) {
	reason := fmt.Errorf("%s %s: %w", op, name, err)
	if isNoSpace(err) {
		h.noSpace(reason)
	} else {
		h.fail(reason)
	}
	<-h.park
}

func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// logger keeps Pebble silent, and turns Fatalf, Pebble's "cannot go on",
// into a failed device: the reason is recorded and the goroutine parked,
// never unwound through Pebble's locks (see trouble).
type logger struct{ h *health }

func (logger) Infof(string, ...any)  {}
func (logger) Errorf(string, ...any) {}
func (l logger) Fatalf(format string, args ...any) {
	l.h.fail(fmt.Errorf("pebble: "+format, args...))
	<-l.h.park
}

// events is the device's Pebble event listener: it notices trouble that no
// caller sees (a background write running out of space, a disk stuck
// longer than the device's time limit) and keeps corruption found by a
// read from reaching Pebble's default handler, which calls Fatalf: the
// read itself returns the corruption error.
func (d *Device) events() *pdb.EventListener {
	return &pdb.EventListener{
		BackgroundError: func(err error) {
			if isNoSpace(err) {
				d.h.noSpace(fmt.Errorf("background write: %w", err))
			}
		},
		DataCorruption: func(info pdb.DataCorruptionInfo) {
			d.corruptions.Add(1)
		},
		FlushEnd: func(info pdb.FlushInfo) {
			if info.Err == nil {
				d.unflushed.Store(0)
			}
		},
		DiskSlow: func(info pdb.DiskSlowInfo) {
			// On a device already read-only or failed, the stuck
			// operation is the one parked on purpose (see trouble).
			if info.Duration >= d.timeout && d.h.writeable() == nil {
				d.h.fail(fmt.Errorf("disk stuck for %v in %s of %s", info.Duration, info.OpType, info.Path))
			}
		},
	}
}

// guardFS hands write-side errors to health.trouble; read-side errors
// (opening or reading a file, listing, locking, removing) are returned to
// Pebble, which handles them by failing the read or retrying later.
type guardFS struct {
	vfs.FS
	h *health
}

func (g guardFS) Unwrap() vfs.FS { return g.FS }

// Lock keeps the directory's lock, for abandon.
func (g guardFS) Lock(name string) (io.Closer, error) {
	c, err := g.FS.Lock(name)
	if err != nil {
		return nil, err
	}
	oc := &onceCloser{c: c}
	g.h.mu.Lock()
	g.h.lock = oc
	g.h.mu.Unlock()
	return oc, nil
}

func (g guardFS) Remove(name string) error {
	g.h.parkIfAbandoned()
	return g.FS.Remove(name)
}

func (g guardFS) RemoveAll(name string) error {
	g.h.parkIfAbandoned()
	return g.FS.RemoveAll(name)
}

func (g guardFS) MkdirAll(dir string, perm os.FileMode) error {
	g.h.parkIfAbandoned()
	return g.FS.MkdirAll(dir, perm)
}

func (g guardFS) check(op, name string, err error) {
	if err != nil {
		g.h.trouble(op, name, err)
	}
}

func (g guardFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	g.h.parkIfAbandoned()
	f, err := g.FS.Create(name, c)
	g.check("create", name, err)
	return guardFile{File: f, name: name, h: g.h}, nil
}

func (g guardFS) Link(oldname, newname string) error {
	g.h.parkIfAbandoned()
	g.check("link", newname, g.FS.Link(oldname, newname))
	return nil
}

func (g guardFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	g.h.parkIfAbandoned()
	f, err := g.FS.OpenReadWrite(name, c, opts...)
	if err != nil {
		return nil, err
	}
	return guardFile{File: f, name: name, h: g.h}, nil
}

func (g guardFS) OpenDir(name string) (vfs.File, error) {
	f, err := g.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return guardFile{File: f, name: name, h: g.h}, nil
}

func (g guardFS) Rename(oldname, newname string) error {
	g.h.parkIfAbandoned()
	g.check("rename", newname, g.FS.Rename(oldname, newname))
	return nil
}

func (g guardFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	g.h.parkIfAbandoned()
	f, err := g.FS.ReuseForWrite(oldname, newname, c)
	g.check("reuse", newname, err)
	return guardFile{File: f, name: newname, h: g.h}, nil
}

// guardFile is a file Pebble writes (or a directory it syncs).
type guardFile struct {
	vfs.File
	name string
	h    *health
}

func (f guardFile) check(op string, err error) {
	if err != nil && !errors.Is(err, io.EOF) {
		f.h.trouble(op, f.name, err)
	}
}

func (f guardFile) Write(p []byte) (int, error) {
	f.h.parkIfAbandoned()
	n, err := f.File.Write(p)
	f.check("write", err)
	return n, nil
}

func (f guardFile) WriteAt(p []byte, off int64) (int, error) {
	f.h.parkIfAbandoned()
	n, err := f.File.WriteAt(p, off)
	f.check("write", err)
	return n, nil
}

func (f guardFile) Preallocate(off, n int64) error {
	f.h.parkIfAbandoned()
	err := f.File.Preallocate(off, n)
	// A file system that cannot preallocate still writes.
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
		return err
	}
	f.check("preallocate", err)
	return nil
}

func (f guardFile) Sync() error {
	f.h.parkIfAbandoned()
	f.check("sync", f.File.Sync())
	return nil
}

func (f guardFile) SyncData() error {
	f.h.parkIfAbandoned()
	f.check("sync", f.File.SyncData())
	return nil
}

func (f guardFile) SyncTo(n int64) (bool, error) {
	f.h.parkIfAbandoned()
	full, err := f.File.SyncTo(n)
	f.check("sync", err)
	return full, nil
}

func (f guardFile) Close() error {
	err := f.File.Close()
	// Closing a file already removed is no write error (the directory
	// probe reports a removed directory).
	if !errors.Is(err, os.ErrClosed) {
		f.check("close", err)
	}
	return nil
}
