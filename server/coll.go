package server

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/collection"
	"github.com/kvarray/kvarray/keyspace"
)

// What the collection commands share: the Source a collection reads its
// elements through (the transaction's overlay first), the all-or-nothing
// write of a command's ops, the conversion thresholds CONFIG SET changes,
// and the reclaimer of removed collections' elements.

// source is the collection.Source of the call.
func (c *call) source() collection.Source { return callSource{c} }

type callSource struct{ c *call }

func (s callSource) Element(ctx context.Context, ek []byte) ([]byte, bool, error) {
	c := s.c
	if c.tx != nil {
		if op, ok := c.tx.lookup(ek); ok {
			return op.Val, !op.Del, nil
		}
	}
	c.s.stats.retrieves.Add(1)
	return c.s.ks.Element(ctx, ek)
}

func (s callSource) ElementKeys(ctx context.Context, prefix, after []byte, n int, opts ...array.ListOption) ([][]byte, []byte, error) {
	c := s.c
	c.s.stats.lists.Add(1)
	if c.tx == nil || !c.tx.hasElements(prefix) {
		return c.s.a.KeysFrom(ctx, prefix, after, n, opts...)
	}
	// The overlay has elements under prefix: the whole listing with them
	// merged, then the page (transactions are small).
	present := map[string]bool{}
	for a := after; ; {
		page, next, err := c.s.a.KeysFrom(ctx, prefix, a, max(n, 1024), opts...)
		if err != nil {
			return nil, nil, err
		}
		for _, k := range page {
			present[string(k)] = true
		}
		if next == nil {
			break
		}
		a = next
	}
	for _, op := range c.tx.list {
		if op.Phys == keyspace.Internal {
			if ak := op.ArrayKey(); bytes.HasPrefix(ak, prefix) && (after == nil || bytes.Compare(ak, after) > 0) {
				present[string(ak)] = !op.Del
			}
		}
	}
	keys := make([][]byte, 0, len(present))
	for k, ok := range present {
		if ok {
			keys = append(keys, []byte(k))
		}
	}
	slices.SortFunc(keys, bytes.Compare)
	if len(keys) > n {
		return keys[:n], keys[n-1], nil
	}
	return keys, nil, nil
}

// hasElements reports whether the transaction wrote elements under
// prefix.
func (t *txn) hasElements(prefix []byte) bool {
	for _, op := range t.list {
		if op.Phys == keyspace.Internal && bytes.HasPrefix(op.ArrayKey(), prefix) {
			return true
		}
	}
	return false
}

// writeOps performs a command's ops all or nothing (Server.commitOps),
// or records them in the transaction's overlay, and tells the watchers
// of the keys written and of owners, keys of c's database whose
// collections the ops change (an element's op names no key).
func (c *call) writeOps(ops []keyspace.Op, owners ...[]byte) error {
	dbs := make([]int, len(ops))
	for i, op := range ops {
		dbs[i] = -1
		if op.Phys != keyspace.Internal {
			if db, ok := c.s.ks.Logical(op.Phys); ok {
				dbs[i] = db
			}
		}
	}
	if c.tx != nil {
		for i, op := range ops {
			c.tx.record(op.ArrayKey(), dbs[i], op)
		}
		for _, k := range owners {
			c.tx.touched = append(c.tx.touched, watchKey{c.cl.db, string(k)})
		}
		return nil
	}
	var err error
	if c.phased {
		err = c.s.commitPhased(c, ops)
	} else {
		err = c.s.commitOps(c.ctx, ops)
	}
	for i, op := range ops {
		if dbs[i] >= 0 {
			c.s.touch(c, dbs[i], op.Key)
		}
	}
	for _, k := range owners {
		c.s.touch(c, c.cl.db, k)
	}
	return err
}

// changes is a collection a command worked on (collection.Hash, Set).
type changes interface {
	Changed() bool
	Commit() (keyspace.Value, bool, bool, []keyspace.Op)
}

// collOps are the ops that write what the command changed of key's
// collection x: its elements' and its value's.
func (c *call) collOps(key []byte, x changes) []keyspace.Op {
	if !x.Changed() {
		return nil
	}
	nv, del, changed, ops := x.Commit()
	if changed {
		ops = append(ops, c.s.ks.Op(c.cl.db, key, nv, del))
	}
	return ops
}

// collLimits are the conversion thresholds (CONFIG SET
// hash-max-listpack-entries...).
type collLimits struct {
	hashEntries, hashValue, setIntset atomic.Int64
	// listSize is list-max-listpack-size; listCompress is
	// list-compress-depth, kept for CONFIG GET only (the array
	// compresses nothing per list).
	listSize, listCompress atomic.Int64
	zsetEntries, zsetValue atomic.Int64
	// streamEntries and streamBytes: stream-node-max-entries and -bytes
	// (stream.go).
	streamEntries, streamBytes atomic.Int64
}

func (l *collLimits) init() {
	d := collection.DefaultLimits
	l.hashEntries.Store(int64(d.HashEntries))
	l.hashValue.Store(int64(d.HashValue))
	l.setIntset.Store(int64(d.SetIntsetEntries))
	l.listSize.Store(int64(d.ListSize))
	l.zsetEntries.Store(int64(d.ZSetEntries))
	l.zsetValue.Store(int64(d.ZSetValue))
	l.streamEntries.Store(collection.DefaultStreamLimits.NodeEntries)
	l.streamBytes.Store(collection.DefaultStreamLimits.NodeBytes)
}

func (l *collLimits) get() collection.Limits {
	return collection.Limits{HashEntries: int(l.hashEntries.Load()), HashValue: int(l.hashValue.Load()),
		SetIntsetEntries: int(l.setIntset.Load()), ListSize: int(l.listSize.Load()),
		ZSetEntries: int(l.zsetEntries.Load()), ZSetValue: int(l.zsetValue.Load())}
}

// limitParams are the CONFIG parameters of the thresholds, under Redis
// 7's names and their ziplist aliases.
func limitParams() []param {
	p := func(name string, v func(*Server) *atomic.Int64, signed ...bool) param {
		// signed: a negative value means something (list sizes in KiB).
		return param{name: name, get: func(s *Server) string { return strconv.FormatInt(v(s).Load(), 10) },
			set: func(s *Server, a string) error {
				n, err := parseInt([]byte(a))
				if err != nil || n < 0 && len(signed) == 0 {
					return fmt.Errorf("argument couldn't be parsed into an integer")
				}
				v(s).Store(n)
				return nil
			}}
	}
	entries := func(s *Server) *atomic.Int64 { return &s.limits.hashEntries }
	value := func(s *Server) *atomic.Int64 { return &s.limits.hashValue }
	intset := func(s *Server) *atomic.Int64 { return &s.limits.setIntset }
	listSize := func(s *Server) *atomic.Int64 { return &s.limits.listSize }
	compress := func(s *Server) *atomic.Int64 { return &s.limits.listCompress }
	zEntries := func(s *Server) *atomic.Int64 { return &s.limits.zsetEntries }
	zValue := func(s *Server) *atomic.Int64 { return &s.limits.zsetValue }
	return []param{p("hash-max-listpack-entries", entries), p("hash-max-ziplist-entries", entries),
		p("hash-max-listpack-value", value), p("hash-max-ziplist-value", value), p("set-max-intset-entries", intset),
		p("list-max-listpack-size", listSize, true), p("list-max-ziplist-size", listSize, true), p("list-compress-depth", compress),
		p("zset-max-listpack-entries", zEntries), p("zset-max-ziplist-entries", zEntries),
		p("zset-max-listpack-value", zValue), p("zset-max-ziplist-value", zValue)}
}

func init() { params = append(params, limitParams()...) }

// collection opens key's collection of type typ for a command, under the
// key's lock (reads too: an external collection's reads span several
// array values, which a write changes all at once), runs fn and, when fn
// changed it (commit returns ops), writes the ops. ok false: it replied
// with an error (WRONGTYPE for a value of another type).
func (c *call) collection(key []byte, typ byte, fn func(v keyspace.Value, found bool) (ops []keyspace.Op, ok bool)) bool {
	if !c.checkKeys(key) {
		return false
	}
	unlock, err := c.lockKeys(c.cl.db, key)
	if err != nil {
		c.fail(err)
		return false
	}
	defer unlock()
	v, found, err := c.getAny(c.cl.db, key)
	if err != nil {
		c.fail(err)
		return false
	}
	if found && v.typ != typ {
		c.fail(keyspace.ErrWrongType)
		return false
	}
	ops, ok := fn(v.ks(), found)
	if !ok {
		return false
	}
	if len(ops) > 0 {
		if err := c.writeOps(ops, key); err != nil {
			c.fail(err)
			return false
		}
		c.notifyColl(typ, collEvents[c.e.name], key, found, ops)
	}
	return true
}

// Reclaiming removed collections' elements (keyspace.Store.Reclaim), in
// the expiry cycle's turns: each turn deletes at most reclaimTurn
// elements, so a DEL of a million-field hash replies at once and its
// elements go over the following turns.
const (
	reclaimStep = 1024
	reclaimTurn = 8 * reclaimStep
)

func (s *Server) reclaimGarbage(ctx context.Context) error {
	// A garbage record's key is checked under the transaction lock too:
	// a commit applies its ops under it, not under the keys' locks.
	lock := func(ak []byte) (func(), error) {
		if err := s.lockForWrite(ctx); err != nil {
			return nil, err
		}
		tk, err := s.locks.Lock(ctx, ak)
		if err != nil {
			s.txmu.RUnlock()
			return nil, err
		}
		return func() { tk.Release(); s.txmu.RUnlock() }, nil
	}
	for done := 0; done < reclaimTurn; {
		n, more, err := s.ks.Reclaim(ctx, lock, reclaimStep)
		if err != nil || !more {
			return err
		}
		done += max(n, 1)
	}
	return nil
}
