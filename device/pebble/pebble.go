// Package pebble is the persistent embedded device: a device.Device backed
// by one Pebble database in one directory, for `pebble:` devices.
//
// Durability: a write is acknowledged only once it is durable. Every Store
// and Delete commits with pebble.Sync, and all the writes of one Batch call
// go into one pebble.Batch committed with pebble.Sync, so a whole batch
// costs one fsync. Concurrent synced commits are group-committed by Pebble,
// so many writers share fsyncs rather than queueing one each.
//
// Invariants:
//   - Open never creates a database unless WithCreate(true) is given: a
//     missing directory, an empty one, or one holding no Pebble database is
//     an error wrapping device.ErrDeviceFailed that names the directory.
//     An array must never take a fresh empty device for a healthy member
//     that merely lost its data.
//   - Keys and Used (the sum of len(key)+len(value)) are exact. They are
//     loaded by one scan at Open and then kept in memory, adjusted on every
//     write. Writers of one key are serialised by striped mutexes, so the
//     size they replace, read with a Get before the write, is the one the
//     write really replaces. Growth is reserved against the capacity before
//     the write and given back if the write fails, so concurrent writers
//     cannot jointly exceed it. (One exception: a Batch frees the space of
//     its deletes as it goes, for its own later ops; if its commit then
//     fails while a concurrent writer has taken that space, Used can end
//     above the capacity. It stays exact.)
//   - Pebble errors other than not-found surface wrapped in
//     device.ErrDeviceFailed: nothing about the key can be concluded.
//   - Close waits for calls in flight; calls after Close return
//     device.ErrDeviceFailed. (So an Iterate callback must not call Close.)
//   - Pebble's logger is silenced so that CLI output stays clean; a fatal
//     Pebble error panics instead of exiting the process.
package pebble

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	pdb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvarray/kvarray/device"
)

// Option configures Open.
type Option func(*options)

type options struct {
	create   bool
	limits   device.Limits
	capacity int64
	fs       vfs.FS
}

// WithCreate lets Open create the directory and the database when they do
// not exist. Only initialisation should pass true; see the package doc.
func WithCreate(create bool) Option { return func(o *options) { o.create = create } }

// WithLimits sets the key and value limits; zero fields take the KV-SSD
// defaults (keys of 4..255 bytes, values up to 2 MiB).
func WithLimits(l device.Limits) Option { return func(o *options) { o.limits = l } }

// WithCapacity limits the bytes of keys and values stored; 0 is unlimited.
func WithCapacity(bytes int64) Option { return func(o *options) { o.capacity = bytes } }

// withFS runs Pebble over fs, so tests can inject file system errors.
func withFS(fs vfs.FS) Option { return func(o *options) { o.fs = fs } }

// stripes is the number of per-key-hash write locks. Enough that unrelated
// writers rarely share one; a batch takes each at most once.
const stripes = 256

// Device is a Pebble-backed device. Open it with Open.
type Device struct {
	dir      string
	name     string
	db       *pdb.DB
	limits   device.Limits
	capacity int64

	keys atomic.Int64
	used atomic.Int64

	seed  maphash.Seed
	locks [stripes]sync.Mutex

	// Close gate: calls register as in flight; Close marks the device
	// closed and waits for them, so the DB is never used after its Close.
	gate     sync.Mutex
	idle     sync.Cond
	closed   bool
	inflight int
}

var _ device.Device = (*Device)(nil)

// Open opens the device in dir. See the package doc for when it refuses.
func Open(dir string, opts ...Option) (*Device, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	name := "pebble:" + dir
	l := o.limits.WithDefaults()
	if l.MinKeyLen < 0 || l.MinKeyLen > l.MaxKeyLen || l.MaxValueLen < 0 {
		return nil, fmt.Errorf("%s: open: invalid limits %+v", name, l)
	}
	if o.capacity < 0 {
		return nil, fmt.Errorf("%s: open: negative capacity %d", name, o.capacity)
	}
	if err := checkDir(dir, o.create); err != nil {
		return nil, fmt.Errorf("%s: open: %w", name, err)
	}
	popts := &pdb.Options{
		Logger:           quietLogger{},
		ErrorIfNotExists: !o.create,
		FS:               o.fs,
	}
	db, err := pdb.Open(dir, popts)
	if err != nil {
		return nil, fmt.Errorf("%s: open: %w: %w", name, err, device.ErrDeviceFailed)
	}
	d := &Device{
		dir:      dir,
		name:     name,
		db:       db,
		limits:   l,
		capacity: o.capacity,
		seed:     maphash.MakeSeed(),
	}
	d.idle.L = &d.gate
	if err := d.load(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%s: open: loading accounting: %w: %w", name, err, device.ErrDeviceFailed)
	}
	return d, nil
}

// checkDir refuses, without creating anything, a directory that does not
// hold a database unless create is set, in which case it makes the
// directory. Pebble's own ErrorIfNotExists comes too late for this: by
// then it has already created the directory and its lock file.
func checkDir(dir string, create bool) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if !create {
			return fmt.Errorf("directory %s does not exist (not initialised?): %w", dir, device.ErrDeviceFailed)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("%w: %w", err, device.ErrDeviceFailed)
		}
		return nil
	case err != nil:
		return fmt.Errorf("%w: %w", err, device.ErrDeviceFailed)
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory: %w", dir, device.ErrDeviceFailed)
	}
	if create {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("%w: %w", err, device.ErrDeviceFailed)
	}
	if len(ents) == 0 {
		return fmt.Errorf("directory %s is empty (not initialised?): %w", dir, device.ErrDeviceFailed)
	}
	for _, e := range ents {
		// Pebble marks the current manifest with a "marker.manifest."
		// file; databases of format version 1 use CURRENT instead.
		if strings.HasPrefix(e.Name(), "marker.manifest.") || e.Name() == "CURRENT" {
			return nil
		}
	}
	return fmt.Errorf("directory %s holds no pebble database: %w", dir, device.ErrDeviceFailed)
}

// load counts the keys and bytes stored. Value lengths come from the lazy
// value, so values kept out of line are not read.
func (d *Device) load() error {
	it, err := d.db.NewIter(nil)
	if err != nil {
		return err
	}
	var keys, used int64
	for ok := it.First(); ok; ok = it.Next() {
		lv := it.LazyValue()
		keys++
		used += int64(len(it.Key()) + lv.Len())
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	d.keys.Store(keys)
	d.used.Store(used)
	return nil
}

// quietLogger keeps Pebble silent. Fatal errors panic, which still stops
// the process loudly, rather than letting Pebble carry on in a state it
// considers unrecoverable.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}

func (d *Device) errorf(format string, args ...any) error {
	return fmt.Errorf("%s: "+format, append([]any{d.name}, args...)...)
}

// failed wraps a Pebble error: the device could not serve the request.
func failed(err error) error { return fmt.Errorf("%w: %w", err, device.ErrDeviceFailed) }

var errClosed = fmt.Errorf("closed: %w", device.ErrDeviceFailed)

// enter registers a call in flight, or refuses it once closed. Every
// successful enter is paired with exit.
func (d *Device) enter(ctx context.Context) error {
	d.gate.Lock()
	defer d.gate.Unlock()
	if d.closed {
		return errClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	d.inflight++
	return nil
}

func (d *Device) exit() {
	d.gate.Lock()
	defer d.gate.Unlock()
	if d.inflight--; d.inflight == 0 && d.closed {
		d.idle.Broadcast()
	}
}

func (d *Device) stripe(key []byte) int {
	return int(maphash.Bytes(d.seed, key) % stripes)
}

// reserve adds n > 0 bytes to Used unless that would exceed the capacity.
// It compares and swaps rather than adds and checks, so that a refused
// reservation is never visible to others.
func (d *Device) reserve(n int64) error {
	for {
		u := d.used.Load()
		if d.capacity > 0 && u+n > d.capacity {
			return fmt.Errorf("%d of %d bytes used, %d more needed: %w", u, d.capacity, n, device.ErrNoSpace)
		}
		if d.used.CompareAndSwap(u, u+n) {
			return nil
		}
	}
}

// size returns len(key)+len(value) of the stored key, or false.
func (d *Device) size(key []byte) (int64, bool, error) {
	v, closer, err := d.db.Get(key)
	if errors.Is(err, pdb.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, failed(err)
	}
	n := int64(len(key) + len(v))
	if err := closer.Close(); err != nil {
		return 0, false, failed(err)
	}
	return n, true, nil
}

// get returns a copy of the stored value, never nil when found.
func (d *Device) get(key []byte) ([]byte, bool, error) {
	v, closer, err := d.db.Get(key)
	if errors.Is(err, pdb.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, failed(err)
	}
	out := make([]byte, len(v))
	copy(out, v)
	if err := closer.Close(); err != nil {
		return nil, false, failed(err)
	}
	return out, true, nil
}

// Store implements device.Device.
func (d *Device) Store(ctx context.Context, key, value []byte) error {
	if err := d.enter(ctx); err != nil {
		return d.errorf("store %q: %w", key, err)
	}
	defer d.exit()
	if err := d.checkStore(key, value); err != nil {
		return d.errorf("store %q: %w", key, err)
	}
	mu := &d.locks[d.stripe(key)]
	mu.Lock()
	defer mu.Unlock()
	old, found, err := d.size(key)
	if err != nil {
		return d.errorf("store %q: %w", key, err)
	}
	delta := int64(len(key)+len(value)) - old
	if delta > 0 {
		if err := d.reserve(delta); err != nil {
			return d.errorf("store %q: %w", key, err)
		}
	}
	if err := d.db.Set(key, value, pdb.Sync); err != nil {
		if delta > 0 {
			d.used.Add(-delta)
		}
		return d.errorf("store %q: %w", key, failed(err))
	}
	if delta < 0 {
		d.used.Add(delta)
	}
	if !found {
		d.keys.Add(1)
	}
	return nil
}

func (d *Device) checkStore(key, value []byte) error {
	if err := d.limits.CheckKey(key); err != nil {
		return err
	}
	return d.limits.CheckValue(value)
}

// Retrieve implements device.Device.
func (d *Device) Retrieve(ctx context.Context, key []byte) ([]byte, error) {
	if err := d.enter(ctx); err != nil {
		return nil, d.errorf("retrieve %q: %w", key, err)
	}
	defer d.exit()
	if err := d.limits.CheckKey(key); err != nil {
		return nil, d.errorf("retrieve %q: %w", key, err)
	}
	v, found, err := d.get(key)
	if err != nil {
		return nil, d.errorf("retrieve %q: %w", key, err)
	}
	if !found {
		return nil, d.errorf("retrieve %q: %w", key, device.ErrNotFound)
	}
	return v, nil
}

// Delete implements device.Device. Deleting a missing key writes nothing.
func (d *Device) Delete(ctx context.Context, key []byte) error {
	if err := d.enter(ctx); err != nil {
		return d.errorf("delete %q: %w", key, err)
	}
	defer d.exit()
	if err := d.limits.CheckKey(key); err != nil {
		return d.errorf("delete %q: %w", key, err)
	}
	mu := &d.locks[d.stripe(key)]
	mu.Lock()
	defer mu.Unlock()
	old, found, err := d.size(key)
	if err != nil {
		return d.errorf("delete %q: %w", key, err)
	}
	if !found {
		return nil
	}
	if err := d.db.Delete(key, pdb.Sync); err != nil {
		return d.errorf("delete %q: %w", key, failed(err))
	}
	d.used.Add(-old)
	d.keys.Add(-1)
	return nil
}

// Exist implements device.Device.
func (d *Device) Exist(ctx context.Context, key []byte) (bool, error) {
	if err := d.enter(ctx); err != nil {
		return false, d.errorf("exist %q: %w", key, err)
	}
	defer d.exit()
	if err := d.limits.CheckKey(key); err != nil {
		return false, d.errorf("exist %q: %w", key, err)
	}
	_, found, err := d.size(key)
	if err != nil {
		return false, d.errorf("exist %q: %w", key, err)
	}
	return found, nil
}

// prefixEnd returns the least key greater than every key with prefix, or
// nil when there is none (prefix empty or all 0xff).
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// Iterate implements device.Device. It reads a consistent snapshot (a
// Pebble iterator), so writes made by fn are not seen.
func (d *Device) Iterate(ctx context.Context, prefix []byte, fn func(key []byte) error) error {
	if err := d.enter(ctx); err != nil {
		return d.errorf("iterate %q: %w", prefix, err)
	}
	defer d.exit()
	it, err := d.db.NewIterWithContext(ctx, &pdb.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return d.errorf("iterate %q: %w", prefix, failed(err))
	}
	var key []byte // a copy, so fn cannot disturb the iterator's buffer
	for ok := it.First(); ok; ok = it.Next() {
		if err := ctx.Err(); err != nil {
			_ = it.Close()
			return d.errorf("iterate %q: %w", prefix, err)
		}
		key = append(key[:0], it.Key()...)
		if err := fn(key); err != nil {
			_ = it.Close()
			return err
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return d.errorf("iterate %q: %w", prefix, failed(err))
	}
	return nil
}

// pending is the state of a key written earlier in the same Batch call,
// which the database does not show until the batch commits.
type pending struct {
	value  []byte // the caller's buffer, valid during the call
	exists bool
}

// Batch implements device.Device. Ops are applied in order against the
// database as overlaid by the batch's own earlier writes; the writes are
// committed together, synced, at the end. Results that depend on the commit
// (writes, and reads answered from earlier writes of the batch) are turned
// into errors if the commit fails, so that nothing undurable is reported.
func (d *Device) Batch(ctx context.Context, ops []device.Op) error {
	setAll := func(err error) {
		for i := range ops {
			ops[i].Result, ops[i].Found = nil, false
			ops[i].Err = d.errorf("batch op %d (%v %q): %w", i, ops[i].Kind, ops[i].Key, err)
		}
	}
	if err := d.enter(ctx); err != nil {
		setAll(err)
		return d.errorf("batch: %w", err)
	}
	defer d.exit()

	var locked []int
	for i := range ops {
		op := &ops[i]
		op.Result, op.Found, op.Err = nil, false, nil
		switch op.Kind {
		case device.OpStore:
			op.Err = d.checkStore(op.Key, op.Value)
		case device.OpDelete:
			op.Err = d.limits.CheckKey(op.Key)
		case device.OpRetrieve, device.OpExist:
			op.Err = d.limits.CheckKey(op.Key)
			continue
		default:
			op.Err = errors.New("unknown op kind")
		}
		if op.Err != nil {
			op.Err = d.errorf("batch op %d (%v %q): %w", i, op.Kind, op.Key, op.Err)
			continue
		}
		locked = append(locked, d.stripe(op.Key))
	}
	// Ascending order, so batches cannot deadlock each other or single
	// writers, which hold one stripe.
	slices.Sort(locked)
	locked = slices.Compact(locked)
	for _, s := range locked {
		d.locks[s].Lock()
	}
	defer func() {
		for _, s := range locked {
			d.locks[s].Unlock()
		}
	}()

	b := d.db.NewBatch()
	defer b.Close()
	overlay := map[string]*pending{}
	lookup := func(key []byte) (int64, bool, error) {
		if p, ok := overlay[string(key)]; ok {
			if !p.exists {
				return 0, false, nil
			}
			return int64(len(key) + len(p.value)), true, nil
		}
		return d.size(key)
	}
	// Size changes go into Used as each op is applied, not at the commit,
	// so that a later op of the batch can use the space an earlier one
	// freed, as it would if the ops were issued one by one. A failed commit
	// undoes them all.
	var (
		applied   int64
		keysDelta int64
		dependent []int
	)
	for i := range ops {
		op := &ops[i]
		if op.Err != nil {
			continue
		}
		opErr := func(err error) { op.Err = d.errorf("batch op %d (%v %q): %w", i, op.Kind, op.Key, err) }
		switch op.Kind {
		case device.OpStore:
			old, found, err := lookup(op.Key)
			if err != nil {
				opErr(err)
				continue
			}
			delta := int64(len(op.Key)+len(op.Value)) - old
			if delta > 0 {
				if err := d.reserve(delta); err != nil {
					opErr(err)
					continue
				}
			}
			if err := b.Set(op.Key, op.Value, nil); err != nil {
				if delta > 0 {
					d.used.Add(-delta)
				}
				opErr(failed(err))
				continue
			}
			if delta < 0 {
				d.used.Add(delta)
			}
			applied += delta
			if !found {
				keysDelta++
			}
			overlay[string(op.Key)] = &pending{value: op.Value, exists: true}
			dependent = append(dependent, i)
		case device.OpDelete:
			old, found, err := lookup(op.Key)
			if err != nil {
				opErr(err)
				continue
			}
			if !found {
				continue
			}
			if err := b.Delete(op.Key, nil); err != nil {
				opErr(failed(err))
				continue
			}
			d.used.Add(-old)
			applied -= old
			keysDelta--
			overlay[string(op.Key)] = &pending{}
			dependent = append(dependent, i)
		case device.OpRetrieve, device.OpExist:
			var (
				v     []byte
				found bool
				err   error
			)
			if p, ok := overlay[string(op.Key)]; ok {
				found = p.exists
				if found {
					v = make([]byte, len(p.value))
					copy(v, p.value)
				}
				dependent = append(dependent, i)
			} else {
				v, found, err = d.get(op.Key)
			}
			switch {
			case err != nil:
				opErr(err)
			case op.Kind == device.OpExist:
				op.Found = found
			case found:
				op.Result, op.Found = v, true
			default:
				opErr(device.ErrNotFound)
			}
		}
	}
	if b.Empty() {
		return nil
	}
	err := ctx.Err()
	if err == nil {
		if err = b.Commit(pdb.Sync); err != nil {
			err = failed(err)
		}
	}
	if err != nil {
		d.used.Add(-applied)
		for _, i := range dependent {
			op := &ops[i]
			op.Result, op.Found = nil, false
			op.Err = d.errorf("batch op %d (%v %q): commit: %w", i, op.Kind, op.Key, err)
		}
		return nil
	}
	d.keys.Add(keysDelta)
	return nil
}

// Info implements device.Device.
func (d *Device) Info(ctx context.Context) (device.Info, error) {
	if err := d.enter(ctx); err != nil {
		return device.Info{}, d.errorf("info: %w", err)
	}
	defer d.exit()
	return device.Info{
		Name:        d.name,
		Capacity:    d.capacity,
		Used:        d.used.Load(),
		Keys:        d.keys.Load(),
		MinKeyLen:   d.limits.MinKeyLen,
		MaxKeyLen:   d.limits.MaxKeyLen,
		MaxValueLen: d.limits.MaxValueLen,
		Ordered:     true,
	}, nil
}

// Close implements device.Device: it waits for calls in flight and closes
// the database. A second Close returns device.ErrDeviceFailed.
func (d *Device) Close() error {
	d.gate.Lock()
	if d.closed {
		d.gate.Unlock()
		return d.errorf("close: %w", errClosed)
	}
	d.closed = true
	for d.inflight > 0 {
		d.idle.Wait()
	}
	d.gate.Unlock()
	if err := d.db.Close(); err != nil {
		return d.errorf("close: %w", failed(err))
	}
	return nil
}

// Dir returns the directory the device lives in.
func (d *Device) Dir() string { return d.dir }
