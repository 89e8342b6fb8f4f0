package server

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/collection"
	"github.com/kvarray/kvarray/internal/glob"
	"github.com/kvarray/kvarray/internal/longdouble"
	"github.com/kvarray/kvarray/keyspace"
)

// The hash commands: parsing and replies; the hash itself is
// collection.Hash.

// hash runs fn on the hash under c.args[1] (collection), then writes what
// fn changed. fn returns false when it replied with an error.
func (c *call) hash(fn func(h *collection.Hash) bool) bool {
	return c.collection(c.args[1], keyspace.TypeHash, func(v keyspace.Value, found bool) ([]keyspace.Op, bool) {
		h, err := collection.OpenHash(c.ctx, c.source(), v, found, c.s.limits.get(), c.s.ks.MaxElement())
		if err != nil {
			c.fail(err)
			return nil, false
		}
		if !fn(h) {
			return nil, false
		}
		return c.collOps(c.args[1], h), true
	})
}

// hashFail replies with err from a hash operation: a field too long is
// the array's key-too-long error.
func (c *call) hashFail(err error) bool {
	if errors.Is(err, collection.ErrElementTooLong) {
		err = fmt.Errorf("%w: %w", err, array.ErrKeyTooLong)
	}
	c.fail(err)
	return false
}

// cmdHSet serves HSET and HMSET.
func cmdHSet(c *call) {
	if len(c.args)%2 != 0 {
		c.arityError(c.e.name)
		return
	}
	for i := 3; i < len(c.args); i += 2 {
		if err := c.s.checkValue(c.args[i]); err != nil {
			c.fail(err)
			return
		}
	}
	added := 0
	if !c.hash(func(h *collection.Hash) bool {
		fields := make([][]byte, 0, len(c.args)/2)
		for i := 2; i < len(c.args); i += 2 {
			fields = append(fields, c.args[i])
		}
		if err := h.Prefetch(fields); err != nil {
			return c.hashFail(err)
		}
		for i := 2; i < len(c.args); i += 2 {
			isNew, err := h.Set(c.args[i], c.args[i+1])
			if err != nil {
				return c.hashFail(err)
			}
			added += b2i(isNew)
		}
		return true
	}) {
		return
	}
	if c.e.name == "hmset" {
		c.ok()
		return
	}
	c.w.WriteInt(added)
}

func cmdHSetNX(c *call) {
	set := false
	if c.hash(func(h *collection.Hash) bool {
		_, found, err := h.Get(c.args[2])
		if err != nil {
			return c.hashFail(err)
		}
		if found {
			return true
		}
		if _, err := h.Set(c.args[2], c.args[3]); err != nil {
			return c.hashFail(err)
		}
		set = true
		return true
	}) {
		c.w.WriteInt(b2i(set))
	}
}

func cmdHGet(c *call) {
	var v []byte
	var found bool
	if c.hash(func(h *collection.Hash) bool {
		var err error
		if v, found, err = h.Get(c.args[2]); err != nil {
			return c.hashFail(err)
		}
		return true
	}) {
		if found {
			c.w.WriteBulk(v)
		} else {
			c.w.WriteNull()
		}
	}
}

func cmdHMGet(c *call) {
	fields := c.args[2:]
	vals := make([][]byte, len(fields))
	founds := make([]bool, len(fields))
	if !c.hash(func(h *collection.Hash) bool {
		if err := h.Prefetch(fields); err != nil {
			return c.hashFail(err)
		}
		for i, f := range fields {
			var err error
			if vals[i], founds[i], err = h.Get(f); err != nil {
				return c.hashFail(err)
			}
		}
		return true
	}) {
		return
	}
	c.w.WriteArray(len(fields))
	for i := range fields {
		if founds[i] {
			c.w.WriteBulk(vals[i])
		} else {
			c.w.WriteNull()
		}
	}
}

func cmdHDel(c *call) {
	n := 0
	if c.hash(func(h *collection.Hash) bool {
		if err := h.Prefetch(c.args[2:]); err != nil {
			return c.hashFail(err)
		}
		for _, f := range c.args[2:] {
			ok, err := h.Delete(f)
			if err != nil {
				return c.hashFail(err)
			}
			n += b2i(ok)
		}
		return true
	}) {
		c.w.WriteInt(n)
	}
}

func cmdHLen(c *call) {
	var n int64
	if c.hash(func(h *collection.Hash) bool { n = h.Len(); return true }) {
		c.w.WriteInt64(n)
	}
}

// cmdHStrlen serves HSTRLEN and HEXISTS.
func cmdHStrlen(c *call) {
	var v []byte
	var found bool
	if !c.hash(func(h *collection.Hash) bool {
		var err error
		if v, found, err = h.Get(c.args[2]); err != nil {
			return c.hashFail(err)
		}
		return true
	}) {
		return
	}
	if c.e.name == "hexists" {
		c.w.WriteInt(b2i(found))
		return
	}
	c.w.WriteInt(len(v))
}

// cmdHGetAll serves HGETALL, HKEYS and HVALS.
func cmdHGetAll(c *call) {
	var fields []collection.Field
	if !c.hash(func(h *collection.Hash) bool {
		var err error
		if fields, err = h.All(); err != nil {
			return c.hashFail(err)
		}
		return true
	}) {
		return
	}
	switch c.e.name {
	case "hgetall":
		c.w.WriteMap(len(fields))
		for _, f := range fields {
			c.w.WriteBulk(f.Name)
			c.w.WriteBulk(f.Value)
		}
	case "hkeys":
		c.w.WriteArray(len(fields))
		for _, f := range fields {
			c.w.WriteBulk(f.Name)
		}
	default:
		c.w.WriteArray(len(fields))
		for _, f := range fields {
			c.w.WriteBulk(f.Value)
		}
	}
}

func cmdHIncrBy(c *call) {
	by, err := parseInt(c.args[3])
	if err != nil {
		c.error(errNotInt)
		return
	}
	var result int64
	if c.hash(func(h *collection.Hash) bool {
		cur, found, err := h.Get(c.args[2])
		if err != nil {
			return c.hashFail(err)
		}
		n := int64(0)
		if found {
			var ok bool
			if n, ok = parseCounter(cur); !ok {
				c.error("ERR hash value is not an integer")
				return false
			}
		}
		if by > 0 && n > math.MaxInt64-by || by < 0 && n < math.MinInt64-by {
			c.error(errOverflow)
			return false
		}
		result = n + by
		if _, err := h.Set(c.args[2], strconv.AppendInt(nil, result, 10)); err != nil {
			return c.hashFail(err)
		}
		return true
	}) {
		c.w.WriteInt64(result)
	}
}

func cmdHIncrByFloat(c *call) {
	by, ok := longdouble.Parse(c.args[3])
	if !ok {
		c.error(errNotFloat)
		return
	}
	if by.IsInf() {
		c.error("ERR value is NaN or Infinity")
		return
	}
	var out []byte
	if c.hash(func(h *collection.Hash) bool {
		cur, found, err := h.Get(c.args[2])
		if err != nil {
			return c.hashFail(err)
		}
		n := new(big.Float)
		if found {
			var ok bool
			if n, ok = longdouble.Parse(cur); !ok {
				c.error("ERR hash value is not a float")
				return false
			}
		}
		r, ok := longdouble.Add(n, by)
		if !ok {
			c.error(errNaN)
			return false
		}
		out = []byte(longdouble.Format(r))
		if _, err := h.Set(c.args[2], out); err != nil {
			return c.hashFail(err)
		}
		return true
	}) {
		c.w.WriteBulk(out)
	}
}

// cmdHRandField: HRANDFIELD key [count [WITHVALUES]].
func cmdHRandField(c *call) {
	count, withCount, withValues := int64(1), false, false
	switch {
	case len(c.args) > 4:
		c.syntaxError()
		return
	case len(c.args) >= 3:
		n, err := parseInt(c.args[2])
		if err != nil {
			c.error(errNotInt)
			return
		}
		count, withCount = n, true
		if len(c.args) == 4 {
			if upper(c.args[3]) != "WITHVALUES" {
				c.syntaxError()
				return
			}
			withValues = true
		}
		if count < -math.MaxInt64/2 || count > math.MaxInt64/2 {
			c.error("ERR value is out of range")
			return
		}
	}
	var fields []collection.Field
	found := false
	if !c.hash(func(h *collection.Hash) bool {
		found = h.Len() > 0
		if !found || withCount && count == 0 {
			return true
		}
		var err error
		if fields, err = h.All(); err != nil {
			return c.hashFail(err)
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
		c.w.WriteBulk(fields[rand.IntN(len(fields))].Name)
		return
	}
	pick := randomPick(fields, count)
	c.writeFields(pick, withValues)
}

// writeFields replies with fields: names, or with their values (RESP3:
// an array of pairs; RESP2: flat, as Redis).
func (c *call) writeFields(fields []collection.Field, withValues bool) {
	switch {
	case !withValues:
		c.w.WriteArray(len(fields))
		for _, f := range fields {
			c.w.WriteBulk(f.Name)
		}
	case c.w.resp3():
		c.w.WriteArray(len(fields))
		for _, f := range fields {
			c.w.WriteArray(2)
			c.w.WriteBulk(f.Name)
			c.w.WriteBulk(f.Value)
		}
	default:
		c.w.WriteArray(2 * len(fields))
		for _, f := range fields {
			c.w.WriteBulk(f.Name)
			c.w.WriteBulk(f.Value)
		}
	}
}

// cmdHScan: HSCAN key cursor [MATCH pattern] [COUNT count] (scanColl).
func cmdHScan(c *call) {
	cursor, pattern, count, ok := c.scanArgs(2, nil)
	if !ok {
		return
	}
	var fields []collection.Field
	var next, prefix []byte
	if !c.hash(func(h *collection.Hash) bool {
		var err error
		if fields, next, prefix, err = c.scanColl(h, cursor, count); err != nil {
			return c.hashFail(err)
		}
		return true
	}) {
		return
	}
	c.writeScan(fields, next, prefix, pattern, true)
}

// scanner is a collection HSCAN, SSCAN and ZSCAN page through.
type scanner interface {
	Version() uint64
	Scan(after []byte, n int) ([]collection.Field, []byte, error)
}

// scanColl returns the page of x after cursor: an inline collection
// whole (cursor 0 next, as Redis's listpack and intset), an external
// one a page of its element keys in byte order, the cursor a slot of
// SCAN's table (scanCursors) naming the last element key (prefix is its
// version's).
func (c *call) scanColl(x scanner, cursor uint64, count int) (fields []collection.Field, next, prefix []byte, err error) {
	var after []byte
	if ver := x.Version(); ver != 0 {
		prefix = keyspace.ElementPrefix(ver)
		if cursor != 0 {
			if ak := c.s.scans.resume(cursor, keyspace.Internal); bytes.HasPrefix(ak, prefix) {
				after = ak[len(prefix):]
			}
		}
	}
	fields, next, err = x.Scan(after, count)
	return fields, next, prefix, err
}

// writeScan replies with a scan page: the next cursor, then the
// elements matching pattern (with their values, for a hash).
func (c *call) writeScan(fields []collection.Field, next, prefix, pattern []byte, withValues bool) {
	nextCursor := uint64(0)
	if next != nil {
		nextCursor = c.s.scans.cursor(append(prefix, next...))
	}
	c.w.WriteArray(2)
	c.w.WriteBulkString(strconv.FormatUint(nextCursor, 10))
	out := fields[:0]
	for _, f := range fields {
		if pattern == nil || glob.Match(pattern, f.Name) {
			out = append(out, f)
		}
	}
	if !withValues {
		c.w.WriteArray(len(out))
		for _, f := range out {
			c.w.WriteBulk(f.Name)
		}
		return
	}
	c.w.WriteArray(2 * len(out))
	for _, f := range out {
		c.w.WriteBulk(f.Name)
		c.w.WriteBulk(f.Value)
	}
}

// scanArgs parses a *SCAN's cursor (argument at) and its MATCH and COUNT
// options (and TYPE into typ, when not nil: SCAN's), replying with
// Redis's errors.
func (c *call) scanArgs(at int, typ *string) (cursor uint64, pattern []byte, count int, ok bool) {
	cursor, err := strconv.ParseUint(string(c.args[at]), 10, 64)
	if err != nil {
		c.error("ERR invalid cursor")
		return 0, nil, 0, false
	}
	count = defaultScanCount
	for i := at + 1; i < len(c.args); i += 2 {
		if i+1 >= len(c.args) {
			c.syntaxError()
			return 0, nil, 0, false
		}
		v := c.args[i+1]
		switch upper(c.args[i]) {
		case "MATCH":
			pattern = v
		case "TYPE":
			if typ == nil {
				c.syntaxError()
				return 0, nil, 0, false
			}
			*typ = string(v)
		case "COUNT":
			n, err := parseInt(v)
			if err != nil {
				c.error(errNotInt)
				return 0, nil, 0, false
			}
			if n < 1 {
				c.syntaxError()
				return 0, nil, 0, false
			}
			count = int(min(n, 1<<20))
		default:
			c.syntaxError()
			return 0, nil, 0, false
		}
	}
	return cursor, pattern, count, true
}
