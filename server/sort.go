package server

import (
	"bytes"
	"math"
	"slices"
	"strings"

	"github.com/kvarray/kvarray/collection"
	"github.com/kvarray/kvarray/internal/longdouble"
	"github.com/kvarray/kvarray/keyspace"
	"github.com/kvarray/kvarray/pubsub"
)

// SORT and SORT_RO over lists, sets and sorted sets, as Redis's sort.c:
// BY a pattern (a key's string or "key->field" a hash's field; no '*':
// not sorted), LIMIT, GET patterns ('#' the element), ASC/DESC, ALPHA
// and STORE into a list.
//
// The sorted key is read under its lock; the keys the patterns name are
// read after it, each under its own lock (a command locks its keys all
// at once, and these are known only once the elements are read), and
// the destination written under its own. Inside MULTI and scripts,
// which hold the transaction lock exclusively, nothing runs between; a
// plain SORT with BY or GET patterns may see a write to a pattern's key
// made while it runs, which Redis's single thread never shows.

func init() { commands = append(commands, sortCommands()...) }

func sortCommands() []*command {
	args := []arg{keyArg("key"), optional(tokenArg("BY", strArg("pattern"))),
		optional(tokenArg("LIMIT", block("limit", intArg("offset"), intArg("count")))),
		optional(multiple(tokenArg("GET", strArg("pattern")))), optional(oneof("order", token("ASC"), token("DESC"))),
		optional(token("SORTING")), optional(tokenArg("STORE", keyArg("destination")))}
	args[5] = optional(token("ALPHA"))
	sort := wcmd("sort", -2, "generic", "1.0.0", "Sorts the elements of a list, a set or a sorted set, optionally storing the result.", cmdSort, args...)
	sort.flags = append(sort.flags, "movablekeys")
	sort.acl = []string{"write", "set", "sortedset", "list", "slow", "dangerous"}
	ro := rcmd("sort_ro", -2, "generic", "7.0.0", "Sorts the elements of a list, a set or a sorted set (read only).", cmdSort, args[:6]...)
	ro.flags = []string{"readonly"}
	ro.acl = []string{"read", "set", "sortedset", "list", "slow", "dangerous"}
	for _, c := range []*command{sort, ro} {
		c.complexity = "O(N+M*log(M)) where N is the number of elements to sort and M the number returned"
	}
	return []*command{sort, ro}
}

// sortItem is an element with what it sorts by.
type sortItem struct {
	elem  []byte
	score float64
	by    []byte // ALPHA with BY: the pattern's value, nil when missing
}

// sortQuery is SORT's parsed options.
type sortQuery struct {
	desc, alpha, dontSort bool
	start, count          int64
	by                    []byte
	gets                  [][]byte
	store                 []byte
}

func (c *call) parseSort() (q sortQuery, ok bool) {
	q.count = -1
	ro := c.e.name == "sort_ro"
	for j := 2; j < len(c.args); j++ {
		left := len(c.args) - j - 1
		switch opt := strings.ToLower(string(c.args[j])); {
		case opt == "asc":
			q.desc = false
		case opt == "desc":
			q.desc = true
		case opt == "alpha":
			q.alpha = true
		case opt == "limit" && left >= 2:
			var err1, err2 error
			q.start, err1 = parseInt(c.args[j+1])
			q.count, err2 = parseInt(c.args[j+2])
			if err1 != nil || err2 != nil {
				c.error(errNotInt)
				return q, false
			}
			j += 2
		case opt == "store" && left >= 1 && !ro:
			q.store = c.args[j+1]
			j++
		case opt == "by" && left >= 1:
			q.by = c.args[j+1]
			q.dontSort = bytes.IndexByte(q.by, '*') < 0
			if !q.dontSort && !c.sortPatternsAllowed() {
				c.error("ERR BY option of SORT denied due to insufficient ACL permissions.")
				return q, false
			}
			j++
		case opt == "get" && left >= 1:
			if !c.sortPatternsAllowed() {
				c.error("ERR GET option of SORT denied due to insufficient ACL permissions.")
				return q, false
			}
			q.gets = append(q.gets, c.args[j+1])
			j++
		default:
			c.syntaxError()
			return q, false
		}
	}
	return q, true
}

// sortPatternsAllowed: BY and GET patterns read keys no ACL check sees,
// so Redis allows them only to a user who may read every key.
func (c *call) sortPatternsAllowed() bool {
	u, cmd := c.cl.user.Load(), c.s.acl.Table().Resolve(c.args)
	return u == nil || cmd == nil || c.s.acl.UnrestrictedKeys(u, cmd, c.args)
}

// sortSource reads the elements SORT sorts from key (nil: missing), in
// the order Redis loads them: a list's, a set's, a sorted set's by score
// (with BY no-sort and a sorted set or a list, only the LIMIT window,
// from the end when desc). n is the whole length.
func (c *call) sortSource(key []byte, q *sortQuery) (elems [][]byte, typ byte, n int64, ok bool) {
	if !c.checkKeys(key) {
		return nil, 0, 0, false
	}
	unlock, err := c.lockKeys(c.cl.db, key)
	if err != nil {
		c.fail(err)
		return nil, 0, 0, false
	}
	defer unlock()
	v, found, err := c.getAny(c.cl.db, key)
	if err != nil {
		c.fail(err)
		return nil, 0, 0, false
	}
	if !found {
		return nil, keyspace.TypeList, 0, true
	}
	switch v.typ {
	case keyspace.TypeList:
		var l *collection.List
		if l, err = collection.OpenList(c.ctx, c.source(), v.ks(), true, c.s.limits.get()); err == nil {
			n = l.Len()
			start, end := sortWindow(q.start, q.count, n)
			switch {
			case q.dontSort && end >= start && q.desc:
				elems, err = l.Range(n-1-end, n-1-start)
				slices.Reverse(elems)
			case q.dontSort && end >= start:
				elems, err = l.Range(start, end)
			case q.dontSort:
			default:
				elems, err = l.Range(0, -1)
			}
		}
	case keyspace.TypeSet:
		var s *collection.Set
		if s, err = c.openSet(v.ks(), true); err == nil {
			n = s.Len()
			elems, err = s.Members()
		}
	case keyspace.TypeZSet:
		var z *collection.ZSet
		if z, err = c.openZSet(v.ks(), true); err == nil {
			n = z.Len()
			var es []collection.ZEntry
			start, end := sortWindow(q.start, q.count, n)
			switch {
			case q.dontSort && end >= start && q.desc:
				es, err = z.ByRank(n-1-end, n-1-start)
				slices.Reverse(es)
			case q.dontSort && end >= start:
				es, err = z.ByRank(start, end)
			case q.dontSort:
			default:
				es, err = z.All()
			}
			for _, e := range es {
				elems = append(elems, e.Member)
			}
		}
	default:
		err = keyspace.ErrWrongType
	}
	if err != nil {
		c.fail(err)
		return nil, 0, 0, false
	}
	return elems, v.typ, n, true
}

// sortWindow is sort.c's start and end (inclusive) of LIMIT over n
// elements: end < start when it is empty.
func sortWindow(offset, count, n int64) (start, end int64) {
	start = min(max(offset, 0), n)
	count = min(max(count, -1), n)
	end = start + count - 1
	if count < 0 {
		end = n - 1
	}
	if start >= n {
		start, end = n-1, n-2
	}
	return start, min(end, n-1)
}

// sortLookup is lookupKeyByPattern: the value pattern names for elem
// ('#' elem itself; the first '*' replaced by elem, a "->field" suffix a
// hash's field), nil when there is none (no '*', a missing key, another
// type, a missing field).
func (c *call) sortLookup(pattern, elem []byte) ([]byte, bool) {
	if string(pattern) == "#" {
		return elem, true
	}
	star := bytes.IndexByte(pattern, '*')
	if star < 0 {
		return nil, true
	}
	keyPat, field := pattern, []byte(nil)
	if f := bytes.Index(pattern[star+1:], []byte("->")); f >= 0 && star+1+f+2 < len(pattern) {
		keyPat, field = pattern[:star+1+f], pattern[star+1+f+2:]
	}
	key := slices.Concat(keyPat[:star], elem, keyPat[star+1:])
	if c.s.checkKey(key) != nil {
		return nil, true // a key no command can name holds nothing
	}
	unlock, err := c.lockKeys(c.cl.db, key)
	if err != nil {
		c.fail(err)
		return nil, false
	}
	defer unlock()
	v, found, err := c.getAny(c.cl.db, key)
	switch {
	case err != nil:
		c.fail(err)
		return nil, false
	case !found:
		return nil, true
	case field == nil && v.typ == keyspace.TypeString:
		return v.v, true
	case field == nil || v.typ != keyspace.TypeHash:
		return nil, true
	}
	h, err := collection.OpenHash(c.ctx, c.source(), v.ks(), true, c.s.limits.get(), c.s.ks.MaxElement())
	var val []byte
	if err == nil {
		val, _, err = h.Get(field)
	}
	if err != nil {
		c.fail(err)
		return nil, false
	}
	return val, true
}

// sortScore is SORT's strtod of a value: the whole of it a number (the
// empty string 0), not NaN, not out of range.
func sortScore(b []byte) (float64, bool) {
	if len(b) == 0 {
		return 0, true
	}
	f, ok := longdouble.ParseDoubleLoose(b)
	if ok && math.IsInf(f, 0) && !bytes.Contains(bytes.ToLower(b), []byte("inf")) {
		return 0, false // overflow: ERANGE
	}
	return f, ok
}

func cmdSort(c *call) {
	q, ok := c.parseSort()
	if !ok {
		return
	}
	elems, typ, n, ok := c.sortSource(c.args[1], &q)
	if !ok {
		return
	}
	// A set's order is not the same on another server: BY no-sort of a
	// set stored or in a script sorts it (as Redis, for replication).
	if q.dontSort && typ == keyspace.TypeSet && (q.store != nil || c.inScript()) {
		q.dontSort, q.alpha, q.by = false, true, nil
	}
	start, end := sortWindow(q.start, q.count, n)
	if q.dontSort && typ != keyspace.TypeSet {
		end, start = end-start, 0 // the window was read
	}
	items := make([]sortItem, len(elems))
	badScore := false
	for i, e := range elems {
		items[i].elem = e
		if q.dontSort {
			continue
		}
		by := e
		if q.by != nil {
			v, ok := c.sortLookup(q.by, e)
			if !ok {
				return
			}
			if v == nil {
				continue
			}
			by = v
		}
		switch {
		case q.alpha && q.by != nil:
			items[i].by = by
		case !q.alpha:
			s, ok := sortScore(by)
			items[i].score = s
			badScore = badScore || !ok
		}
	}
	if !q.dontSort {
		slices.SortStableFunc(items, func(a, b sortItem) int {
			var r int
			switch {
			case !q.alpha:
				if r = cmpFloat(a.score, b.score); r == 0 {
					r = bytes.Compare(a.elem, b.elem)
				}
			case q.by != nil:
				switch {
				case a.by == nil || b.by == nil:
					r = map[bool]int{true: -1, false: 1}[a.by == nil]
					if (a.by == nil) == (b.by == nil) {
						r = 0
					}
				default:
					r = bytes.Compare(a.by, b.by)
				}
			default:
				r = bytes.Compare(a.elem, b.elem)
			}
			if q.desc {
				return -r
			}
			return r
		})
	}
	if badScore {
		c.error("ERR One or more scores can't be converted into double")
		return
	}
	var out [][]byte
	var present []bool
	for j := start; j <= end; j++ {
		e := items[j].elem
		if len(q.gets) == 0 {
			out, present = append(out, e), append(present, true)
			continue
		}
		for _, g := range q.gets {
			v, ok := c.sortLookup(g, e)
			if !ok {
				return
			}
			out, present = append(out, v), append(present, v != nil)
		}
	}
	if q.store == nil {
		c.w.WriteArray(len(out))
		for i, v := range out {
			if present[i] {
				c.w.WriteBulk(v)
			} else {
				c.w.WriteNull()
			}
		}
		return
	}
	c.sortStore(q.store, out)
}

func cmpFloat(a, b float64) int {
	switch {
	case a > b:
		return 1
	case a < b:
		return -1
	}
	return 0
}

// sortStore replaces dst by a list of vals (a missing GET is the empty
// string), or deletes it when vals is empty, and replies their number.
func (c *call) sortStore(dst []byte, vals [][]byte) {
	if !c.checkKeys(dst) {
		return
	}
	unlock, err := c.lockKeys(c.cl.db, dst)
	if err != nil {
		c.fail(err)
		return
	}
	defer unlock()
	_, existed, err := c.getAny(c.cl.db, dst)
	if err != nil {
		c.fail(err)
		return
	}
	var ops []keyspace.Op
	switch {
	case len(vals) > 0:
		l, err := collection.OpenList(c.ctx, c.source(), keyspace.Value{}, false, c.s.limits.get())
		if err != nil {
			c.fail(err)
			return
		}
		for i := range vals {
			if vals[i] == nil {
				vals[i] = []byte{}
			}
		}
		l.Push(false, vals...)
		nv, del, _, eops, _ := l.Commit()
		ops = append(eops, c.s.ks.Op(c.cl.db, dst, nv, del))
	case existed:
		ops = []keyspace.Op{c.s.ks.Op(c.cl.db, dst, keyspace.Value{}, true)}
	}
	if len(ops) > 0 {
		if err := c.writeOps(ops, dst); err != nil {
			c.fail(err)
			return
		}
	}
	switch {
	case len(vals) > 0:
		if !existed {
			c.notify(pubsub.New, "new", c.cl.db, dst)
		}
		c.notify(pubsub.List, "sortstore", c.cl.db, dst)
	case existed:
		c.notify(pubsub.Generic, "del", c.cl.db, dst)
	}
	c.w.WriteInt(len(vals))
}
