package server

import (
	"bytes"
	"math"
	"math/rand/v2"

	"github.com/kvarray/kvarray/collection"
	"github.com/kvarray/kvarray/keyspace"
	"github.com/kvarray/kvarray/pubsub"
)

// The set commands: parsing and replies; the set itself is
// collection.Set.

func (c *call) openSet(v keyspace.Value, found bool) (*collection.Set, error) {
	return collection.OpenSet(c.ctx, c.source(), v, found, c.s.limits.get(), c.s.ks.MaxElement())
}

// set runs fn on the set under c.args[1] (collection), then writes what
// fn changed. fn returns false when it replied with an error.
func (c *call) set(fn func(s *collection.Set) bool) bool {
	return c.collection(c.args[1], keyspace.TypeSet, func(v keyspace.Value, found bool) ([]keyspace.Op, bool) {
		s, err := c.openSet(v, found)
		if err != nil {
			c.fail(err)
			return nil, false
		}
		if !fn(s) {
			return nil, false
		}
		return c.collOps(c.args[1], s), true
	})
}

// sets opens the sets under keys (a missing key is an empty set) and
// the value under dst, if not nil, whatever its type, all under their
// locks, and runs fn; then writes the ops fn returns. WRONGTYPE for a
// key of keys that is not a set.
func (c *call) sets(keys [][]byte, dst []byte, fn func(sets []*collection.Set) ([]keyspace.Op, bool)) bool {
	all := keys
	if dst != nil {
		all = append(append([][]byte(nil), keys...), dst)
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
	sets := make([]*collection.Set, len(keys))
	existed := make([]bool, len(all)) // for the notifications
	for i, k := range keys {
		v, found, err := c.getAny(c.cl.db, k)
		existed[i] = found
		if err == nil && found && v.typ != keyspace.TypeSet {
			err = keyspace.ErrWrongType
		}
		if err == nil {
			sets[i], err = c.openSet(v.ks(), found)
		}
		if err != nil {
			c.fail(err)
			return false
		}
	}
	if dst != nil && c.notifying(pubsub.Set|pubsub.Generic|pubsub.New) {
		if _, existed[len(keys)], err = c.getAny(c.cl.db, dst); err != nil {
			c.fail(err)
			return false
		}
	}
	ops, ok := fn(sets)
	if !ok {
		return false
	}
	// Every set these commands change changes its count, so its value
	// is among the ops and its watchers are told: a set left as it was
	// (SMOVE of a member dst has) is not touched, as in Redis.
	if err := c.writeOps(ops); err != nil {
		c.fail(err)
		return false
	}
	switch {
	case dst != nil:
		c.notifyColl(keyspace.TypeSet, collEvents[c.e.name], dst, existed[len(keys)], ops)
	case c.e.name == "smove":
		c.notifyColl(keyspace.TypeSet, "srem", keys[0], existed[0], ops)
		c.notifyColl(keyspace.TypeSet, "sadd", keys[1], existed[1], ops)
	}
	return true
}

// setFail replies with err from a set operation.
func (c *call) setFail(err error) bool { return c.hashFail(err) }

func cmdSAdd(c *call) {
	n := 0
	if c.set(func(s *collection.Set) bool {
		if err := s.Prefetch(c.args[2:]); err != nil {
			return c.setFail(err)
		}
		for _, m := range c.args[2:] {
			added, err := s.Add(m)
			if err != nil {
				return c.setFail(err)
			}
			n += b2i(added)
		}
		return true
	}) {
		c.w.WriteInt(n)
	}
}

func cmdSRem(c *call) {
	n := 0
	if c.set(func(s *collection.Set) bool {
		if err := s.Prefetch(c.args[2:]); err != nil {
			return c.setFail(err)
		}
		for _, m := range c.args[2:] {
			ok, err := s.Delete(m)
			if err != nil {
				return c.setFail(err)
			}
			n += b2i(ok)
		}
		return true
	}) {
		c.w.WriteInt(n)
	}
}

func cmdSCard(c *call) {
	var n int64
	if c.set(func(s *collection.Set) bool { n = s.Len(); return true }) {
		c.w.WriteInt64(n)
	}
}

// cmdSIsMember serves SISMEMBER and SMISMEMBER.
func cmdSIsMember(c *call) {
	ms := c.args[2:]
	has := make([]bool, len(ms))
	if !c.set(func(s *collection.Set) bool {
		if err := s.Prefetch(ms); err != nil {
			return c.setFail(err)
		}
		for i, m := range ms {
			var err error
			if has[i], err = s.Has(m); err != nil {
				return c.setFail(err)
			}
		}
		return true
	}) {
		return
	}
	if c.e.name == "sismember" {
		c.w.WriteInt(b2i(has[0]))
		return
	}
	c.w.WriteArray(len(has))
	for _, h := range has {
		c.w.WriteInt(b2i(h))
	}
}

func cmdSMembers(c *call) {
	var ms [][]byte
	if c.set(func(s *collection.Set) bool {
		var err error
		if ms, err = s.Members(); err != nil {
			return c.setFail(err)
		}
		return true
	}) {
		c.writeSet(ms)
	}
}

// writeSet replies with members: a RESP3 set, a RESP2 array.
func (c *call) writeSet(ms [][]byte) {
	c.w.WriteSet(len(ms))
	for _, m := range ms {
		c.w.WriteBulk(m)
	}
}

// cmdSRandMember: SRANDMEMBER key [count].
func cmdSRandMember(c *call) {
	withCount, count, ok := c.countArg(false)
	if !ok {
		return
	}
	var ms [][]byte
	if !c.set(func(s *collection.Set) bool {
		if s.Len() == 0 || withCount && count == 0 {
			return true
		}
		var err error
		if ms, err = s.Members(); err != nil {
			return c.setFail(err)
		}
		return true
	}) {
		return
	}
	if !withCount {
		if len(ms) == 0 {
			c.w.WriteNull()
			return
		}
		c.w.WriteBulk(ms[rand.IntN(len(ms))])
		return
	}
	pick := randomPick(ms, count)
	c.w.WriteArray(len(pick))
	for _, m := range pick {
		c.w.WriteBulk(m)
	}
}

// countArg parses SRANDMEMBER's and SPOP's optional count (positive:
// SPOP's, which refuses a negative one), replying with Redis's errors.
func (c *call) countArg(positive bool) (withCount bool, count int64, ok bool) {
	if len(c.args) > 3 {
		c.syntaxError()
		return false, 0, false
	}
	if len(c.args) < 3 {
		return false, 1, true
	}
	n, err := parseInt(c.args[2])
	switch {
	case err != nil:
		c.error(errNotInt)
		return false, 0, false
	case positive && n < 0:
		c.error("ERR value is out of range, must be positive")
		return false, 0, false
	case n == math.MinInt64:
		c.error("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807")
		return false, 0, false
	}
	return true, n, true
}

// randomPick is count random elements of xs, as Redis's SRANDMEMBER and
// HRANDFIELD pick them: distinct (at most all of xs, shuffled) for a
// count ≥ 0, -count independent draws for a negative one.
func randomPick[T any](xs []T, count int64) []T {
	switch {
	case len(xs) == 0:
		return nil
	case count < 0:
		pick := make([]T, -count)
		for i := range pick {
			pick[i] = xs[rand.IntN(len(xs))]
		}
		return pick
	}
	rand.Shuffle(len(xs), func(i, j int) { xs[i], xs[j] = xs[j], xs[i] })
	return xs[:min(int64(len(xs)), count)]
}

// cmdSPop: SPOP key [count].
func cmdSPop(c *call) {
	withCount, count, ok := c.countArg(true)
	if !ok {
		return
	}
	var popped [][]byte
	if !c.set(func(s *collection.Set) bool {
		if s.Len() == 0 || count == 0 {
			return true
		}
		ms, err := s.Members()
		if err != nil {
			return c.setFail(err)
		}
		popped = randomPick(ms, count)
		for _, m := range popped {
			if _, err := s.Delete(m); err != nil {
				return c.setFail(err)
			}
		}
		return true
	}) {
		return
	}
	if !withCount {
		if len(popped) == 0 {
			c.w.WriteNull()
			return
		}
		c.w.WriteBulk(popped[0])
		return
	}
	c.writeSet(popped)
}

// cmdSMove: SMOVE source destination member, all or nothing.
func cmdSMove(c *call) {
	src, dst, m := c.args[1], c.args[2], c.args[3]
	moved := false
	if c.sets([][]byte{src, dst}, nil, func(ss []*collection.Set) ([]keyspace.Op, bool) {
		if bytes.Equal(src, dst) {
			has, err := ss[0].Has(m)
			if err != nil {
				return nil, c.setFail(err)
			}
			moved = has
			return nil, true
		}
		ok, err := ss[0].Delete(m)
		if err != nil {
			return nil, c.setFail(err)
		}
		if !ok {
			return nil, true
		}
		if _, err := ss[1].Add(m); err != nil {
			return nil, c.setFail(err)
		}
		moved = true
		return append(c.collOps(src, ss[0]), c.collOps(dst, ss[1])...), true
	}) {
		c.w.WriteInt(b2i(moved))
	}
}

// setAlgebra is the members of SINTER, SUNION or SDIFF of sets, in the
// first set's order for SINTER and SDIFF; limit > 0 stops SINTER there.
func setAlgebra(op string, sets []*collection.Set, limit int) ([][]byte, error) {
	var out [][]byte
	switch op {
	case "union":
		seen := map[string]bool{}
		for _, s := range sets {
			ms, err := s.Members()
			if err != nil {
				return nil, err
			}
			for _, m := range ms {
				if !seen[string(m)] {
					seen[string(m)] = true
					out = append(out, m)
				}
			}
		}
		return out, nil
	case "inter":
		for _, s := range sets {
			if s.Len() == 0 {
				return nil, nil
			}
		}
	}
	if len(sets) == 0 || sets[0].Len() == 0 {
		return nil, nil
	}
	ms, err := sets[0].Members()
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		keep := true
		for _, s := range sets[1:] {
			has, err := s.Has(m)
			if err != nil {
				return nil, err
			}
			if has != (op == "inter") {
				keep = false
				break
			}
		}
		if keep {
			out = append(out, m)
			if limit > 0 && len(out) >= limit {
				break
			}
		}
	}
	return out, nil
}

// setOpOf is the algebra of a command name.
func setOpOf(name string) string {
	switch {
	case bytes.HasPrefix([]byte(name), []byte("sinter")):
		return "inter"
	case bytes.HasPrefix([]byte(name), []byte("sunion")):
		return "union"
	}
	return "diff"
}

// cmdSetAlgebra serves SINTER, SUNION and SDIFF.
func cmdSetAlgebra(c *call) {
	var out [][]byte
	if c.sets(c.args[1:], nil, func(ss []*collection.Set) ([]keyspace.Op, bool) {
		var err error
		if out, err = setAlgebra(setOpOf(c.e.name), ss, 0); err != nil {
			return nil, c.setFail(err)
		}
		return nil, true
	}) {
		c.writeSet(out)
	}
}

// cmdSetStore serves SINTERSTORE, SUNIONSTORE and SDIFFSTORE: the
// destination is replaced (whatever its type, its TTL dropped) by the
// result, or deleted when it is empty, in one all-or-nothing write.
func cmdSetStore(c *call) {
	dst := c.args[1]
	n := 0
	if c.sets(c.args[2:], dst, func(ss []*collection.Set) ([]keyspace.Op, bool) {
		out, err := setAlgebra(setOpOf(c.e.name), ss, 0)
		if err != nil {
			return nil, c.setFail(err)
		}
		n = len(out)
		if n == 0 {
			return []keyspace.Op{c.s.ks.Op(c.cl.db, dst, keyspace.Value{}, true)}, true
		}
		ns, err := c.openSet(keyspace.Value{}, false)
		if err != nil {
			return nil, c.setFail(err)
		}
		for _, m := range out {
			if _, err := ns.Add(m); err != nil {
				return nil, c.setFail(err)
			}
		}
		return c.collOps(dst, ns), true
	}) {
		c.w.WriteInt(n)
	}
}

// cmdSInterCard: SINTERCARD numkeys key [key ...] [LIMIT limit].
func cmdSInterCard(c *call) {
	numkeys, err := parseInt(c.args[1])
	if err != nil || numkeys < 1 {
		c.error("ERR numkeys should be greater than 0")
		return
	}
	if numkeys > int64(len(c.args)-2) {
		c.error("ERR Number of keys can't be greater than number of args")
		return
	}
	limit := int64(0)
	for j := 2 + int(numkeys); j < len(c.args); j++ {
		if upper(c.args[j]) != "LIMIT" || j+1 >= len(c.args) {
			c.syntaxError()
			return
		}
		j++
		if limit, err = parseInt(c.args[j]); err != nil || limit < 0 {
			c.error("ERR LIMIT can't be negative")
			return
		}
	}
	n := 0
	if c.sets(c.args[2:2+numkeys], nil, func(ss []*collection.Set) ([]keyspace.Op, bool) {
		out, err := setAlgebra("inter", ss, int(min(limit, math.MaxInt32)))
		if err != nil {
			return nil, c.setFail(err)
		}
		n = len(out)
		return nil, true
	}) {
		c.w.WriteInt(n)
	}
}

// cmdSScan: SSCAN key cursor [MATCH pattern] [COUNT count], as HSCAN.
func cmdSScan(c *call) {
	cursor, pattern, count, ok := c.scanArgs(2, nil)
	if !ok {
		return
	}
	var fields []collection.Field
	var next, prefix []byte
	if !c.set(func(s *collection.Set) bool {
		var err error
		fields, next, prefix, err = c.scanColl(s, cursor, count)
		if err != nil {
			return c.setFail(err)
		}
		return true
	}) {
		return
	}
	c.writeScan(fields, next, prefix, pattern, false)
}
