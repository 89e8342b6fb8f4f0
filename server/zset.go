package server

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/kvarray/kvarray/collection"
	"github.com/kvarray/kvarray/internal/longdouble"
	"github.com/kvarray/kvarray/keyspace"
	"github.com/kvarray/kvarray/pubsub"
)

// The sorted set commands: parsing, replies and notifications; the
// sorted set itself is collection.ZSet.

const (
	errZNaN      = "ERR resulting score is not a number (NaN)"
	errZMinMax   = "ERR min or max is not a float"
	errZLexRange = "ERR min or max not valid string range item"
	errPositive  = "ERR value is out of range, must be positive"
)

func (c *call) openZSet(v keyspace.Value, found bool) (*collection.ZSet, error) {
	return collection.OpenZSet(c.ctx, c.source(), v, found, c.s.limits.get(), c.s.ks.MaxElement())
}

// zset runs fn on the sorted set under key (collection), then writes
// what fn changed. fn gets whether the key existed and returns false
// when it replied with an error.
func (c *call) zset(key []byte, fn func(z *collection.ZSet, found bool) bool) bool {
	return c.collection(key, keyspace.TypeZSet, func(v keyspace.Value, found bool) ([]keyspace.Op, bool) {
		z, err := c.openZSet(v, found)
		if err != nil {
			c.fail(err)
			return nil, false
		}
		if !fn(z, found) {
			return nil, false
		}
		return c.collOps(key, z), true
	})
}

// zsource is an input of ZUNION, ZINTER and ZDIFF: a sorted set, or a
// set whose members score 1.
type zsource struct {
	z *collection.ZSet
	s *collection.Set
}

func (x zsource) Len() int64 {
	switch {
	case x.z != nil:
		return x.z.Len()
	case x.s != nil:
		return x.s.Len()
	}
	return 0
}

func (x zsource) entries() ([]collection.ZEntry, error) {
	switch {
	case x.z != nil:
		return x.z.All()
	case x.s != nil:
		ms, err := x.s.Members()
		out := make([]collection.ZEntry, len(ms))
		for i, m := range ms {
			out[i] = collection.ZEntry{Member: m, Score: 1}
		}
		return out, err
	}
	return nil, nil
}

func (x zsource) score(m []byte) (float64, bool, error) {
	switch {
	case x.z != nil:
		return x.z.Score(m)
	case x.s != nil:
		has, err := x.s.Has(m)
		return 1, has, err
	}
	return 0, false, nil
}

// zsets opens keys as zsources (sets too when withSets; a missing key
// is empty) and, when dst is not nil, locks dst too, all under their
// locks, and runs fn; then writes the ops fn returns.
func (c *call) zsets(keys [][]byte, dst []byte, withSets bool, fn func(srcs []zsource) ([]keyspace.Op, bool)) bool {
	all := keys
	if dst != nil {
		all = append(slices.Clone(keys), dst)
	}
	if !c.checkKeys(all...) {
		return false
	}
	unlock, err := c.lockKeys(c.cl.db, all...)
	if err != nil {
		c.fail(err)
		return false
	}
	defer unlock()
	srcs := make([]zsource, len(keys))
	for i, k := range keys {
		v, found, err := c.getAny(c.cl.db, k)
		switch {
		case err != nil:
		case !found:
			continue
		case v.typ == keyspace.TypeZSet:
			srcs[i].z, err = c.openZSet(v.ks(), true)
		case v.typ == keyspace.TypeSet && withSets:
			srcs[i].s, err = c.openSet(v.ks(), true)
		default:
			err = keyspace.ErrWrongType
		}
		if err != nil {
			c.fail(err)
			return false
		}
	}
	ops, ok := fn(srcs)
	if !ok {
		return false
	}
	// A written key's value is among the ops: its watchers are told.
	if err := c.writeOps(ops); err != nil {
		c.fail(err)
		return false
	}
	return true
}

// zfail replies with err from a sorted set operation.
func (c *call) zfail(err error) bool { return c.hashFail(err) }

// notifyZ publishes a sorted set command's event on key, and "del" when
// it left the key empty (deleted).
func (c *call) notifyZ(event string, key []byte, deleted bool) {
	c.notify(pubsub.ZSet, event, c.cl.db, key)
	if deleted {
		c.notify(pubsub.Generic, "del", c.cl.db, key)
	}
}

// parseScore reads a score argument (ZADD's, WEIGHTS', as string2d).
func parseScore(b []byte) (float64, bool) { return longdouble.ParseDouble(b) }

// cmdZAdd serves ZADD and ZINCRBY.
func cmdZAdd(c *call) {
	var nx, xx, gt, lt, ch, incr bool
	at := 2
	if c.e.name == "zincrby" {
		incr = true
	} else {
	opts:
		for ; at < len(c.args); at++ {
			switch upper(c.args[at]) {
			case "NX":
				nx = true
			case "XX":
				xx = true
			case "CH":
				ch = true
			case "INCR":
				incr = true
			case "GT":
				gt = true
			case "LT":
				lt = true
			default:
				break opts
			}
		}
	}
	pairs := len(c.args) - at
	switch {
	case pairs%2 != 0 || pairs == 0:
		c.syntaxError()
		return
	case nx && xx:
		c.error("ERR XX and NX options at the same time are not compatible")
		return
	case gt && nx || lt && nx || gt && lt:
		c.error("ERR GT, LT, and/or NX options at the same time are not compatible")
		return
	case incr && pairs > 2:
		c.error("ERR INCR option supports a single increment-element pair")
		return
	}
	scores := make([]float64, pairs/2)
	members := make([][]byte, pairs/2)
	for i := range scores {
		var ok bool
		if scores[i], ok = parseScore(c.args[at+2*i]); !ok {
			c.error(errNotFloat)
			return
		}
		members[i] = c.args[at+2*i+1]
	}
	var added, updated, processed int
	var last float64
	var existed bool
	if !c.zset(c.args[1], func(z *collection.ZSet, found bool) bool {
		existed = found
		if !found && xx {
			return true
		}
		if err := z.Prefetch(members); err != nil {
			return c.zfail(err)
		}
		for i, m := range members {
			s := scores[i]
			cur, exists, err := z.Score(m)
			if err != nil {
				return c.zfail(err)
			}
			switch {
			case exists && !nx:
				if incr {
					if s += cur; math.IsNaN(s) {
						c.error(errZNaN)
						return false
					}
				}
				if lt && s >= cur || gt && s <= cur {
					continue
				}
				if s != cur {
					if _, err := z.Set(m, s); err != nil {
						return c.zfail(err)
					}
					updated++
				}
			case !exists && !xx:
				if _, err := z.Set(m, s); err != nil {
					return c.zfail(err)
				}
				added++
			default:
				continue
			}
			processed++
			last = s
		}
		return true
	}) {
		return
	}
	if added+updated > 0 {
		if !existed {
			c.notify(pubsub.New, "new", c.cl.db, c.args[1])
		}
		ev := "zadd"
		if incr {
			ev = "zincr"
		}
		c.notifyZ(ev, c.args[1], false)
	}
	switch {
	case !incr:
		c.w.WriteInt(added + b2i(ch)*updated)
	case processed > 0:
		c.w.WriteDouble(last)
	default:
		c.w.WriteNull()
	}
}

func cmdZRem(c *call) {
	n := 0
	var left int64
	if !c.zset(c.args[1], func(z *collection.ZSet, found bool) bool {
		if err := z.Prefetch(c.args[2:]); err != nil {
			return c.zfail(err)
		}
		for _, m := range c.args[2:] {
			ok, err := z.Delete(m)
			if err != nil {
				return c.zfail(err)
			}
			n += b2i(ok)
		}
		left = z.Len()
		return true
	}) {
		return
	}
	if n > 0 {
		c.notifyZ("zrem", c.args[1], left == 0)
	}
	c.w.WriteInt(n)
}

func cmdZCard(c *call) {
	var n int64
	if c.zset(c.args[1], func(z *collection.ZSet, _ bool) bool { n = z.Len(); return true }) {
		c.w.WriteInt64(n)
	}
}

// zscores reads members' scores from key's sorted set (has[i] false:
// member i is not there; found false: there is no set); ok false: it
// replied with an error.
func (c *call) zscores(key []byte, members [][]byte) (scores []float64, has []bool, found, ok bool) {
	scores, has = make([]float64, len(members)), make([]bool, len(members))
	ok = c.zset(key, func(z *collection.ZSet, f bool) bool {
		found = f
		if err := z.Prefetch(members); err != nil {
			return c.zfail(err)
		}
		for i, m := range members {
			var err error
			if scores[i], has[i], err = z.Score(m); err != nil {
				return c.zfail(err)
			}
		}
		return true
	})
	return
}

// cmdZScore serves ZSCORE and ZMSCORE.
func cmdZScore(c *call) {
	ms := c.args[2:]
	scores, has, _, ok := c.zscores(c.args[1], ms)
	if !ok {
		return
	}
	one := func(i int) {
		if has[i] {
			c.w.WriteDouble(scores[i])
		} else {
			c.w.WriteNull()
		}
	}
	if c.e.name == "zscore" {
		one(0)
		return
	}
	c.w.WriteArray(len(ms))
	for i := range ms {
		one(i)
	}
}

// cmdZRank serves ZRANK and ZREVRANK.
func cmdZRank(c *call) {
	var rank int64
	var found bool
	if !c.zset(c.args[1], func(z *collection.ZSet, _ bool) bool {
		var err error
		if rank, _, found, err = z.Rank(c.args[2]); err != nil {
			return c.zfail(err)
		}
		if c.e.name == "zrevrank" {
			rank = z.Len() - 1 - rank
		}
		return true
	}) {
		return
	}
	if !found {
		c.w.WriteNull()
		return
	}
	c.w.WriteInt64(rank)
}

// parseScoreBound reads a ZRANGEBYSCORE bound: '(' for exclusive, then
// what strtod reads.
func parseScoreBound(b []byte) (float64, bool, bool) {
	ex := len(b) > 0 && b[0] == '('
	if ex {
		b = b[1:]
	}
	f, ok := longdouble.ParseDoubleLoose(b)
	return f, ex, ok
}

func parseScoreRange(min, max []byte) (collection.ScoreRange, bool) {
	var r collection.ScoreRange
	var ok1, ok2 bool
	r.Min, r.MinEx, ok1 = parseScoreBound(min)
	r.Max, r.MaxEx, ok2 = parseScoreBound(max)
	return r, ok1 && ok2
}

// parseLexBound reads a ZRANGEBYLEX bound: '-', '+', '(' or '[' and a
// member. inf is -1 for '-', 1 for '+'.
func parseLexBound(b []byte) (m []byte, ex bool, inf int, ok bool) {
	if len(b) == 0 {
		return nil, false, 0, false
	}
	switch b[0] {
	case '+', '-':
		if len(b) != 1 {
			return nil, false, 0, false
		}
		if b[0] == '+' {
			return nil, true, 1, true
		}
		return nil, true, -1, true
	case '(':
		return b[1:], true, 0, true
	case '[':
		return b[1:], false, 0, true
	}
	return nil, false, 0, false
}

func parseLexRange(min, max []byte) (collection.LexRange, bool) {
	var r collection.LexRange
	lo, loEx, loInf, ok1 := parseLexBound(min)
	hi, hiEx, hiInf, ok2 := parseLexBound(max)
	if !ok1 || !ok2 {
		return r, false
	}
	if loInf == 1 || hiInf == -1 {
		// '+' as min, '-' as max: no member is in range.
		return collection.LexRange{Min: []byte{}, Max: []byte{}, MinEx: true, MaxEx: true}, true
	}
	r.Min, r.MinEx, r.Max, r.MaxEx = lo, loEx, hi, hiEx
	r.NoMin, r.NoMax = loInf == -1, hiInf == 1
	return r, true
}

// cmdZCount serves ZCOUNT and ZLEXCOUNT.
func cmdZCount(c *call) {
	lex := c.e.name == "zlexcount"
	var sr collection.ScoreRange
	var lr collection.LexRange
	var ok bool
	if lex {
		if lr, ok = parseLexRange(c.args[2], c.args[3]); !ok {
			c.error(errZLexRange)
			return
		}
	} else if sr, ok = parseScoreRange(c.args[2], c.args[3]); !ok {
		c.error(errZMinMax)
		return
	}
	var n int64
	if c.zset(c.args[1], func(z *collection.ZSet, _ bool) bool {
		var err error
		if lex {
			n, err = z.CountLex(lr)
		} else {
			n, err = z.CountScore(sr)
		}
		if err != nil {
			return c.zfail(err)
		}
		return true
	}) {
		c.w.WriteInt64(n)
	}
}

// zrange is a parsed ZRANGE-family request.
type zrange struct {
	by            string // "rank", "score", "lex"
	rev           bool
	withScores    bool
	start, stop   int64
	sr            collection.ScoreRange
	lr            collection.LexRange
	offset, count int64
}

// parseZRange parses the arguments after the source key at args[at]
// (min max [options]) as Redis's zrangeGenericCommand: by and rev are
// fixed by the older commands' names ("" and false: ZRANGE's options
// choose), store forbids WITHSCORES.
func (c *call) parseZRange(at int, by string, rev, fixedRev, store bool) (zrange, bool) {
	q := zrange{by: by, rev: rev, count: -1}
	limited := false
	for j := at + 3; j < len(c.args); j++ {
		left := len(c.args) - j - 1
		switch w := upper(c.args[j]); {
		case !store && w == "WITHSCORES":
			q.withScores = true
		case w == "LIMIT" && left >= 2:
			var err1, err2 error
			q.offset, err1 = parseInt(c.args[j+1])
			q.count, err2 = parseInt(c.args[j+2])
			if err1 != nil || err2 != nil {
				c.error(errNotInt)
				return q, false
			}
			limited = true
			j += 2
		case !fixedRev && w == "REV":
			q.rev = true
		case by == "" && w == "BYLEX":
			q.by = "lex"
		case by == "" && w == "BYSCORE":
			q.by = "score"
		default:
			c.syntaxError()
			return q, false
		}
	}
	if q.by == "" {
		q.by = "rank"
	}
	if limited && q.by == "rank" {
		c.error("ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX")
		return q, false
	}
	if q.withScores && q.by == "lex" {
		c.error("ERR syntax error, WITHSCORES not supported in combination with BYLEX")
		return q, false
	}
	lo, hi := c.args[at+1], c.args[at+2]
	if q.rev && q.by != "rank" {
		lo, hi = hi, lo
	}
	var ok bool
	switch q.by {
	case "rank":
		var err1, err2 error
		q.start, err1 = parseInt(lo)
		q.stop, err2 = parseInt(hi)
		if err1 != nil || err2 != nil {
			c.error(errNotInt)
			return q, false
		}
	case "score":
		if q.sr, ok = parseScoreRange(lo, hi); !ok {
			c.error(errZMinMax)
			return q, false
		}
	case "lex":
		if q.lr, ok = parseLexRange(lo, hi); !ok {
			c.error(errZLexRange)
			return q, false
		}
	}
	return q, true
}

// rankWindow clamps ranks start and stop (negative from the end) to a
// sorted set of n entries as Redis does; ok false: the range is empty.
func rankWindow(start, stop, n int64) (int64, int64, bool) {
	if start < 0 {
		start += n
	}
	if stop < 0 {
		stop += n
	}
	start = max(start, 0)
	if start > stop || start >= n {
		return 0, 0, false
	}
	return start, min(stop, n-1), true
}

// run reads the range q of z, in the order it is to be given.
func (q zrange) run(z *collection.ZSet, withScores bool) ([]collection.ZEntry, error) {
	switch q.by {
	case "score":
		return z.ByScore(q.sr, q.offset, q.count, q.rev)
	case "lex":
		return z.ByLex(q.lr, q.offset, q.count, q.rev, withScores)
	}
	start, stop, ok := rankWindow(q.start, q.stop, z.Len())
	if !ok {
		return nil, nil
	}
	if q.rev {
		n := z.Len()
		start, stop = n-1-stop, n-1-start
	}
	es, err := z.ByRank(start, stop)
	if q.rev {
		slices.Reverse(es)
	}
	return es, err
}

// writeEntries replies with entries, with their scores when withScores
// (RESP2 flat, RESP3 pairs).
func (c *call) writeEntries(es []collection.ZEntry, withScores bool) {
	switch {
	case !withScores:
		c.w.WriteArray(len(es))
	case c.w.resp3():
		c.w.WriteArray(len(es))
	default:
		c.w.WriteArray(2 * len(es))
	}
	for _, e := range es {
		if withScores && c.w.resp3() {
			c.w.WriteArray(2)
		}
		c.w.WriteBulk(e.Member)
		if withScores {
			c.w.WriteDouble(e.Score)
		}
	}
}

// zrangeRead serves the reading ZRANGE family.
func zrangeRead(by string, rev, fixedRev bool) func(*call) {
	return func(c *call) {
		q, ok := c.parseZRange(1, by, rev, fixedRev, false)
		if !ok {
			return
		}
		var es []collection.ZEntry
		if c.zset(c.args[1], func(z *collection.ZSet, _ bool) bool {
			var err error
			if es, err = q.run(z, q.withScores); err != nil {
				return c.zfail(err)
			}
			return true
		}) {
			c.writeEntries(es, q.withScores)
		}
	}
}

// storeZSet returns the ops that replace dst (whatever it holds, its TTL
// dropped) by a sorted set of es, or delete it when es is empty, and
// whether dst existed.
func (c *call) storeZSet(dst []byte, es []collection.ZEntry) ([]keyspace.Op, bool, bool) {
	_, existed, err := c.getAny(c.cl.db, dst)
	if err != nil {
		c.fail(err)
		return nil, false, false
	}
	if len(es) == 0 {
		if !existed {
			return nil, false, true
		}
		return []keyspace.Op{c.s.ks.Op(c.cl.db, dst, keyspace.Value{}, true)}, true, true
	}
	z, err := c.openZSet(keyspace.Value{}, false)
	if err != nil {
		return nil, false, c.zfail(err)
	}
	for _, e := range es {
		if _, err := z.Set(e.Member, e.Score); err != nil {
			return nil, false, c.zfail(err)
		}
	}
	return c.collOps(dst, z), existed, true
}

// notifyStored publishes the events of a STORE form that stored n
// entries under dst (existed: it held a value before): Redis's "new" and
// event, or "del" for an empty result that deleted dst.
func (c *call) notifyStored(event string, dst []byte, n int, existed bool) {
	switch {
	case n > 0:
		if !existed {
			c.notify(pubsub.New, "new", c.cl.db, dst)
		}
		c.notifyZ(event, dst, false)
	case existed:
		c.notify(pubsub.Generic, "del", c.cl.db, dst)
	}
}

// cmdZRangeStore: ZRANGESTORE dst src min max [BYSCORE|BYLEX] [REV]
// [LIMIT offset count].
func cmdZRangeStore(c *call) {
	q, ok := c.parseZRange(2, "", false, false, true)
	if !ok {
		return
	}
	dst := c.args[1]
	n, existed := 0, false
	if !c.zsets([][]byte{c.args[2]}, dst, false, func(srcs []zsource) ([]keyspace.Op, bool) {
		var es []collection.ZEntry
		if srcs[0].z != nil {
			var err error
			if es, err = q.run(srcs[0].z, true); err != nil {
				return nil, c.zfail(err)
			}
		}
		n = len(es)
		var ops []keyspace.Op
		ops, existed, ok = c.storeZSet(dst, es)
		return ops, ok
	}) {
		return
	}
	c.notifyStored("zrangestore", dst, n, existed)
	c.w.WriteInt(n)
}

// zpop pops up to count entries (count ≥ 1) from the first of keys that
// exists (WRONGTYPE if it is not a sorted set), lowest scores first
// (highest when top), writes it and publishes the events; key nil:
// none of keys exists. ok false: it replied with an error. The blocking
// pops call it once a key has entries.
func (c *call) zpop(keys [][]byte, top bool, count int64) (key []byte, popped []collection.ZEntry, ok bool) {
	if !c.checkKeys(keys...) {
		return nil, nil, false
	}
	key = keys[0] // one key: zset checks its type
	if len(keys) > 1 {
		if key, ok = c.firstZSet(keys); !ok || key == nil {
			return nil, nil, ok
		}
	}
	var left int64
	exists := false
	if !c.zset(key, func(z *collection.ZSet, found bool) bool {
		// Under the lock now: the key may have gone since.
		exists = found
		n := z.Len()
		if n == 0 || count == 0 {
			return true
		}
		k := min(count, n)
		var es []collection.ZEntry
		var err error
		if top {
			if es, err = z.ByRank(n-k, n-1); err == nil {
				err = z.DeleteEntries(es)
			}
			slices.Reverse(es)
		} else if es, err = z.ByRank(0, k-1); err == nil {
			err = z.DeleteLowest(es)
		}
		if err != nil {
			return c.zfail(err)
		}
		popped, left = es, z.Len()
		return true
	}) {
		return nil, nil, false
	}
	if !exists {
		return nil, nil, true
	}
	if len(popped) > 0 {
		ev := "zpopmin"
		if top {
			ev = "zpopmax"
		}
		c.notifyZ(ev, key, left == 0)
	}
	return key, popped, true
}

// firstZSet is the first of keys that exists (nil: none), WRONGTYPE if
// it is not a sorted set.
func (c *call) firstZSet(keys [][]byte) ([]byte, bool) {
	for _, k := range keys {
		v, found, err := c.getAny(c.cl.db, k)
		switch {
		case err != nil:
			c.fail(err)
			return nil, false
		case !found:
			continue
		case v.typ != keyspace.TypeZSet:
			c.fail(keyspace.ErrWrongType)
			return nil, false
		}
		return k, true
	}
	return nil, true
}

// cmdZPop serves ZPOPMIN and ZPOPMAX.
func cmdZPop(c *call) {
	if len(c.args) > 3 {
		c.syntaxError()
		return
	}
	count := int64(1)
	withCount := len(c.args) == 3
	if withCount {
		n, err := parseInt(c.args[2])
		if err != nil || n < 0 {
			c.error(errPositive)
			return
		}
		count = n
	}
	key, popped, ok := c.zpop(c.args[1:2], c.e.name == "zpopmax", count)
	if !ok {
		return
	}
	if key == nil {
		c.w.WriteArray(0)
		return
	}
	if !withCount && c.w.resp3() {
		// A single pop is flat in RESP3 too.
		c.w.WriteArray(2 * len(popped))
		for _, e := range popped {
			c.w.WriteBulk(e.Member)
			c.w.WriteDouble(e.Score)
		}
		return
	}
	c.writeEntries(popped, true)
}

// cmdZMPop: ZMPOP numkeys key [key ...] MIN|MAX [COUNT count].
func cmdZMPop(c *call) {
	keys, top, count, ok := c.parseZMPop(1)
	if !ok {
		return
	}
	key, popped, ok := c.zpop(keys, top, count)
	if !ok {
		return
	}
	c.writeZMPop(key, popped)
}

// parseZMPop parses ZMPOP's arguments from numkeys at args[at] on (BZMPOP
// has its timeout before).
func (c *call) parseZMPop(at int) (keys [][]byte, top bool, count int64, ok bool) {
	numkeys, err := parseInt(c.args[at])
	if err != nil || numkeys < 1 {
		c.error("ERR numkeys should be greater than 0")
		return nil, false, 0, false
	}
	where := at + 1 + int(min(numkeys, int64(len(c.args))))
	if where >= len(c.args) {
		c.syntaxError()
		return nil, false, 0, false
	}
	switch upper(c.args[where]) {
	case "MIN":
	case "MAX":
		top = true
	default:
		c.syntaxError()
		return nil, false, 0, false
	}
	count = -1
	for j := where + 1; j < len(c.args); j++ {
		if count == -1 && upper(c.args[j]) == "COUNT" && j+1 < len(c.args) {
			j++
			if count, err = parseInt(c.args[j]); err != nil || count < 1 {
				c.error("ERR count should be greater than 0")
				return nil, false, 0, false
			}
			continue
		}
		c.syntaxError()
		return nil, false, 0, false
	}
	return c.args[at+1 : where], top, max(count, 1), true
}

// writeZMPop replies as ZMPOP: null when nothing was popped, else the
// key and the entries as pairs.
func (c *call) writeZMPop(key []byte, popped []collection.ZEntry) {
	if key == nil || len(popped) == 0 {
		c.w.WriteNullArray()
		return
	}
	c.w.WriteArray(2)
	c.w.WriteBulk(key)
	c.w.WriteArray(len(popped))
	for _, e := range popped {
		c.w.WriteArray(2)
		c.w.WriteBulk(e.Member)
		c.w.WriteDouble(e.Score)
	}
}

// zblock is the blocking spec of BZPOPMIN, BZPOPMAX and BZMPOP: it waits
// for sorted sets and pops with zpop, replying with write; a timeout
// replies null.
func zblock(keys [][]byte, top bool, count, timeout int64, write func(c *call, key []byte, popped []collection.ZEntry)) *blockSpec {
	return &blockSpec{keys: keys, types: []byte{keyspace.TypeZSet}, timeout: timeout,
		serve: func(c *call, key []byte) bool {
			k, popped, ok := c.zpop([][]byte{key}, top, count)
			if !ok {
				return true
			}
			if k == nil || len(popped) == 0 {
				return false
			}
			write(c, k, popped)
			return true
		},
		timedOut: func(w *respWriter) { w.WriteNullArray() }}
}

// cmdBZPop serves BZPOPMIN and BZPOPMAX: key [key ...] timeout; the
// reply is the key, the member and its score.
func cmdBZPop(c *call) {
	timeout, ok := c.timeoutArg(c.args[len(c.args)-1])
	if !ok {
		return
	}
	c.block(zblock(c.args[1:len(c.args)-1], c.e.name == "bzpopmax", 1, timeout, func(c *call, key []byte, popped []collection.ZEntry) {
		c.w.WriteArray(3)
		c.w.WriteBulk(key)
		c.w.WriteBulk(popped[0].Member)
		c.w.WriteDouble(popped[0].Score)
	}))
}

// cmdBZMPop: BZMPOP timeout numkeys key [key ...] MIN|MAX [COUNT count].
// As Redis, the arguments after the timeout are checked before it.
func cmdBZMPop(c *call) {
	keys, top, count, ok := c.parseZMPop(2)
	if !ok {
		return
	}
	timeout, ok := c.timeoutArg(c.args[1])
	if !ok {
		return
	}
	c.block(zblock(keys, top, count, timeout, (*call).writeZMPop))
}

// cmdZRemRange serves ZREMRANGEBYRANK, ZREMRANGEBYSCORE and
// ZREMRANGEBYLEX.
func cmdZRemRange(c *call) {
	q := zrange{count: -1}
	switch c.e.name {
	case "zremrangebyrank":
		var err1, err2 error
		q.by = "rank"
		q.start, err1 = parseInt(c.args[2])
		q.stop, err2 = parseInt(c.args[3])
		if err1 != nil || err2 != nil {
			c.error(errNotInt)
			return
		}
	case "zremrangebyscore":
		var ok bool
		q.by = "score"
		if q.sr, ok = parseScoreRange(c.args[2], c.args[3]); !ok {
			c.error(errZMinMax)
			return
		}
	default:
		var ok bool
		q.by = "lex"
		if q.lr, ok = parseLexRange(c.args[2], c.args[3]); !ok {
			c.error(errZLexRange)
			return
		}
	}
	n := 0
	var left int64
	if !c.zset(c.args[1], func(z *collection.ZSet, _ bool) bool {
		es, err := q.run(z, true)
		switch {
		case err != nil:
		case q.by == "rank" && len(es) > 0 && rankFromStart(q.start, z.Len()):
			err = z.DeleteLowest(es)
		default:
			err = z.DeleteEntries(es)
		}
		if err != nil {
			return c.zfail(err)
		}
		n, left = len(es), z.Len()
		return true
	}) {
		return
	}
	if n > 0 {
		c.notifyZ(c.e.name, c.args[1], left == 0)
	}
	c.w.WriteInt(n)
}

// rankFromStart reports whether rank start (negative from the end) of
// a sorted set of n entries clamps to its first.
func rankFromStart(start, n int64) bool { return start <= 0 && start+n <= 0 || start == 0 }

// zalgebra is ZUNION's, ZINTER's or ZDIFF's result, in order; limit >
// 0 stops ZINTER there (ZINTERCARD).
func zalgebra(op string, srcs []zsource, weights []float64, agg string, limit int) ([]collection.ZEntry, error) {
	idx := make([]int, len(srcs))
	for i := range idx {
		idx[i] = i
	}
	if op != "diff" {
		// Smallest first, as Redis (it decides the order of the sums).
		slices.SortStableFunc(idx, func(a, b int) int { return int(srcs[a].Len() - srcs[b].Len()) })
	}
	aggregate := func(acc *float64, v float64) {
		switch agg {
		case "min":
			*acc = math.Min(*acc, v)
		case "max":
			*acc = math.Max(*acc, v)
		default:
			if *acc += v; math.IsNaN(*acc) {
				*acc = 0
			}
		}
	}
	weighted := func(i int, s float64) float64 {
		if s *= weights[i]; math.IsNaN(s) {
			return 0
		}
		return s
	}
	var out []collection.ZEntry
	switch op {
	case "inter":
		first := idx[0]
		if srcs[first].Len() == 0 {
			return nil, nil
		}
		es, err := srcs[first].entries()
		if err != nil {
			return nil, err
		}
	entries:
		for _, e := range es {
			score := weighted(first, e.Score)
			for _, j := range idx[1:] {
				s, found, err := srcs[j].score(e.Member)
				if err != nil {
					return nil, err
				}
				if !found {
					continue entries
				}
				aggregate(&score, s*weights[j])
			}
			out = append(out, collection.ZEntry{Member: e.Member, Score: score})
			if limit > 0 && len(out) >= limit {
				break
			}
		}
	case "union":
		at := map[string]int{}
		for _, i := range idx {
			es, err := srcs[i].entries()
			if err != nil {
				return nil, err
			}
			for _, e := range es {
				s := weighted(i, e.Score)
				if j, ok := at[string(e.Member)]; ok {
					aggregate(&out[j].Score, s)
					continue
				}
				at[string(e.Member)] = len(out)
				out = append(out, collection.ZEntry{Member: e.Member, Score: s})
			}
		}
	default:
		es, err := srcs[0].entries()
		if err != nil {
			return nil, err
		}
	diff:
		for _, e := range es {
			for _, x := range srcs[1:] {
				_, found, err := x.score(e.Member)
				if err != nil {
					return nil, err
				}
				if found {
					continue diff
				}
			}
			out = append(out, e)
		}
	}
	slices.SortFunc(out, collection.CompareEntries)
	return out, nil
}

// zalgebraOp is the algebra of a command name.
func zalgebraOp(name string) string {
	switch {
	case len(name) >= 6 && name[:6] == "zunion":
		return "union"
	case len(name) >= 6 && name[:6] == "zinter":
		return "inter"
	}
	return "diff"
}

// cmdZAlgebra serves ZUNION, ZINTER, ZDIFF, their STORE forms and
// ZINTERCARD, parsed as Redis's zunionInterDiffGenericCommand.
func cmdZAlgebra(c *call) {
	op := zalgebraOp(c.e.name)
	store := len(c.e.name) > 5 && c.e.name[len(c.e.name)-5:] == "store"
	card := c.e.name == "zintercard"
	at := 1
	var dst []byte
	if store {
		dst, at = c.args[1], 2
	}
	numkeys, err := parseInt(c.args[at])
	if err != nil {
		c.error(errNotInt)
		return
	}
	if numkeys < 1 {
		c.error(fmt.Sprintf("ERR at least 1 input key is needed for '%s' command", c.e.name))
		return
	}
	if numkeys > int64(len(c.args)-at-1) {
		c.syntaxError()
		return
	}
	keys := c.args[at+1 : at+1+int(numkeys)]
	weights := make([]float64, len(keys))
	for i := range weights {
		weights[i] = 1
	}
	agg, withScores, limit := "sum", false, int64(0)
	// Options are parsed after the keys are looked up, as Redis does
	// (WRONGTYPE first): the parse runs inside zsets.
	parse := func() bool {
		for j := at + 1 + int(numkeys); j < len(c.args); {
			left := len(c.args) - j
			switch w := upper(c.args[j]); {
			case op != "diff" && !card && left >= len(keys)+1 && w == "WEIGHTS":
				for i := range keys {
					var ok bool
					if weights[i], ok = parseScore(c.args[j+1+i]); !ok {
						c.error("ERR weight value is not a float")
						return false
					}
				}
				j += 1 + len(keys)
			case op != "diff" && !card && left >= 2 && w == "AGGREGATE":
				switch upper(c.args[j+1]) {
				case "SUM":
					agg = "sum"
				case "MIN":
					agg = "min"
				case "MAX":
					agg = "max"
				default:
					c.syntaxError()
					return false
				}
				j += 2
			case dst == nil && !card && w == "WITHSCORES":
				withScores = true
				j++
			case card && left >= 2 && w == "LIMIT":
				var err error
				if limit, err = parseInt(c.args[j+1]); err != nil || limit < 0 {
					c.error("ERR LIMIT can't be negative")
					return false
				}
				j += 2
			default:
				c.syntaxError()
				return false
			}
		}
		return true
	}
	var out []collection.ZEntry
	existed := false
	if !c.zsets(keys, dst, true, func(srcs []zsource) ([]keyspace.Op, bool) {
		if !parse() {
			return nil, false
		}
		var err error
		if out, err = zalgebra(op, srcs, weights, agg, int(min(limit, math.MaxInt32))); err != nil {
			return nil, c.zfail(err)
		}
		if !store {
			return nil, true
		}
		var ops []keyspace.Op
		var ok bool
		ops, existed, ok = c.storeZSet(dst, out)
		return ops, ok
	}) {
		return
	}
	switch {
	case card || store:
		if store {
			c.notifyStored(c.e.name, dst, len(out), existed)
		}
		c.w.WriteInt(len(out))
	default:
		c.writeEntries(out, withScores)
	}
}

// cmdZRandMember: ZRANDMEMBER key [count [WITHSCORES]].
func cmdZRandMember(c *call) {
	count, withCount, withScores := int64(1), false, false
	if len(c.args) >= 3 {
		n, err := parseInt(c.args[2])
		switch {
		case err != nil:
			c.error(errNotInt)
			return
		case n == math.MinInt64:
			c.error("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807")
			return
		}
		if len(c.args) > 4 || len(c.args) == 4 && upper(c.args[3]) != "WITHSCORES" {
			c.syntaxError()
			return
		}
		if len(c.args) == 4 {
			withScores = true
			if n < -math.MaxInt64/2 || n > math.MaxInt64/2 {
				c.error("ERR value is out of range")
				return
			}
		}
		count, withCount = n, true
	}
	var es []collection.ZEntry
	found := false
	if !c.zset(c.args[1], func(z *collection.ZSet, f bool) bool {
		found = f
		if !f || withCount && count == 0 {
			return true
		}
		var err error
		if es, err = z.All(); err != nil {
			return c.zfail(err)
		}
		return true
	}) {
		return
	}
	if !withCount {
		if !found {
			c.w.WriteNull()
			return
		}
		c.w.WriteBulk(es[rand.IntN(len(es))].Member)
		return
	}
	if count < int64(len(es)) || count < 0 {
		es = randomPick(es, count)
	} else {
		slices.Reverse(es) // all of them, as Redis iterates: highest first
	}
	c.writeEntries(es, withScores)
}

// cmdZScan: ZSCAN key cursor [MATCH pattern] [COUNT count], as HSCAN.
func cmdZScan(c *call) {
	cursor, pattern, count, ok := c.scanArgs(2, nil)
	if !ok {
		return
	}
	var fields []collection.Field
	var next, prefix []byte
	if !c.zset(c.args[1], func(z *collection.ZSet, _ bool) bool {
		var err error
		if fields, next, prefix, err = c.scanColl(z, cursor, count); err != nil {
			return c.zfail(err)
		}
		return true
	}) {
		return
	}
	c.writeScan(fields, next, prefix, pattern, true)
}
