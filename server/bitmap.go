package server

import (
	"cmp"
	"errors"
	"slices"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/internal/bitops"
	"github.com/kvarray/kvarray/keyspace"
	"github.com/kvarray/kvarray/pubsub"
)

// Bitmap commands beyond SETBIT, GETBIT and BITCOUNT (strings.go): BITOP,
// BITPOS, BITFIELD and BITFIELD_RO. The arithmetic is package bitops';
// here the arguments are parsed, values read and stored, and replies
// written, with Redis 7.0's errors.

func init() { commands = append(commands, bitmapCommands()...) }

func bitmapCommands() []*command {
	bitfieldOps := []arg{
		optional(multiple(oneof("operation",
			tokenArg("GET", block("get-block", strArg("encoding"), intArg("offset"))),
			block("write", optional(tokenArg("OVERFLOW", oneof("overflow-block", token("WRAP"), token("SAT"), token("FAIL")))),
				oneof("write-operation",
					tokenArg("SET", block("set-block", strArg("encoding"), intArg("offset"), intArg("value"))),
					tokenArg("INCRBY", block("incrby-block", strArg("encoding"), intArg("offset"), intArg("increment")))))))),
	}
	bitop := wcmd("bitop", -4, "bitmap", "2.6.0", "Stores the AND, OR, XOR or NOT of strings in a key; replies with its length.", cmdBitOp,
		oneof("operation", token("AND"), token("OR"), token("XOR"), token("NOT")), keyArg("destkey"), multiple(keyArg("key")))
	bitop.first, bitop.last = 2, -1
	bitpos := rcmd("bitpos", -3, "bitmap", "2.8.7", "Finds the first set or clear bit of a string, optionally in a range of bytes or bits.", cmdBitPos,
		keyArg("key"), intArg("bit"), optional(block("range", intArg("start"),
			optional(block("end-unit-block", intArg("end"), optional(oneof("unit", token("BYTE"), token("BIT"))))))))
	bitfield := wcmd("bitfield", -2, "bitmap", "3.2.0", "Gets, sets and increments integer fields of a string, with WRAP, SAT or FAIL on overflow.", cmdBitField,
		append([]arg{keyArg("key")}, bitfieldOps...)...)
	bitfieldRO := rcmd("bitfield_ro", -2, "bitmap", "6.0.0", "Gets integer fields of a string.", cmdBitField,
		keyArg("key"), optional(multiple(tokenArg("GET", block("get-block", strArg("encoding"), intArg("offset"))))))
	bitpos.flags, bitpos.acl[2] = []string{"readonly"}, "slow"
	return []*command{bitop, bitpos, bitfield, bitfieldRO}
}

// readStrings reads the string values of keys (under the caller's
// locks): absent keys are found false.
func (c *call) readStrings(keys [][]byte) ([]value, []bool, error) {
	vals := make([]value, len(keys))
	founds := make([]bool, len(keys))
	errs := forEach(len(keys), func(i int) error {
		var err error
		vals[i], founds[i], err = c.get(c.cl.db, keys[i])
		return err
	})
	if _, err := firstError(errs); err != nil {
		return nil, nil, err
	}
	return vals, founds, nil
}

// cmdBitOp: BITOP op destkey key [key ...]. An empty result deletes
// destkey, as Redis does.
func cmdBitOp(c *call) {
	op, ok := bitops.ParseOp(string(truncate(c.args[1], 8)))
	if !ok {
		c.syntaxError()
		return
	}
	if op == bitops.Not && len(c.args) != 4 {
		c.error("ERR BITOP NOT must be called with a single source key.")
		return
	}
	dst, srcs := c.args[2], c.args[3:]
	if !c.checkKeys(c.args[2:]...) {
		return
	}
	unlock, err := c.lockKeys(c.cl.db, c.args[2:]...)
	if err != nil {
		c.fail(err)
		return
	}
	defer unlock()
	vals, _, err := c.readStrings(srcs)
	if err != nil {
		c.fail(err)
		return
	}
	in := make([][]byte, len(vals))
	for i, v := range vals {
		in[i] = v.v
	}
	out := bitops.Combine(op, in)
	if len(out) == 0 {
		existed, err := c.remove(c.cl.db, dst)
		if err != nil {
			c.fail(err)
			return
		}
		if existed {
			c.notify(pubsub.Generic, "del", c.cl.db, dst)
		}
		c.w.WriteInt(0)
		return
	}
	// Redis's setKey: the destination's expiry goes, whatever it held.
	_, existed, err := c.getAny(c.cl.db, dst)
	if err == nil {
		err = c.s.checkValue(out)
	}
	if err == nil {
		err = c.put(c.cl.db, dst, value{v: out, raw: true})
	}
	if err != nil {
		c.fail(err)
		return
	}
	c.notifyStore(dst, existed, value{v: out})
	c.w.WriteInt(len(out))
}

// cmdBitPos: BITPOS key bit [start [end [BYTE | BIT]]].
func cmdBitPos(c *call) {
	bit, err := parseInt(c.args[2])
	if err != nil {
		c.error(errNotInt)
		return
	}
	if bit != 0 && bit != 1 {
		c.error("ERR The bit argument must be 1 or 0.")
		return
	}
	var start, end int64 = 0, -1
	endGiven, inBits := false, false
	switch len(c.args) {
	case 3:
	case 4, 5, 6:
		if start, err = parseInt(c.args[3]); err != nil {
			c.error(errNotInt)
			return
		}
		if len(c.args) == 6 {
			switch upper(c.args[5]) {
			case "BIT":
				inBits = true
			case "BYTE":
			default:
				c.syntaxError()
				return
			}
		}
		if len(c.args) >= 5 {
			if end, err = parseInt(c.args[4]); err != nil {
				c.error(errNotInt)
				return
			}
			endGiven = true
		}
	default:
		c.syntaxError()
		return
	}
	v, found, err := c.get(c.cl.db, c.args[1])
	if err != nil {
		c.fail(err)
		return
	}
	if !found {
		c.w.WriteInt(-int(bit)) // all zeroes: -1 for a 1, 0 for a 0
		return
	}
	first, last, ok := bitops.Range(start, end, int64(len(v.v)), inBits)
	if !ok {
		c.w.WriteInt(-1)
		return
	}
	c.w.WriteInt64(bitops.Pos(v.v, int(bit), first, last, inBits, endGiven))
}

// parseBitField reads BITFIELD's operations; ok false once it has
// replied with an error. write tells whether one sets or increments.
func (c *call) parseBitField() (fields []bitops.Field, write, ok bool) {
	ow := bitops.Wrap
	for j := 2; j < len(c.args); j++ {
		rem := len(c.args) - j - 1
		var kind bitops.Kind
		switch sub := upper(c.args[j]); {
		case sub == "GET" && rem >= 2:
			kind = bitops.Get
		case sub == "SET" && rem >= 3:
			kind = bitops.Set
		case sub == "INCRBY" && rem >= 3:
			kind = bitops.IncrBy
		case sub == "OVERFLOW" && rem >= 1:
			j++
			var known bool
			if ow, known = bitops.ParseOverflow(string(truncate(c.args[j], 8))); !known {
				c.error("ERR Invalid OVERFLOW type specified")
				return nil, false, false
			}
			continue
		default:
			c.syntaxError()
			return nil, false, false
		}
		t, err := bitops.ParseType(string(truncate(c.args[j+1], 32)))
		if err != nil {
			c.error("ERR " + err.Error())
			return nil, false, false
		}
		off, err := bitops.ParseOffset(string(truncate(c.args[j+2], 32)), t, c.s.o.maxBulk)
		if err != nil {
			c.error("ERR " + err.Error())
			return nil, false, false
		}
		f := bitops.Field{Kind: kind, Type: t, Offset: off, Overflow: ow}
		if kind != bitops.Get {
			write = true
			if f.Arg, err = parseInt(c.args[j+3]); err != nil {
				c.error(errNotInt)
				return nil, false, false
			}
			j++
		}
		j += 2
		fields = append(fields, f)
	}
	return fields, write, true
}

// cmdBitField serves BITFIELD and BITFIELD_RO. A write grows the value
// to its farthest field first (so a FAIL still creates or grows it, as
// Redis does); the "setbit" event is published only when a field was
// written.
func cmdBitField(c *call) {
	fields, write, ok := c.parseBitField()
	if !ok {
		return
	}
	if !write {
		// Only the bytes the fields cover are read.
		ws, of := windows(fields)
		if _, _, err := c.readWindows(c.args[1], ws); err != nil {
			c.fail(err)
			return
		}
		replies := make([]*int64, len(fields))
		for i, f := range fields {
			w := ws[of[i]]
			f.Offset -= w.lo * 8
			replies[i], _ = f.Apply(w.data)
		}
		c.writeFieldReplies(replies)
		return
	}
	if c.e.name == "bitfield_ro" {
		c.error("ERR BITFIELD_RO only supports the GET subcommand")
		return
	}
	replies, changes, ok := c.applyFields(c.args[1], fields)
	if !ok {
		return
	}
	if changes > 0 {
		c.notify(pubsub.String, "setbit", c.cl.db, c.args[1])
	}
	c.writeFieldReplies(replies)
}

// window is a run of bytes of a value that fields cover: the spans of
// fields that overlap or touch are one window.
type window struct {
	lo, hi uint64 // first and last byte
	write  bool   // a field in it sets or increments
	data   []byte
}

// windows groups fields' bytes into windows, in offset order, and
// returns for each field the index of its window.
func windows(fields []bitops.Field) ([]*window, []int) {
	order := make([]int, len(fields))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(fields[a].Offset, fields[b].Offset) })
	var ws []*window
	of := make([]int, len(fields))
	for _, i := range order {
		f := fields[i]
		lo, hi := f.Offset/8, f.Last()/8
		if n := len(ws); n > 0 && lo <= ws[n-1].hi+1 {
			ws[n-1].hi = max(ws[n-1].hi, hi)
		} else {
			ws = append(ws, &window{lo: lo, hi: hi})
		}
		ws[len(ws)-1].write = ws[len(ws)-1].write || f.Kind != bitops.Get
		of[i] = len(ws) - 1
	}
	return ws, of
}

// readWindows reads the windows' bytes of key's string value (zero past
// its end) and returns its length; found false if it is absent.
func (c *call) readWindows(key []byte, ws []*window) (int64, bool, error) {
	for _, w := range ws {
		w.data = make([]byte, w.hi-w.lo+1)
	}
	if c.tx != nil {
		v, found, err := c.get(c.cl.db, key)
		for _, w := range ws {
			if w.lo < uint64(len(v.v)) {
				copy(w.data, v.v[w.lo:])
			}
		}
		return int64(len(v.v)), found, err
	}
	if err := c.s.checkKey(key); err != nil {
		return 0, false, err
	}
	rs := make([]array.Range, len(ws))
	for i, w := range ws {
		rs[i] = array.Range{Off: int64(w.lo), Len: int64(w.hi - w.lo + 1)}
	}
	c.s.stats.retrieves.Add(1)
	parts, n, _, err := c.s.ks.LoadRanges(c.ctx, c.cl.db, key, rs...)
	if errors.Is(err, array.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	for i, w := range ws {
		copy(w.data, parts[i])
	}
	return n, true, nil
}

// applyFields runs fields, one of which writes, on key's value under its
// lock, growing the value to the farthest field written first, and
// returns their replies and how many writes changed it (or grew it);
// false once it has replied with an error. A live value is edited in
// place: only the bytes the fields cover are read, and those of the
// windows that are written are stored (keyspace range I/O, so a field at
// a large offset of a large value does not rewrite it). A new key, or
// one inside a transaction, is written whole.
func (c *call) applyFields(key []byte, fields []bitops.Field) ([]*int64, int, bool) {
	var high uint64
	for _, f := range fields {
		if f.Kind != bitops.Get {
			high = max(high, f.Last()/8)
		}
	}
	if int64(high) >= c.s.maxValue {
		c.error(errTooBig)
		return nil, 0, false
	}
	replies := make([]*int64, len(fields))
	changes := 0
	// run applies the fields to the bytes their windows hold (ws[of[i]]
	// for field i) of a value of length n (found false: a new one), and
	// says whether the value is to be stored.
	run := func(ws []*window, of []int, n uint64, found bool) bool {
		grew := !found || high+1 > n
		changes = 0
		for i, f := range fields {
			w := ws[of[i]]
			f.Offset -= w.lo * 8
			var changed bool
			replies[i], changed = f.Apply(w.data)
			if f.Kind != bitops.Get && replies[i] != nil && (changed || grew) {
				changes++
			}
		}
		return grew || changes > 0
	}
	wrote := false
	_, done, ok := c.inPlace(key, func() (int64, error) {
		ws, of := windows(fields)
		n, found, err := c.readWindows(key, ws)
		if err != nil {
			return 0, err
		}
		if !found {
			return 0, keyspace.ErrNoValue // a new key: written whole
		}
		if !run(ws, of, uint64(n), true) {
			return n, nil
		}
		// The windows written, as far as the value goes once grown: a GET
		// past the farthest write does not grow it.
		end := max(uint64(n), high+1)
		var edits []array.Edit
		for _, w := range ws {
			if w.write {
				edits = append(edits, array.Edit{Off: int64(w.lo), Data: w.data[:min(w.hi+1, end)-w.lo]})
			}
		}
		wrote = true
		return c.s.ks.SetRanges(c.ctx, c.cl.db, key, edits, c.s.maxValue)
	})
	if done {
		if ok && wrote {
			c.edited(key)
		}
		return replies, changes, ok
	}
	_, _, ok = c.update(key, func(cur value, found bool) (value, bool, string) {
		size := max(uint64(len(cur.v)), high+1)
		nv := make([]byte, size)
		copy(nv, cur.v)
		// One window of the whole value (Apply reads zeroes past it).
		ws := []*window{{data: nv}}
		store := run(ws, make([]int, len(fields)), uint64(len(cur.v)), found)
		return value{v: nv, at: cur.at, raw: true}, store, ""
	})
	return replies, changes, ok
}

func (c *call) writeFieldReplies(replies []*int64) {
	c.w.WriteArray(len(replies))
	for _, r := range replies {
		if r == nil {
			c.w.WriteNull()
		} else {
			c.w.WriteInt64(*r)
		}
	}
}
