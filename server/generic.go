package server

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/kvarray/kvarray/collection"
	"github.com/kvarray/kvarray/keyspace"
	"github.com/kvarray/kvarray/pubsub"
)

// The keyspace commands: deleting, testing, expiring, renaming and
// moving keys, and the databases.

// cmdDel serves DEL and UNLINK: it locks the keys, deletes them
// concurrently and counts those that existed.
func cmdDel(c *call) {
	keys := slices.Clone(c.args[1:])
	slices.SortFunc(keys, bytes.Compare)
	keys = slices.CompactFunc(keys, bytes.Equal)
	if !c.checkKeys(keys...) {
		return
	}
	unlock, err := c.lockKeys(c.cl.db, keys...)
	if err != nil {
		c.fail(err)
		return
	}
	defer unlock()
	existed := make([]bool, len(keys))
	errs := forEach(len(keys), func(i int) error {
		var err error
		existed[i], err = c.remove(c.cl.db, keys[i])
		return err
	})
	deleted := 0
	for i, e := range existed {
		deleted += b2i(e)
		if e {
			c.notify(pubsub.Generic, "del", c.cl.db, keys[i])
		}
	}
	if failed, first := firstError(errs); first != nil {
		c.error(fmt.Sprintf("%s (%d of %d keys deleted, %d failed)", errorReply(first), deleted, len(keys), failed))
		return
	}
	c.w.WriteInt(deleted)
}

// cmdExists serves EXISTS and TOUCH: how many of the arguments exist (a
// key given twice counts twice, as in Redis).
func cmdExists(c *call) {
	n := 0
	for _, k := range c.args[1:] {
		_, found, err := c.getAny(c.cl.db, k)
		if err != nil {
			c.fail(err)
			return
		}
		n += b2i(found)
	}
	c.w.WriteInt(n)
}

func cmdType(c *call) {
	v, found, err := c.getAny(c.cl.db, c.args[1])
	switch {
	case err != nil:
		c.fail(err)
	case found:
		c.w.WriteString(typeName(v.typ))
	default:
		c.w.WriteString("none")
	}
}

// typeName is TYPE's name of a value type.
func typeName(t byte) string {
	switch t {
	case keyspace.TypeHash:
		return "hash"
	case keyspace.TypeSet:
		return "set"
	case keyspace.TypeZSet:
		return "zset"
	case keyspace.TypeList:
		return "list"
	case keyspace.TypeStream:
		return "stream"
	}
	return "string"
}

// cmdTTL serves TTL, PTTL, EXPIRETIME and PEXPIRETIME: -2 for a missing
// key, -1 for one without expiry.
func cmdTTL(c *call) {
	v, found, err := c.getAny(c.cl.db, c.args[1])
	switch {
	case err != nil:
		c.fail(err)
		return
	case !found:
		c.w.WriteInt(-2)
		return
	case v.at == 0:
		c.w.WriteInt(-1)
		return
	}
	left := max(v.at-keyspace.NowMs(), 0)
	switch c.e.name {
	case "ttl":
		c.w.WriteInt64((left + 500) / 1000)
	case "pttl":
		c.w.WriteInt64(left)
	case "expiretime":
		c.w.WriteInt64(v.at / 1000)
	default:
		c.w.WriteInt64(v.at)
	}
}

// cmdExpire serves EXPIRE, PEXPIRE, EXPIREAT and PEXPIREAT with NX, XX,
// GT and LT: 1 if the expiry was set, 0 if not.
func cmdExpire(c *call) {
	n, err := parseInt(c.args[2])
	if err != nil {
		c.error(errNotInt)
		return
	}
	var nx, xx, gt, lt bool
	for _, a := range c.args[3:] {
		switch upper(a) {
		case "NX":
			nx = true
		case "XX":
			xx = true
		case "GT":
			gt = true
		case "LT":
			lt = true
		default:
			c.error(fmt.Sprintf("ERR Unsupported option %s", a))
			return
		}
	}
	if nx && (xx || gt || lt) {
		c.error("ERR NX and XX, GT or LT options at the same time are not compatible")
		return
	}
	if gt && lt {
		c.error("ERR GT and LT options at the same time are not compatible")
		return
	}
	invalid := fmt.Sprintf("ERR invalid expire time in '%s' command", c.e.name)
	now := keyspace.NowMs()
	var at int64
	switch c.e.name {
	case "expire":
		if n > math.MaxInt64/1000 || n < math.MinInt64/1000 {
			c.error(invalid)
			return
		}
		n *= 1000
		fallthrough
	case "pexpire":
		if n > 0 && n > math.MaxInt64-now || n < 0 && n < math.MinInt64+now {
			c.error(invalid)
			return
		}
		at = now + n
	case "expireat":
		if n > math.MaxInt64/1000 || n < math.MinInt64/1000 {
			c.error(invalid)
			return
		}
		at = n * 1000
	default:
		at = n
	}
	if at <= 0 {
		at = 1 // in the past: the key is deleted
	}
	set := false
	if _, _, ok := c.updateKey(c.args[1], true, c.getAny, func(cur value, found bool) (value, bool, string) {
		if !found {
			return cur, false, ""
		}
		// No expiry counts as an infinite TTL for GT and LT.
		switch {
		case nx && cur.at != 0, xx && cur.at == 0,
			gt && (cur.at == 0 || at <= cur.at), lt && cur.at != 0 && at >= cur.at:
			return cur, false, ""
		}
		set = true
		cur.at = at
		return cur, true, ""
	}); ok {
		c.w.WriteInt(b2i(set))
	}
}

func cmdPersist(c *call) {
	done := false
	if _, _, ok := c.updateKey(c.args[1], true, c.getAny, func(cur value, found bool) (value, bool, string) {
		if !found || cur.at == 0 {
			return cur, false, ""
		}
		done = true
		cur.at = 0
		return cur, true, ""
	}); ok {
		c.w.WriteInt(b2i(done))
	}
}

// move copies src of db sdb to dst of db ddb (keeping its expiry), under
// both keys' write locks, and deletes src unless keep. replace allows an
// existing dst. It returns whether it copied; ok false when it replied
// with an error.
func (c *call) move(sdb int, src []byte, ddb int, dst []byte, replace, keep bool) (moved, ok bool) {
	if !c.checkKeys(src, dst) {
		return false, false
	}
	sk, dk := c.s.ks.Key(sdb, src), c.s.ks.Key(ddb, dst)
	unlock, err := c.s.lock(c.ctx, sk, dk)
	if err != nil {
		c.fail(err)
		return false, false
	}
	defer unlock()
	c.s.preserve(c.ctx, sdb, src)
	c.s.preserve(c.ctx, ddb, dst)
	v, found, err := c.getAny(sdb, src)
	if err != nil {
		c.fail(err)
		return false, false
	}
	if !found {
		return false, true
	}
	if bytes.Equal(sk, dk) {
		return true, true
	}
	if !replace {
		_, exists, err := c.getAny(ddb, dst)
		if err != nil {
			c.fail(err)
			return false, false
		}
		if exists {
			return false, true
		}
	}
	if keep && v.ver != 0 {
		// A copy of a collection with elements of its own copies them,
		// under a version of its own, all or nothing with its value.
		nv, ops, err := collection.CopyElements(c.ctx, c.source(), v.ks())
		if err != nil {
			c.fail(err)
			return false, false
		}
		ops = append(ops, c.s.ks.Op(ddb, dst, nv, false))
		if err := c.writeOps(ops); err != nil {
			c.fail(err)
			return false, false
		}
		return true, true
	}
	if !keep && v.ver != 0 {
		// Both keys must never hold one version (a delete of either
		// would reclaim the other's elements): the two writes are one.
		del := c.s.ks.Op(sdb, src, keyspace.Value{}, true)
		del.Keep = true
		if err := c.writeOps([]keyspace.Op{c.s.ks.Op(ddb, dst, v.ks(), false), del}); err != nil {
			c.fail(err)
			return false, false
		}
		return true, true
	}
	if err := c.put(ddb, dst, v); err != nil {
		c.fail(err)
		return false, false
	}
	if !keep {
		if _, err := c.removeKeep(sdb, src, v.ver != 0); err != nil {
			c.fail(err)
			return false, false
		}
	}
	return true, true
}

// cmdRename serves RENAME and RENAMENX. The destination is written before
// the source is deleted: a crash between the two leaves both (inside
// MULTI/EXEC, neither or both writes).
func cmdRename(c *call) {
	nx := c.e.name == "renamenx"
	db := c.cl.db
	moved, ok := c.move(db, c.args[1], db, c.args[2], !nx, false)
	if moved {
		c.notify(pubsub.Generic, "rename_from", db, c.args[1])
		c.notify(pubsub.Generic, "rename_to", db, c.args[2])
	}
	switch {
	case !ok:
	case !moved && !nx:
		c.error("ERR no such key")
	case nx && bytes.Equal(c.args[1], c.args[2]):
		c.w.WriteInt(0) // the destination exists: it is the source
	case !moved:
		// RENAMENX: a missing source is an error too.
		if _, found, err := c.getAny(db, c.args[1]); err == nil && !found {
			c.error("ERR no such key")
			return
		}
		c.w.WriteInt(0)
	case nx:
		c.w.WriteInt(1)
	default:
		c.ok()
	}
}

// cmdCopy: COPY source destination [DB destination-db] [REPLACE].
func cmdCopy(c *call) {
	db, replace := c.cl.db, false
	for i := 3; i < len(c.args); i++ {
		switch upper(c.args[i]) {
		case "REPLACE":
			replace = true
		case "DB":
			if i+1 >= len(c.args) {
				c.syntaxError()
				return
			}
			i++
			n, ok := c.dbIndex(c.args[i])
			if !ok {
				return
			}
			db = n
		default:
			c.syntaxError()
			return
		}
	}
	if db == c.cl.db && bytes.Equal(c.args[1], c.args[2]) {
		c.error("ERR source and destination objects are the same")
		return
	}
	if moved, ok := c.move(c.cl.db, c.args[1], db, c.args[2], replace, true); ok {
		if moved {
			c.notify(pubsub.Generic, "copy_to", db, c.args[2])
		}
		c.w.WriteInt(b2i(moved))
	}
}

// cmdMove: MOVE key db.
func cmdMove(c *call) {
	db, ok := c.dbIndex(c.args[2])
	if !ok {
		return
	}
	if db == c.cl.db {
		c.error("ERR source and destination objects are the same")
		return
	}
	if moved, ok := c.move(c.cl.db, c.args[1], db, c.args[1], false, false); ok {
		if moved {
			c.notify(pubsub.Generic, "move_from", c.cl.db, c.args[1])
			c.notify(pubsub.Generic, "move_to", db, c.args[1])
		}
		c.w.WriteInt(b2i(moved))
	}
}

// dbIndex parses a database number, replying with Redis's errors.
func (c *call) dbIndex(a []byte) (int, bool) {
	n, err := parseInt(a)
	if err != nil {
		c.error(errNotInt)
		return 0, false
	}
	if n < 0 || n >= int64(c.s.ks.DBs()) {
		c.error("ERR DB index is out of range")
		return 0, false
	}
	return int(n), true
}

func cmdSelect(c *call) {
	if db, ok := c.dbIndex(c.args[1]); ok {
		c.cl.db = db
		c.cl.dbShown.Store(int64(db))
		c.ok()
	}
}

// cmdRandomKey lists the keys (a pass over every device) and picks one.
func cmdRandomKey(c *call) {
	keys, err := c.listKeys(c.cl.db, nil)
	if err == nil {
		keys, err = c.live(c.cl.db, keys)
	}
	if err != nil {
		c.fail(err)
		return
	}
	if len(keys) == 0 {
		c.w.WriteNull()
		return
	}
	c.w.WriteBulk(keys[rand.IntN(len(keys))])
}

// flush deletes every key of db, concurrently, under the keys' locks.
func (c *call) flush(db int) error {
	c.noTrack = true // the flush's null invalidation (flushed) says it
	keys, err := c.listKeys(db, nil)
	if err != nil {
		return err
	}
	// remove touches the watchers of each key that existed: FLUSH*
	// does not abort an EXEC that watched a missing key, as in Redis.
	errs := forEach(len(keys), func(i int) error {
		unlock, err := c.lockKeys(db, keys[i])
		if err != nil {
			return err
		}
		defer unlock()
		_, err = c.remove(db, keys[i])
		return err
	})
	_, err = firstError(errs)
	return err
}

// flushed sends tracking clients the null invalidation of a flush, or
// has the transaction's commit send it.
func (c *call) flushed() {
	if c.tx != nil {
		c.tx.flushed = true
		return
	}
	c.s.trackFlushed()
}

// flushOpt accepts FLUSHDB / FLUSHALL's ASYNC and SYNC (both run at once:
// the reply comes when every key is deleted).
func (c *call) flushOpt() bool {
	if len(c.args) > 2 {
		c.syntaxError()
		return false
	}
	if len(c.args) == 2 {
		switch upper(c.args[1]) {
		case "ASYNC", "SYNC":
		default:
			c.syntaxError()
			return false
		}
	}
	return true
}

func cmdFlushDB(c *call) {
	if !c.flushOpt() {
		return
	}
	if err := c.flush(c.cl.db); err != nil {
		c.fail(err)
		return
	}
	c.flushed()
	c.ok()
}

func cmdFlushAll(c *call) {
	if !c.flushOpt() {
		return
	}
	for db := range c.s.ks.DBs() {
		if err := c.flush(db); err != nil {
			c.fail(err)
			return
		}
	}
	c.flushed()
	c.ok()
}

// cmdSwapDB swaps two databases: one write of the keyspace's database map
// (not allowed inside MULTI), under the exclusive transaction lock.
func cmdSwapDB(c *call) {
	x, err1 := parseInt(c.args[1])
	y, err2 := parseInt(c.args[2])
	switch {
	case err1 != nil:
		c.error("ERR invalid first DB index")
		return
	case err2 != nil:
		c.error("ERR invalid second DB index")
		return
	case x < 0 || y < 0 || x >= int64(c.s.ks.DBs()) || y >= int64(c.s.ks.DBs()):
		c.error("ERR DB index is out of range")
		return
	}
	if x != y {
		// Exclusively: a command running meanwhile could read a key in
		// one database and write it in the other.
		c.s.txmu.Lock()
		defer c.s.txmu.Unlock()
		if err := c.s.completeLeftBehind(c.ctx); err != nil {
			c.fail(err)
			return
		}
		// An export in progress lists databases by number: it cannot
		// follow their keys from one number to the other.
		c.s.failSnapshots(errSwappedDuringExport)
		if err := c.s.ks.Swap(c.ctx, int(x), int(y)); err != nil {
			c.fail(err)
			return
		}
		c.s.touchDB(int(x))
		c.s.touchDB(int(y))
		c.s.trackFlushed()
	}
	c.ok()
}

// cmdObject: OBJECT ENCODING | FREQ | IDLETIME | REFCOUNT | HELP.
func cmdObject(c *call) {
	sub := strings.ToLower(string(truncate(c.args[1], 32)))
	if sub == "help" {
		c.lines([]string{"OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"ENCODING <key>", "    Return the kind of internal representation used in order to store the value associated with a <key>.",
			"FREQ <key>", "    Return the access frequency index of the <key>.",
			"IDLETIME <key>", "    Return the idle time of the <key>.",
			"REFCOUNT <key>", "    Return the number of references of the value associated with the specified <key>.",
			"HELP", "    Print this help."})
		return
	}
	switch sub {
	case "encoding", "freq", "idletime", "refcount":
	default:
		c.unknownSubcommand("object")
		return
	}
	if len(c.args) != 3 {
		c.arityError("object|" + sub)
		return
	}
	v, found, err := c.getAny(c.cl.db, c.args[2])
	switch {
	case err != nil:
		c.fail(err)
	case !found:
		c.w.WriteNull()
	case sub == "encoding" && v.typ != keyspace.TypeString:
		c.w.WriteBulkString(collection.Encoding(v.ks()))
	case sub == "encoding":
		c.w.WriteBulkString(encoding(v))
	case sub == "refcount":
		c.w.WriteInt(1)
	case sub == "freq":
		c.error("ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.")
	default:
		c.w.WriteInt(0)
	}
}

// encoding is the encoding Redis would report for a string value: raw
// once changed in place, else what Redis picks for a value it stores
// whole (an integer in range is int, up to 44 bytes embstr).
func encoding(v value) string {
	switch _, isInt := parseCounter(v.v); {
	case v.raw:
		return "raw"
	case isInt:
		return "int"
	case len(v.v) <= 44:
		return "embstr"
	}
	return "raw"
}

// cmdMemory: MEMORY USAGE key [SAMPLES n] (the value's length plus the
// key's and the mapping's overhead: not what the devices hold, which
// depends on the mechanism), MEMORY HELP.
func cmdMemory(c *call) {
	switch sub := strings.ToLower(string(truncate(c.args[1], 32))); sub {
	case "usage":
		if len(c.args) < 3 || len(c.args) != 3 && len(c.args) != 5 {
			c.syntaxError()
			return
		}
		v, found, err := c.getAny(c.cl.db, c.args[2])
		switch {
		case err != nil:
			c.fail(err)
		case !found:
			c.w.WriteNull()
		default:
			c.w.WriteInt(len(v.v) + len(c.args[2]) + keyspace.KeyOverhead + keyspace.ValueOverhead)
		}
	case "help":
		c.lines(slices.Concat([]string{"MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"}, memoryHelp,
			[]string{"USAGE <key> [SAMPLES <count>]", "    Return memory in bytes used by <key> and its value.",
				"HELP", "    Print this help."}))
	default:
		if !c.memoryMore(sub) {
			c.unknownSubcommand("memory")
		}
	}
}
