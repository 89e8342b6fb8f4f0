// Package faultdev injects errors into any device.Device, in the manner of
// Pebble's vfs/errorfs: Wrap puts an Injector in front of a device, and the
// Injector decides, operation by operation, whether to fail it. Injectors
// compose (OnWrites(OnIndex(3, nil)) fails the fourth write), so a test can
// fail exactly the operation it means to, on any backend.
//
// Invariants:
//   - The injector is consulted once per device operation, before the
//     operation reaches the wrapped device, and an injected failure never
//     reaches it: the operation has no effect. WrapAfter is the one
//     exception: it consults the injector after the operation took effect,
//     and a failure it injects loses only the answer.
//   - Each op of a Batch is one operation, consulted in slice order; the ops
//     not failed are passed on as one batch, still in order.
//   - Iterate is one operation (OpIterate, Key = the prefix) and Info is
//     one (OpInfo, no key). Close is never injected, so that resources are
//     always released.
//   - Injectors given a nil error inject ErrInjected, which wraps
//     device.ErrDeviceFailed: by default an injected failure looks like a
//     device failure, the error the array must tolerate.
package faultdev

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/kvarray/kvarray/device"
)

// ErrInjected is the error injected when no other is given. It wraps
// device.ErrDeviceFailed.
var ErrInjected = fmt.Errorf("injected fault: %w", device.ErrDeviceFailed)

// ErrInjectedFull is a full device's refusal, as Pebble's on ENOSPC and
// Redis's OOM: it wraps device.ErrFull and device.ErrNoSpace (and not
// device.ErrDeviceFailed, as Redis's does not). Inject it on writes
// (OnWrites) to make a device read-only-full.
var ErrInjectedFull = fmt.Errorf("injected: no space: %w: %w", device.ErrFull, device.ErrNoSpace)

// Kinds of operations that are not batch ops, numbered far from the
// device.OpKind values so they can never collide with a future batch op.
const (
	OpIterate device.OpKind = 0x80 + iota
	OpInfo
)

// Op is one device operation as seen by an Injector. Key is the caller's
// buffer, valid only during MaybeError; for OpIterate it is the prefix.
type Op struct {
	Kind device.OpKind
	Key  []byte
}

func (o Op) String() string {
	switch o.Kind {
	case OpIterate:
		return fmt.Sprintf("iterate %q", o.Key)
	case OpInfo:
		return "info"
	}
	return fmt.Sprintf("%v %q", o.Kind, o.Key)
}

// IsRead reports whether the op reads data: retrieve, exist, iterate.
func (o Op) IsRead() bool {
	return o.Kind == device.OpRetrieve || o.Kind == device.OpExist || o.Kind == OpIterate
}

// IsWrite reports whether the op changes data: store, delete.
func (o Op) IsWrite() bool {
	return o.Kind == device.OpStore || o.Kind == device.OpDelete
}

// Injector decides whether an operation fails. It must be safe for
// concurrent use, as devices are.
type Injector interface {
	// MaybeError returns the error to fail op with, or nil to let it
	// through.
	MaybeError(op Op) error
}

// InjectorFunc adapts a function to an Injector.
type InjectorFunc func(op Op) error

// MaybeError implements Injector.
func (f InjectorFunc) MaybeError(op Op) error { return f(op) }

func orInjected(err error) error {
	if err == nil {
		return ErrInjected
	}
	return err
}

// Always fails every operation with err (ErrInjected if nil).
func Always(err error) Injector {
	err = orInjected(err)
	return InjectorFunc(func(Op) error { return err })
}

// Index fails exactly one operation: the n-th it is consulted for,
// counting from 0. The count is atomic, so among concurrent operations
// exactly one fails.
type Index struct {
	n     int64
	err   error
	count atomic.Int64
}

// OnIndex returns an injector failing the n-th operation (from 0) with err
// (ErrInjected if nil).
func OnIndex(n int64, err error) *Index {
	return &Index{n: n, err: orInjected(err)}
}

// MaybeError implements Injector.
func (x *Index) MaybeError(Op) error {
	if x.count.Add(1)-1 == x.n {
		return x.err
	}
	return nil
}

// Count returns how many operations the injector has been consulted for.
func (x *Index) Count() int64 { return x.count.Load() }

// ErrCrashed is the error of every operation from a Crash's crash point
// on. It wraps device.ErrDeviceFailed: to the process that is still
// running, a crash looks like every device failing at once.
var ErrCrashed = fmt.Errorf("crashed: %w", device.ErrDeviceFailed)

// Crash is one crash point shared by every device of an array: wrap each
// device with the same Crash, and the operations on all of them are counted
// together, so that the n-th (from 0) and every later one fails with
// ErrCrashed, as if the process had died just before it. Nothing from the
// crash point on reaches a device, so what the devices hold afterwards is
// exactly what a process killed there would have left; reopening the array
// over the unwrapped devices is the restart.
//
// Concurrent operations are ordered by an atomic count, so the cut falls
// between two operations of that order even when several devices are
// written at once (one of the interleavings a real crash can leave).
type Crash struct {
	at    int64
	count atomic.Int64
}

// CrashAt returns a crash point at operation n; a negative n never crashes
// (to count a workload's operations first).
func CrashAt(n int64) *Crash { return &Crash{at: n} }

// MaybeError implements Injector.
func (c *Crash) MaybeError(Op) error {
	if i := c.count.Add(1) - 1; c.at >= 0 && i >= c.at {
		return ErrCrashed
	}
	return nil
}

// Crashed reports whether the crash point has been reached.
func (c *Crash) Crashed() bool { return c.at >= 0 && c.count.Load() > c.at }

// Count returns how many operations the crash point has been consulted
// for, those failed included.
func (c *Crash) Count() int64 { return c.count.Load() }

// Toggle is an injector switched on and off at run time, for example to
// let a setup phase through and then fail everything. The zero Toggle is
// off and, once on, injects ErrInjected; set Injector to inject something
// narrower. Only On and Off may be called concurrently with MaybeError.
type Toggle struct {
	Injector Injector // consulted while on; nil means Always(nil)
	on       atomic.Bool
}

// On starts injecting.
func (t *Toggle) On() { t.on.Store(true) }

// Off stops injecting.
func (t *Toggle) Off() { t.on.Store(false) }

// Enabled reports whether the toggle is on.
func (t *Toggle) Enabled() bool { return t.on.Load() }

// MaybeError implements Injector.
func (t *Toggle) MaybeError(op Op) error {
	if !t.on.Load() {
		return nil
	}
	if t.Injector == nil {
		return ErrInjected
	}
	return t.Injector.MaybeError(op)
}

// Delay holds each operation for its duration before letting it through
// (it injects no error): a slow device, or with a long duration one that
// stopped answering. The zero Delay holds nothing; Set may be called
// concurrently with MaybeError.
type Delay struct{ d atomic.Int64 }

// Set makes each operation from now on wait d (0: none).
func (x *Delay) Set(d time.Duration) { x.d.Store(int64(d)) }

// MaybeError implements Injector.
func (x *Delay) MaybeError(Op) error {
	if d := time.Duration(x.d.Load()); d > 0 {
		time.Sleep(d)
	}
	return nil
}

// OnReads passes only reads (retrieve, exist, iterate) to inj; other ops
// are let through without consulting it, so they do not advance an OnIndex
// inside.
func OnReads(inj Injector) Injector {
	return InjectorFunc(func(op Op) error {
		if op.IsRead() {
			return inj.MaybeError(op)
		}
		return nil
	})
}

// OnWrites passes only writes (store, delete) to inj.
func OnWrites(inj Injector) Injector {
	return InjectorFunc(func(op Op) error {
		if op.IsWrite() {
			return inj.MaybeError(op)
		}
		return nil
	})
}

// OnPrefix passes to inj only the ops that touch keys starting with
// prefix: ops on such a key, and iterations whose range overlaps them
// (iterating "a" touches the keys of prefix "ab", and the other way round).
func OnPrefix(prefix []byte, inj Injector) Injector {
	prefix = bytes.Clone(prefix)
	return InjectorFunc(func(op Op) error {
		switch {
		case op.Kind == OpInfo:
			return nil
		case bytes.HasPrefix(op.Key, prefix),
			op.Kind == OpIterate && bytes.HasPrefix(prefix, op.Key):
			return inj.MaybeError(op)
		}
		return nil
	})
}

// Wrap returns d with inj consulted before every operation. Closing the
// result closes d.
func Wrap(d device.Device, inj Injector) device.Device {
	return &wrapped{d: d, inj: inj}
}

type wrapped struct {
	d   device.Device
	inj Injector
}

func (w *wrapped) check(kind device.OpKind, key []byte) error {
	op := Op{Kind: kind, Key: key}
	if err := w.inj.MaybeError(op); err != nil {
		return fmt.Errorf("faultdev: %v: %w", op, err)
	}
	return nil
}

func (w *wrapped) Store(ctx context.Context, key, value []byte) error {
	if err := w.check(device.OpStore, key); err != nil {
		return err
	}
	return w.d.Store(ctx, key, value)
}

func (w *wrapped) Retrieve(ctx context.Context, key []byte) ([]byte, error) {
	if err := w.check(device.OpRetrieve, key); err != nil {
		return nil, err
	}
	return w.d.Retrieve(ctx, key)
}

func (w *wrapped) Delete(ctx context.Context, key []byte) error {
	if err := w.check(device.OpDelete, key); err != nil {
		return err
	}
	return w.d.Delete(ctx, key)
}

func (w *wrapped) Exist(ctx context.Context, key []byte) (bool, error) {
	if err := w.check(device.OpExist, key); err != nil {
		return false, err
	}
	return w.d.Exist(ctx, key)
}

func (w *wrapped) Iterate(ctx context.Context, prefix []byte, fn func(key []byte) error) error {
	if err := w.check(OpIterate, prefix); err != nil {
		return err
	}
	return w.d.Iterate(ctx, prefix, fn)
}

func (w *wrapped) Info(ctx context.Context) (device.Info, error) {
	if err := w.check(OpInfo, nil); err != nil {
		return device.Info{}, err
	}
	return w.d.Info(ctx)
}

func (w *wrapped) Close() error { return w.d.Close() }

// Batch fails the ops the injector picks and passes the rest to the
// wrapped device as one batch. If that batch as a whole fails, its error is
// returned (the passed ops carry it); the injected ops keep their own.
func (w *wrapped) Batch(ctx context.Context, ops []device.Op) error {
	var (
		pass []device.Op
		idx  []int
	)
	for i := range ops {
		op := &ops[i]
		op.Result, op.Found, op.Partial, op.Err = nil, false, false, nil
		if err := w.check(op.Kind, op.Key); err != nil {
			op.Err = fmt.Errorf("batch op %d: %w", i, err)
			continue
		}
		pass = append(pass, *op)
		idx = append(idx, i)
	}
	if len(pass) == 0 {
		if len(ops) == 0 {
			return w.d.Batch(ctx, ops)
		}
		return nil
	}
	if len(pass) == len(ops) {
		return w.d.Batch(ctx, ops)
	}
	err := w.d.Batch(ctx, pass)
	for j, i := range idx {
		ops[i].Result, ops[i].Found, ops[i].Partial, ops[i].Err = pass[j].Result, pass[j].Found, pass[j].Partial, pass[j].Err
	}
	return err
}

var _ device.Device = (*wrapped)(nil)

// WrapAfter returns d with inj consulted after every operation has reached
// d: an operation inj fails took effect all the same, and only its answer
// is lost. This is a device that dies, or whose connection breaks, after
// it took a write: the case that makes a reported failure say nothing of
// what the device holds. A read whose answer is lost returns no result.
// Closing the result closes d.
func WrapAfter(d device.Device, inj Injector) device.Device {
	return &after{wrapped{d: d, inj: inj}}
}

type after struct{ wrapped }

func (w *after) Store(ctx context.Context, key, value []byte) error {
	if err := w.d.Store(ctx, key, value); err != nil {
		return err
	}
	return w.check(device.OpStore, key)
}

func (w *after) Retrieve(ctx context.Context, key []byte) ([]byte, error) {
	b, err := w.d.Retrieve(ctx, key)
	if err != nil {
		return nil, err
	}
	if err := w.check(device.OpRetrieve, key); err != nil {
		return nil, err
	}
	return b, nil
}

func (w *after) Delete(ctx context.Context, key []byte) error {
	if err := w.d.Delete(ctx, key); err != nil {
		return err
	}
	return w.check(device.OpDelete, key)
}

func (w *after) Exist(ctx context.Context, key []byte) (bool, error) {
	ok, err := w.d.Exist(ctx, key)
	if err != nil {
		return false, err
	}
	if err := w.check(device.OpExist, key); err != nil {
		return false, err
	}
	return ok, nil
}

func (w *after) Iterate(ctx context.Context, prefix []byte, fn func(key []byte) error) error {
	if err := w.d.Iterate(ctx, prefix, fn); err != nil {
		return err
	}
	return w.check(OpIterate, prefix)
}

func (w *after) Info(ctx context.Context) (device.Info, error) {
	info, err := w.d.Info(ctx)
	if err != nil {
		return device.Info{}, err
	}
	if err := w.check(OpInfo, nil); err != nil {
		return device.Info{}, err
	}
	return info, nil
}

// Batch passes every op to the wrapped device as one batch, then fails
// the ops the injector picks: their effects stay.
func (w *after) Batch(ctx context.Context, ops []device.Op) error {
	err := w.d.Batch(ctx, ops)
	for i := range ops {
		op := &ops[i]
		if op.Err != nil {
			continue
		}
		if ierr := w.check(op.Kind, op.Key); ierr != nil {
			op.Result, op.Found, op.Partial = nil, false, false
			op.Err = fmt.Errorf("batch op %d: %w", i, ierr)
		}
	}
	return err
}

var _ device.Device = (*after)(nil)
