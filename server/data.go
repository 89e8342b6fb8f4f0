package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/internal/fanout"
	"github.com/kvarray/kvarray/internal/glob"
	"github.com/kvarray/kvarray/internal/keylock"
	"github.com/kvarray/kvarray/keyspace"
)

// Every read and write of Redis data goes through the call's methods
// here, so that databases, expiry, transactions and WATCH are handled in
// one place:
//   - get treats an expired value as absent (lazy expiry: the value is
//     reclaimed by the expiry cycle, expire.go, never returned);
//   - put and remove mark the keys' watchers dirty (WATCH);
//   - while EXEC runs a transaction (c.tx set), put and remove only record
//     the write in the transaction's overlay, which get and listKeys read
//     through; EXEC then commits the overlay (tx.go).

// txn is a transaction's overlay: its writes, by array key, in order.
type txn struct {
	ops  map[string]int // array key → index in list
	list []keyspace.Op
	dbs  []int // logical db of each op, for touch
	// events are the keyspace notifications of the queued commands,
	// published once the transaction is committed (notify.go).
	events []event
	// touched: keys whose collections the ops change through their
	// elements alone (their own ops name no key), for touch.
	touched []watchKey
	// flushed: a FLUSHDB or FLUSHALL ran, whose null invalidation the
	// commit sends (tracking.go).
	flushed bool
}

func (t *txn) record(ak []byte, db int, op keyspace.Op) {
	if t.ops == nil {
		t.ops = map[string]int{}
	}
	if i, ok := t.ops[string(ak)]; ok {
		t.list[i], t.dbs[i] = op, db
		return
	}
	t.ops[string(ak)] = len(t.list)
	t.list = append(t.list, op)
	t.dbs = append(t.dbs, db)
}

// added returns keys (a page of db's listing after array key after, up
// to array key next, nil for the end, filtered by pattern) with the keys
// of that range the transaction stored, in order. (Keys it deleted are
// left for the caller's read through the overlay to drop.)
func (t *txn) added(db int, keys [][]byte, after, next []byte, prefix, pattern []byte) [][]byte {
	have := map[string]bool{}
	for _, k := range keys {
		have[string(k)] = true
	}
	for i, op := range t.list {
		ak := keyspace.RawKey(op.Phys, op.Key)
		switch {
		case t.dbs[i] != db, op.Phys == keyspace.Internal, op.Del, have[string(op.Key)], !bytes.HasPrefix(op.Key, prefix),
			after != nil && bytes.Compare(ak, after) <= 0, next != nil && bytes.Compare(ak, next) > 0,
			pattern != nil && !glob.Match(pattern, op.Key):
			continue
		}
		keys = append(keys, op.Key)
	}
	slices.SortFunc(keys, bytes.Compare)
	return keys
}

func (t *txn) lookup(ak []byte) (keyspace.Op, bool) {
	if i, ok := t.ops[string(ak)]; ok {
		return t.list[i], true
	}
	return keyspace.Op{}, false
}

// value is a Redis value, its expire-at (Unix ms, 0 for none) and
// encoding flag (keyspace.Value.Raw: set by the commands that change a
// value in place, kept by those that change only its expiry).
//
// A collection's value has its type and version (keyspace.Value.Type,
// Ver); v is then its encoded value (package collection).
type value struct {
	v   []byte
	at  int64
	raw bool
	typ byte
	ver uint64
}

func (v value) ks() keyspace.Value {
	return keyspace.Value{V: v.v, At: v.at, Raw: v.raw, Type: v.typ, Ver: v.ver}
}

// get reads the string under key of database db: found false if absent
// or expired, keyspace.ErrWrongType if it holds another type.
func (c *call) get(db int, key []byte) (value, bool, error) {
	v, found, err := c.getAny(db, key)
	if err == nil && found && v.typ != keyspace.TypeString {
		return value{}, false, fmt.Errorf("key %q: %w", truncate(key, 32), keyspace.ErrWrongType)
	}
	return v, found, err
}

// getAny reads key of database db, of any type.
func (c *call) getAny(db int, key []byte) (value, bool, error) {
	if err := c.s.checkKey(key); err != nil {
		return value{}, false, err
	}
	if c.tx != nil {
		if op, ok := c.tx.lookup(c.s.ks.Key(db, key)); ok {
			if op.Del || keyspace.Expired(op.At, keyspace.NowMs()) {
				return value{}, false, nil
			}
			return value{op.Val, op.At, op.Raw, op.Type, op.Ver}, true, nil
		}
	}
	c.s.stats.retrieves.Add(1)
	v, err := c.s.ks.Load(c.ctx, db, key)
	switch {
	case err == nil:
		return value{v.V, v.At, v.Raw, v.Type, v.Ver}, true, nil
	case errors.Is(err, array.ErrNotFound):
		return value{}, false, nil
	}
	return value{}, false, err
}

// put stores val under key of db. An expire-at already past deletes the
// key instead, as Redis does.
func (c *call) put(db int, key []byte, val value, opts ...array.CallOption) error {
	if keyspace.Expired(val.at, keyspace.NowMs()) {
		_, err := c.remove(db, key)
		return err
	}
	if c.tx != nil {
		kv := val.ks()
		kv.V = slices.Clone(val.v)
		op := c.s.ks.Op(db, key, kv, false)
		if len(opts) > 0 {
			op.Using = c.using
		}
		c.tx.record(c.s.ks.Key(db, key), db, op)
		return nil
	}
	c.s.stats.stores.Add(1)
	c.s.observeStore(len(val.v), opts)
	err := c.s.ks.Save(c.ctx, db, key, val.ks(), opts...)
	c.s.touch(c, db, key)
	return err
}

// remove deletes key of db and reports whether it existed.
func (c *call) remove(db int, key []byte) (bool, error) { return c.removeKeep(db, key, false) }

// removeKeep is remove; keep says a collection's elements moved to
// another key with its value (keyspace.Op.Keep).
func (c *call) removeKeep(db int, key []byte, keep bool) (bool, error) {
	if c.tx != nil {
		_, found, err := c.getAny(db, key)
		if err != nil {
			return false, err
		}
		op := c.s.ks.Op(db, key, keyspace.Value{}, true)
		op.Keep = keep
		c.tx.record(c.s.ks.Key(db, key), db, op)
		return found, nil
	}
	c.s.stats.deletes.Add(1)
	existed, err := c.s.ks.DeleteKeep(c.ctx, db, key, keep)
	if existed {
		c.s.touch(c, db, key)
	}
	return existed, err
}

// listKeys lists db's keys that start with prefix, in byte order,
// through the transaction's overlay. Keys that expired but are not yet
// reclaimed are listed: callers that must not show them filter with
// live.
func (c *call) listKeys(db int, prefix []byte) ([][]byte, error) {
	c.s.stats.lists.Add(1)
	keys, err := c.s.ks.Keys(c.ctx, db, prefix)
	if err != nil || c.tx == nil {
		return keys, err
	}
	present := map[string]bool{}
	for _, k := range keys {
		present[string(k)] = true
	}
	for i, op := range c.tx.list {
		if c.tx.dbs[i] != db || op.Phys == keyspace.Internal || !bytes.HasPrefix(op.Key, prefix) {
			continue
		}
		present[string(op.Key)] = !op.Del
	}
	keys = keys[:0]
	for k, ok := range present {
		if ok {
			keys = append(keys, []byte(k))
		}
	}
	slices.SortFunc(keys, bytes.Compare)
	return keys, nil
}

// live keeps the keys of db that exist now (not expired), reading each
// value that the expiry index says may have expired: only keys with a due
// index entry are read.
func (c *call) live(db int, keys [][]byte) ([][]byte, error) {
	due, err := c.s.dueKeys(c.ctx, db)
	if err != nil || len(due) == 0 {
		return keys, err
	}
	out := keys[:0]
	for _, k := range keys {
		if due[string(k)] {
			if _, found, err := c.getAny(db, k); err != nil {
				return nil, err
			} else if !found {
				continue
			}
		}
		out = append(out, k)
	}
	return out, nil
}

// lockKeys takes the write locks of keys of db (see Server.lock), and
// keeps the keys for the exports in progress before the command changes
// them (replication.go).
func (c *call) lockKeys(db int, keys ...[]byte) (func(), error) {
	if c.held {
		return func() {}, nil
	}
	aks := make([][]byte, len(keys))
	for i, k := range keys {
		aks[i] = c.s.ks.Key(db, k)
	}
	unlock, err := c.s.lock(c.ctx, aks...)
	if err == nil {
		c.s.preserve(c.ctx, db, keys...)
	}
	return unlock, err
}

// forEach runs fn on each index in 0..n-1 concurrently (the array serves
// concurrent calls in parallel), 64 at most at once, and returns the
// errors by index.
func forEach(n int, fn func(i int) error) []error { return fanout.All(n, 64, fn) }

// firstError is how many errors there are and the first non-nil one.
func firstError(errs []error) (int, error) {
	var first error
	n := 0
	for _, err := range errs {
		if err != nil {
			n++
			if first == nil {
				first = err
			}
		}
	}
	return n, first
}

// checkKey rejects keys the keyspace cannot hold before anything is
// done (keyspace.Store.CheckKey).
func (s *Server) checkKey(key []byte) error { return s.ks.CheckKey(key) }

func (s *Server) checkValue(v []byte) error {
	if int64(len(v)) > s.maxValue {
		return fmt.Errorf("value of %d bytes, maximum %d: %w", len(v), s.maxValue, array.ErrValueTooLarge)
	}
	return nil
}

// checkKeys checks every key.
func (c *call) checkKeys(keys ...[]byte) bool {
	for _, k := range keys {
		if err := c.s.checkKey(k); err != nil {
			c.fail(err)
			return false
		}
	}
	return true
}

// watchKey identifies a watched key: logical db and key.
type watchKey struct {
	db  int
	key string
}

// watches is the server's WATCH registry.
type watches struct {
	mu   sync.Mutex
	keys map[watchKey]map[*conn]struct{}
}

// touch marks the watchers of key dirty (their EXEC will abort), wakes
// its blocked clients and invalidates its tracking clients' caches; by is
// the call that wrote it (nil: the server itself).
func (s *Server) touch(by *call, db int, key []byte) {
	s.blk.signal(db, key)
	s.trackWrite(by, key)
	w := &s.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.keys) == 0 {
		return
	}
	for cl := range w.keys[watchKey{db, string(key)}] {
		cl.dirty.Store(true)
	}
}

// touchDB marks the watchers of every key of db dirty (FLUSHDB, SWAPDB);
// db -1 means every database.
func (s *Server) touchDB(db int) {
	s.blk.signalDB(db)
	w := &s.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, cls := range w.keys {
		if db < 0 || k.db == db {
			for cl := range cls {
				cl.dirty.Store(true)
			}
		}
	}
}

func (s *Server) watchAdd(cl *conn, k watchKey) {
	w := &s.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.keys == nil {
		w.keys = map[watchKey]map[*conn]struct{}{}
	}
	if w.keys[k] == nil {
		w.keys[k] = map[*conn]struct{}{}
	}
	w.keys[k][cl] = struct{}{}
}

// unwatch forgets every key cl watches.
func (s *Server) unwatch(cl *conn) {
	if len(cl.watching) == 0 {
		cl.dirty.Store(false)
		return
	}
	w := &s.watch
	w.mu.Lock()
	for k := range cl.watching {
		delete(w.keys[k], cl)
		if len(w.keys[k]) == 0 {
			delete(w.keys, k)
		}
	}
	w.mu.Unlock()
	cl.watching = nil
	cl.dirty.Store(false)
}

// lock takes this server's write lock on each of the array keys, once
// each and in byte order (so that two multi-key commands cannot
// deadlock), and returns the function that releases them. Every write of
// the server holds the locks of its keys, which makes read-modify-write
// commands (SET NX, INCR, APPEND…) atomic among the server's clients.
func (s *Server) lock(ctx context.Context, keys ...[]byte) (func(), error) {
	if len(keys) == 1 {
		tk, err := s.locks.Lock(ctx, keys[0])
		if err != nil {
			return nil, err
		}
		return tk.Release, nil
	}
	sorted := slices.Clone(keys)
	slices.SortFunc(sorted, bytes.Compare)
	sorted = slices.CompactFunc(sorted, bytes.Equal)
	tks := make([]*keylock.Ticket, 0, len(sorted))
	release := func() {
		for _, tk := range tks {
			tk.Release()
		}
	}
	for _, k := range sorted {
		tk, err := s.locks.Lock(ctx, k)
		if err != nil {
			release()
			return nil, err
		}
		tks = append(tks, tk)
	}
	return release, nil
}
