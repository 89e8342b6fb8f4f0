package mechanism

import (
	"context"
	"math"
	"sync"
	"time"
)

// Watch records which keys were written to one device, and when, so that
// a rebuild can tell whether what its scan read of a key may have changed
// since: the keys of every store and delete addressed to the device, by
// any call to Do except the rebuild's own (under WithRestoring for the
// device), from when the call starts until it ends.
//
// A key counts as touched after generation g when a Do call writing it to
// the device ended after g was taken, or is still running. A write that
// changes a key a rebuild restores is addressed to the device being
// rebuilt (the key has a piece there, which the write overwrites or
// releases), so a key not touched since the rebuild's scan began reads on
// the other devices as the scan saw it.
type Watch struct {
	dev     int
	mu      sync.Mutex
	gen     uint64
	touched map[string]uint64 // math.MaxUint64 while a write is running
	full    bool              // too many keys to track: everything counts as touched
}

// watchMax bounds the keys a Watch tracks (their memory); past it every
// key counts as touched, which is safe, only slower.
const watchMax = 1 << 20

// WatchWrites starts a Watch on device dev; Unwatch ends it. It returns
// once every Do call that began before it has ended, so that the writes
// of every call still running afterwards are tracked. A device has at
// most one watch: a second call replaces the first.
func (e *Env) WatchWrites(dev int) *Watch {
	w := &Watch{dev: dev, touched: map[string]uint64{}}
	e.watches[dev].Store(w)
	e.Quiesce()
	return w
}

// Quiesce returns once every Do call and every Begin (without its End)
// that started before it has ended. Resync uses it: a write that found a
// device Failed records the miss after its Do returns (Acknowledge,
// MarkStale), under the turn of its key (keylock.WithHolder reports
// turns here), so once the device is Healthy again and Quiesce returns,
// every miss of it by an operation already running is recorded, and no
// later operation misses it for being Failed.
func (e *Env) Quiesce() {
	// One at a time: a second epoch change while the first waits would
	// send new calls to the slot the first is draining.
	e.quiesce.Lock()
	defer e.quiesce.Unlock()
	old := e.epoch.Add(1) - 1
	for e.inflight[old&1].Load() != 0 {
		time.Sleep(100 * time.Microsecond)
	}
}

// Begin registers an operation that Quiesce waits for, until End with
// Begin's result: the turns of the array's and mechanisms' key locks.
func (e *Env) Begin() uint64 { return e.enter() }

// End ends what Begin started.
func (e *Env) End(ep uint64) { e.exit(ep) }

// Unwatch ends w.
func (e *Env) Unwatch(w *Watch) { e.watches[w.dev].CompareAndSwap(w, nil) }

// enter registers a Do call or a Begin in the current epoch (see
// Quiesce), and exit ends it.
func (e *Env) enter() uint64 {
	for {
		ep := e.epoch.Load()
		e.inflight[ep&1].Add(1)
		if e.epoch.Load() == ep {
			return ep
		}
		e.inflight[ep&1].Add(-1)
	}
}

func (e *Env) exit(ep uint64) { e.inflight[ep&1].Add(-1) }

// watchWrites starts tracking the writes of ops that a watch covers and
// returns what ends it.
func (e *Env) watchWrites(ctx context.Context, ops []Op) func() {
	var ends []func()
	for i := range ops {
		if !isWrite(ops[i].Kind) {
			continue
		}
		w := e.watches[ops[i].Dev].Load()
		if w == nil {
			continue
		}
		if r := restoringFrom(ctx); r != nil && r.dev == w.dev {
			continue // the rebuild's own
		}
		k := ops[i].Key
		w.start(k)
		ends = append(ends, func() { w.end(k) })
	}
	return func() {
		for _, end := range ends {
			end()
		}
	}
}

// Gen returns the current generation.
func (w *Watch) Gen() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen
}

// TouchedSince reports whether key was written to the device after
// generation g was taken, or is being written.
func (w *Watch) TouchedSince(key []byte, g uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.full || w.touched[string(key)] > g
}

func (w *Watch) start(k []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.note(k, math.MaxUint64)
}

func (w *Watch) end(k []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gen++
	w.note(k, w.gen)
}

func (w *Watch) note(k []byte, g uint64) {
	if len(w.touched) >= watchMax {
		w.full, w.touched = true, map[string]uint64{}
	}
	if !w.full {
		w.touched[string(k)] = g
	}
}

// Missing reports whether dev's resync record lists key: its piece there,
// if any, may be older than the key's value.
func (e *Env) Missing(dev int, key []byte) bool { return e.missed(dev, key) }
