// Package mem is a KV-SSD emulator: a device.Device held in memory in an
// ordered B-tree. It is a real backend, used for `mem:` devices, tests and
// benchmarks, and it adds what a bench needs from a drive that real drives
// do not offer on demand: a speed model (Perf), fault injection (Fail,
// Recover, Replace, Corrupt) and operation counters (Stats) for measuring
// read and write amplification.
//
// Invariants:
//   - Stored keys and values are private copies; a value is only ever
//     modified in place by Corrupt, and keys never are.
//   - Used is the sum of len(key)+len(value) over stored keys and never
//     exceeds a non-zero capacity: a store that would is refused with
//     device.ErrNoSpace and changes nothing.
//   - While failed, every call returns device.ErrDeviceFailed and the data
//     is kept for Recover. Close is final: Recover does not undo it.
//   - Stats count every attempted operation exactly once, a Batch's ops
//     individually, whatever the outcome, so that amplification measured
//     over a failure includes the failed attempts. Byte counters count only
//     values actually stored or delivered.
//   - Waiting for the speed model happens before a write is applied and
//     honours ctx: a cancelled wait leaves nothing applied.
//   - No lock is held while an Iterate callback runs, so callbacks may call
//     back into the device.
package mem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"

	"github.com/kvarray/kvarray/device"
)

// DefaultName is Info().Name when WithName is not given.
const DefaultName = "mem"

// Option configures New.
type Option func(*options)

type options struct {
	name     string
	limits   device.Limits
	capacity int64
	perf     Perf
	now      func() time.Time
	sleep    func(context.Context, time.Duration) error
	tagger   device.Tagger
}

// WithName sets the name reported by Info and used in error messages.
func WithName(name string) Option { return func(o *options) { o.name = name } }

// WithLimits sets the key and value limits; zero fields take the KV-SSD
// defaults (keys of 4..255 bytes, values up to 2 MiB).
func WithLimits(l device.Limits) Option { return func(o *options) { o.limits = l } }

// WithCapacity limits the bytes of keys and values stored; 0 is unlimited.
func WithCapacity(bytes int64) Option { return func(o *options) { o.capacity = bytes } }

// WithPerf sets the speed model. The zero Perf, the default, is as fast as
// the host.
func WithPerf(p Perf) Option { return func(o *options) { o.perf = p } }

// WithTagger makes the device keep its values apart from their keys, as
// Pebble keeps values in blob files: its filtered scan (ScanFiltered)
// hands want each value's tag, and leaves the value of a key want says
// device.KeyOnly for unread (nil), so that tests of what a caller does
// with tags and unread values run on the emulator. Without a tagger every
// tag is 0 and every value is handed out, being at hand.
func WithTagger(t device.Tagger) Option { return func(o *options) { o.tagger = t } }

// withClock replaces the clock and the sleep of the speed model, so tests
// can check what the model charges without depending on the host's timers.
func withClock(now func() time.Time, sleep func(context.Context, time.Duration) error) Option {
	return func(o *options) { o.now, o.sleep = now, sleep }
}

// Stats counts device operations. See the package doc for what is counted.
type Stats struct {
	Stores       int64
	Retrieves    int64
	Deletes      int64
	Exists       int64
	Iterates     int64
	BytesWritten int64 // value bytes of successful stores
	BytesRead    int64 // value bytes of successful retrieves
}

// Device is an emulated KV-SSD. Create it with New.
type Device struct {
	name     string
	limits   device.Limits
	capacity int64

	perf        Perf
	opsBucket   *bucket // nil: unlimited
	bytesBucket *bucket // nil: unlimited
	now         func() time.Time
	sleep       func(context.Context, time.Duration) error
	tagger      device.Tagger // nil: values at hand (WithTagger)

	mu     sync.RWMutex
	tree   *btree.BTreeG[entry]
	used   int64
	failed bool
	closed bool

	stores, retrieves, deletes, exists, iterates atomic.Int64
	bytesWritten, bytesRead                      atomic.Int64
}

type entry struct {
	key, value []byte
}

func lessEntry(a, b entry) bool { return bytes.Compare(a.key, b.key) < 0 }

// btreeDegree suits small in-memory items; the exact value matters little.
const btreeDegree = 32

// iterChunk is how many keys Iterate copies out per lock hold, bounding
// both the time writers wait and the memory of a large iteration.
const iterChunk = 128

// New returns an empty, healthy device. It panics on invalid options
// (limits out of order, negative capacity or Perf fields), which are
// programming errors.
func New(opts ...Option) *Device {
	o := options{name: DefaultName, now: time.Now, sleep: sleepCtx}
	for _, opt := range opts {
		opt(&o)
	}
	l := o.limits.WithDefaults()
	if l.MinKeyLen < 0 || l.MinKeyLen > l.MaxKeyLen || l.MaxValueLen < 0 {
		panic(fmt.Sprintf("mem.New: invalid limits %+v", l))
	}
	if o.capacity < 0 {
		panic(fmt.Sprintf("mem.New: negative capacity %d", o.capacity))
	}
	if err := o.perf.validate(); err != nil {
		panic("mem.New: " + err.Error())
	}
	start := o.now()
	return &Device{
		name:        o.name,
		limits:      l,
		capacity:    o.capacity,
		perf:        o.perf,
		opsBucket:   newBucket(o.perf.OpsPerSec, start),
		bytesBucket: newBucket(o.perf.BytesPerSec, start),
		now:         o.now,
		sleep:       o.sleep,
		tagger:      o.tagger,
		tree:        btree.NewG(btreeDegree, lessEntry),
	}
}

var _ device.Device = (*Device)(nil)

// errorf prefixes the device name, so that errors from an array of devices
// say which one failed.
func (d *Device) errorf(format string, args ...any) error {
	return fmt.Errorf("%s: "+format, append([]any{d.name}, args...)...)
}

// stateLocked returns the error every call gets while the device is closed
// or failed. d.mu must be held.
func (d *Device) stateLocked() error {
	if d.closed {
		return fmt.Errorf("closed: %w", device.ErrDeviceFailed)
	}
	if d.failed {
		return fmt.Errorf("failed (injected): %w", device.ErrDeviceFailed)
	}
	return nil
}

// begin is the common entry check: device state, then the context, then
// the key. It is cheap enough to run before the speed model charges
// anything, so that rejected calls cost no device time.
func (d *Device) begin(ctx context.Context, key []byte, checkKey bool) error {
	d.mu.RLock()
	err := d.stateLocked()
	d.mu.RUnlock()
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if checkKey {
		return d.limits.CheckKey(key)
	}
	return nil
}

// Store implements device.Device.
func (d *Device) Store(ctx context.Context, key, value []byte) error {
	d.stores.Add(1)
	if err := d.begin(ctx, key, true); err != nil {
		return d.errorf("store %q: %w", key, err)
	}
	if err := d.limits.CheckValue(value); err != nil {
		return d.errorf("store %q: %w", key, err)
	}
	if err := d.delay(ctx, 1, len(value), true); err != nil {
		return d.errorf("store %q: %w", key, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.stateLocked(); err != nil {
		return d.errorf("store %q: %w", key, err)
	}
	if err := d.storeLocked(key, value); err != nil {
		return d.errorf("store %q: %w", key, err)
	}
	return nil
}

func (d *Device) storeLocked(key, value []byte) error {
	delta := int64(len(key) + len(value))
	if old, ok := d.tree.Get(entry{key: key}); ok {
		delta -= int64(len(old.key) + len(old.value))
	}
	if d.capacity > 0 && delta > 0 && d.used+delta > d.capacity {
		return fmt.Errorf("%d of %d bytes used, %d more needed: %w", d.used, d.capacity, delta, device.ErrNoSpace)
	}
	d.tree.ReplaceOrInsert(entry{key: bytes.Clone(key), value: bytes.Clone(value)})
	d.used += delta
	d.bytesWritten.Add(int64(len(value)))
	return nil
}

// getRangeLocked returns a copy of bytes [off, off+n) of the value under
// key, fewer where it ends (a partial retrieve, device.Op.Len): only
// those bytes are read and charged to the speed model.
func (d *Device) getRangeLocked(key []byte, off, n int) ([]byte, bool) {
	e, ok := d.tree.Get(entry{key: key})
	if !ok {
		return nil, false
	}
	lo := min(max(off, 0), len(e.value))
	return append([]byte{}, e.value[lo:lo+min(n, len(e.value)-lo)]...), true
}

// getLocked returns a copy of the value under key. The copy is never nil
// for a found key, so that an empty value is told apart from none.
func (d *Device) getLocked(key []byte) ([]byte, bool) {
	e, ok := d.tree.Get(entry{key: key})
	if !ok {
		return nil, false
	}
	v := make([]byte, len(e.value))
	copy(v, e.value)
	return v, true
}

// Retrieve implements device.Device.
func (d *Device) Retrieve(ctx context.Context, key []byte) ([]byte, error) {
	d.retrieves.Add(1)
	if err := d.begin(ctx, key, true); err != nil {
		return nil, d.errorf("retrieve %q: %w", key, err)
	}
	// Reading before the delay is indistinguishable from reading after it,
	// and tells the speed model the size to charge.
	d.mu.RLock()
	err := d.stateLocked()
	v, ok := d.getLocked(key)
	d.mu.RUnlock()
	if err != nil {
		return nil, d.errorf("retrieve %q: %w", key, err)
	}
	if err := d.delay(ctx, 1, len(v), true); err != nil {
		return nil, d.errorf("retrieve %q: %w", key, err)
	}
	if !ok {
		return nil, d.errorf("retrieve %q: %w", key, device.ErrNotFound)
	}
	d.bytesRead.Add(int64(len(v)))
	return v, nil
}

// Delete implements device.Device.
func (d *Device) Delete(ctx context.Context, key []byte) error {
	d.deletes.Add(1)
	if err := d.begin(ctx, key, true); err != nil {
		return d.errorf("delete %q: %w", key, err)
	}
	if err := d.delay(ctx, 1, 0, true); err != nil {
		return d.errorf("delete %q: %w", key, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.stateLocked(); err != nil {
		return d.errorf("delete %q: %w", key, err)
	}
	d.deleteLocked(key)
	return nil
}

func (d *Device) deleteLocked(key []byte) {
	if old, ok := d.tree.Delete(entry{key: key}); ok {
		d.used -= int64(len(old.key) + len(old.value))
	}
}

// Exist implements device.Device.
func (d *Device) Exist(ctx context.Context, key []byte) (bool, error) {
	d.exists.Add(1)
	if err := d.begin(ctx, key, true); err != nil {
		return false, d.errorf("exist %q: %w", key, err)
	}
	if err := d.delay(ctx, 1, 0, true); err != nil {
		return false, d.errorf("exist %q: %w", key, err)
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if err := d.stateLocked(); err != nil {
		return false, d.errorf("exist %q: %w", key, err)
	}
	return d.tree.Has(entry{key: key}), nil
}

// Iterate implements device.Device. Keys are copied out a chunk at a time
// and fn runs with no lock held; a key stored or deleted meanwhile may or
// may not be seen, as the interface allows, but every other key is seen
// exactly once because each chunk resumes just after the last key given.
func (d *Device) Iterate(ctx context.Context, prefix []byte, fn func(key []byte) error) error {
	d.iterates.Add(1)
	if err := d.begin(ctx, nil, false); err != nil {
		return d.errorf("iterate %q: %w", prefix, err)
	}
	if err := d.delay(ctx, 1, 0, true); err != nil {
		return d.errorf("iterate %q: %w", prefix, err)
	}
	var (
		cursor = bytes.Clone(prefix)
		chunk  = make([][]byte, 0, iterChunk)
		key    []byte // handed to fn, so fn cannot reach the stored key
	)
	for {
		chunk = chunk[:0]
		more := false
		d.mu.RLock()
		err := d.stateLocked()
		if err == nil {
			d.tree.AscendGreaterOrEqual(entry{key: cursor}, func(e entry) bool {
				if !bytes.HasPrefix(e.key, prefix) {
					return false
				}
				if len(chunk) == iterChunk {
					more = true
					return false
				}
				// Stored keys are never modified, so sharing them until
				// they are copied into key below is safe.
				chunk = append(chunk, e.key)
				return true
			})
		}
		d.mu.RUnlock()
		if err != nil {
			return d.errorf("iterate %q: %w", prefix, err)
		}
		for _, k := range chunk {
			if err := ctx.Err(); err != nil {
				return d.errorf("iterate %q: %w", prefix, err)
			}
			key = append(key[:0], k...)
			if err := fn(key); err != nil {
				return err
			}
		}
		if !more {
			return nil
		}
		// The least key greater than the last one given.
		last := chunk[len(chunk)-1]
		cursor = append(append(cursor[:0], last...), 0)
	}
}

// Batch implements device.Device. All ops are charged to the speed model
// up front, as if issued together on a deep queue (one latency), then
// applied in slice order under one lock hold; the bytes of retrieved values
// are charged afterwards, once their sizes are known.
func (d *Device) Batch(ctx context.Context, ops []device.Op) error {
	for i := range ops {
		d.countOp(ops[i].Kind)
	}
	if err := d.begin(ctx, nil, false); err != nil {
		err = d.errorf("batch: %w", err)
		for i := range ops {
			ops[i].Result, ops[i].Found, ops[i].Partial, ops[i].Err = nil, false, false, err
		}
		return err
	}
	valid, written := 0, 0
	for i := range ops {
		op := &ops[i]
		op.Result, op.Found, op.Partial, op.Err = nil, false, false, d.validate(i, op)
		if op.Err == nil {
			valid++
			if op.Kind == device.OpStore {
				written += len(op.Value)
			}
		}
	}
	if valid == 0 {
		return nil
	}
	fail := func(err error) {
		for i := range ops {
			if op := &ops[i]; op.Err == nil {
				op.Err = d.errorf("batch op %d (%v %q): %w", i, op.Kind, op.Key, err)
			}
		}
	}
	if err := d.delay(ctx, valid, written, true); err != nil {
		fail(err)
		return d.errorf("batch: %w", err)
	}

	read := 0
	d.mu.Lock()
	if err := d.stateLocked(); err != nil {
		d.mu.Unlock()
		fail(err)
		return d.errorf("batch: %w", err)
	}
	for i := range ops {
		op := &ops[i]
		if op.Err != nil {
			continue
		}
		switch op.Kind {
		case device.OpStore:
			if err := d.storeLocked(op.Key, op.Value); err != nil {
				op.Err = d.errorf("batch op %d (store %q): %w", i, op.Key, err)
			}
		case device.OpRetrieve:
			if op.Len > 0 {
				op.Result, op.Found = d.getRangeLocked(op.Key, op.Off, op.Len)
				op.Partial = op.Found
			} else {
				op.Result, op.Found = d.getLocked(op.Key)
			}
			if !op.Found {
				op.Err = d.errorf("batch op %d (retrieve %q): %w", i, op.Key, device.ErrNotFound)
			}
			read += len(op.Result)
		case device.OpDelete:
			d.deleteLocked(op.Key)
		case device.OpExist:
			op.Found = d.tree.Has(entry{key: op.Key})
		}
	}
	d.mu.Unlock()

	// Reads have no side effects, so a cancelled wait only withholds them.
	err := d.delay(ctx, 0, read, false)
	for i := range ops {
		op := &ops[i]
		if op.Kind != device.OpRetrieve || !op.Found {
			continue
		}
		if err != nil {
			op.Result, op.Found, op.Partial = nil, false, false
			op.Err = d.errorf("batch op %d (retrieve %q): %w", i, op.Key, err)
			continue
		}
		d.bytesRead.Add(int64(len(op.Result)))
	}
	return nil
}

func (d *Device) countOp(k device.OpKind) {
	switch k {
	case device.OpStore:
		d.stores.Add(1)
	case device.OpRetrieve:
		d.retrieves.Add(1)
	case device.OpDelete:
		d.deletes.Add(1)
	case device.OpExist:
		d.exists.Add(1)
	}
}

// validate checks what can be checked without the data: the kind and the
// limits. Ops failing here are not charged to the speed model.
func (d *Device) validate(i int, op *device.Op) error {
	var err error
	switch op.Kind {
	case device.OpStore:
		if err = d.limits.CheckKey(op.Key); err == nil {
			err = d.limits.CheckValue(op.Value)
		}
	case device.OpRetrieve, device.OpDelete, device.OpExist:
		err = d.limits.CheckKey(op.Key)
	default:
		err = errors.New("unknown op kind")
	}
	if err != nil {
		return d.errorf("batch op %d (%v %q): %w", i, op.Kind, op.Key, err)
	}
	return nil
}

// Ordered implements device.Orderer: the device iterates in key order.
func (d *Device) Ordered() bool { return true }

// Info implements device.Device.
func (d *Device) Info(ctx context.Context) (device.Info, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if err := d.stateLocked(); err != nil {
		return device.Info{}, d.errorf("info: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return device.Info{}, d.errorf("info: %w", err)
	}
	return device.Info{
		Name:        d.name,
		Capacity:    d.capacity,
		Used:        d.used,
		Keys:        int64(d.tree.Len()),
		MinKeyLen:   d.limits.MinKeyLen,
		MaxKeyLen:   d.limits.MaxKeyLen,
		MaxValueLen: d.limits.MaxValueLen,
		Ordered:     true,
	}, nil
}

// Close implements device.Device. It drops the data; a second Close
// returns device.ErrDeviceFailed like any other call after Close.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return d.errorf("close: already closed: %w", device.ErrDeviceFailed)
	}
	d.closed = true
	d.tree = btree.NewG(btreeDegree, lessEntry)
	d.used = 0
	return nil
}

// Fail makes the device unreachable: every call returns an error wrapping
// device.ErrDeviceFailed until Recover or Replace. The data is kept.
func (d *Device) Fail() {
	d.mu.Lock()
	d.failed = true
	d.mu.Unlock()
}

// Recover brings a failed device back with the data it had, as a device
// that was only unreachable (a cable pulled and plugged back in). Writes
// attempted while it was failed are not there.
func (d *Device) Recover() {
	d.mu.Lock()
	d.failed = false
	d.mu.Unlock()
}

// Replace swaps in a new, empty, healthy device in the same slot, as when a
// dead drive is replaced. Limits, capacity, speed model and Stats carry
// over, as they belong to the slot and to the measurement.
func (d *Device) Replace() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	d.tree = btree.NewG(btreeDegree, lessEntry)
	d.used = 0
	d.failed = false
}

// Failed reports whether the device is failed (by Fail, not yet recovered
// or replaced).
func (d *Device) Failed() bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.failed
}

// Corrupt flips every bit of one byte (the middle one) of the value stored
// under key, in place and without changing its size, as silent media
// corruption would; the array's checksums are expected to catch it. It
// works on a failed device too, since the data is still there. It returns
// an error wrapping device.ErrNotFound when key is absent, and an error
// when the value is empty and so has no byte to flip.
func (d *Device) Corrupt(key []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return d.errorf("corrupt %q: %w", key, d.stateLocked())
	}
	e, ok := d.tree.Get(entry{key: key})
	if !ok {
		return d.errorf("corrupt %q: %w", key, device.ErrNotFound)
	}
	if len(e.value) == 0 {
		return d.errorf("corrupt %q: value is empty, no byte to flip", key)
	}
	// Retrieve returns copies, so no caller holds this buffer.
	e.value[len(e.value)/2] ^= 0xff
	return nil
}

// Stats returns the operation counters.
func (d *Device) Stats() Stats {
	return Stats{
		Stores:       d.stores.Load(),
		Retrieves:    d.retrieves.Load(),
		Deletes:      d.deletes.Load(),
		Exists:       d.exists.Load(),
		Iterates:     d.iterates.Load(),
		BytesWritten: d.bytesWritten.Load(),
		BytesRead:    d.bytesRead.Load(),
	}
}

// ResetStats zeroes the operation counters, to measure one phase of a run.
func (d *Device) ResetStats() {
	d.stores.Store(0)
	d.retrieves.Store(0)
	d.deletes.Store(0)
	d.exists.Store(0)
	d.iterates.Store(0)
	d.bytesWritten.Store(0)
	d.bytesRead.Store(0)
}
