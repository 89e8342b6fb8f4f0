package keyspace

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/kvarray/kvarray/array"
)

// Counts: how many keys, and keys with an expiry, each database holds,
// kept up to date by every write of the Store so that DBSIZE and INFO
// keyspace never list keys.
//
// Contract:
//   - A key counts from the moment its value is stored until it is
//     deleted or reclaimed, expired or not (as Redis counts keys not yet
//     reclaimed); it counts under expires while its value has an
//     expire-at.
//   - Each write learns the key's state before it (one read, unless the
//     caller read it already) and after it, and adds the difference once
//     the write succeeded. The server holds the key's lock across the
//     read and the write, so with one process writing the counts are
//     exact. A write whose outcome is unknown (a delete that failed, a
//     state that could not be read) marks the counts inexact: Exact says
//     so and callers list keys instead, until the next start recounts.
//   - Across restarts: a clean shutdown (SaveCounts) stores the counts in
//     a record (Internal ‖ 'n'); the next StartCounting reads it and
//     deletes it before any write, so a record present is always current.
//     After a crash there is no record, and StartCounting recounts in the
//     background: the keys by listing the databases, the expires by
//     listing the expiry index and reading the value of each entry (an
//     entry counts when its value has its expire-at: every value with an
//     expiry has exactly one such entry, stale entries do not count). A
//     Store opened by another program (the CLI) that writes deletes the
//     record first, so the next server start recounts.
//   - A recount walks in key order and is exact while clients write: a
//     write's change is added only if the recount has passed its key
//     (the recount lists the rest later and sees the write's result),
//     and a page is counted while no write is in flight (the recount
//     holds a gate that writes hold shared). Writes wait for at most one
//     page's listing, and only during a recount.

const (
	recCounts = 'n'
	// recountPage is how many keys, or index entries (each read), a
	// recount step covers while writes wait.
	recountPage = 512
)

// state is a key's presence and expiry, as counted.
type state struct {
	exists  bool
	at      int64 // expire-at; 0 for none
	foreign bool  // a value not in the keyspace's format
	unknown bool  // could not be read, for err
	err     error
	// Of a value in the keyspace's format, as before read it: its
	// encoding flag, the length of its keyspace header (where the Redis
	// value starts) and of the Redis value.
	raw    bool
	head   int
	length int64
	// typ and ver: the value's type and version (Value.Type, Value.Ver).
	typ byte
	ver uint64
}

// tally is one recount's progress in its key order.
type tally struct {
	gate sync.RWMutex
	// active: the recount is running; pos is the last key it counted
	// (nil: none yet). Both guarded by gate.
	active bool
	pos    []byte
}

// counts is the Store's counters, by db byte.
type counts struct {
	on      bool // StartCounting was called: writes read the old state
	keys    [MaxDatabases]atomic.Int64
	expires [MaxDatabases]atomic.Int64
	inexact atomic.Bool
	// recounting is set while either recount runs (the gates matter).
	recounting atomic.Bool
	ready      atomic.Bool // loaded or recounted
	byKey      tally       // order: array key (db ‖ key)
	byIndex    tally       // order: expiry index key
	stop       context.CancelFunc
	done       chan struct{}
	// dropped: a Store that does not count deleted the saved counts.
	dropped atomic.Bool
}

func countsKey() []byte { return []byte{Internal, recCounts} }

// StartCounting makes the Store keep counts: from the record a clean
// shutdown left (deleted at once), or by a recount in the background
// that runs until it is done, StopCounting is called or ctx ends. Call it
// once, before any write through the Store.
func (s *Store) StartCounting(ctx context.Context) {
	c := &s.cnt
	c.on = true
	if b, err := s.A.Retrieve(ctx, countsKey()); err == nil && c.load(b) {
		if err := s.A.Delete(ctx, countsKey()); err == nil {
			c.ready.Store(true)
			return
		}
	}
	for i := range c.keys {
		c.keys[i].Store(0)
		c.expires[i].Store(0)
	}
	c.byKey.active, c.byIndex.active = true, true
	c.recounting.Store(true)
	rctx, cancel := context.WithCancel(ctx)
	c.stop, c.done = cancel, make(chan struct{})
	go func() {
		defer close(c.done)
		if err := s.recount(rctx); err != nil {
			c.inexact.Store(true)
		}
		c.end(&c.byKey)
		c.end(&c.byIndex)
		c.recounting.Store(false)
		c.ready.Store(true)
	}()
}

// StopCounting ends a recount in progress (the counts stay inexact) and
// waits for it.
func (s *Store) StopCounting() {
	if c := &s.cnt; c.stop != nil {
		c.stop()
		<-c.done
	}
}

// SaveCounts stores exact counts for the next start (a clean shutdown:
// no write may follow). Inexact or incomplete counts are not saved.
func (s *Store) SaveCounts(ctx context.Context) error {
	c := &s.cnt
	if !c.on || !c.ready.Load() || c.inexact.Load() {
		return nil
	}
	b := []byte{}
	for i := range c.keys {
		b = binary.AppendUvarint(b, uint64(max(c.keys[i].Load(), 0)))
		b = binary.AppendUvarint(b, uint64(max(c.expires[i].Load(), 0)))
	}
	if err := s.A.Store(ctx, countsKey(), b); err != nil {
		return fmt.Errorf("keyspace: saving the key counts: %w", err)
	}
	return nil
}

func (c *counts) load(b []byte) bool {
	var keys, exp [MaxDatabases]int64
	for i := range keys {
		for _, p := range []*int64{&keys[i], &exp[i]} {
			v, n := binary.Uvarint(b)
			if n <= 0 {
				return false
			}
			*p, b = int64(v), b[n:]
		}
	}
	for i := range keys {
		c.keys[i].Store(keys[i])
		c.expires[i].Store(exp[i])
	}
	return len(b) == 0
}

// Count is how many keys, and keys with an expiry, database db holds;
// exact false when the counts cannot be trusted (still recounting, a
// write with an unknown outcome, or not counting): list keys instead.
func (s *Store) Count(db int) (keys, expires int64, exact bool) {
	c := &s.cnt
	p := s.Phys(db)
	return c.keys[p].Load(), c.expires[p].Load(), c.on && c.ready.Load() && !c.inexact.Load()
}

// end marks a recount finished.
func (c *counts) end(t *tally) {
	t.gate.Lock()
	t.active = false
	t.gate.Unlock()
}

// passed reports whether the recount in order t has counted k (or is not
// running). Call with t.gate held.
func (t *tally) passed(k []byte) bool {
	return !t.active || t.pos != nil && bytes.Compare(k, t.pos) <= 0
}

// before reads the state of key of db byte p: its keyspace header and
// length only (a range read), not the value.
func (s *Store) before(ctx context.Context, p int, key []byte) state {
	got, total, err := s.A.RetrieveRanges(ctx, RawKey(p, key), array.Range{Len: headLen})
	if err == nil && len(got[0]) > 0 && got[0][0]&tagVersion != 0 {
		// A collection's version follows: the rare second read of a
		// write that replaces or deletes a collection with elements.
		got, total, err = s.A.RetrieveRanges(ctx, RawKey(p, key), array.Range{Len: headVerLen})
	}
	switch {
	case errors.Is(err, array.ErrNotFound):
		return state{}
	case err != nil:
		return state{unknown: true, err: err}
	}
	v, n, err := DecodeHead(got[0])
	if err != nil {
		return state{exists: true, foreign: true} // not ours, but listed as a key
	}
	return state{exists: true, at: v.At, raw: v.Raw, head: n, length: total - int64(n), typ: v.Type, ver: v.Ver}
}

// write reads the state of key of db byte p, runs fn with it — a write
// that returns the state it leaves — and counts the change. fn returning
// errUnchanged writes nothing and is no error. failedMayChange tells
// whether a failed fn may have changed the key anyway (a failed store
// leaves the old value; a failed delete may have deleted). It returns
// the state read; a Store that does not count reads it only for a fn
// that uses it (useOld).
func (s *Store) write(ctx context.Context, p int, key []byte, fn func(old state) (state, error), failedMayChange, useOld bool) (state, error) {
	c := &s.cnt
	if !c.on && !c.dropped.Load() {
		// Counts saved by a server would no longer be current.
		if err := s.A.Delete(ctx, countsKey()); err != nil && !errors.Is(err, array.ErrNotFound) {
			return state{}, fmt.Errorf("keyspace: deleting the saved key counts before the first write: %w", err)
		}
		c.dropped.Store(true)
	}
	if c.recounting.Load() {
		c.byKey.gate.RLock()
		defer c.byKey.gate.RUnlock()
		c.byIndex.gate.RLock()
		defer c.byIndex.gate.RUnlock()
	}
	var old state
	if c.on || useOld {
		old = s.before(ctx, p, key)
	}
	now, err := fn(old)
	switch {
	case errors.Is(err, errUnchanged):
		return old, nil
	case err != nil && failedMayChange, err == nil && old.unknown:
		c.inexact.Store(true)
		return old, err
	case err != nil:
		return old, err
	}
	if c.on {
		c.add(p, key, old, now)
	}
	return old, nil
}

// errUnchanged: a write that decided to write nothing.
var errUnchanged = errors.New("unchanged")

// add counts a write of key of db byte p from state old to state now.
func (c *counts) add(p int, key []byte, old, now state) {
	if d := b2i(now.exists) - b2i(old.exists); d != 0 && c.byKey.passed(RawKey(p, key)) {
		c.keys[p].Add(d)
	}
	if old.at != 0 && c.byIndex.passed(ExpiryKey(old.at, p, key)) {
		c.expires[p].Add(-1)
	}
	if now.at != 0 && c.byIndex.passed(ExpiryKey(now.at, p, key)) {
		c.expires[p].Add(1)
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// recount counts the keys, then the expires, a page at a time (see
// Counts).
func (s *Store) recount(ctx context.Context) error {
	c := &s.cnt
	// Keys: every array key below Internal's is a database's. The writes
	// count the keys up to t.pos, so each page must see every key past it
	// stored before the page: fresh device cursors (array.Fresh).
	for t := &c.byKey; ; {
		t.gate.Lock()
		page, next, err := s.A.KeysFrom(ctx, nil, t.pos, recountPage, array.Fresh())
		if err != nil {
			t.gate.Unlock()
			return err
		}
		for _, k := range page {
			if k[0] == Internal {
				next = nil
				break
			}
			c.keys[k[0]].Add(1)
			t.pos = k
		}
		if next == nil {
			t.active = false
		}
		t.gate.Unlock()
		if next == nil {
			break
		}
	}
	// Expires: an entry counts when its value has its expire-at.
	prefix := ExpiryPrefix()
	for t := &c.byIndex; ; {
		t.gate.Lock()
		page, next, err := s.A.KeysFrom(ctx, prefix, t.pos, recountPage, array.Fresh())
		if err == nil {
			err = s.countEntries(ctx, page)
		}
		if err != nil {
			t.gate.Unlock()
			return err
		}
		if len(page) > 0 {
			t.pos = page[len(page)-1]
		}
		if next == nil {
			t.active = false
		}
		t.gate.Unlock()
		if next == nil {
			return nil
		}
	}
}

// countEntries adds the index entries of page whose values have their
// expire-at, reading the values concurrently.
func (s *Store) countEntries(ctx context.Context, page [][]byte) error {
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	sem := make(chan struct{}, 32)
	for _, k := range page {
		at, p, key, ok := ParseExpiryKey(k)
		if !ok {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			st := s.before(ctx, p, key)
			if st.unknown {
				err := fmt.Errorf("keyspace: recounting expires: reading key %q: %w", key, st.err)
				failed.CompareAndSwap(nil, &err)
				return
			}
			if st.at == at {
				s.cnt.expires[p].Add(1)
			}
		}()
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		return *p
	}
	return ctx.Err()
}
