package collection

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/keyspace"
)

// Sorted sets. Entries are ordered by score, then member bytes, as
// Redis orders them. Two encodings, under Redis's names:
//   - listpack (inline): the value holds member, score (8 bytes, the
//     float64's bits), member, score... in that order, while there are
//     at most lim.ZSetEntries entries and no member is longer than
//     lim.ZSetValue, as Redis;
//   - skiplist (external): per member two elements, both ending in a
//     0x00 terminator (which keeps byte order equal to member order and
//     lets a listing start just before or just after a given member):
//     the member element 'm' ‖ member ‖ 0 → the score's 8 bytes, read by
//     ZSCORE and ZADD; the index element 's' ‖ scoreKey(score) ‖ member ‖
//     0 → empty, whose keys list in Redis's order, so that ranges by
//     rank or score read element keys alone (the score is in the key)
//     and only as many as they cover.
//
// A member too long for an index key (longer than maxElem-zOverhead
// bytes) is keyed by its name instead: its first bytes, then its
// SHA-256, as long as the longest member that fits; its keys end in
// terminator 2 (3: score -0) instead of 0 (1), so a name never reads as
// a member of that length. Its member element holds the score, then the
// member; its index element holds the member (a listing reads it, one
// read per long member listed). Two long members share a name only with
// a SHA-256 collision: the one stored reads as itself, the other as
// absent. Such members sort by name, so they are out of member order
// only against members that share their first maxElem-zOverhead-32
// bytes, at equal scores (and in BYLEX ranges).
//
// A score of -0 is kept as Redis keeps it: as 0 inline (a listpack
// holds "-0" as the integer 0), as -0 external, where its index key is
// 0's (Redis compares them equal) with terminator 1 instead of 0 (which
// misorders it only against a member of score 0 that extends it with a
// 0 byte). A command's range reads see the collection as stored and as
// earlier commands of its transaction left it, not its own pending
// writes (no command reads a range after writing).

// ZEntry is a sorted set's member and its score.
type ZEntry struct {
	Member []byte
	Score  float64
}

// CompareEntries orders entries as Redis does.
func CompareEntries(a, b ZEntry) int {
	if c := cmp.Compare(a.Score, b.Score); c != 0 {
		return c
	}
	return bytes.Compare(a.Member, b.Member)
}

const (
	zMember = 'm'
	zIndex  = 's'
	// zOverhead is what an external member's longest element key adds
	// to it: 's', the score, the terminator.
	zOverhead = 10
)

// scoreKey is an order-preserving encoding of a score: big-endian bits
// with the sign bit flipped for positives, all bits for negatives.
func scoreKey(b []byte, f float64) []byte {
	if f == 0 {
		f = 0 // -0
	}
	u := math.Float64bits(f)
	if u&(1<<63) == 0 {
		u ^= 1 << 63
	} else {
		u = ^u
	}
	return binary.BigEndian.AppendUint64(b, u)
}

func scoreOfKey(b []byte) float64 {
	u := binary.BigEndian.Uint64(b)
	if u&(1<<63) != 0 {
		u ^= 1 << 63
	} else {
		u = ^u
	}
	return math.Float64frombits(u)
}

// Terminators of a long member's keys (a short one's are 0 and, for an
// index key of score -0, 1).
const (
	zLongTerm    = 2
	zLongNegZero = 3
)

// long reports whether member m is keyed by its name.
func (z *ZSet) long(m []byte) bool { return len(m)+zOverhead > z.maxElem }

// keyName is what member m's keys hold of it: m, or its name.
func (z *ZSet) keyName(m []byte) []byte {
	if !z.long(m) {
		return m
	}
	sum := sha256.Sum256(m)
	return append(slices.Clip(m[:z.maxElem-zOverhead-len(sum)]), sum[:]...)
}

func (z *ZSet) memberSub(m []byte) []byte {
	term := byte(0)
	if z.long(m) {
		term = zLongTerm
	}
	name := z.keyName(m)
	return append(append(append(make([]byte, 0, len(name)+2), zMember), name...), term)
}

func (z *ZSet) indexSub(e ZEntry) []byte {
	name := z.keyName(e.Member)
	b := scoreKey(append(make([]byte, 0, len(name)+zOverhead), zIndex), e.Score)
	term := b2u(e.Score == 0 && math.Signbit(e.Score))
	if z.long(e.Member) {
		term += zLongTerm
	}
	return append(append(b, name...), term)
}

// memberValue is what member m's member element holds: its score, then,
// for a long member, m.
func (z *ZSet) memberValue(m []byte, s float64) []byte {
	v := binary.BigEndian.AppendUint64(nil, math.Float64bits(s))
	if z.long(m) {
		v = append(v, m...)
	}
	return v
}

// scoreOf decodes member m's member element v: found false when it is
// another long member's (a name collision).
func (z *ZSet) scoreOf(m, v []byte) (float64, bool, error) {
	if len(v) < 8 || len(v) > 8 && !z.long(m) {
		return 0, false, fmt.Errorf("collection: member %q: %w", truncated(m), ErrBadValue)
	}
	if z.long(m) && !bytes.Equal(v[8:], m) {
		return 0, false, nil
	}
	return math.Float64frombits(binary.BigEndian.Uint64(v)), true, nil
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// entryOfIndex decodes an index element's sub key; long: the member is
// a long one's name (indexEntry reads it).
func entryOfIndex(sub []byte) (e ZEntry, long bool, err error) {
	if len(sub) < zOverhead || sub[0] != zIndex || sub[len(sub)-1] > zLongNegZero {
		return ZEntry{}, false, ErrBadValue
	}
	term := sub[len(sub)-1]
	e = ZEntry{Member: sub[9 : len(sub)-1 : len(sub)-1], Score: scoreOfKey(sub[1:9])}
	if term&1 == 1 {
		e.Score = math.Copysign(0, -1)
	}
	return e, term >= zLongTerm, nil
}

// indexEntry is the entry of index element sub: from the key, and for a
// long member from the element (one read).
func (z *ZSet) indexEntry(sub []byte) (ZEntry, error) {
	e, long, err := entryOfIndex(sub)
	if err != nil || !long {
		return e, err
	}
	m, found, err := z.src.Element(z.ctx, keyspace.ElementKey(z.ver, sub))
	switch {
	case err != nil:
		return e, fmt.Errorf("collection: reading a long member: %w", err)
	case !found:
		return e, fmt.Errorf("collection: a long member's index element without its member: %w", ErrBadValue)
	}
	e.Member = m
	return e, nil
}

// ScoreRange is a range of scores (ZRANGEBYSCORE's min and max, each
// inclusive unless Ex).
type ScoreRange struct {
	Min, Max     float64
	MinEx, MaxEx bool
}

func (r ScoreRange) aboveMin(s float64) bool {
	return s > r.Min || !r.MinEx && s == r.Min
}

func (r ScoreRange) belowMax(s float64) bool {
	return s < r.Max || !r.MaxEx && s == r.Max
}

func (r ScoreRange) empty() bool {
	return r.Min > r.Max || r.Min == r.Max && (r.MinEx || r.MaxEx)
}

// LexRange is a range of members (ZRANGEBYLEX's): NoMin is '-', NoMax
// '+'.
type LexRange struct {
	Min, Max     []byte
	MinEx, MaxEx bool
	NoMin, NoMax bool
}

func (r LexRange) aboveMin(m []byte) bool {
	if r.NoMin {
		return true
	}
	c := bytes.Compare(m, r.Min)
	return c > 0 || !r.MinEx && c == 0
}

func (r LexRange) belowMax(m []byte) bool {
	if r.NoMax {
		return true
	}
	c := bytes.Compare(m, r.Max)
	return c < 0 || !r.MaxEx && c == 0
}

func (r LexRange) empty() bool {
	if r.NoMin || r.NoMax {
		return false
	}
	c := bytes.Compare(r.Min, r.Max)
	return c > 0 || c == 0 && (r.MinEx || r.MaxEx)
}

// zpend is a member an external sorted set's command changed: as
// stored when the command first touched it (was), as now (cur).
type zpend struct {
	was, cur       float64
	wasIn, present bool
}

// ZSet is one sorted set as a command sees it: read through its Source,
// the command's writes buffered until Commit.
type ZSet struct {
	ctx     context.Context
	src     Source
	lim     Limits
	maxElem int
	at      int64
	ver     uint64 // 0: inline
	n       int64
	openVer uint64
	openN   int64
	// floor (external): an index sub key every live index key sorts
	// after (nil: none known), kept in the value after the count, so
	// that listings from the start seek past the keys ZPOPMIN and
	// ZREMRANGEBYRANK deleted (a store's tombstones there would
	// otherwise be read on every listing until compacted).
	floor, openFloor []byte
	entries          []ZEntry // inline only, in order
	changed          bool
	pend             map[string]*zpend
	order            []string
	// read: scores Prefetch read (NaN: absent).
	read map[string]float64
}

// OpenZSet returns sorted set value v (found false: a new, empty one)
// for a command (OpenHash's arguments).
func OpenZSet(ctx context.Context, src Source, v keyspace.Value, found bool, lim Limits, maxElem int) (*ZSet, error) {
	z := &ZSet{ctx: ctx, src: src, lim: lim, maxElem: maxElem}
	if !found {
		return z, nil
	}
	if v.Type != keyspace.TypeZSet {
		return nil, keyspace.ErrWrongType
	}
	enc, n, rest, err := decodeHead(v.V)
	if err != nil || enc&encFlags != 0 {
		return nil, ErrBadValue
	}
	z.at, z.n, z.openN = v.At, n, n
	if enc == encExternal {
		if v.Ver == 0 {
			return nil, ErrBadValue
		}
		z.ver, z.openVer = v.Ver, v.Ver
		if len(rest) > 0 {
			if z.floor, rest, err = readString(rest); err != nil || len(rest) != 0 {
				return nil, ErrBadValue
			}
			z.openFloor = z.floor
		}
		return z, nil
	}
	z.entries = make([]ZEntry, 0, min(n, int64(len(rest))))
	for range n {
		var e ZEntry
		if e.Member, rest, err = readString(rest); err != nil {
			return nil, err
		}
		if len(rest) < 8 {
			return nil, ErrBadValue
		}
		e.Score = math.Float64frombits(binary.BigEndian.Uint64(rest))
		rest = rest[8:]
		z.entries = append(z.entries, e)
	}
	if len(rest) != 0 {
		return nil, ErrBadValue
	}
	return z, nil
}

// Len is the number of members.
func (z *ZSet) Len() int64 { return z.n }

// Version is the version of an external sorted set's elements, 0 for an
// inline one.
func (z *ZSet) Version() uint64 { return z.ver }

// Encoding is OBJECT ENCODING's name for the sorted set as it is now.
func (z *ZSet) Encoding() string {
	if z.ver != 0 {
		return "skiplist"
	}
	return "listpack"
}

// Changed reports whether the command changed the sorted set.
func (z *ZSet) Changed() bool { return z.changed }

func (z *ZSet) inlineIndex(m []byte) int {
	return slices.IndexFunc(z.entries, func(e ZEntry) bool { return bytes.Equal(e.Member, m) })
}

// Score returns member m's score.
func (z *ZSet) Score(m []byte) (float64, bool, error) {
	if z.ver == 0 {
		if i := z.inlineIndex(m); i >= 0 {
			return z.entries[i].Score, true, nil
		}
		return 0, false, nil
	}
	if p, ok := z.pend[string(m)]; ok {
		return p.cur, p.present, nil
	}
	s, found, err := z.stored(m)
	return s, found, err
}

// stored reads member m's score as stored (or as Prefetch read it).
func (z *ZSet) stored(m []byte) (float64, bool, error) {
	if s, ok := z.read[string(m)]; ok {
		return s, !math.IsNaN(s), nil
	}
	v, found, err := z.src.Element(z.ctx, keyspace.ElementKey(z.ver, z.memberSub(m)))
	if err != nil {
		return 0, false, fmt.Errorf("collection: member %q: %w", truncated(m), err)
	}
	sc := math.NaN()
	if found {
		var s float64
		if s, found, err = z.scoreOf(m, v); err != nil {
			return 0, false, err
		}
		if found {
			sc = s
		}
	}
	if z.read == nil {
		z.read = map[string]float64{}
	}
	z.read[string(m)] = sc
	return sc, found, nil
}

// Prefetch reads the scores of members of an external sorted set at
// once (Hash.Prefetch).
func (z *ZSet) Prefetch(members [][]byte) error {
	if z.ver == 0 || len(members) < 2 {
		return nil
	}
	keys := make([][]byte, len(members))
	for i, m := range members {
		keys[i] = keyspace.ElementKey(z.ver, z.memberSub(m))
	}
	vals, found, err := readAll(z.ctx, z.src, keys)
	if err != nil {
		return fmt.Errorf("collection: reading members: %w", err)
	}
	if z.read == nil {
		z.read = make(map[string]float64, len(keys))
	}
	for i, m := range members {
		z.read[string(m)] = math.NaN()
		if found[i] {
			s, ok, err := z.scoreOf(m, vals[i])
			if err != nil {
				return err
			}
			if ok {
				z.read[string(m)] = s
			}
		}
	}
	return nil
}

// Set gives member m score s (not NaN) and reports whether m is new.
func (z *ZSet) Set(m []byte, s float64) (bool, error) {
	if z.ver == 0 {
		if s == 0 {
			s = 0 // -0, as a listpack
		}
		i := z.inlineIndex(m)
		if i >= 0 {
			if z.entries[i].Score == s {
				return false, nil
			}
			z.entries = slices.Delete(z.entries, i, i+1)
		} else {
			z.n++
		}
		e := ZEntry{m, s}
		at, _ := slices.BinarySearchFunc(z.entries, e, CompareEntries)
		z.entries = slices.Insert(z.entries, at, e)
		z.changed = true
		if len(z.entries) > z.lim.ZSetEntries || len(m) > z.lim.ZSetValue {
			if err := z.external(); err != nil {
				return false, err
			}
		}
		return i < 0, nil
	}
	p, err := z.pending(m)
	if err != nil {
		return false, err
	}
	if z.floor != nil && bytes.Compare(z.indexSub(ZEntry{m, s}), z.floor) <= 0 {
		z.floor = nil // below what was the lowest
	}
	added := !p.present
	if added {
		z.n++
	}
	p.cur, p.present = s, true
	z.changed = true
	return added, nil
}

// pending is member m's entry in pend, made on first touch.
func (z *ZSet) pending(m []byte) (*zpend, error) {
	if p, ok := z.pend[string(m)]; ok {
		return p, nil
	}
	s, found, err := z.stored(m)
	if err != nil {
		return nil, err
	}
	if z.pend == nil {
		z.pend = map[string]*zpend{}
	}
	p := &zpend{was: s, cur: s, wasIn: found, present: found}
	z.pend[string(m)] = p
	z.order = append(z.order, string(m))
	return p, nil
}

// Delete removes member m and reports whether it was there.
func (z *ZSet) Delete(m []byte) (bool, error) {
	if z.ver == 0 {
		i := z.inlineIndex(m)
		if i < 0 {
			return false, nil
		}
		z.entries = slices.Delete(z.entries, i, i+1)
		z.n--
		z.changed = true
		return true, nil
	}
	if _, found, err := z.Score(m); err != nil || !found {
		return false, err
	}
	p, err := z.pending(m)
	if err != nil {
		return false, err
	}
	p.present = false
	z.n--
	z.changed = true
	return true, nil
}

// DeleteEntries removes entries es read from the sorted set (by a
// range): an external one knows their scores from the index and reads
// nothing more.
func (z *ZSet) DeleteEntries(es []ZEntry) error {
	if z.ver != 0 {
		if z.read == nil {
			z.read = make(map[string]float64, len(es))
		}
		for _, e := range es {
			if _, ok := z.read[string(e.Member)]; !ok {
				z.read[string(e.Member)] = e.Score
			}
		}
	}
	for _, e := range es {
		if _, err := z.Delete(e.Member); err != nil {
			return err
		}
	}
	return nil
}

// DeleteLowest removes es, the lowest entries (ByRank(0, len(es)-1)),
// and remembers where the remaining ones start.
func (z *ZSet) DeleteLowest(es []ZEntry) error {
	if err := z.DeleteEntries(es); err != nil || len(es) == 0 || z.ver == 0 {
		return err
	}
	if f := z.indexSub(es[len(es)-1]); bytes.Compare(f, z.floor) > 0 {
		z.floor = f
	}
	return nil
}

// external makes an inline sorted set external.
func (z *ZSet) external() error {
	z.ver = keyspace.NewVersion()
	z.pend = make(map[string]*zpend, len(z.entries))
	for _, e := range z.entries {
		z.pend[string(e.Member)] = &zpend{cur: e.Score, present: true}
		z.order = append(z.order, string(e.Member))
	}
	z.entries = nil
	return nil
}

// Commit returns what table's Commit returns, for the sorted set.
func (z *ZSet) Commit() (v keyspace.Value, del, valueChanged bool, ops []keyspace.Op) {
	if z.n == 0 {
		return keyspace.Value{}, true, true, nil
	}
	v = keyspace.Value{Type: keyspace.TypeZSet, At: z.at, Ver: z.ver}
	if z.ver == 0 {
		size := 0
		for _, e := range z.entries {
			size += len(e.Member) + 10
		}
		b := encodeHead(encInline, z.n, size)
		for _, e := range z.entries {
			b = binary.BigEndian.AppendUint64(appendString(b, e.Member), math.Float64bits(e.Score))
		}
		v.V = b
		return v, false, true, nil
	}
	v.V = encodeHead(encExternal, z.n, len(z.floor)+2)
	if z.floor != nil {
		v.V = appendString(v.V, z.floor)
	}
	el := func(sub, val []byte, del bool) keyspace.Op {
		return keyspace.ElementOp(keyspace.ElementKey(z.ver, sub), val, del)
	}
	for _, name := range z.order {
		p, m := z.pend[name], []byte(name)
		moved := p.wasIn != p.present || math.Float64bits(p.was) != math.Float64bits(p.cur)
		if !moved {
			continue
		}
		if p.wasIn {
			ops = append(ops, el(z.indexSub(ZEntry{m, p.was}), nil, true))
		}
		if p.present {
			// A long member's index element holds it.
			iv := []byte{}
			if z.long(m) {
				iv = m
			}
			ops = append(ops, el(z.memberSub(m), z.memberValue(m, p.cur), false),
				el(z.indexSub(ZEntry{m, p.cur}), iv, false))
		} else {
			ops = append(ops, el(z.memberSub(m), nil, true))
		}
	}
	return v, false, z.n != z.openN || z.ver != z.openVer || !bytes.Equal(z.floor, z.openFloor), ops
}

// walk lists the external sorted set's element subkeys under kind
// (zIndex or zMember) after sub after (nil: from the first), a page of
// at most page keys at a time, until fn returns false.
func (z *ZSet) walk(kind byte, after []byte, page int, fn func(sub []byte) (bool, error)) error {
	prefix := append(keyspace.ElementPrefix(z.ver), kind)
	if kind == zIndex && z.floor != nil && (after == nil || bytes.Compare(after, z.floor) < 0) {
		after = z.floor
	}
	var ak []byte
	if after != nil {
		ak = append(keyspace.ElementPrefix(z.ver), after...)
	}
	base := len(prefix) - 1
	for {
		// Fresh: a command reads the sorted set as its lock holds it; a
		// kept listing (of an earlier command whose page ended where
		// this one starts: the floor, a LIMIT's last member) may be up
		// to a second old.
		keys, next, err := z.src.ElementKeys(z.ctx, prefix, ak, max(min(page, listPage), 1), array.Fresh())
		if err != nil {
			return fmt.Errorf("collection: listing a sorted set: %w", err)
		}
		for _, k := range keys {
			more, err := fn(k[base:])
			if err != nil || !more {
				return err
			}
		}
		if next == nil {
			return nil
		}
		ak = next
	}
}

// walkIndex is walk over the index, entries decoded.
func (z *ZSet) walkIndex(after []byte, page int, fn func(e ZEntry) bool) error {
	return z.walk(zIndex, after, page, func(sub []byte) (bool, error) {
		e, err := z.indexEntry(sub)
		if err != nil {
			return false, err
		}
		return fn(e), nil
	})
}

// All returns every entry, in order.
func (z *ZSet) All() ([]ZEntry, error) {
	if z.ver == 0 {
		return slices.Clone(z.entries), nil
	}
	return z.ByRank(0, z.n-1)
}

// ByRank returns the entries of ranks start to stop (0 ≤ start ≤ stop,
// stop < Len), in order. External: it lists stop+1 index keys.
func (z *ZSet) ByRank(start, stop int64) ([]ZEntry, error) {
	if z.ver == 0 {
		return slices.Clone(z.entries[start : stop+1]), nil
	}
	out := make([]ZEntry, 0, min(stop-start+1, listPage))
	i := int64(0)
	err := z.walkIndex(nil, int(min(stop+1, listPage)), func(e ZEntry) bool {
		if i >= start {
			out = append(out, e)
		}
		i++
		return i <= stop
	})
	if err == nil && i <= stop {
		return nil, fmt.Errorf("ranks %d to %d of a sorted set of %d listed %d: %w", start, stop, z.n, i, ErrIncomplete)
	}
	return out, err
}

// Rank returns member m's rank (0: the lowest score) and score.
// External: it reads the member and lists the index keys before it.
func (z *ZSet) Rank(m []byte) (int64, float64, bool, error) {
	if z.ver == 0 {
		if i := z.inlineIndex(m); i >= 0 {
			e := z.entries[i]
			r, _ := slices.BinarySearchFunc(z.entries, e, CompareEntries)
			return int64(r), e.Score, true, nil
		}
		return 0, 0, false, nil
	}
	s, found, err := z.Score(m)
	if err != nil || !found {
		return 0, 0, false, err
	}
	self := ZEntry{m, s}
	rank := int64(0)
	err = z.walkIndex(nil, listPage, func(e ZEntry) bool {
		if CompareEntries(e, self) >= 0 {
			return false
		}
		rank++
		return true
	})
	return rank, s, true, err
}

// window applies a LIMIT's offset and count (count < 0: no limit; a
// negative offset: nothing, as Redis) to the n entries of a range.
func window(n, offset, count int64) (int64, int64) {
	if offset < 0 || offset >= n {
		return 0, 0
	}
	end := n
	if count >= 0 && offset+count < n {
		end = offset + count
	}
	return offset, end
}

// ByScore returns the entries with scores in r, lowest first (rev:
// highest first), after skipping offset of them, at most count (< 0:
// all). External: it lists the index keys of the range from its start
// (rev: all of them, the listing goes forward only), offset+count of
// them when not rev.
func (z *ZSet) ByScore(r ScoreRange, offset, count int64, rev bool) ([]ZEntry, error) {
	if r.empty() || offset < 0 {
		return nil, nil
	}
	var in []ZEntry
	if z.ver == 0 {
		for _, e := range z.entries {
			if r.aboveMin(e.Score) && r.belowMax(e.Score) {
				in = append(in, e)
			}
		}
	} else {
		limit := int64(-1)
		if !rev && count >= 0 {
			limit = offset + count
		}
		page := listPage
		if limit >= 0 {
			page = int(min(limit+1, listPage))
		}
		err := z.walkIndex(scoreAfter(r), page, func(e ZEntry) bool {
			if !r.belowMax(e.Score) || limit >= 0 && int64(len(in)) >= limit {
				return false
			}
			if r.aboveMin(e.Score) {
				in = append(in, e)
			}
			return true
		})
		if err != nil {
			return nil, err
		}
	}
	if rev {
		slices.Reverse(in)
	}
	from, to := window(int64(len(in)), offset, count)
	return in[from:to], nil
}

// scoreAfter is the index sub key a listing of r starts after.
func scoreAfter(r ScoreRange) []byte {
	if math.IsInf(r.Min, -1) {
		return nil
	}
	k := scoreKey([]byte{zIndex}, r.Min)
	if r.MinEx {
		// Just after every key of score Min: the next encoded score.
		u := binary.BigEndian.Uint64(k[1:])
		if u == math.MaxUint64 {
			return append(k, 0xFF)
		}
		binary.BigEndian.PutUint64(k[1:], u+1)
	}
	return k
}

// CountScore is the number of entries with scores in r. External: it
// lists the range's index keys.
func (z *ZSet) CountScore(r ScoreRange) (int64, error) {
	in, err := z.ByScore(r, 0, -1, false)
	return int64(len(in)), err
}

// ByLex returns the entries with members in r in member order (the
// order of a sorted set whose scores are all equal, which ZRANGEBYLEX
// expects: Redis leaves other sets' answers unspecified), rev and the
// LIMIT as ByScore's. External: it lists the member keys of the range;
// scores, when withScores, are read (one read per entry).
func (z *ZSet) ByLex(r LexRange, offset, count int64, rev, withScores bool) ([]ZEntry, error) {
	if r.empty() || offset < 0 {
		return nil, nil
	}
	var in []ZEntry
	if z.ver == 0 {
		for _, e := range z.entries {
			if r.aboveMin(e.Member) && r.belowMax(e.Member) {
				in = append(in, e)
			}
		}
		// Member order, as the external encoding lists them.
		slices.SortStableFunc(in, func(a, b ZEntry) int { return bytes.Compare(a.Member, b.Member) })
	} else {
		limit := int64(-1)
		if !rev && count >= 0 {
			limit = offset + count
		}
		page := listPage
		if limit >= 0 {
			page = int(min(limit+1, listPage))
		}
		var after []byte
		if !r.NoMin {
			after = append([]byte{zMember}, r.Min...)
			if r.MinEx {
				after = append(after, 0)
			}
		}
		err := z.walk(zMember, after, page, func(sub []byte) (bool, error) {
			if len(sub) < 2 || sub[len(sub)-1] != 0 && sub[len(sub)-1] != zLongTerm {
				return false, ErrBadValue
			}
			m := sub[1 : len(sub)-1 : len(sub)-1]
			if sub[len(sub)-1] == zLongTerm {
				// A long member's name: the member is in the element.
				v, found, err := z.src.Element(z.ctx, keyspace.ElementKey(z.ver, sub))
				if err != nil || !found || len(v) < 8 {
					return false, fmt.Errorf("collection: reading a long member: %w", cmp.Or(err, ErrBadValue))
				}
				m = v[8:]
			}
			if !r.belowMax(m) || limit >= 0 && int64(len(in)) >= limit {
				return false, nil
			}
			if r.aboveMin(m) {
				in = append(in, ZEntry{Member: m})
			}
			return true, nil
		})
		if err != nil {
			return nil, err
		}
	}
	if rev {
		slices.Reverse(in)
	}
	from, to := window(int64(len(in)), offset, count)
	in = in[from:to]
	if z.ver != 0 && withScores {
		if err := z.fillScores(in); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// fillScores reads the scores of external entries listed by member.
func (z *ZSet) fillScores(es []ZEntry) error {
	keys := make([][]byte, len(es))
	for i, e := range es {
		keys[i] = keyspace.ElementKey(z.ver, z.memberSub(e.Member))
	}
	vals, found, err := readAll(z.ctx, z.src, keys)
	if err != nil {
		return fmt.Errorf("collection: reading scores: %w", err)
	}
	for i, e := range es {
		ok := found[i]
		if ok {
			if es[i].Score, ok, err = z.scoreOf(e.Member, vals[i]); err != nil {
				return err
			}
		}
		if !ok {
			return fmt.Errorf("collection: member %q without its score: %w", truncated(e.Member), ErrBadValue)
		}
	}
	return nil
}

// CountLex is the number of entries with members in r.
func (z *ZSet) CountLex(r LexRange) (int64, error) {
	in, err := z.ByLex(r, 0, -1, false, false)
	return int64(len(in)), err
}

// Scan returns up to about n entries after cursor after (nil: from the
// first) as fields (the score formatted as Redis's ZSCAN gives it) and the
// cursor of the next page (nil: none): an inline sorted set whole, as
// Redis does for a listpack, an external one a page of its index keys
// (no value reads: the score is in the key).
func (z *ZSet) Scan(after []byte, n int) ([]Field, []byte, error) {
	var es []ZEntry
	var next []byte
	if z.ver == 0 {
		es = z.entries
	} else {
		prefix := append(keyspace.ElementPrefix(z.ver), zIndex)
		if after == nil {
			after = z.floor
		}
		var ak []byte
		if after != nil {
			ak = append(keyspace.ElementPrefix(z.ver), after...)
		}
		keys, nk, err := z.src.ElementKeys(z.ctx, prefix, ak, max(n, 1))
		if err != nil {
			return nil, nil, fmt.Errorf("collection: listing a sorted set: %w", err)
		}
		for _, k := range keys {
			e, err := z.indexEntry(k[len(prefix)-1:])
			if err != nil {
				return nil, nil, err
			}
			es = append(es, e)
		}
		if nk != nil {
			next = nk[len(prefix)-1:]
		}
	}
	format := FormatScore // a skiplist's: %.17Lg
	if z.ver == 0 {
		format = ScanScore // a listpack holds d2string's
	}
	out := make([]Field, len(es))
	for i, e := range es {
		out[i] = Field{e.Member, []byte(format(e.Score))}
	}
	return out, next, nil
}

// FormatScore is a score as Redis 7.0 replies with one (addReplyDouble:
// %.17g, inf and -inf).
func FormatScore(f float64) string {
	if math.IsInf(f, 0) {
		if f > 0 {
			return "inf"
		}
		return "-inf"
	}
	return strconv.FormatFloat(f, 'g', 17, 64)
}

// ScanScore is a score as ZSCAN gives it (Redis's d2string: integers in
// long long's safe range without exponent, else FormatScore).
func ScanScore(f float64) string {
	if f == math.Trunc(f) && f >= -math.MaxInt64/2 && f <= math.MaxInt64/2 {
		return strconv.FormatInt(int64(f), 10)
	}
	return FormatScore(f)
}
