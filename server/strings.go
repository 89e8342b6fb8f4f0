package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/internal/keylock"
)

// The array calls the server makes, counted for INFO.

func (s *Server) retrieve(ctx context.Context, key []byte) ([]byte, error) {
	s.stats.retrieves.Add(1)
	return s.a.Retrieve(ctx, key)
}

func (s *Server) exist(ctx context.Context, key []byte) (bool, error) {
	s.stats.exists.Add(1)
	return s.a.Exist(ctx, key)
}

func (s *Server) store(ctx context.Context, key, value []byte, opts ...array.CallOption) error {
	s.stats.stores.Add(1)
	s.observeStore(len(value), opts)
	return s.a.Store(ctx, key, value, opts...)
}

func (s *Server) keys(ctx context.Context, prefix []byte) ([][]byte, error) {
	s.stats.lists.Add(1)
	return s.a.Keys(ctx, prefix)
}

// lock takes this server's write lock on each of keys, once each and in
// byte order (so that two multi-key commands cannot deadlock), and returns
// the function that releases them. Every write of the server holds the
// locks of its keys, which is what makes SET NX / XX atomic among the
// server's clients.
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

// checkKey rejects keys the array cannot hold before anything is done,
// with the array's sentinels (the array checks again, with its exact
// limits).
func (s *Server) checkKey(key []byte) error {
	if len(key) == 0 {
		return fmt.Errorf("the empty key: keys are 1 to %d bytes: %w", s.maxKey, array.ErrKeyTooShort)
	}
	if len(key) > s.maxKey {
		return fmt.Errorf("key %q… of %d bytes, maximum %d: %w", truncate(key, 32), len(key), s.maxKey, array.ErrKeyTooLong)
	}
	return nil
}

func (s *Server) checkValue(v []byte) error {
	if int64(len(v)) > s.maxValue {
		return fmt.Errorf("value of %d bytes, maximum %d: %w", len(v), s.maxValue, array.ErrValueTooLarge)
	}
	return nil
}

func cmdGet(c *call) {
	v, err := c.s.retrieve(c.ctx, c.args[1])
	switch {
	case err == nil:
		c.s.stats.hits.Add(1)
		c.rc.WriteBulk(v)
	case errors.Is(err, array.ErrNotFound):
		c.s.stats.misses.Add(1)
		c.rc.WriteNull()
	default:
		c.fail(err)
	}
}

// SET conditions.
const (
	always = iota
	ifAbsent
	ifPresent
)

// cmdSet: SET key value [NX | XX] [GET] [EX s | PX ms | EXAT t | PXAT t | KEEPTTL],
// parsed as Redis 7 does; then expiry and GET are refused.
func cmdSet(c *call) {
	cond, get, expiry := always, false, ""
	for i := 3; i < len(c.args); i++ {
		switch opt := upper(c.args[i]); opt {
		case "NX", "XX":
			want := ifAbsent
			if opt == "XX" {
				want = ifPresent
			}
			if cond != always && cond != want {
				c.syntaxError()
				return
			}
			cond = want
		case "GET":
			get = true
		case "KEEPTTL", "EX", "PX", "EXAT", "PXAT":
			if expiry != "" && expiry != opt {
				c.syntaxError()
				return
			}
			if opt != "KEEPTTL" {
				if i+1 >= len(c.args) {
					c.syntaxError()
					return
				}
				i++
			}
			expiry = opt
		default:
			c.syntaxError()
			return
		}
	}
	switch {
	case expiry != "":
		c.error(fmt.Sprintf("ERR SET %s is not supported by kvarray: values never expire", expiry))
		return
	case get:
		c.error("ERR SET GET is not supported by kvarray")
		return
	}
	switch stored, ok := c.set(c.args[1], c.args[2], cond); {
	case stored:
		c.ok()
	case ok:
		c.rc.WriteNull()
	}
}

// set stores value under key if cond holds, under the key's write lock,
// and reports whether it stored; on an error it has replied with it, and
// returns ok false.
func (c *call) set(key, value []byte, cond int, opts ...array.CallOption) (stored, ok bool) {
	if err := c.s.checkValue(value); err != nil {
		c.fail(err)
		return false, false
	}
	if err := c.s.checkKey(key); err != nil {
		c.fail(err)
		return false, false
	}
	unlock, err := c.s.lock(c.ctx, key)
	if err != nil {
		c.fail(err)
		return false, false
	}
	defer unlock()
	if cond != always {
		exists, err := c.s.exist(c.ctx, key)
		if err != nil {
			c.fail(err)
			return false, false
		}
		if exists != (cond == ifPresent) {
			return false, true
		}
	}
	if err := c.s.store(c.ctx, key, value, opts...); err != nil {
		c.fail(err)
		return false, false
	}
	return true, true
}

// cmdSetNX: SETNX key value, 1 if it stored, 0 if the key exists.
func cmdSetNX(c *call) {
	if stored, ok := c.set(c.args[1], c.args[2], ifAbsent); ok {
		c.rc.WriteInt(map[bool]int{false: 0, true: 1}[stored])
	}
}

// cmdMset locks every key, then submits all the stores at once (the array
// runs them concurrently) and waits for them.
func cmdMset(c *call) {
	if len(c.args)%2 != 1 {
		c.arityError("mset")
		return
	}
	keys := make([][]byte, 0, len(c.args)/2)
	for i := 1; i < len(c.args); i += 2 {
		if err := c.s.checkKey(c.args[i]); err != nil {
			c.fail(err)
			return
		}
		if err := c.s.checkValue(c.args[i+1]); err != nil {
			c.fail(err)
			return
		}
		keys = append(keys, c.args[i])
	}
	unlock, err := c.s.lock(c.ctx, keys...)
	if err != nil {
		c.fail(err)
		return
	}
	defer unlock()
	fs := make([]*array.Future, len(keys))
	for i := range keys {
		c.s.stats.stores.Add(1)
		c.s.observeStore(len(c.args[2+2*i]), nil)
		fs[i] = c.s.a.StoreAsync(c.ctx, c.args[1+2*i], c.args[2+2*i])
	}
	var first error
	failed := 0
	for _, f := range fs {
		if err := f.Err(); err != nil {
			failed++
			if first == nil {
				first = err
			}
		}
	}
	if first != nil {
		c.error(fmt.Sprintf("%s (%d of %d keys not written)", errorReply(first), failed, len(fs)))
		return
	}
	c.ok()
}

// cmdMget submits every retrieve at once and replies in order; a missing
// key is nil, any other error fails the whole command (so that a lost
// value never passes for a missing one).
func cmdMget(c *call) {
	keys := c.args[1:]
	fs := make([]*array.Future, len(keys))
	for i, k := range keys {
		c.s.stats.retrieves.Add(1)
		fs[i] = c.s.a.RetrieveAsync(c.ctx, k)
	}
	vals := make([][]byte, len(keys))
	var first error
	for i, f := range fs {
		v, err := f.Wait()
		switch {
		case err == nil:
			c.s.stats.hits.Add(1)
			if v == nil {
				v = []byte{}
			}
			vals[i] = v
		case errors.Is(err, array.ErrNotFound):
			c.s.stats.misses.Add(1)
		case first == nil:
			first = err
		}
	}
	if first != nil {
		c.fail(first)
		return
	}
	c.rc.WriteArray(len(vals))
	for _, v := range vals {
		if v == nil {
			c.rc.WriteNull()
		} else {
			c.rc.WriteBulk(v)
		}
	}
}

// cmdDel locks the keys, deletes them concurrently and counts those that
// existed.
func cmdDel(c *call) {
	keys := slices.Clone(c.args[1:])
	slices.SortFunc(keys, bytes.Compare)
	keys = slices.CompactFunc(keys, bytes.Equal)
	for _, k := range keys {
		if err := c.s.checkKey(k); err != nil {
			c.fail(err)
			return
		}
	}
	unlock, err := c.s.lock(c.ctx, keys...)
	if err != nil {
		c.fail(err)
		return
	}
	defer unlock()
	fs := make([]*array.Future, len(keys))
	for i, k := range keys {
		c.s.stats.deletes.Add(1)
		fs[i] = c.s.a.DeleteAsync(c.ctx, k)
	}
	deleted, failed := 0, 0
	var first error
	for _, f := range fs {
		switch err := f.Err(); {
		case err == nil:
			deleted++
		case errors.Is(err, array.ErrNotFound):
		default:
			failed++
			if first == nil {
				first = err
			}
		}
	}
	if first != nil {
		c.error(fmt.Sprintf("%s (%d of %d keys deleted, %d failed)", errorReply(first), deleted, len(keys), failed))
		return
	}
	c.rc.WriteInt(deleted)
}

// cmdExists counts the arguments that exist (a key given twice counts
// twice, as in Redis).
func cmdExists(c *call) {
	n := 0
	for _, k := range c.args[1:] {
		ok, err := c.s.exist(c.ctx, k)
		if err != nil {
			c.fail(err)
			return
		}
		if ok {
			n++
		}
	}
	c.rc.WriteInt(n)
}

func cmdStrlen(c *call) {
	v, err := c.s.retrieve(c.ctx, c.args[1])
	switch {
	case err == nil:
		c.rc.WriteInt(len(v))
	case errors.Is(err, array.ErrNotFound):
		c.rc.WriteInt(0)
	default:
		c.fail(err)
	}
}

func cmdType(c *call) {
	ok, err := c.s.exist(c.ctx, c.args[1])
	switch {
	case err != nil:
		c.fail(err)
	case ok:
		c.rc.WriteString("string")
	default:
		c.rc.WriteString("none")
	}
}

// cmdTTL serves TTL and PTTL: no key ever expires.
func cmdTTL(c *call) {
	ok, err := c.s.exist(c.ctx, c.args[1])
	switch {
	case err != nil:
		c.fail(err)
	case ok:
		c.rc.WriteInt(-1)
	default:
		c.rc.WriteInt(-2)
	}
}
