package server

import (
	"bytes"
	"math"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// SCAN's cursor. Clients parse the cursor as an unsigned integer (go-redis
// reads it with ReadUint, redis-cli --scan with strtoull), so it cannot be
// an opaque string such as the last key. It is a position in the order of
// scanHash(key): a call returns the keys whose hash is at least the
// cursor, up to COUNT of them (more when several keys share the last
// hash, so that a hash's keys are never split between calls), and the next
// cursor is the last hash plus one; 0 when no key is left. A key present
// for the whole scan is returned exactly once, whatever is stored or
// deleted meanwhile — the guarantee Redis gives, and a little more (Redis
// may return a key twice).
//
// Cost: the array lists its keys (sorted, from every device) on every
// call, and the server sorts them by hash, so a full scan of N keys with
// COUNT c takes N/c passes over the keys. Fine for now; an iterator in the
// array would make it a pass in all.

func scanHash(key []byte) uint64 { return xxhash.Sum64(key) }

const defaultScanCount = 10

// cmdScan: SCAN cursor [MATCH pattern] [COUNT count] [TYPE type].
func cmdScan(c *call) {
	cursor, err := strconv.ParseUint(string(c.args[1]), 10, 64)
	if err != nil {
		c.error("ERR invalid cursor")
		return
	}
	var pattern []byte
	count, typ := defaultScanCount, ""
	for i := 2; i < len(c.args); i += 2 {
		if i+1 >= len(c.args) {
			c.syntaxError()
			return
		}
		v := c.args[i+1]
		switch upper(c.args[i]) {
		case "MATCH":
			pattern = v
		case "COUNT":
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				c.error("ERR value is not an integer or out of range")
				return
			}
			if n < 1 {
				c.syntaxError()
				return
			}
			count = int(min(n, math.MaxInt32))
		case "TYPE":
			typ = string(v)
		default:
			c.syntaxError()
			return
		}
	}
	keys, err := c.listKeys(c.cl.db, literalPrefix(pattern))
	if err == nil {
		keys, err = c.live(c.cl.db, keys)
	}
	if err != nil {
		c.fail(err)
		return
	}
	type hashed struct {
		h   uint64
		key []byte
	}
	hs := make([]hashed, 0, len(keys))
	for _, k := range keys {
		if h := scanHash(k); h >= cursor {
			hs = append(hs, hashed{h, k})
		}
	}
	slices.SortFunc(hs, func(x, y hashed) int {
		if x.h != y.h {
			if x.h < y.h {
				return -1
			}
			return 1
		}
		return bytes.Compare(x.key, y.key)
	})
	n := min(count, len(hs))
	for n < len(hs) && n > 0 && hs[n].h == hs[n-1].h {
		n++
	}
	next := uint64(0)
	if n < len(hs) {
		next = hs[n-1].h + 1 // no overflow: a larger hash follows
	}
	var page [][]byte
	if typ == "" || typ == "string" {
		for _, k := range hs[:n] {
			if pattern == nil || globMatch(pattern, k.key) {
				page = append(page, k.key)
			}
		}
	}
	c.w.WriteArray(2)
	c.w.WriteBulkString(strconv.FormatUint(next, 10))
	c.w.WriteArray(len(page))
	for _, k := range page {
		c.w.WriteBulk(k)
	}
}

// cmdKeys: KEYS pattern, in byte order.
func cmdKeys(c *call) {
	pattern := c.args[1]
	keys, err := c.listKeys(c.cl.db, literalPrefix(pattern))
	if err == nil {
		keys, err = c.live(c.cl.db, keys)
	}
	if err != nil {
		c.fail(err)
		return
	}
	matched := keys[:0]
	for _, k := range keys {
		if globMatch(pattern, k) {
			matched = append(matched, k)
		}
	}
	c.w.WriteArray(len(matched))
	for _, k := range matched {
		c.w.WriteBulk(k)
	}
}

// cmdDBSize lists the database's keys (the array keeps no count); keys
// that expired and are not yet reclaimed count, as in Redis.
func cmdDBSize(c *call) {
	keys, err := c.listKeys(c.cl.db, nil)
	if err != nil {
		c.fail(err)
		return
	}
	c.w.WriteInt(len(keys))
}

// literalPrefix is the part of a glob pattern before its first special
// character: every key it matches starts with it, so the array need only
// list those.
func literalPrefix(pattern []byte) []byte {
	for i, ch := range pattern {
		switch ch {
		case '*', '?', '[', '\\':
			return pattern[:i]
		}
	}
	return pattern
}

// globMatch reports whether s matches the Redis glob pattern: '*' any
// bytes, '?' one byte, '[abc]' '[^abc]' '[a-z]' one byte of (or not of) a
// set, '\x' the byte x. Case-sensitive, as KEYS and SCAN are. It runs in
// O(len(pattern) × len(s)): on a mismatch it backtracks only to the last
// '*', which is enough because every other element matches exactly one
// byte.
func globMatch(pattern, s []byte) bool {
	p, i := 0, 0
	starP, starI := -1, 0
	for i < len(s) {
		if p < len(pattern) {
			if pattern[p] == '*' {
				for p < len(pattern) && pattern[p] == '*' {
					p++
				}
				if p == len(pattern) {
					return true
				}
				starP, starI = p, i
				continue
			}
			if next, ok := matchOne(pattern, p, s[i]); ok {
				p, i = next, i+1
				continue
			}
		}
		if starP < 0 {
			return false
		}
		starI++
		p, i = starP, starI
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// matchOne matches the pattern element at p (not '*') against the byte ch
// and returns where the next element starts.
func matchOne(pattern []byte, p int, ch byte) (int, bool) {
	switch pattern[p] {
	case '?':
		return p + 1, true
	case '\\':
		if p+1 < len(pattern) {
			return p + 2, pattern[p+1] == ch
		}
		return p + 1, ch == '\\'
	case '[':
		p++
		not := p < len(pattern) && pattern[p] == '^'
		if not {
			p++
		}
		match := false
		for p < len(pattern) && pattern[p] != ']' {
			switch {
			case pattern[p] == '\\' && p+1 < len(pattern):
				p++
				match = match || pattern[p] == ch
				p++
			case p+2 < len(pattern) && pattern[p+1] == '-':
				lo, hi := pattern[p], pattern[p+2]
				if lo > hi {
					lo, hi = hi, lo
				}
				match = match || lo <= ch && ch <= hi
				p += 3
			default:
				match = match || pattern[p] == ch
				p++
			}
		}
		if p < len(pattern) {
			p++ // the ']'; an unclosed set runs to the end
		}
		return p, match != not
	}
	return p + 1, pattern[p] == ch
}
