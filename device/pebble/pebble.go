// Package pebble is the persistent embedded device: a device.Device backed
// by one Pebble database in one directory, for `pebble:` devices.
//
// Durability: a write is acknowledged only once it is durable. Every Store
// and Delete, and all the writes of one Batch call, are committed with
// pebble.Sync. Concurrent writes are group-committed (commit.go): the
// writes of every caller that arrive while a commit runs go into the next
// one, one pebble.Batch and one fsync per device, so many writers share
// commits rather than queueing one each. The exception is
// BatchDeferred (device.Deferred, for a rebuild that can redo its
// writes): durable only after a later Sync; its stores are bulk loaded
// (bulk.go).
//
// Invariants:
//   - Open never creates a database unless WithCreate(true) is given: a
//     missing directory, an empty one, or one holding no Pebble database is
//     an error wrapping device.ErrDeviceFailed that names the directory.
//     An array must never take a fresh empty device for a healthy member
//     that merely lost its data.
//   - No fault of the files takes the process down. Pebble answers write
//     errors (a removed or unwritable directory, a full disk, an I/O error)
//     with panics and Fatalf deep inside its locks. Here the file system
//     wrapper parks the goroutine that met a write error, and Fatalf parks
//     its goroutine, after recording the reason: Pebble never sees the
//     error, so it never unwinds. Every Pebble call runs under a watchdog,
//     so a caller waiting on a parked goroutine (or on a disk stuck past
//     WithTimeout) returns device.ErrDeviceFailed with the reason; every
//     later call returns it without entering Pebble; Close finishes in
//     bounded time (a failed database is left open, its goroutines
//     parked, until the process exits; Close abandons it: its write-side
//     file calls park from then on, and the directory's lock is released,
//     so that a new device opens at the same path in this process). A probe notices within a second a
//     directory removed, or one that no longer takes new files, before
//     Pebble needs one (it creates and removes a file "kvarray-probe" in
//     the directory every second).
//   - A full file system (ENOSPC, EDQUOT) makes the device read-only: that
//     write and every later one return device.ErrFull (and ErrNoSpace),
//     wrapping also device.ErrDeviceFailed so that a caller counts a
//     failed device, not a refused value; reads are still served. Any
//     other write error, a Fatalf, or a call over the time limit makes it
//     failed. Both last until the device is opened again: ProbeSpace
//     (device.SpaceProber) says when the file system has room for that.
//   - Corruption Pebble finds in a read (a block failing its checksum)
//     returns an error wrapping device.ErrCorrupt for the keys that read
//     touches; the device keeps serving the rest. Iterate over a corrupt
//     region wraps device.ErrCorrupt and device.ErrDeviceFailed: the
//     device's key list cannot be trusted. Corrupt WAL, MANIFEST or OPTIONS
//     files, or a truncated or missing table, fail Open (or, for what Pebble
//     checks in the background, fail the device) with the reason.
//   - Accounting costs no read per write and no scan at open, so Keys and
//     Used are estimates from Pebble's own metadata. Used is the bytes the
//     database's files take on disk (tables, blob files, WAL, MANIFEST),
//     after compression: versions not yet compacted away count, and a
//     fresh database already uses some KiB. Keys is the sum over tables of
//     their entries less their tombstones (from table statistics Pebble
//     loads in the background after Open), plus stores less deletes since
//     the last flush: a key overwritten in several tables counts until
//     compaction merges them, a blind delete counts down, and after a
//     crash the WAL replayed is not counted until flushed. Once compacted,
//     Keys is exact. The capacity bounds Used: a write is refused with
//     device.ErrNoSpace (for that write only) when Used, sampled at most
//     every 100 ms, plus the bytes admitted since would pass it. It is a
//     bound on the disk footprint, not an exact logical quota.
//   - Pebble errors other than not-found and corruption surface wrapped in
//     device.ErrDeviceFailed: nothing about the key can be concluded.
//   - Close flushes the memtable before closing, so a cleanly closed
//     device depends on no WAL. (Damage to the last records of a WAL left
//     by a crash is read by Pebble as the torn tail a crash leaves: those
//     writes are dropped, as they would be had the crash come earlier.)
//   - Close waits for calls in flight; calls after Close return
//     device.ErrDeviceFailed. (So an Iterate callback must not call Close.)
//   - Pebble's logger is silenced so that CLI output stays clean.
package pebble

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pdb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/internal/workers"
)

// Option configures Open.
type Option func(*options)

type options struct {
	create   bool
	limits   device.Limits
	capacity int64
	timeout  time.Duration
	fs       vfs.FS
	cache    int64
	tagger   device.Tagger
}

// WithCreate lets Open create the directory and the database when they do
// not exist. Only initialisation should pass true; see the package doc.
func WithCreate(create bool) Option { return func(o *options) { o.create = create } }

// WithLimits sets the key and value limits; zero fields take the KV-SSD
// defaults (keys of 4..255 bytes, values up to 2 MiB).
func WithLimits(l device.Limits) Option { return func(o *options) { o.limits = l } }

// WithCapacity limits the bytes of keys and values stored; 0 is unlimited.
func WithCapacity(bytes int64) Option { return func(o *options) { o.capacity = bytes } }

// DefaultTimeout is how long one Pebble call may run before the device is
// marked failed: generous, as a loaded disk may take seconds for an fsync.
const DefaultTimeout = 30 * time.Second

// WithTimeout sets how long one Pebble call (or a disk operation Pebble
// runs in the background) may take before the device is marked failed;
// zero means DefaultTimeout.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithTagger gives the device the function that tags its values (see
// device.Tag): ScanFiltered hands each key's tag to its want. Pebble keeps
// the tag of a value it separates into a blob file beside the key (its
// short attribute), so a scan tells it without reading the value. The
// tags stored are tagger's: a device must be opened with the same tagger,
// or none, for as long as its data lives.
func WithTagger(tagger device.Tagger) Option { return func(o *options) { o.tagger = tagger } }

// DefaultCacheSize is the cache of a device opened without WithCacheSize:
// Pebble's default size.
const DefaultCacheSize = 8 << 20

// WithCacheSize sets the size in bytes of the device's cache (0:
// DefaultCacheSize), Pebble's: its memtables and the blocks of its
// tables and blob files it keeps, outside the Go heap (so it counts in
// the process's RSS). Pebble counts each memtable against it (up to three
// of 16 MiB under a sustained write load: tuning.go), and blocks get the
// rest: at the default, once a memtable has filled, none. Each device has
// its own: one cache shared by the six devices of an array cost a rebuild
// 8% of its rate (its scans contend for the cache's shards).
func WithCacheSize(bytes int64) Option { return func(o *options) { o.cache = bytes } }

// withFS runs Pebble over fs, so tests can inject file system errors.
func withFS(fs vfs.FS) Option { return func(o *options) { o.fs = fs } }

// Device is a Pebble-backed device. Open it with Open.
type Device struct {
	dir      string
	name     string
	db       *pdb.DB
	fs       vfs.FS // the file system under the guard
	limits   device.Limits
	capacity int64
	timeout  time.Duration
	h        *health
	tagger   device.Tagger // nil: no tags (see WithTagger)

	// corruptions counts corrupt blocks Pebble reported.
	corruptions atomic.Int64

	// Accounting estimates; see the package doc.
	usage     atomic.Int64 // disk bytes at the last sample
	since     atomic.Int64 // bytes admitted since the last sample
	sampledAt atomic.Int64 // unix nanoseconds of the last sample
	sampling  sync.Mutex
	unflushed atomic.Int64 // stores less deletes since the last flush

	// queue merges concurrent writes into one synced commit (commit.go).
	queue committer
	// bulk collects deferred stores for ingestion (bulk.go); popts are
	// the options the database was opened with, for its tables.
	bulk  bulkLoad
	popts *pdb.Options

	// running counts the goroutines the watchdog started that have not
	// returned from Pebble: the database is closed only when none is left.
	running   atomic.Int64
	stopProbe chan struct{}
	probeDone chan struct{}

	// Close gate: calls register as in flight; Close marks the device
	// closed and waits for them, so the DB is never used after its Close.
	gate     sync.Mutex
	idle     sync.Cond
	closed   bool
	inflight int

	// cursors are the Cursors open (scan.go), closed by Close before the
	// database: Pebble refuses to close under an open iterator.
	cursorMu sync.Mutex
	cursors  map[*cursor]struct{}
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
	if o.cache < 0 {
		return nil, fmt.Errorf("%s: open: negative cache size %d", name, o.cache)
	}
	if o.timeout < 0 {
		return nil, fmt.Errorf("%s: open: negative timeout %v", name, o.timeout)
	}
	if o.timeout == 0 {
		o.timeout = DefaultTimeout
	}
	if o.fs == nil {
		o.fs = vfs.Default
	}
	if err := checkDir(dir, o.create); err != nil {
		return nil, fmt.Errorf("%s: open: %w", name, err)
	}
	d := &Device{
		dir:       dir,
		name:      name,
		fs:        o.fs,
		limits:    l,
		capacity:  o.capacity,
		timeout:   o.timeout,
		h:         newHealth(),
		stopProbe: make(chan struct{}),
		probeDone: make(chan struct{}),
		tagger:    o.tagger,
	}
	d.idle.L = &d.gate
	popts := tuned(&pdb.Options{
		Logger:           logger{d.h},
		EventListener:    d.events(),
		ErrorIfNotExists: !o.create,
		FS:               o.fs,
		CacheSize:        cmp.Or(o.cache, DefaultCacheSize),
	})
	popts.FS = guardFS{FS: popts.FS, h: d.h}
	if o.tagger != nil {
		popts.Experimental.ShortAttributeExtractor = func(_ []byte, _ int, value []byte) (pdb.ShortAttribute, error) {
			return pdb.ShortAttribute(d.tagger.Of(value)), nil
		}
	}
	// Pebble's disk health checks, over the guard, report a write stuck
	// in the kernel (DiskSlow) even when no caller waits on it.
	popts.WithFSDefaults()
	popts.EnsureDefaults() // as Open does: bulk.go writes tables with them
	removeBulkLeftovers(o.fs, dir)
	var db *pdb.DB
	err := d.call(context.Background(), true, func() error {
		var err error
		db, err = pdb.Open(dir, popts)
		return err
	})
	if err != nil {
		if e := inUse(dir, err); e != nil {
			return nil, fmt.Errorf("%s: open: %w", name, e)
		}
		return nil, fmt.Errorf("%s: open: %w", name, d.openErr(err))
	}
	d.db, d.popts = db, popts
	claim(dir)
	d.sample(context.Background())
	go d.probe()
	return d, nil
}

// openErr classifies an error of pdb.Open: every one means the device
// cannot serve.
func (d *Device) openErr(err error) error {
	switch {
	case errors.Is(err, device.ErrDeviceFailed):
		return err
	case pdb.IsCorruptionError(err):
		return fmt.Errorf("%w: %w: %w", err, device.ErrCorrupt, device.ErrDeviceFailed)
	}
	return failed(err)
}

// probeEvery is how often the directory is checked.
const probeEvery = time.Second

// probeFile is the file the probe creates and removes; Pebble ignores
// files it did not name.
const probeFile = "kvarray-probe"

// probe checks every probeEvery that the directory still holds Pebble's
// lock file and still takes a new file: a directory removed, made
// unreadable or unwritable (or its file system remounted read-only) under
// a running database fails the device at once, not when Pebble next needs
// a file, which on a quiet device may be hours later (and a write to a
// removed directory's open WAL still succeeds, and is lost).
func (d *Device) probe() {
	defer close(d.probeDone)
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	lock, scratch := d.fs.PathJoin(d.dir, "LOCK"), d.fs.PathJoin(d.dir, probeFile)
	for {
		select {
		case <-d.stopProbe:
			return
		case <-d.h.dead:
			return
		case <-t.C:
		}
		if _, err := d.fs.Stat(lock); err != nil {
			d.h.fail(fmt.Errorf("directory check: %w", err))
			return
		}
		f, err := d.fs.Create(scratch, vfs.WriteCategoryUnspecified)
		if err == nil {
			err = errors.Join(f.Close(), d.fs.Remove(scratch))
		}
		switch {
		case err == nil:
		case isNoSpace(err):
			d.h.noSpace(fmt.Errorf("directory check: %w", err))
		default:
			d.h.fail(fmt.Errorf("directory check: cannot create a file: %w", err))
			return
		}
	}
}

// call runs fn, a call into Pebble, on its own goroutine under the
// watchdog: it returns fn's error, or, without waiting for fn, the
// device's failure once it is marked failed (read-only too, for a write),
// the context's error, or a failure after the time limit. A device already
// failed refuses without running fn. fn must not touch the caller's
// buffers, which the caller may reuse as soon as call returns.
func (d *Device) call(ctx context.Context, write bool, fn func() error) error {
	if err := d.refusal(write); err != nil {
		return err
	}
	done := make(chan error, 1)
	d.running.Add(1)
	workers.Go(func() {
		defer d.running.Add(-1)
		done <- d.survive(fn)
	})
	var full chan struct{} // nil, never ready, for reads
	if write {
		full = d.h.full
	}
	t := time.NewTimer(d.timeout)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			// The reason beats the symptom Pebble saw.
			if herr := d.refusal(write); herr != nil {
				return herr
			}
		}
		return err
	case <-d.h.dead:
		return d.h.err()
	case <-full:
		return d.h.writeable()
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		d.h.fail(fmt.Errorf("a call ran over the %v time limit", d.timeout))
		return d.h.err()
	}
}

// survive runs fn, a call into Pebble, and turns a panic in it into the
// device's failure. Pebble panics on some faults of its files rather than
// returning an error (v2.1.7: a blob file that cannot be opened, because
// the directory was removed, panics in reportCorruption); one device's
// fault must not take the process and every other device with it. The
// unwound Pebble instance is never used again: the device is failed, and
// Close leaves it as it is.
func (d *Device) survive(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			d.h.fail(fmt.Errorf("pebble panicked: %v", r))
			err = d.h.err()
		}
	}()
	return fn()
}

// refusal is why a call must not enter Pebble, or nil.
func (d *Device) refusal(write bool) error {
	if write {
		return d.h.writeable()
	}
	return d.h.err()
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

func (d *Device) errorf(format string, args ...any) error {
	return fmt.Errorf("%s: "+format, append([]any{d.name}, args...)...)
}

// failed wraps a Pebble error: the device could not serve the request.
func failed(err error) error { return fmt.Errorf("%w: %w", err, device.ErrDeviceFailed) }

// classify turns an error of a Pebble call into the device's sentinels.
func classify(err error) error {
	switch {
	case err == nil, errors.Is(err, device.ErrDeviceFailed),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case pdb.IsCorruptionError(err):
		return fmt.Errorf("%w: %w", err, device.ErrCorrupt)
	}
	return failed(err)
}

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

// sampleEvery bounds how often the capacity check asks Pebble for the
// disk usage.
const sampleEvery = 100 * time.Millisecond

// sample refreshes the disk usage unless another caller is doing it or it
// is fresh.
func (d *Device) sample(ctx context.Context) {
	if !d.sampling.TryLock() {
		return
	}
	defer d.sampling.Unlock()
	if time.Since(time.Unix(0, d.sampledAt.Load())) < sampleEvery {
		return
	}
	var used int64
	if err := d.call(ctx, false, func() error {
		used = diskUsage(d.db.Metrics())
		return nil
	}); err != nil {
		return
	}
	d.usage.Store(used)
	d.since.Store(0)
	d.sampledAt.Store(time.Now().UnixNano())
}

// diskUsage is the bytes the database's files take. Pebble's own figure
// leaves out the WAL being written until it is rotated, which holds all
// the data not yet flushed.
// Nor does it count blob files (separated values) at all in this version
// of Pebble, though it lists them in BlobFiles. It adds the bytes of
// compactions in progress, a signed count, so the sum can fall below
// zero: that printed as 16 EiB (status showed it once on every device,
// after a crash; the cause is not pinned down) and, with a capacity,
// would refuse every write. No device uses less than nothing.
func diskUsage(m *pdb.Metrics) int64 {
	u := m.DiskSpaceUsage() - m.WAL.PhysicalSize + max(m.WAL.PhysicalSize, m.WAL.Size)
	local := m.BlobFiles.Local.LiveSize + m.BlobFiles.Local.ObsoleteSize
	return max(int64(u-local+max(local, m.BlobFiles.LiveSize+m.BlobFiles.ObsoleteSize)), 0)
}

// admit counts n bytes about to be written against the capacity.
func (d *Device) admit(ctx context.Context, n int64) error {
	if d.capacity == 0 {
		return nil
	}
	if d.usage.Load()+d.since.Load()+n > d.capacity {
		d.sample(ctx)
	}
	if u := d.usage.Load() + d.since.Add(n); u > d.capacity {
		d.since.Add(-n)
		return fmt.Errorf("about %d of %d bytes used on disk, %d more needed: %w", u-n, d.capacity, n, device.ErrNoSpace)
	}
	return nil
}

// lookup reads key; the value is copied only when want is set (then it is
// never nil when found).
func (d *Device) lookup(ctx context.Context, key []byte, want bool) ([]byte, bool, error) {
	key = bytes.Clone(key) // the call may outlive this one's caller
	var (
		v     []byte
		found bool
	)
	err := d.call(ctx, false, func() error {
		val, closer, err := d.db.Get(key)
		if errors.Is(err, pdb.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if want {
			v = make([]byte, len(val))
			copy(v, val)
		}
		found = true
		return closer.Close()
	})
	if err != nil {
		return nil, false, classify(err)
	}
	return v, found, nil
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
	if err := d.h.writeable(); err != nil {
		return d.errorf("store %q: %w", key, err)
	}
	if err := d.admit(ctx, int64(len(key)+len(value))); err != nil {
		return d.errorf("store %q: %w", key, err)
	}
	b := d.db.NewBatch()
	if err := b.Set(key, value, nil); err != nil {
		b.Close()
		return d.errorf("store %q: %w", key, failed(err))
	}
	if err := d.commit(ctx, b); err != nil {
		return d.errorf("store %q: %w", key, err)
	}
	d.unflushed.Add(1)
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
	v, found, err := d.lookup(ctx, key, true)
	if err != nil {
		return nil, d.errorf("retrieve %q: %w", key, err)
	}
	if !found {
		return nil, d.errorf("retrieve %q: %w", key, device.ErrNotFound)
	}
	return v, nil
}

// Delete implements device.Device. It writes a tombstone whether or not
// the key exists: finding out would cost a read.
func (d *Device) Delete(ctx context.Context, key []byte) error {
	if err := d.enter(ctx); err != nil {
		return d.errorf("delete %q: %w", key, err)
	}
	defer d.exit()
	if err := d.limits.CheckKey(key); err != nil {
		return d.errorf("delete %q: %w", key, err)
	}
	if err := d.h.writeable(); err != nil {
		return d.errorf("delete %q: %w", key, err)
	}
	b := d.db.NewBatch()
	if err := b.Delete(key, nil); err != nil {
		b.Close()
		return d.errorf("delete %q: %w", key, failed(err))
	}
	if err := d.commit(ctx, b); err != nil {
		return d.errorf("delete %q: %w", key, err)
	}
	d.unflushed.Add(-1)
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
	_, found, err := d.lookup(ctx, key, false)
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

// iterChunk is how many keys the iterating goroutine hands over at once.
const iterChunk = 256

// chunk is a run of keys read by Iterate's goroutine; err and last end it.
type chunk struct {
	keys [][]byte
	err  error
	last bool
}

// Iterate implements device.Device. It reads a consistent snapshot (a
// Pebble iterator), so writes made by fn are not seen. The iterator runs
// on its own goroutine, which hands over keys in chunks, so that each
// chunk waits under the watchdog and fn runs on the caller's goroutine.
func (d *Device) Iterate(ctx context.Context, prefix []byte, fn func(key []byte) error) error {
	if err := d.enter(ctx); err != nil {
		return d.errorf("iterate %q: %w", prefix, err)
	}
	defer d.exit()
	if err := d.h.err(); err != nil {
		return d.errorf("iterate %q: %w", prefix, err)
	}
	opts := &pdb.IterOptions{LowerBound: bytes.Clone(prefix), UpperBound: prefixEnd(prefix)}
	chunks := make(chan chunk, 1)
	stop := make(chan struct{})
	defer close(stop)
	d.running.Add(1)
	go func() {
		defer d.running.Add(-1)
		send := func(c chunk) bool {
			select {
			case chunks <- c:
				return true
			case <-stop:
				return false
			}
		}
		it, err := d.db.NewIterWithContext(ctx, opts)
		if err != nil {
			send(chunk{err: err, last: true})
			return
		}
		var keys [][]byte
		for ok := it.First(); ok; ok = it.Next() {
			keys = append(keys, bytes.Clone(it.Key()))
			if len(keys) == iterChunk {
				if !send(chunk{keys: keys}) {
					_ = it.Close()
					return
				}
				keys = nil
			}
		}
		send(chunk{keys: keys, err: errors.Join(it.Error(), it.Close()), last: true})
	}()
	t := time.NewTimer(d.timeout)
	defer t.Stop()
	for {
		var c chunk
		select {
		case c = <-chunks:
		case <-d.h.dead:
			return d.errorf("iterate %q: %w", prefix, d.h.err())
		case <-ctx.Done():
			return d.errorf("iterate %q: %w", prefix, ctx.Err())
		case <-t.C:
			d.h.fail(fmt.Errorf("an iteration waited over the %v time limit", d.timeout))
			return d.errorf("iterate %q: %w", prefix, d.h.err())
		}
		for _, k := range c.keys {
			if err := ctx.Err(); err != nil {
				return d.errorf("iterate %q: %w", prefix, err)
			}
			if err := fn(k); err != nil {
				return err
			}
		}
		if err := c.err; err != nil {
			if herr := d.h.err(); herr != nil {
				err = herr
			} else if err = classify(err); errors.Is(err, device.ErrCorrupt) {
				// A listing with a hole cannot be trusted: the device
				// cannot answer for its keys.
				err = failed(err)
			}
			return d.errorf("iterate %q: %w", prefix, err)
		}
		if c.last {
			return nil
		}
		t.Reset(d.timeout)
	}
}

// pending is the state of a key written earlier in the same Batch call,
// which the database does not show until the batch commits.
type pending struct {
	value  []byte // the caller's buffer, valid during the call
	exists bool
}

// read is one read of a Batch that goes to the database.
type read struct {
	op    int
	key   []byte // a copy: the reads may outlive the call
	value []byte
	found bool
	err   error
}

// Batch implements device.Device. Ops are applied in order against the
// database as overlaid by the batch's own earlier writes: a read of a key
// the batch wrote is answered from the batch, the others from the
// database, which shows none of the batch until it commits. The writes are
// committed together, synced, at the end. Results that depend on the
// commit (writes, and reads answered from earlier writes of the batch) are
// turned into errors if the commit fails, so that nothing undurable is
// reported.
func (d *Device) Batch(ctx context.Context, ops []device.Op) error {
	return d.batch(ctx, ops, true)
}

var _ device.Deferred = (*Device)(nil)

// BatchDeferred implements device.Deferred. A batch of stores only is
// collected for bulk loading (bulk.go): invisible to reads until Sync
// ingests it. Any other batch ingests what was collected, then runs as
// Batch with its writes committed unsynced, on their own rather than
// through the group commit (whose callers each wait for an fsync).
// Pebble writes its WAL in commit order and each sync covers everything
// written before it, so any later synced write (Sync, or another caller's
// synced commit) makes these durable too, and a crash loses a suffix of
// them, never a write before one it kept.
func (d *Device) BatchDeferred(ctx context.Context, ops []device.Op) error {
	if !slices.ContainsFunc(ops, func(op device.Op) bool { return op.Kind != device.OpStore }) {
		return d.batch(ctx, ops, false)
	}
	if err := d.ingestBulk(ctx); err != nil {
		for i := range ops {
			ops[i].Result, ops[i].Found = nil, false
			ops[i].Err = d.errorf("batch op %d (%v %q): %w", i, ops[i].Kind, ops[i].Key, err)
		}
		return d.errorf("batch: %w", err)
	}
	return d.batch(ctx, ops, false)
}

// Sync implements device.Deferred: the stores collected are ingested
// (bulk.go), then an empty synced WAL record covers the other writes.
func (d *Device) Sync(ctx context.Context) error {
	if err := d.enter(ctx); err != nil {
		return d.errorf("sync: %w", err)
	}
	defer d.exit()
	if err := d.ingestBulk(ctx); err != nil {
		return d.errorf("sync: %w", err)
	}
	err := d.call(ctx, true, func() error { return d.db.LogData(nil, pdb.Sync) })
	if err != nil {
		return d.errorf("sync: %w", classify(err))
	}
	return nil
}

// batch is Batch, its writes committed synced through the group commit,
// or unsynced (BatchDeferred).
func (d *Device) batch(ctx context.Context, ops []device.Op, sync bool) error {
	opErr := func(i int, err error) error {
		return d.errorf("batch op %d (%v %q): %w", i, ops[i].Kind, ops[i].Key, err)
	}
	setAll := func(err error) {
		for i := range ops {
			ops[i].Result, ops[i].Found = nil, false
			ops[i].Err = opErr(i, err)
		}
	}
	if err := d.enter(ctx); err != nil {
		setAll(err)
		return d.errorf("batch: %w", err)
	}
	defer d.exit()
	if err := d.h.err(); err != nil {
		setAll(err)
		return d.errorf("batch: %w", err)
	}

	var (
		b         *pdb.Batch
		reads     []read
		dependent []int
		stores    int64
		overlay   = map[string]*pending{}
		// bulk: deferred stores only, collected (bulk.go); full: the
		// collection is due for ingestion.
		bulk = !sync && !slices.ContainsFunc(ops, func(op device.Op) bool { return op.Kind != device.OpStore })
		full bool
	)
	for i := range ops {
		op := &ops[i]
		op.Result, op.Found, op.Err = nil, false, nil
		switch op.Kind {
		case device.OpStore:
			op.Err = d.checkStore(op.Key, op.Value)
		case device.OpDelete, device.OpRetrieve, device.OpExist:
			op.Err = d.limits.CheckKey(op.Key)
		default:
			op.Err = errors.New("unknown op kind")
		}
		if op.Err == nil && (op.Kind == device.OpStore || op.Kind == device.OpDelete) {
			op.Err = d.h.writeable()
		}
		if op.Err == nil && op.Kind == device.OpStore {
			op.Err = d.admit(ctx, int64(len(op.Key)+len(op.Value)))
		}
		if op.Err != nil {
			op.Err = opErr(i, op.Err)
			continue
		}
		if bulk {
			full = d.bulk.collect(op.Key, op.Value) || full
			continue
		}
		switch op.Kind {
		case device.OpStore, device.OpDelete:
			if b == nil {
				b = d.db.NewBatch()
			}
			var err error
			if op.Kind == device.OpStore {
				err = b.Set(op.Key, op.Value, nil)
				stores++
			} else {
				err = b.Delete(op.Key, nil)
				stores--
			}
			if err != nil {
				op.Err = opErr(i, failed(err))
				continue
			}
			overlay[string(op.Key)] = &pending{value: op.Value, exists: op.Kind == device.OpStore}
			dependent = append(dependent, i)
		case device.OpRetrieve, device.OpExist:
			p, ok := overlay[string(op.Key)]
			if !ok {
				reads = append(reads, read{op: i, key: bytes.Clone(op.Key)})
				continue
			}
			dependent = append(dependent, i)
			switch {
			case op.Kind == device.OpExist:
				op.Found = p.exists
			case p.exists:
				op.Result, op.Found = bytes.Clone(p.value), true
				if op.Result == nil {
					op.Result = []byte{}
				}
			default:
				op.Err = opErr(i, device.ErrNotFound)
			}
		}
	}
	d.batchReads(ctx, ops, reads, opErr)
	if full {
		if err := d.ingestBulk(ctx); err != nil {
			setAll(err)
			return d.errorf("batch: %w", err)
		}
	}
	if b == nil {
		return nil
	}
	commit := d.commit
	if !sync {
		commit = d.commitDeferred
	}
	if err := commit(ctx, b); err != nil {
		for _, i := range dependent {
			op := &ops[i]
			op.Result, op.Found = nil, false
			op.Err = opErr(i, fmt.Errorf("commit: %w", err))
		}
		return nil
	}
	d.unflushed.Add(stores)
	return nil
}

// batchReads runs the database reads of a batch in one watchdog call.
func (d *Device) batchReads(ctx context.Context, ops []device.Op, reads []read, opErr func(int, error) error) {
	if len(reads) == 0 {
		return
	}
	// fn works on its own copy: call may return (the device failed, the
	// time limit passed) while fn still runs, and the caller then owns
	// reads and the keys again. The copy is read back only once fn is done.
	local := make([]read, len(reads))
	for i, r := range reads {
		local[i] = r
		local[i].key = bytes.Clone(r.key)
	}
	kinds := make([]device.OpKind, len(ops))
	for i := range ops {
		kinds[i] = ops[i].Kind
	}
	err := d.call(ctx, false, func() error {
		for i := range local {
			r := &local[i]
			val, closer, err := d.db.Get(r.key)
			switch {
			case errors.Is(err, pdb.ErrNotFound):
			case err != nil:
				r.err = classify(err)
			default:
				r.found = true
				if kinds[r.op] == device.OpRetrieve {
					// append, not make and copy: make would clear
					// the bytes (an 8 MiB value's worth) before the
					// copy writes them.
					r.value = append([]byte{}, val...)
				}
				if err := closer.Close(); err != nil {
					r.err = classify(err)
				}
			}
		}
		return nil
	})
	if err == nil {
		copy(reads, local)
	}
	for _, r := range reads {
		op := &ops[r.op]
		switch {
		case err != nil:
			op.Err = opErr(r.op, classify(err))
		case r.err != nil:
			op.Err = opErr(r.op, r.err)
		case op.Kind == device.OpExist:
			op.Found = r.found
		case r.found:
			op.Result, op.Found = r.value, true
		default:
			op.Err = opErr(r.op, device.ErrNotFound)
		}
	}
}

// Ordered implements device.Orderer: Pebble iterates in key order.
func (d *Device) Ordered() bool { return true }

// Info implements device.Device. Keys and Used are estimates (see the
// package doc). A device that is read-only or failed returns why, so that
// status shows the reason, rather than ask a Pebble that may be stuck.
func (d *Device) Info(ctx context.Context) (device.Info, error) {
	if err := d.enter(ctx); err != nil {
		return device.Info{}, d.errorf("info: %w", err)
	}
	defer d.exit()
	if err := d.h.writeable(); err != nil {
		return device.Info{}, d.errorf("info: %w", err)
	}
	info := device.Info{
		Name:        d.name,
		Capacity:    d.capacity,
		MinKeyLen:   d.limits.MinKeyLen,
		MaxKeyLen:   d.limits.MaxKeyLen,
		MaxValueLen: d.limits.MaxValueLen,
		Ordered:     true,
	}
	var used, keys int64
	err := d.call(ctx, false, func() error {
		used = diskUsage(d.db.Metrics())
		levels, err := d.db.SSTables()
		if err != nil {
			return err
		}
		for _, tables := range levels {
			for _, t := range tables {
				keys += int64(t.TableStats.NumEntries) - int64(t.TableStats.NumDeletions)
			}
		}
		return nil
	})
	if err != nil {
		return device.Info{}, d.errorf("info: %w", classify(err))
	}
	keys = max(keys+d.unflushed.Load(), 0)
	d.usage.Store(used)
	d.since.Store(0)
	d.sampledAt.Store(time.Now().UnixNano())
	info.Used, info.Keys = used, keys
	return info, nil
}

// Close implements device.Device: it waits for calls in flight and closes
// the database. A second Close returns device.ErrDeviceFailed. Close takes
// bounded time: calls in flight are bounded by the watchdog, and a
// database whose goroutines are parked (a failed or read-only device) or
// that does not close within the time limit is left open.
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
	d.closeCursors()
	close(d.stopProbe)
	<-d.probeDone
	// Goroutines the watchdog left behind may still be inside Pebble;
	// closing the database under them would make Pebble panic.
	deadline := time.Now().Add(d.timeout)
	for d.running.Load() > 0 && d.h.writeable() == nil && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if d.running.Load() > 0 {
		d.h.fail(errors.New("calls still inside pebble at close"))
	}
	if d.h.writeable() != nil {
		d.h.abandon()
		return nil // already reported by every call; see the package doc
	}
	done := make(chan error, 1)
	go func() {
		// Flushed first, so that a cleanly closed device replays no WAL
		// at open: damage to a WAL's last records reads as a crash's torn
		// tail, and would silently drop acknowledged writes.
		done <- errors.Join(d.db.Flush(), d.db.Close())
	}()
	t := time.NewTimer(d.timeout)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			return d.errorf("close: %w", failed(err))
		}
		return nil
	case <-d.h.dead:
		d.h.abandon()
		return nil
	case <-t.C:
		d.h.fail(fmt.Errorf("close ran over the %v time limit", d.timeout))
		d.h.abandon()
		return d.errorf("close: %w", d.h.err())
	}
}

// Dir returns the directory the device lives in.
func (d *Device) Dir() string { return d.dir }
