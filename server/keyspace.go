package server

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/kvarray/kvarray/internal/glob"
	"github.com/kvarray/kvarray/keyspace"
)

// SCAN's cursor. Clients parse the cursor as an unsigned integer (go-redis
// reads it with ReadUint, redis-cli --scan with strtoull), so it cannot be
// the last key returned, which is where the array's ordered listing
// (Array.KeysFrom) resumes. A cursor is therefore two hints to that key:
// the low 16 bits name a slot of a table (scanCursors, 65535 slots reused
// in turn) that holds the key, the high 48 bits are the key's first 6
// bytes. A call resumes after the slot's key when the slot still holds a
// key of this database with those first bytes, else (the slot was reused
// by 65535 later calls, or the server restarted) after the 6 bytes
// themselves, which come at or before the key: keys between are returned
// again, none is skipped. So a key present for the whole scan is returned
// at least once and, unless a cursor outlives its slot, exactly once —
// Redis's guarantee. A call costs O(COUNT): one page of the listing, and
// each key of it read to leave out keys that expired (whose value is not
// reclaimed yet) — never a pass over the database.

const (
	defaultScanCount = 10
	scanSlots        = 1 << 16
	scanPrefix       = 6
)

type scanCursors struct {
	mu    sync.Mutex
	last  int
	slots [][]byte // array keys (db byte ‖ key); allocated at first use
}

// cursor registers ak, an array key just returned, as where a scan
// resumes, and returns its cursor (never 0).
func (t *scanCursors) cursor(ak []byte) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.slots == nil {
		t.slots = make([][]byte, scanSlots)
	}
	t.last = t.last%(scanSlots-1) + 1 // 1..65535
	t.slots[t.last] = slices.Clone(ak)
	return scanHead(ak[1:])<<16 | uint64(t.last)
}

// resume is the array key a scan of db byte p resumes after (see above).
func (t *scanCursors) resume(cursor uint64, p int) []byte {
	head := cursor >> 16
	var ak []byte
	t.mu.Lock()
	if t.slots != nil { // nil: a cursor from before a restart
		ak = t.slots[cursor&(scanSlots-1)]
	}
	t.mu.Unlock()
	if len(ak) > 0 && int(ak[0]) == p && scanHead(ak[1:]) == head {
		return ak
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], head)
	// The key's first bytes, zero-padded: trimmed of the padding (and of
	// real zero bytes, which only moves the resume point earlier).
	return keyspace.RawKey(p, bytes.TrimRight(b[8-scanPrefix:], "\x00"))
}

// scanHead is the first 6 bytes of key, zero-padded, as a number.
func scanHead(key []byte) uint64 {
	var b [8]byte
	copy(b[8-scanPrefix:], key[:min(len(key), scanPrefix)])
	return binary.BigEndian.Uint64(b[:])
}

// cmdScan: SCAN cursor [MATCH pattern] [COUNT count] [TYPE type].
func cmdScan(c *call) {
	var typ string
	cursor, pattern, count, ok := c.scanArgs(1, &typ)
	if !ok {
		return
	}
	db := c.cl.db
	p := c.s.ks.Phys(db)
	var after []byte
	if cursor != 0 {
		after = c.s.scans.resume(cursor, p)
	}
	c.s.stats.lists.Add(1)
	page, next, err := c.s.a.KeysFrom(c.ctx, keyspace.PrefixKey(p, literalPrefix(pattern)), after, count)
	if err != nil {
		c.fail(err)
		return
	}
	keys := make([][]byte, 0, len(page))
	for _, ak := range page {
		keys = append(keys, ak[1:])
	}
	if err := c.s.ks.FullKeys(c.ctx, db, keys); err != nil { // long keys' names
		c.fail(err)
		return
	}
	if pattern != nil {
		keys = slices.DeleteFunc(keys, func(k []byte) bool { return !glob.Match(pattern, k) })
	}
	if c.tx != nil {
		keys = c.tx.added(db, keys, after, next, literalPrefix(pattern), pattern)
	}
	if typ != "" {
		// The type is in each value: the keys of the page are read.
		if keys, err = c.ofType(db, keys, strings.ToLower(typ)); err != nil {
			c.fail(err)
			return
		}
	}
	if c.tx != nil {
		keys, err = c.existing(db, keys) // the transaction's own writes count
	} else {
		// The listing is exact; only keys past their expire-at and not
		// yet reclaimed are read (a read of every key listed was 22%
		// of a full scan's CPU).
		keys, err = c.live(db, keys)
	}
	if err != nil {
		c.fail(err)
		return
	}
	nextCursor := uint64(0)
	if next != nil {
		nextCursor = c.s.scans.cursor(next)
	}
	c.w.WriteArray(2)
	c.w.WriteBulkString(strconv.FormatUint(nextCursor, 10))
	c.w.WriteArray(len(keys))
	for _, k := range keys {
		c.w.WriteBulk(k)
	}
}

// ofType keeps the keys of db whose value has type name typ (TYPE's).
func (c *call) ofType(db int, keys [][]byte, typ string) ([][]byte, error) {
	vals := make([]value, len(keys))
	found := make([]bool, len(keys))
	errs := forEach(len(keys), func(i int) error {
		var err error
		vals[i], found[i], err = c.getAny(db, keys[i])
		return err
	})
	if _, err := firstError(errs); err != nil {
		return nil, err
	}
	out := keys[:0]
	for i, k := range keys {
		if found[i] && typeName(vals[i].typ) == typ {
			out = append(out, k)
		}
	}
	return out, nil
}

// existing keeps the keys of db that exist (not expired), reading them
// concurrently.
func (c *call) existing(db int, keys [][]byte) ([][]byte, error) {
	found := make([]bool, len(keys))
	errs := forEach(len(keys), func(i int) error {
		var err error
		_, found[i], err = c.getAny(db, keys[i])
		return err
	})
	if _, err := firstError(errs); err != nil {
		return nil, err
	}
	out := keys[:0]
	for i, k := range keys {
		if found[i] {
			out = append(out, k)
		}
	}
	return out, nil
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
		if glob.Match(pattern, k) {
			matched = append(matched, k)
		}
	}
	c.w.WriteArray(len(matched))
	for _, k := range matched {
		c.w.WriteBulk(k)
	}
}

// cmdDBSize answers from the keyspace's counts (keys that expired and are
// not yet reclaimed count, as in Redis), and lists the database's keys
// only while the counts are not exact (a recount after a crash) or
// inside a transaction (its own writes count). Listing 2 M keys held
// them all in memory: 480 MB of the server's RSS.
func cmdDBSize(c *call) {
	if c.tx == nil {
		if n, _, exact := c.s.ks.Count(c.cl.db); exact {
			c.w.WriteInt(int(n))
			return
		}
	}
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
