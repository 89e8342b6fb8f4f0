package server

import (
	"errors"
	"strconv"
	"strings"

	"github.com/kvarray/kvarray/internal/hll"
)

// HyperLogLog commands: PFADD, PFCOUNT, PFMERGE, PFSELFTEST, PFDEBUG.
// A HyperLogLog is a string value in Redis's own encoding (package hll),
// so GET, DUMP and RESTORE carry it as Redis does; here the arguments are
// parsed, values read and stored under the keys' locks, and replies
// written.

func init() { commands = append(commands, hllCommands()...) }

func hllCommands() []*command {
	pfadd := wcmd("pfadd", -2, "hyperloglog", "2.8.9", "Adds elements to a HyperLogLog; 1 if a register changed.", cmdPFAdd,
		keyArg("key"), optional(multiple(strArg("element"))))
	pfadd.flags = append(pfadd.flags, "fast")
	pfadd.acl[2] = "fast"
	pfcount := keyPos(rcmd("pfcount", -2, "hyperloglog", "2.8.9", "Returns the approximated cardinality of the union of HyperLogLogs (one key: cached in the value).", cmdPFCount,
		multiple(keyArg("key"))), -1, 1)
	pfcount.flags, pfcount.acl[2] = []string{"readonly", "may_replicate"}, "slow"
	pfmerge := keyPos(wcmd("pfmerge", -2, "hyperloglog", "2.8.9", "Merges HyperLogLogs into the first key.", cmdPFMerge,
		keyArg("destkey"), optional(multiple(keyArg("sourcekey")))), -1, 1)
	return []*command{pfadd, pfcount, pfmerge,
		{name: "pfselftest", arity: 1, flags: []string{"admin"}, acl: []string{"hyperloglog", "admin", "slow", "dangerous"}, group: "hyperloglog", since: "2.8.9",
			summary: "Tests the HyperLogLog registers and estimator.", complexity: "N/A", run: cmdPFSelfTest},
		{name: "pfdebug", arity: 3, flags: []string{"write", "denyoom", "admin"}, first: 2, last: 2, step: 1,
			acl: []string{"write", "hyperloglog", "admin", "slow", "dangerous"}, group: "hyperloglog", since: "2.8.9",
			summary: "PFDEBUG GETREG | DECODE | ENCODING | TODENSE key.", complexity: "N/A",
			args: []arg{strArg("subcommand"), keyArg("key")}, run: cmdPFDebug},
	}
}

// hllError replies with package hll's error, which carries Redis's code.
func (c *call) hllError(err error) string {
	if errors.Is(err, hll.ErrNotHLL) || errors.Is(err, hll.ErrCorrupt) {
		return err.Error()
	}
	return "ERR " + err.Error()
}

func cmdPFAdd(c *call) {
	updated := false
	if _, _, ok := c.update(c.args[1], func(cur value, found bool) (value, bool, string) {
		next, changed, err := hll.Add(cur.v, found, c.s.cfg.hllSparseMax(), c.args[2:]...)
		if err != nil {
			return value{}, false, c.hllError(err)
		}
		updated = changed
		return value{v: next, at: cur.at, raw: true}, changed, ""
	}); ok {
		c.w.WriteInt(map[bool]int{false: 0, true: 1}[updated])
	}
}

// cmdPFCount: one key's count is cached in its value, which is stored
// when the cache was stale (as Redis does, though PFCOUNT reads); many
// keys are counted as their union.
func cmdPFCount(c *call) {
	if len(c.args) == 2 {
		var card uint64
		if _, _, ok := c.update(c.args[1], func(cur value, found bool) (value, bool, string) {
			if !found {
				return value{}, false, ""
			}
			n, next, store, err := hll.Count(cur.v)
			if err != nil {
				return value{}, false, c.hllError(err)
			}
			card = n
			return value{v: next, at: cur.at, raw: true}, store, ""
		}); ok {
			c.w.WriteInt64(int64(card))
		}
		return
	}
	var u hll.Union
	if c.mergeHLLs(c.args[1:], &u, nil) {
		c.w.WriteInt64(int64(u.Count()))
	}
}

// mergeHLLs locks keys and merges their HyperLogLogs into u, then runs
// then (if given) under the locks with the first key's value; false once
// it has replied with an error.
func (c *call) mergeHLLs(keys [][]byte, u *hll.Union, then func(first value, found bool) bool) bool {
	if !c.checkKeys(keys...) {
		return false
	}
	unlock, err := c.lockKeys(c.cl.db, keys...)
	if err != nil {
		c.fail(err)
		return false
	}
	defer unlock()
	vals, founds, err := c.readStrings(keys)
	if err != nil {
		c.fail(err)
		return false
	}
	for i, v := range vals {
		if !founds[i] {
			continue
		}
		if err := u.Merge(v.v); err != nil {
			c.error(c.hllError(err))
			return false
		}
	}
	return then == nil || then(vals[0], founds[0])
}

// cmdPFMerge: PFMERGE destkey [sourcekey ...], destkey among the sources.
func cmdPFMerge(c *call) {
	var u hll.Union
	dst := c.args[1]
	if c.mergeHLLs(c.args[1:], &u, func(cur value, found bool) bool {
		next, err := u.Store(cur.v, found, c.s.cfg.hllSparseMax())
		if err == nil {
			err = c.s.checkValue(next)
		}
		nv := value{v: next, at: cur.at, raw: true}
		if err == nil {
			err = c.put(c.cl.db, dst, nv)
		}
		if err != nil {
			c.error(c.hllError(err))
			return false
		}
		c.notifyStore(dst, found, nv)
		return true
	}) {
		c.ok()
	}
}

func cmdPFSelfTest(c *call) {
	if err := hll.SelfTest(c.s.cfg.hllSparseMax()); err != nil {
		c.error(err.Error())
		return
	}
	c.ok()
}

// cmdPFDebug: GETREG and TODENSE store the value in dense form, as Redis.
func cmdPFDebug(c *call) {
	sub := strings.ToLower(string(truncate(c.args[1], 32)))
	var regs []uint8
	var reply func()
	if _, _, ok := c.update(c.args[2], func(cur value, found bool) (value, bool, string) {
		if !found {
			return value{}, false, "ERR The specified key does not exist"
		}
		if err := hll.Check(cur.v); err != nil {
			return value{}, false, c.hllError(err)
		}
		var next []byte
		var err error
		switch sub {
		case "getreg":
			regs, next, err = hll.Registers(cur.v)
			reply = func() {
				c.w.WriteArray(len(regs))
				for _, r := range regs {
					c.w.WriteInt(int(r))
				}
			}
		case "decode":
			var s string
			s, err = hll.Decode(cur.v)
			reply = func() { c.w.WriteBulkString(s) }
		case "encoding":
			enc := hll.Encoding(cur.v)
			reply = func() { c.w.WriteString(enc) }
		case "todense":
			var conv bool
			next, conv, err = hll.ToDense(cur.v)
			reply = func() { c.w.WriteInt(map[bool]int{false: 0, true: 1}[conv]) }
		default:
			return value{}, false, "ERR Unknown PFDEBUG subcommand '" + string(truncate(c.args[1], 128)) + "'"
		}
		if err != nil {
			return value{}, false, c.hllError(err)
		}
		changed := next != nil && string(next) != string(cur.v)
		return value{v: next, at: cur.at, raw: true}, changed, ""
	}); ok {
		reply()
	}
}

func init() { params = append(params, hllSparseMaxParam) }

// hllSparseMax is hll-sparse-max-bytes: how long a sparse HyperLogLog
// may grow before it turns dense.
func (rc *runtimeConfig) hllSparseMax() int { return int(min(rc.hllSparse.Load(), 1<<31)) }

// hllSparseMaxParam is CONFIG's hll-sparse-max-bytes.
var hllSparseMaxParam = param{name: "hll-sparse-max-bytes",
	get: func(s *Server) string { return strconv.Itoa(s.cfg.hllSparseMax()) },
	set: func(s *Server, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return errors.New("argument must be a memory value")
		}
		s.cfg.hllSparse.Store(n)
		return nil
	}}
