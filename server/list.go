package server

import (
	"bytes"
	"math"

	"github.com/kvarray/kvarray/collection"
	"github.com/kvarray/kvarray/keyspace"
	"github.com/kvarray/kvarray/pubsub"
)

// The list commands: parsing and replies; the list itself is
// collection.List. The blocking forms are here too, over blocking.go.

// lists opens the lists under keys (a key given twice is one list; a
// missing key an empty list) under their locks, runs fn and writes what
// it changed: one list's push or pop phased (collection.List.Commit),
// anything else through one intent record. A key holding another type
// is nil in ls when lax, else the command fails with WRONGTYPE.
func (c *call) lists(keys [][]byte, lax bool, fn func(ls []*collection.List) bool) bool {
	if !c.checkKeys(keys...) {
		return false
	}
	unlock, err := c.lockKeys(c.cl.db, keys...)
	if err != nil {
		c.fail(err)
		return false
	}
	defer unlock()
	ls, first, err := c.openLists(keys, lax)
	if err != nil {
		c.fail(err)
		return false
	}
	if !fn(ls) {
		return false
	}
	if err := c.commitLists(keys, ls, first); err != nil {
		c.fail(err)
		return false
	}
	return true
}

// openLists opens the lists under keys, whose locks the caller holds
// (lists); first[i] is the index of key i's first mention.
func (c *call) openLists(keys [][]byte, lax bool) (ls []*collection.List, first []int, err error) {
	ls = make([]*collection.List, len(keys))
	first = make([]int, len(keys))
	for i, k := range keys {
		first[i] = i
		for j := range i {
			if bytes.Equal(keys[j], k) {
				first[i] = j
				break
			}
		}
		if first[i] != i {
			ls[i] = ls[first[i]]
			continue
		}
		v, found, err := c.getAny(c.cl.db, k)
		if err == nil && found && v.typ != keyspace.TypeList {
			if lax {
				continue
			}
			err = keyspace.ErrWrongType
		}
		if err == nil {
			ls[i], err = collection.OpenList(c.ctx, c.source(), v.ks(), found, c.s.limits.get())
		}
		if err != nil {
			return nil, nil, err
		}
	}
	return ls, first, nil
}

// commitLists writes what changed of the lists openLists opened.
func (c *call) commitLists(keys [][]byte, ls []*collection.List, first []int) error {
	var ops []keyspace.Op
	var owners [][]byte
	phased := false
	for i, l := range ls {
		if first[i] != i || l == nil || !l.Changed() {
			continue
		}
		nv, del, changed, eops, ph := l.Commit()
		ops = append(ops, eops...)
		if changed {
			ops = append(ops, c.s.ks.Op(c.cl.db, keys[i], nv, del))
		}
		owners = append(owners, keys[i])
		phased = ph
		if del {
			c.notify(pubsub.Generic, "del", c.cl.db, keys[i])
		}
	}
	if len(ops) == 0 {
		return nil
	}
	c.phased = phased && len(owners) == 1
	err := c.writeOps(ops, owners...)
	c.phased = false
	return err
}

// list runs fn on the list under key (lists).
func (c *call) list(key []byte, fn func(l *collection.List) bool) bool {
	return c.lists([][]byte{key}, false, func(ls []*collection.List) bool { return fn(ls[0]) })
}

// commitPhased writes a push's or pop's ops (collection.List.Commit):
// the element stores, then the value, then the element deletes. A
// delete that fails leaves an element outside the list's range, never
// read and reclaimed with the list: the command has taken effect.
func (s *Server) commitPhased(c *call, ops []keyspace.Op) error {
	var stores, dels []keyspace.Op
	var value *keyspace.Op
	for i, op := range ops {
		switch {
		case op.Phys != keyspace.Internal:
			value = &ops[i]
		case op.Del:
			dels = append(dels, op)
		default:
			stores = append(stores, op)
		}
	}
	apply := func(ops []keyspace.Op) error {
		_, err := firstError(forEach(len(ops), func(i int) error {
			s.stats.stores.Add(1)
			return s.ks.Apply(c.ctx, ops[i])
		}))
		return err
	}
	if err := apply(stores); err != nil {
		return err
	}
	if value != nil {
		if err := apply([]keyspace.Op{*value}); err != nil {
			return err
		}
	}
	if err := apply(dels); err != nil {
		s.o.errorLog.Printf("kvarray server: deleting popped list elements: %v (left outside the list, reclaimed with it)", err)
	}
	return nil
}

// listEnd parses LEFT or RIGHT: left true for LEFT.
func (c *call) listEnd(a []byte) (left, ok bool) {
	switch upper(a) {
	case "LEFT":
		return true, true
	case "RIGHT":
		return false, true
	}
	c.syntaxError()
	return false, false
}

// listStep runs step on the list under key: in the list's group when c
// is plain (listgroup.go), else alone (list). step returns an error only
// when it changed nothing.
func (c *call) listStep(key []byte, step func(l *collection.List) error) bool {
	if !c.groupable() {
		return c.list(key, func(l *collection.List) bool {
			if err := step(l); err != nil {
				c.fail(err)
				return false
			}
			return true
		})
	}
	if !c.checkKeys(key) {
		return false
	}
	if err := c.grouped(key, step); err != nil {
		c.fail(err)
		return false
	}
	return true
}

// cmdPush serves LPUSH, RPUSH, LPUSHX and RPUSHX.
func cmdPush(c *call) {
	for _, v := range c.args[2:] {
		if err := c.s.checkValue(v); err != nil {
			c.fail(err)
			return
		}
	}
	left := c.e.name[0] == 'l'
	onlyExisting := c.e.name[len(c.e.name)-1] == 'x'
	event := "rpush"
	if left {
		event = "lpush"
	}
	var n int64
	if !c.listStep(c.args[1], func(l *collection.List) error {
		if onlyExisting && l.Len() == 0 {
			return nil
		}
		if l.Len() == 0 {
			c.notify(pubsub.New, "new", c.cl.db, c.args[1])
		}
		l.Push(left, c.args[2:]...)
		n = l.Len()
		c.notify(pubsub.List, event, c.cl.db, c.args[1])
		return nil
	}) {
		return
	}
	c.w.WriteInt64(n)
}

// popEvent is the event of a pop from the head (left) or the tail.
func popEvent(left bool) string {
	if left {
		return "lpop"
	}
	return "rpop"
}

// cmdPop serves LPOP and RPOP: key [count].
func cmdPop(c *call) {
	if len(c.args) > 3 {
		c.arityError(c.e.name)
		return
	}
	count, withCount := int64(1), len(c.args) == 3
	if withCount {
		n, err := parseInt(c.args[2])
		if err != nil || n < 0 {
			c.error("ERR value is out of range, must be positive")
			return
		}
		count = n
	}
	left := c.e.name[0] == 'l'
	var out [][]byte
	found := false
	if !c.listStep(c.args[1], func(l *collection.List) error {
		found = l.Len() > 0
		var err error
		if out, err = l.Pop(left, count); err != nil {
			return err
		}
		// An element pushed earlier in the batch is that command's
		// argument, gone with it: the reply keeps a copy.
		for i := range out {
			out[i] = bytes.Clone(out[i])
		}
		if len(out) > 0 {
			c.notify(pubsub.List, popEvent(left), c.cl.db, c.args[1])
		}
		return nil
	}) {
		return
	}
	switch {
	case !found && withCount:
		c.w.WriteNullArray()
	case !found:
		c.w.WriteNull()
	case withCount:
		c.writeBulks(out)
	default:
		c.w.WriteBulk(out[0])
	}
}

// writeBulks replies with an array of bulk strings.
func (c *call) writeBulks(vs [][]byte) {
	c.w.WriteArray(len(vs))
	for _, v := range vs {
		c.w.WriteBulk(v)
	}
}

func cmdLLen(c *call) {
	var n int64
	if c.list(c.args[1], func(l *collection.List) bool { n = l.Len(); return true }) {
		c.w.WriteInt64(n)
	}
}

// twoInts parses the integers at args[i] and args[i+1].
func (c *call) twoInts(i int) (a, b int64, ok bool) {
	a, err := parseInt(c.args[i])
	if err == nil {
		b, err = parseInt(c.args[i+1])
	}
	if err != nil {
		c.error(errNotInt)
		return 0, 0, false
	}
	return a, b, true
}

func cmdLRange(c *call) {
	start, stop, ok := c.twoInts(2)
	if !ok {
		return
	}
	var out [][]byte
	if c.list(c.args[1], func(l *collection.List) bool {
		var err error
		if out, err = l.Range(start, stop); err != nil {
			c.fail(err)
			return false
		}
		return true
	}) {
		c.writeBulks(out)
	}
}

func cmdLIndex(c *call) {
	i, err := parseInt(c.args[2])
	if err != nil {
		c.error(errNotInt)
		return
	}
	var v []byte
	found := false
	if !c.list(c.args[1], func(l *collection.List) bool {
		var err error
		if v, found, err = l.Index(i); err != nil {
			c.fail(err)
			return false
		}
		return true
	}) {
		return
	}
	if found {
		c.w.WriteBulk(v)
	} else {
		c.w.WriteNull()
	}
}

func cmdLSet(c *call) {
	i, err := parseInt(c.args[2])
	if err != nil {
		c.error(errNotInt)
		return
	}
	if err := c.s.checkValue(c.args[3]); err != nil {
		c.fail(err)
		return
	}
	if c.list(c.args[1], func(l *collection.List) bool {
		switch {
		case l.Len() == 0:
			c.error("ERR no such key")
			return false
		case !l.Set(i, c.args[3]):
			c.error("ERR index out of range")
			return false
		}
		c.notify(pubsub.List, "lset", c.cl.db, c.args[1])
		return true
	}) {
		c.ok()
	}
}

// cmdLInsert: LINSERT key BEFORE|AFTER pivot element.
func cmdLInsert(c *call) {
	var before bool
	switch upper(c.args[2]) {
	case "BEFORE":
		before = true
	case "AFTER":
	default:
		c.syntaxError()
		return
	}
	if err := c.s.checkValue(c.args[4]); err != nil {
		c.fail(err)
		return
	}
	var n int64
	if c.list(c.args[1], func(l *collection.List) bool {
		if l.Len() == 0 {
			return true
		}
		var err error
		if n, err = l.Insert(c.args[3], c.args[4], before); err != nil {
			c.fail(err)
			return false
		}
		if n > 0 {
			c.notify(pubsub.List, "linsert", c.cl.db, c.args[1])
		}
		return true
	}) {
		c.w.WriteInt64(n)
	}
}

func cmdLRem(c *call) {
	count, err := parseInt(c.args[2])
	if err != nil {
		c.error(errNotInt)
		return
	}
	var n int64
	if c.list(c.args[1], func(l *collection.List) bool {
		var err error
		if n, err = l.Remove(count, c.args[3]); err != nil {
			c.fail(err)
			return false
		}
		if n > 0 {
			c.notify(pubsub.List, "lrem", c.cl.db, c.args[1])
		}
		return true
	}) {
		c.w.WriteInt64(n)
	}
}

func cmdLTrim(c *call) {
	start, stop, ok := c.twoInts(2)
	if !ok {
		return
	}
	if c.list(c.args[1], func(l *collection.List) bool {
		if l.Len() > 0 {
			l.Trim(start, stop)
			c.notify(pubsub.List, "ltrim", c.cl.db, c.args[1])
		}
		return true
	}) {
		c.ok()
	}
}

// cmdLPos: LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len].
func cmdLPos(c *call) {
	rank, count, maxLen, withCount := int64(1), int64(1), int64(0), false
	for i := 3; i < len(c.args); i += 2 {
		if i+1 >= len(c.args) {
			c.syntaxError()
			return
		}
		n, err := parseInt(c.args[i+1])
		if err != nil {
			c.error(errNotInt)
			return
		}
		switch upper(c.args[i]) {
		case "RANK":
			if n == 0 {
				c.error("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list")
				return
			}
			if n == math.MinInt64 {
				c.error("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807")
				return
			}
			rank = n
		case "COUNT":
			if n < 0 {
				c.error("ERR COUNT can't be negative")
				return
			}
			count, withCount = n, true
		case "MAXLEN":
			if n < 0 {
				c.error("ERR MAXLEN can't be negative")
				return
			}
			maxLen = n
		default:
			c.syntaxError()
			return
		}
	}
	var found []int64
	if !c.list(c.args[1], func(l *collection.List) bool {
		skip := max(rank, -rank) - 1
		seen := int64(0)
		if err := l.Each(rank < 0, func(i int64, v []byte) bool {
			seen++
			if bytes.Equal(v, c.args[2]) {
				if skip > 0 {
					skip--
				} else {
					found = append(found, i)
				}
			}
			return (count == 0 || int64(len(found)) < count) && (maxLen == 0 || seen < maxLen)
		}); err != nil {
			c.fail(err)
			return false
		}
		return true
	}) {
		return
	}
	switch {
	case withCount:
		c.w.WriteArray(len(found))
		for _, i := range found {
			c.w.WriteInt64(i)
		}
	case len(found) == 0:
		c.w.WriteNull()
	default:
		c.w.WriteInt64(found[0])
	}
}

// lmove pops one element of src's list from its head (fromLeft) or tail
// and pushes it on dst's (toLeft: at the head), all or nothing, and
// replies with it (nil when src is empty); served false, with no reply,
// when src is empty and quiet (a blocking command's try).
func (c *call) lmove(src, dst []byte, fromLeft, toLeft, quiet bool) (served bool) {
	var v []byte
	empty := false
	if !c.lists([][]byte{src, dst}, true, func(ls []*collection.List) bool {
		if ls[0] == nil {
			c.fail(keyspace.ErrWrongType)
			return false
		}
		if ls[0].Len() == 0 {
			empty = true
			return true
		}
		if ls[1] == nil {
			c.fail(keyspace.ErrWrongType)
			return false
		}
		out, err := ls[0].Pop(fromLeft, 1)
		if err != nil {
			c.fail(err)
			return false
		}
		v = out[0]
		c.notify(pubsub.List, popEvent(fromLeft), c.cl.db, src)
		if ls[1].Len() == 0 && !bytes.Equal(src, dst) {
			c.notify(pubsub.New, "new", c.cl.db, dst)
		}
		ls[1].Push(toLeft, v)
		c.notify(pubsub.List, map[bool]string{true: "lpush", false: "rpush"}[toLeft], c.cl.db, dst)
		return true
	}) {
		return true
	}
	if empty {
		if quiet {
			return false
		}
		c.w.WriteNull()
		return true
	}
	c.w.WriteBulk(v)
	return true
}

// cmdLMove: LMOVE source destination LEFT|RIGHT LEFT|RIGHT.
func cmdLMove(c *call) {
	from, ok := c.listEnd(c.args[3])
	if !ok {
		return
	}
	to, ok := c.listEnd(c.args[4])
	if !ok {
		return
	}
	c.lmove(c.args[1], c.args[2], from, to, false)
}

func cmdRPopLPush(c *call) { c.lmove(c.args[1], c.args[2], false, true, false) }

// mpopArgs parses LMPOP's numkeys key... LEFT|RIGHT [COUNT count] from
// c.args[at].
func (c *call) mpopArgs(at int) (keys [][]byte, left bool, count int64, ok bool) {
	n, err := parseInt(c.args[at])
	if err != nil || n <= 0 {
		c.error("ERR numkeys should be greater than 0")
		return nil, false, 0, false
	}
	if n >= int64(len(c.args)-at-1) {
		c.syntaxError() // no room for LEFT|RIGHT after the keys
		return nil, false, 0, false
	}
	keys = c.args[at+1 : at+1+int(n)]
	rest := c.args[at+1+int(n):]
	if left, ok = c.listEnd(rest[0]); !ok {
		return nil, false, 0, false
	}
	count = 1
	switch {
	case len(rest) == 1:
	case len(rest) == 3 && upper(rest[1]) == "COUNT":
		count, err = parseInt(rest[2])
		if err != nil || count <= 0 {
			c.error("ERR count should be greater than 0")
			return nil, false, 0, false
		}
	default:
		c.syntaxError()
		return nil, false, 0, false
	}
	return keys, left, count, true
}

// popFrom pops up to count elements of key's list and replies as LMPOP
// (mpop: [key, [elements]]) or BLPOP ([key, element]); served false,
// with no reply, when the list is empty.
func (c *call) popFrom(key []byte, left bool, count int64, mpop bool) (served bool) {
	var out [][]byte
	if !c.list(key, func(l *collection.List) bool {
		var err error
		if out, err = l.Pop(left, count); err != nil {
			c.fail(err)
			return false
		}
		if len(out) > 0 {
			c.notify(pubsub.List, popEvent(left), c.cl.db, key)
		}
		return true
	}) {
		return true
	}
	if len(out) == 0 {
		return false
	}
	c.w.WriteArray(2)
	c.w.WriteBulk(key)
	if mpop {
		c.writeBulks(out)
	} else {
		c.w.WriteBulk(out[0])
	}
	return true
}

// cmdLMPop: LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count].
func cmdLMPop(c *call) {
	keys, left, count, ok := c.mpopArgs(1)
	if !ok {
		return
	}
	for _, k := range keys {
		if c.popFrom(k, left, count, true) {
			return
		}
	}
	c.w.WriteNullArray()
}

// listBlock is the blocking spec of a list command: it waits for lists
// and serves with serve.
func listBlock(keys, extra [][]byte, timeout int64, serve func(c *call, key []byte) bool, nullArray bool) *blockSpec {
	return &blockSpec{keys: keys, extra: extra, types: []byte{keyspace.TypeList}, timeout: timeout, serve: serve,
		timedOut: func(w *respWriter) {
			if nullArray {
				w.WriteNullArray()
			} else {
				w.WriteNull()
			}
		}}
}

// cmdBPop serves BLPOP and BRPOP: key [key ...] timeout.
func cmdBPop(c *call) {
	timeout, ok := c.timeoutArg(c.args[len(c.args)-1])
	if !ok {
		return
	}
	left := c.e.name == "blpop"
	c.block(listBlock(c.args[1:len(c.args)-1], nil, timeout, func(c *call, key []byte) bool {
		return c.popFrom(key, left, 1, false)
	}, true))
}

// cmdBLMPop: BLMPOP timeout numkeys key [key ...] LEFT|RIGHT [COUNT count].
func cmdBLMPop(c *call) {
	timeout, ok := c.timeoutArg(c.args[1])
	if !ok {
		return
	}
	keys, left, count, ok := c.mpopArgs(2)
	if !ok {
		return
	}
	c.block(listBlock(keys, nil, timeout, func(c *call, key []byte) bool {
		return c.popFrom(key, left, count, true)
	}, true))
}

// cmdBLMove: BLMOVE source destination LEFT|RIGHT LEFT|RIGHT timeout.
func cmdBLMove(c *call) {
	from, ok := c.listEnd(c.args[3])
	if !ok {
		return
	}
	to, ok := c.listEnd(c.args[4])
	if !ok {
		return
	}
	c.blockMove(c.args[5], from, to)
}

// cmdBRPopLPush: BRPOPLPUSH source destination timeout.
func cmdBRPopLPush(c *call) { c.blockMove(c.args[3], false, true) }

func (c *call) blockMove(timeoutArg []byte, from, to bool) {
	timeout, ok := c.timeoutArg(timeoutArg)
	if !ok {
		return
	}
	src, dst := c.args[1], c.args[2]
	c.block(listBlock([][]byte{src}, [][]byte{dst}, timeout, func(c *call, key []byte) bool {
		return c.lmove(src, dst, from, to, true)
	}, false))
}
