package server

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"strconv"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/internal/bitops"
	"github.com/kvarray/kvarray/internal/longdouble"
	"github.com/kvarray/kvarray/keyspace"
	"github.com/kvarray/kvarray/pubsub"
)

// Redis 7's error strings for string commands.
const (
	errNotInt      = "ERR value is not an integer or out of range"
	errNotFloat    = "ERR value is not a valid float"
	errOverflow    = "ERR increment or decrement would overflow"
	errNaN         = "ERR increment would produce NaN or Infinity"
	errOffsetRange = "ERR offset is out of range"
	errBitOffset   = "ERR bit offset is not an integer or out of range"
	errBitValue    = "ERR bit is not an integer or out of range"
	errTooBig      = "ERR string exceeds maximum allowed size (proto-max-bulk-len)"

	// maxBits is Redis's bit offset limit: 512 MiB of bits.
	maxBits = 512 << 20 * 8
)

// update reads key under its write lock, lets fn decide, and stores what
// fn returns when it says so. fn returns an error reply (nothing stored)
// as msg. ok is false when update has replied with an error.
func (c *call) update(key []byte, fn func(cur value, found bool) (next value, store bool, msg string)) (cur value, found, ok bool) {
	return c.updateRead(key, true, fn)
}

// updateRead is update; with read false the current value is not read
// (fn sees it absent): a plain SET, which replaces whatever is there.
func (c *call) updateRead(key []byte, read bool, fn func(cur value, found bool) (next value, store bool, msg string)) (cur value, found, ok bool) {
	return c.updateKey(key, read, c.get, fn)
}

// updateKey is updateRead with the current value read by get (c.get for
// a string, c.getAny for a value of any type).
func (c *call) updateKey(key []byte, read bool, get func(int, []byte) (value, bool, error), fn func(cur value, found bool) (next value, store bool, msg string)) (cur value, found, ok bool) {
	if !c.checkKeys(key) {
		return value{}, false, false
	}
	unlock, err := c.lockKeys(c.cl.db, key)
	if err != nil {
		c.fail(err)
		return value{}, false, false
	}
	defer unlock()
	existed := false // for the "new" event: read only when it is wanted
	if read || c.notifying(pubsub.New) {
		if cur, found, err = get(c.cl.db, key); err != nil {
			c.fail(err)
			return value{}, false, false
		}
		existed = found
		if !read {
			cur, found = value{}, false // as unread, for fn too
		}
	}
	next, store, msg := fn(cur, found)
	if msg != "" {
		c.error(msg)
		return cur, found, false
	}
	if store {
		if err := c.s.checkValue(next.v); err != nil {
			c.fail(err)
			return cur, found, false
		}
		if err := c.put(c.cl.db, key, next, c.callOpts()...); err != nil {
			c.fail(err)
			return cur, found, false
		}
		c.notifyStore(key, existed, next)
	}
	return cur, found, true
}

// callOpts are the array options of KVARRAY.SET.
func (c *call) callOpts() []array.CallOption {
	if c.using == "" {
		return nil
	}
	return []array.CallOption{array.Using(c.using)}
}

func (c *call) bulkOrNull(v value, found bool) {
	if found {
		c.w.WriteBulk(v.v)
	} else {
		c.w.WriteNull()
	}
}

func (c *call) hit(found bool) {
	if found {
		c.s.stats.hits.Add(1)
	} else {
		c.s.stats.misses.Add(1)
	}
}

func cmdGet(c *call) {
	v, found, err := c.get(c.cl.db, c.args[1])
	if err != nil {
		c.fail(err)
		return
	}
	c.hit(found)
	c.bulkOrNull(v, found)
}

// SET conditions.
const (
	always = iota
	ifAbsent
	ifPresent
)

// expiryOpt is a parsed EX/PX/EXAT/PXAT/KEEPTTL/PERSIST option.
type expiryOpt struct {
	kind string // "" none
	at   int64  // absolute Unix ms for EX..PXAT
}

// expiryArg parses the time that follows option opt (EX, PX, EXAT, PXAT)
// at c.args[*i], moving *i onto it. When it is missing or bad it answers
// the error and returns false.
func (c *call) expiryArg(opt string, i *int, cmd string) (int64, bool) {
	if *i+1 >= len(c.args) {
		c.syntaxError()
		return 0, false
	}
	*i++
	at, msg := parseExpiry(opt, c.args[*i], cmd)
	if msg != "" {
		c.error(msg)
		return 0, false
	}
	return at, true
}

// parseExpiry parses the number after EX/PX/EXAT/PXAT into an absolute
// expire-at, with Redis's error for cmd.
func parseExpiry(kind string, arg []byte, cmd string) (int64, string) {
	n, err := parseInt(arg)
	if err != nil {
		return 0, errNotInt
	}
	invalid := fmt.Sprintf("ERR invalid expire time in '%s' command", cmd)
	if n <= 0 {
		return 0, invalid
	}
	now := keyspace.NowMs()
	var at int64
	switch kind {
	case "EX":
		if n > (math.MaxInt64-now)/1000 {
			return 0, invalid
		}
		at = now + n*1000
	case "PX":
		if n > math.MaxInt64-now {
			return 0, invalid
		}
		at = now + n
	case "EXAT":
		if n > math.MaxInt64/1000 {
			return 0, invalid
		}
		at = n * 1000
	case "PXAT":
		at = n
	}
	return at, ""
}

// cmdSet: SET key value [NX | XX] [GET] [EX s | PX ms | EXAT t | PXAT t | KEEPTTL].
func cmdSet(c *call) {
	cond, get := always, false
	var exp expiryOpt
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
			if exp.kind != "" {
				c.syntaxError()
				return
			}
			exp.kind = opt
			if opt != "KEEPTTL" {
				at, ok := c.expiryArg(opt, &i, "set")
				if !ok {
					return
				}
				exp.at = at
			}
		default:
			c.syntaxError()
			return
		}
	}
	stored := false
	read := cond != always || get || exp.kind == "KEEPTTL"
	cur, found, ok := c.updateRead(c.args[1], read, func(cur value, found bool) (value, bool, string) {
		if cond == ifAbsent && found || cond == ifPresent && !found {
			return value{}, false, ""
		}
		at := exp.at
		if exp.kind == "KEEPTTL" && found {
			at = cur.at
		}
		stored = true
		return value{v: c.args[2], at: at, raw: false}, true, ""
	})
	switch {
	case !ok:
	case get:
		c.bulkOrNull(cur, found)
	case stored:
		c.ok()
	default:
		c.w.WriteNull()
	}
}

// cmdSetNX: SETNX key value, 1 if it stored, 0 if the key exists.
func cmdSetNX(c *call) {
	stored := false
	if _, _, ok := c.update(c.args[1], func(_ value, found bool) (value, bool, string) {
		stored = !found
		return value{v: c.args[2], at: 0, raw: false}, !found, ""
	}); ok {
		c.w.WriteInt(b2i(stored))
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// cmdSetEx serves SETEX key seconds value and PSETEX key ms value.
func cmdSetEx(c *call) {
	kind := "EX"
	if c.e.name == "psetex" {
		kind = "PX"
	}
	at, msg := parseExpiry(kind, c.args[2], c.e.name)
	if msg != "" {
		c.error(msg)
		return
	}
	if _, _, ok := c.updateRead(c.args[1], false, func(value, bool) (value, bool, string) {
		return value{v: c.args[3], at: at, raw: false}, true, ""
	}); ok {
		c.ok()
	}
}

// cmdGetEx: GETEX key [EX s | PX ms | EXAT t | PXAT t | PERSIST].
func cmdGetEx(c *call) {
	var exp expiryOpt
	for i := 2; i < len(c.args); i++ {
		opt := upper(c.args[i])
		switch opt {
		case "PERSIST":
		case "EX", "PX", "EXAT", "PXAT":
			at, ok := c.expiryArg(opt, &i, "getex")
			if !ok {
				return
			}
			exp.at = at
		default:
			c.syntaxError()
			return
		}
		if exp.kind != "" {
			c.syntaxError()
			return
		}
		exp.kind = opt
	}
	cur, found, ok := c.update(c.args[1], func(cur value, found bool) (value, bool, string) {
		if !found || exp.kind == "" || exp.kind == "PERSIST" && cur.at == 0 {
			return cur, false, ""
		}
		return value{v: cur.v, at: exp.at, raw: cur.raw}, true, ""
	})
	if ok {
		c.hit(found)
		c.bulkOrNull(cur, found)
	}
}

func cmdGetSet(c *call) {
	if cur, found, ok := c.update(c.args[1], func(value, bool) (value, bool, string) {
		return value{v: c.args[2], at: 0, raw: false}, true, ""
	}); ok {
		c.bulkOrNull(cur, found)
	}
}

func cmdGetDel(c *call) {
	if !c.checkKeys(c.args[1]) {
		return
	}
	unlock, err := c.lockKeys(c.cl.db, c.args[1])
	if err != nil {
		c.fail(err)
		return
	}
	defer unlock()
	cur, found, err := c.get(c.cl.db, c.args[1])
	if err == nil && found {
		_, err = c.remove(c.cl.db, c.args[1])
	}
	if err != nil {
		c.fail(err)
		return
	}
	if found {
		c.notify(pubsub.Generic, "del", c.cl.db, c.args[1])
	}
	c.bulkOrNull(cur, found)
}

// cmdMset serves MSET and MSETNX: it locks every key, then stores them
// concurrently. Outside a transaction a reader may see some keys written
// and not others, and a failure part way leaves the keys that were
// written; inside MULTI/EXEC it is all-or-nothing like the rest.
func cmdMset(c *call) {
	if len(c.args)%2 != 1 {
		c.arityError(c.e.name)
		return
	}
	n := len(c.args) / 2
	keys := make([][]byte, n)
	for i := range n {
		keys[i] = c.args[1+2*i]
		if err := c.s.checkValue(c.args[2+2*i]); err != nil {
			c.fail(err)
			return
		}
	}
	if !c.checkKeys(keys...) {
		return
	}
	unlock, err := c.lockKeys(c.cl.db, keys...)
	if err != nil {
		c.fail(err)
		return
	}
	defer unlock()
	if c.e.name == "msetnx" {
		for _, k := range keys {
			_, found, err := c.get(c.cl.db, k)
			if err != nil {
				c.fail(err)
				return
			}
			if found {
				c.w.WriteInt(0)
				return
			}
		}
	}
	// A key given twice gets its last value, as in Redis.
	last := map[string]int{}
	for i, k := range keys {
		last[string(k)] = i
	}
	var idx []int
	for i, k := range keys {
		if last[string(k)] == i {
			idx = append(idx, i)
		}
	}
	// The keys' invalidations go in the arguments' order, as Redis
	// sends them, not in the order the concurrent stores end.
	c.noTrack = true
	errs := forEach(len(idx), func(j int) error {
		i := idx[j]
		return c.put(c.cl.db, keys[i], value{v: c.args[2+2*i], at: 0, raw: false})
	})
	c.noTrack = false
	if c.tx == nil {
		for _, i := range idx { // a failed store may have written
			c.s.trackWrite(c, keys[i])
		}
	}
	if failed, first := firstError(errs); first != nil {
		c.error(fmt.Sprintf("%s (%d of %d keys not written)", errorReply(first), failed, len(idx)))
		return
	}
	for _, i := range idx {
		c.notify(pubsub.String, "set", c.cl.db, keys[i])
	}
	if c.e.name == "msetnx" {
		c.w.WriteInt(1)
		return
	}
	c.ok()
}

// mgetChunk is how many keys MGET reads at once, at most: fewer when its
// values are large, so that a chunk's values, all it holds in memory,
// stay within replyBudget whatever the number of keys.
const mgetChunk = 16

// cmdMget reads the keys a chunk at a time, each chunk concurrently, and
// replies in order, streaming. A missing key is nil; any other error
// fails the whole command when it comes in the first chunk (so that a lost
// value never passes for a missing one), and is that key's element of the
// reply (an error, never nil) once the reply has begun.
func cmdMget(c *call) {
	keys := c.args[1:]
	est := newReplyEstimate()
	for lo := 0; lo < len(keys); {
		chunk := keys[lo:min(lo+est.window(mgetChunk), len(keys))]
		vals := make([]value, len(chunk))
		founds := make([]bool, len(chunk))
		errs := forEach(len(chunk), func(i int) error {
			var err error
			vals[i], founds[i], err = c.get(c.cl.db, chunk[i])
			if errors.Is(err, keyspace.ErrWrongType) {
				err = nil // nil, as in Redis
			}
			return err
		})
		if lo == 0 {
			if _, first := firstError(errs); first != nil {
				c.fail(first)
				return
			}
			c.w.WriteArray(len(keys))
		}
		for i := range chunk {
			est.saw(len(vals[i].v))
			if errs[i] != nil {
				c.w.WriteError(errorReply(errs[i]))
				continue
			}
			c.hit(founds[i])
			c.bulkOrNull(vals[i], founds[i])
		}
		lo += len(chunk)
	}
}

// STRLEN, GETRANGE, SETRANGE and APPEND read and write in place outside
// transactions (keyspace's range I/O: the header and the range, never
// the whole value, are read; a write edits the value in the array).
// Inside EXEC they go through the transaction's overlay of whole values.

// getRange returns n bytes of key's value from byte off (fewer where it
// ends) and the value's length; found false if absent or expired.
func (c *call) getRange(db int, key []byte, off, n int64) ([]byte, int64, bool, error) {
	if c.tx != nil {
		v, found, err := c.get(db, key)
		if err != nil || !found {
			return nil, 0, false, err
		}
		lo := min(off, int64(len(v.v)))
		return v.v[lo : lo+min(n, int64(len(v.v))-lo)], int64(len(v.v)), true, nil
	}
	if err := c.s.checkKey(key); err != nil {
		return nil, 0, false, err
	}
	c.s.stats.retrieves.Add(1)
	part, length, _, err := c.s.ks.LoadRange(c.ctx, db, key, off, n)
	switch {
	case err == nil:
		return part, length, true, nil
	case errors.Is(err, array.ErrNotFound):
		return nil, 0, false, nil
	}
	return nil, 0, false, err
}

func cmdStrlen(c *call) {
	_, n, _, err := c.getRange(c.cl.db, c.args[1], 0, 0)
	if err != nil {
		c.fail(err)
		return
	}
	c.w.WriteInt(int(n))
}

// editInPlace runs edit (a keyspace range write) under key's lock and
// replies with the length it returns; false, having replied nothing, when
// the key has no live value to edit (the caller then writes a whole new
// value) or inside a transaction.
func (c *call) editInPlace(key []byte, edit func() (int64, error)) bool {
	n, done, ok := c.inPlace(key, edit)
	if done && ok {
		c.edited(key)
		c.notify(pubsub.String, stringEvents[c.e.name], c.cl.db, key)
		c.w.WriteInt(int(n))
	}
	return done
}

// inPlace runs edit under key's lock and returns what it returns: done
// false when the key has no live value to edit (keyspace.ErrNoValue) or
// inside a transaction, nothing replied; ok false once it has replied
// with an error.
func (c *call) inPlace(key []byte, edit func() (int64, error)) (n int64, done, ok bool) {
	if c.tx != nil {
		return 0, false, false
	}
	if !c.checkKeys(key) {
		return 0, true, false
	}
	unlock, err := c.lockKeys(c.cl.db, key)
	if err != nil {
		c.fail(err)
		return 0, true, false
	}
	defer unlock()
	n, err = edit()
	switch {
	case errors.Is(err, keyspace.ErrNoValue):
		return 0, false, false
	case errors.Is(err, array.ErrValueTooLarge):
		c.error(errTooBig)
		return 0, true, false
	case err != nil:
		c.fail(err)
		return 0, true, false
	}
	return n, true, true
}

// edited counts an in-place edit of key and dirties its watchers.
func (c *call) edited(key []byte) {
	c.s.stats.stores.Add(1)
	c.s.touch(c, c.cl.db, key)
}

// cmdAppend edits the value in place; a key with no value is created
// whole (not raw, as Redis does).
func cmdAppend(c *call) {
	if c.editInPlace(c.args[1], func() (int64, error) {
		return c.s.ks.Append(c.ctx, c.cl.db, c.args[1], c.args[2], c.s.maxValue)
	}) {
		return
	}
	var n int
	if _, _, ok := c.update(c.args[1], func(cur value, found bool) (value, bool, string) {
		if int64(len(cur.v)+len(c.args[2])) > c.s.maxValue {
			return value{}, false, errTooBig
		}
		nv := make([]byte, 0, len(cur.v)+len(c.args[2]))
		nv = append(append(nv, cur.v...), c.args[2]...)
		n = len(nv)
		return value{v: nv, at: cur.at, raw: found}, true, ""
	}); ok {
		c.w.WriteInt(n)
	}
}

// cmdGetRange serves GETRANGE and SUBSTR, with Redis's index rules. It
// reads the value's header and the range; with an index counted from the
// end, the length first (under the key's lock, so that both reads see one
// value).
func cmdGetRange(c *call) {
	start, err1 := parseInt(c.args[2])
	end, err2 := parseInt(c.args[3])
	if err1 != nil || err2 != nil {
		c.error(errNotInt)
		return
	}
	if start < 0 && end < 0 && start > end {
		c.w.WriteBulkString("")
		return
	}
	key := c.args[1]
	if start < 0 || end < 0 {
		if c.tx == nil && c.s.checkKey(key) == nil {
			unlock, err := c.lockKeys(c.cl.db, key)
			if err != nil {
				c.fail(err)
				return
			}
			defer unlock()
		}
		_, n, _, err := c.getRange(c.cl.db, key, 0, 0)
		if err != nil {
			c.fail(err)
			return
		}
		if start < 0 {
			start = max(n+start, 0)
		}
		if end < 0 {
			end = max(n+end, 0)
		}
	}
	if start > end {
		c.w.WriteBulkString("")
		return
	}
	v, _, _, err := c.getRange(c.cl.db, key, start, min(end, math.MaxInt64-1)-start+1)
	if err != nil {
		c.fail(err)
		return
	}
	if len(v) == 0 {
		c.w.WriteBulkString("") // also for a key with no value
		return
	}
	c.w.WriteBulk(v)
}

// cmdSetRange edits the value in place; a key with no value is created
// whole (raw, as Redis does).
func cmdSetRange(c *call) {
	off, err := parseInt(c.args[2])
	if err != nil {
		c.error(errNotInt)
		return
	}
	if off < 0 {
		c.error(errOffsetRange)
		return
	}
	val := c.args[3]
	if len(val) > 0 && off > min(c.s.maxValue, 512<<20)-int64(len(val)) {
		c.error(errTooBig)
		return
	}
	if c.editInPlace(c.args[1], func() (int64, error) {
		return c.s.ks.SetRange(c.ctx, c.cl.db, c.args[1], off, val, c.s.maxValue)
	}) {
		return
	}
	var n int
	if _, _, ok := c.update(c.args[1], func(cur value, found bool) (value, bool, string) {
		if len(val) == 0 {
			n = len(cur.v)
			return cur, false, ""
		}
		nv := cur.v
		if need := int(off) + len(val); need > len(nv) {
			nv = append(bytes.Clone(nv), make([]byte, need-len(nv))...)
		} else {
			nv = bytes.Clone(nv)
		}
		copy(nv[off:], val)
		n = len(nv)
		return value{v: nv, at: cur.at, raw: true}, true, ""
	}); ok {
		c.w.WriteInt(n)
	}
}

// parseCounter is a stored value or an argument as a 64-bit integer, as
// Redis's string2ll reads it: decimal, no spaces, no '+', no leading
// zeros, no "-0".
func parseCounter(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 20 || v[0] == '+' || v[0] == ' ' {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || strconv.FormatInt(n, 10) != string(v) {
		return 0, false
	}
	return n, true
}

// errNotInteger is parseInt's error.
var errNotInteger = errors.New("not an integer as Redis reads one")

// parseInt reads an integer argument as Redis does (parseCounter): every
// command's integer arguments go through it, so that "+1", "01" and "-0"
// are refused everywhere Redis refuses them.
func parseInt(b []byte) (int64, error) {
	n, ok := parseCounter(b)
	if !ok {
		return 0, errNotInteger
	}
	return n, nil
}

// cmdIncr serves INCR, DECR, INCRBY and DECRBY, atomically per key (the
// key's write lock); the key keeps its expiry.
func cmdIncr(c *call) {
	by := int64(1)
	switch c.e.name {
	case "decr":
		by = -1
	case "incrby", "decrby":
		n, err := parseInt(c.args[2])
		if err != nil {
			c.error(errNotInt)
			return
		}
		if c.e.name == "decrby" {
			if n == math.MinInt64 {
				c.error("ERR decrement would overflow")
				return
			}
			n = -n
		}
		by = n
	}
	var result int64
	if _, _, ok := c.update(c.args[1], func(cur value, found bool) (value, bool, string) {
		n := int64(0)
		if found {
			var ok bool
			if n, ok = parseCounter(cur.v); !ok {
				return value{}, false, errNotInt
			}
		}
		if by > 0 && n > math.MaxInt64-by || by < 0 && n < math.MinInt64-by {
			return value{}, false, errOverflow
		}
		result = n + by
		return value{v: strconv.AppendInt(nil, result, 10), at: cur.at, raw: false}, true, ""
	}); ok {
		c.w.WriteInt64(result)
	}
}

// cmdIncrByFloat: INCRBYFLOAT key increment, replying with a bulk string
// as Redis 7 does in both protocols, computed and printed in long double
// as Redis does (package longdouble).
func cmdIncrByFloat(c *call) {
	by, ok := longdouble.Parse(c.args[2])
	if !ok {
		c.error(errNotFloat)
		return
	}
	var out []byte
	if _, _, ok := c.update(c.args[1], func(cur value, found bool) (value, bool, string) {
		n := new(big.Float)
		if found {
			var ok bool
			if n, ok = longdouble.Parse(cur.v); !ok {
				return value{}, false, errNotFloat
			}
		}
		r, ok := longdouble.Add(n, by)
		if !ok {
			return value{}, false, errNaN
		}
		out = []byte(longdouble.Format(r))
		return value{v: out, at: cur.at, raw: false}, true, ""
	}); ok {
		c.w.WriteBulk(out)
	}
}

// cmdSetBit: SETBIT key offset value (bit 0 is the most significant bit
// of byte 0, as Redis): BITFIELD's SET u1, written in place (bitmap.go).
func cmdSetBit(c *call) {
	off, err := parseInt(c.args[2])
	if err != nil || off < 0 || off >= maxBits || off/8 >= c.s.maxValue {
		c.error(errBitOffset)
		return
	}
	bit := string(c.args[3])
	if bit != "0" && bit != "1" {
		c.error(errBitValue)
		return
	}
	f := bitops.Field{Kind: bitops.Set, Type: bitops.Type{Bits: 1}, Offset: uint64(off), Arg: int64(bit[0] - '0')}
	replies, changes, ok := c.applyFields(c.args[1], []bitops.Field{f})
	if !ok {
		return
	}
	if changes > 0 {
		c.notify(pubsub.String, "setbit", c.cl.db, c.args[1])
	}
	c.w.WriteInt64(*replies[0])
}

// cmdGetBit reads the byte that holds the bit.
func cmdGetBit(c *call) {
	off, err := parseInt(c.args[2])
	if err != nil || off < 0 || off >= maxBits {
		c.error(errBitOffset)
		return
	}
	b, _, _, err := c.getRange(c.cl.db, c.args[1], off/8, 1)
	if err != nil {
		c.fail(err)
		return
	}
	if len(b) > 0 && b[0]&(0x80>>(off%8)) != 0 {
		c.w.WriteInt(1)
		return
	}
	c.w.WriteInt(0)
}

// cmdBitCount: BITCOUNT key [start end [BYTE | BIT]].
func cmdBitCount(c *call) {
	var start, end int64
	ranged, bitUnit := false, false
	switch len(c.args) {
	case 2:
	case 4, 5:
		var err1, err2 error
		start, err1 = parseInt(c.args[2])
		end, err2 = parseInt(c.args[3])
		if err1 != nil || err2 != nil {
			c.error(errNotInt)
			return
		}
		if len(c.args) == 5 {
			switch upper(c.args[4]) {
			case "BYTE":
			case "BIT":
				bitUnit = true
			default:
				c.syntaxError()
				return
			}
		}
		ranged = true
		if start < 0 && end < 0 && start > end {
			// Redis 7.0 answers 0 before looking at the value.
			c.w.WriteInt(0)
			return
		}
	default:
		c.syntaxError()
		return
	}
	v, _, err := c.get(c.cl.db, c.args[1])
	if err != nil {
		c.fail(err)
		return
	}
	total := int64(len(v.v))
	if bitUnit {
		total *= 8
	}
	if !ranged {
		start, end = 0, total-1
	}
	if start < 0 {
		start = max(total+start, 0)
	}
	if end < 0 {
		end = max(total+end, 0)
	}
	end = min(end, total-1)
	if start > end || total == 0 {
		c.w.WriteInt(0)
		return
	}
	n := 0
	if bitUnit {
		for i := start; i <= end; i++ {
			if v.v[i/8]&(0x80>>(i%8)) != 0 {
				n++
			}
		}
	} else {
		for _, b := range v.v[start : end+1] {
			n += bits.OnesCount8(b)
		}
	}
	c.w.WriteInt(n)
}

// cmdLCS: LCS key1 key2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN], the
// longest common subsequence, ported from Redis 7's lcsCommand so that the
// ranges IDX reports are the same (O(N*M) time and memory, as Redis).
func cmdLCS(c *call) {
	getLen, getIdx, withMatchLen := false, false, false
	minMatchLen := int64(0)
	for j := 3; j < len(c.args); j++ {
		switch upper(c.args[j]) {
		case "IDX":
			getIdx = true
		case "LEN":
			getLen = true
		case "WITHMATCHLEN":
			withMatchLen = true
		case "MINMATCHLEN":
			if j+1 >= len(c.args) {
				c.syntaxError()
				return
			}
			n, err := parseInt(c.args[j+1])
			if err != nil {
				c.error(errNotInt)
				return
			}
			minMatchLen = max(n, 0)
			j++
		default:
			c.syntaxError()
			return
		}
	}
	if getLen && getIdx {
		c.error("ERR If you want both the length and indexes, please just use IDX.")
		return
	}
	av, _, err := c.get(c.cl.db, c.args[1])
	if err != nil {
		c.fail(err)
		return
	}
	bv, _, err := c.get(c.cl.db, c.args[2])
	if err != nil {
		c.fail(err)
		return
	}
	a, b := av.v, bv.v
	if int64(len(a)+1)*int64(len(b)+1) > 1<<28 {
		c.error("ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len")
		return
	}
	w := len(b) + 1
	dp := make([]uint32, (len(a)+1)*w)
	lcs := func(i, j int) uint32 { return dp[i*w+j] }
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			if a[i-1] == b[j-1] {
				dp[i*w+j] = dp[(i-1)*w+j-1] + 1
			} else {
				dp[i*w+j] = max(dp[(i-1)*w+j], dp[i*w+j-1])
			}
		}
	}
	total := lcs(len(a), len(b))
	if getLen {
		c.w.WriteInt(int(total))
		return
	}
	alen := len(a)
	result := make([]byte, total)
	idx := int(total)
	aStart, aEnd, bStart, bEnd := alen, 0, 0, 0
	type match struct{ a0, a1, b0, b1, n int }
	var matches []match
	for i, j := len(a), len(b); i > 0 && j > 0; {
		emit := false
		if a[i-1] == b[j-1] {
			result[idx-1] = a[i-1]
			switch {
			case aStart == alen:
				aStart, aEnd, bStart, bEnd = i-1, i-1, j-1, j-1
			case aStart == i && bStart == j:
				aStart--
				bStart--
			default:
				emit = true
			}
			if aStart == 0 || bStart == 0 {
				emit = true
			}
			idx, i, j = idx-1, i-1, j-1
		} else {
			if lcs(i-1, j) > lcs(i, j-1) {
				i--
			} else {
				j--
			}
			if aStart != alen {
				emit = true
			}
		}
		if emit {
			n := aEnd - aStart + 1
			if minMatchLen == 0 || int64(n) >= minMatchLen {
				matches = append(matches, match{aStart, aEnd, bStart, bEnd, n})
			}
			aStart = alen
		}
	}
	if !getIdx {
		c.w.WriteBulk(result)
		return
	}
	c.w.WriteMap(2)
	c.w.WriteBulkString("matches")
	c.w.WriteArray(len(matches))
	for _, m := range matches {
		c.w.WriteArray(2 + b2i(withMatchLen))
		c.w.WriteArray(2)
		c.w.WriteInt(m.a0)
		c.w.WriteInt(m.a1)
		c.w.WriteArray(2)
		c.w.WriteInt(m.b0)
		c.w.WriteInt(m.b1)
		if withMatchLen {
			c.w.WriteInt(m.n)
		}
	}
	c.w.WriteBulkString("len")
	c.w.WriteInt(int(total))
}
