package collection

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/kvarray/kvarray/keyspace"
)

// Lists. Redis 7.0 names every list quicklist (OBJECT ENCODING), whatever
// its size; kvarray stores:
//   - inline while the list is small (list-max-listpack-size: a negative
//     n allows 4 KiB << (-n-1) of elements, -2 = 8 KiB, Redis's node size;
//     a positive n allows n elements): the value holds the elements,
//     length-prefixed, head first. One array value: every command is one
//     read and at most one store.
//   - external past that, never back: the value holds the count and the
//     position of the head (a signed varint); element i is the array value
//     under ElementKey(version, pos(head+i)), pos being the position as 8
//     bytes big-endian with its sign bit flipped, so that element keys sort
//     in list order. The positions of a list are contiguous: a push at the
//     head takes head-1, one at the tail head+n, a pop frees an end. So
//     push and pop cost one element write and the value's, LINDEX and LSET
//     one element, LRANGE the elements it returns (read directly, no
//     listing), whatever the length. LINSERT and LREM in the middle shift
//     the shorter side of the list by the gap they make or close.
//
// A push or pop moves only elements outside the list's old range (a push)
// or its new one (a pop): Commit says so (Phased), and the server then
// writes the new elements before the value and deletes the popped ones
// after it, with no intent record. A crash between leaves at most an
// element outside the range the value names, never read (the next push
// at that end overwrites it; a DEL's reclaim lists and deletes it).

// List is one list as a command sees it.
type List struct {
	ctx      context.Context
	src      Source
	lim      Limits
	at       int64
	ver      uint64 // 0: inline
	openVer  uint64
	n, openN int64
	// head is an external list's first position (openHead as opened).
	head, openHead int64
	items          [][]byte // inline only
	changed        bool
	// pend: an external list's element writes by position (nil: deleted),
	// in the order made (order).
	pend  map[int64][]byte
	order []int64
	// shifted: an element inside the old range was written or deleted
	// (Commit's Phased is false).
	shifted bool
}

// OpenList returns list value v (found false: a new, empty list) for a
// command.
func OpenList(ctx context.Context, src Source, v keyspace.Value, found bool, lim Limits) (*List, error) {
	l := &List{ctx: ctx, src: src, lim: lim}
	if !found {
		return l, nil
	}
	if v.Type != keyspace.TypeList {
		return nil, keyspace.ErrWrongType
	}
	enc, n, rest, err := decodeHead(v.V)
	if err != nil || enc&encFlags != 0 {
		return nil, ErrBadValue
	}
	l.at, l.n, l.openN = v.At, n, n
	if enc == encExternal {
		h, k := binary.Varint(rest)
		if k <= 0 || k != len(rest) || v.Ver == 0 {
			return nil, ErrBadValue
		}
		l.ver, l.openVer, l.head, l.openHead = v.Ver, v.Ver, h, h
		return l, nil
	}
	l.items = make([][]byte, 0, min(n, int64(len(rest))))
	for range n {
		var e []byte
		if e, rest, err = readString(rest); err != nil {
			return nil, err
		}
		l.items = append(l.items, e)
	}
	if len(rest) != 0 {
		return nil, ErrBadValue
	}
	return l, nil
}

// Encoding is OBJECT ENCODING's name for a list (Redis 7.0's).
func (l *List) Encoding() string { return "quicklist" }

// Len is the number of elements.
func (l *List) Len() int64 { return l.n }

// Version is an external list's elements' version, 0 for an inline one.
func (l *List) Version() uint64 { return l.ver }

// Changed reports whether the command changed the list.
func (l *List) Changed() bool { return l.changed }

// posKey is the element key of position p.
func (l *List) posKey(p int64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(p)^1<<63)
	return keyspace.ElementKey(l.ver, b[:])
}

// fits reports whether an inline list of items stays inline.
func (l *List) fits() bool {
	if s := l.lim.ListSize; s > 0 {
		return len(l.items) <= s
	}
	limit := 4096 << min(max(-l.lim.ListSize-1, 0), 4)
	size := 0
	for _, e := range l.items {
		size += len(e) + 2
	}
	return size <= limit
}

// external makes an inline list external: every element becomes an
// array value, from position 0.
func (l *List) external() {
	l.ver = keyspace.NewVersion()
	l.head = 0
	for i, e := range l.items {
		l.put(int64(i), e, false)
	}
	l.items = nil
}

// put records the store of v at position p; inside says whether p is
// inside the list's range as opened.
func (l *List) put(p int64, v []byte, inside bool) {
	if v == nil {
		v = []byte{}
	}
	l.record(p, slices.Clip(v), inside)
}

// drop records the delete of position p.
func (l *List) drop(p int64, inside bool) { l.record(p, nil, inside) }

func (l *List) record(p int64, v []byte, inside bool) {
	if l.pend == nil {
		l.pend = map[int64][]byte{}
	}
	if _, ok := l.pend[p]; !ok {
		l.order = append(l.order, p)
	}
	l.pend[p] = v
	l.changed = true
	if inside && l.ver == l.openVer {
		l.shifted = true
	}
}

// insideOpen reports whether position p was inside the range as opened.
func (l *List) insideOpen(p int64) bool {
	return l.ver == l.openVer && p >= l.openHead && p < l.openHead+l.openN
}

// Push adds vals at the head (left) or the tail, one after the other
// (LPUSH a b c leaves c first).
func (l *List) Push(left bool, vals ...[]byte) {
	if len(vals) == 0 {
		return
	}
	l.changed = true
	if l.ver == 0 {
		for _, v := range vals {
			if left {
				l.items = slices.Insert(l.items, 0, v)
			} else {
				l.items = append(l.items, v)
			}
		}
		l.n = int64(len(l.items))
		if !l.fits() {
			l.external()
		}
		return
	}
	for _, v := range vals {
		if left {
			l.head--
			l.put(l.head, v, l.insideOpen(l.head))
		} else {
			p := l.head + l.n
			l.put(p, v, l.insideOpen(p))
		}
		l.n++
	}
}

// Pop removes and returns up to count elements from the head (left) or
// the tail, in the order popped.
func (l *List) Pop(left bool, count int64) ([][]byte, error) {
	count = min(count, l.n)
	if count <= 0 {
		return nil, nil
	}
	l.changed = true
	if l.ver == 0 {
		out := make([][]byte, count)
		for i := range out {
			if left {
				out[i] = l.items[i]
			} else {
				out[i] = l.items[len(l.items)-1-i]
			}
		}
		if left {
			l.items = l.items[count:]
		} else {
			l.items = l.items[:int64(len(l.items))-count]
		}
		l.n -= count
		return out, nil
	}
	idx := make([]int64, count)
	for i := range idx {
		if left {
			idx[i] = int64(i)
		} else {
			idx[i] = l.n - 1 - int64(i)
		}
	}
	out, err := l.read(idx)
	if err != nil {
		return nil, err
	}
	for _, i := range idx {
		// Outside the new range: deleted after the value.
		l.drop(l.head+i, false)
	}
	if left {
		l.head += count
	}
	l.n -= count
	return out, nil
}

// read returns the elements at indexes idx (each in range), reading an
// external list's at once.
func (l *List) read(idx []int64) ([][]byte, error) {
	out := make([][]byte, len(idx))
	if l.ver == 0 {
		for i, x := range idx {
			out[i] = l.items[x]
		}
		return out, nil
	}
	var keys [][]byte
	var at []int
	for i, x := range idx {
		if v, ok := l.pend[l.head+x]; ok {
			out[i] = v
			continue
		}
		keys = append(keys, l.posKey(l.head+x))
		at = append(at, i)
	}
	vals, found, err := readAll(l.ctx, l.src, keys)
	if err != nil {
		return nil, fmt.Errorf("collection: reading list elements: %w", err)
	}
	for j, i := range at {
		if !found[j] {
			return nil, fmt.Errorf("collection: list element %d of %d missing: %w", idx[i], l.n, ErrBadValue)
		}
		out[i] = vals[j]
	}
	return out, nil
}

// Index returns element i (negative: from the tail), found false when
// out of range.
func (l *List) Index(i int64) ([]byte, bool, error) {
	if i < 0 {
		i += l.n
	}
	if i < 0 || i >= l.n {
		return nil, false, nil
	}
	out, err := l.read([]int64{i})
	if err != nil {
		return nil, false, err
	}
	return out[0], true, nil
}

// Normalize turns Redis's start and stop (negative: from the tail) into
// a range [start, stop] within the list, empty when start > stop.
func (l *List) Normalize(start, stop int64) (int64, int64) {
	if start < 0 {
		start = max(start+l.n, 0)
	}
	if stop < 0 {
		stop += l.n
	}
	stop = min(stop, l.n-1)
	return start, stop
}

// Range returns elements start..stop (Redis's LRANGE indexes).
func (l *List) Range(start, stop int64) ([][]byte, error) {
	start, stop = l.Normalize(start, stop)
	if start > stop || start >= l.n {
		return nil, nil
	}
	if l.ver == 0 {
		return slices.Clone(l.items[start : stop+1]), nil
	}
	idx := make([]int64, 0, stop-start+1)
	for i := start; i <= stop; i++ {
		idx = append(idx, i)
	}
	return l.read(idx)
}

// Set replaces element i (negative: from the tail); false when out of
// range.
func (l *List) Set(i int64, v []byte) bool {
	if i < 0 {
		i += l.n
	}
	if i < 0 || i >= l.n {
		return false
	}
	l.changed = true
	if l.ver == 0 {
		l.items[i] = v
		if !l.fits() {
			l.external()
		}
		return true
	}
	l.put(l.head+i, v, l.insideOpen(l.head+i))
	return true
}

// listPageLen is how many elements Each reads at once.
const listPageLen = 256

// Each calls fn on each element with its index, from the head (or from
// the tail when reverse), until fn returns false; an external list is
// read a page at a time.
func (l *List) Each(reverse bool, fn func(i int64, v []byte) bool) error {
	for from := int64(0); from < l.n; from += listPageLen {
		to := min(from+listPageLen, l.n)
		idx := make([]int64, 0, to-from)
		for j := from; j < to; j++ {
			if reverse {
				idx = append(idx, l.n-1-j)
			} else {
				idx = append(idx, j)
			}
		}
		page, err := l.read(idx)
		if err != nil {
			return err
		}
		for k, v := range page {
			if !fn(idx[k], v) {
				return nil
			}
		}
	}
	return nil
}

// Insert puts v before (or after) the first element equal to pivot and
// returns the new length, or -1 when pivot is not there.
func (l *List) Insert(pivot, v []byte, before bool) (int64, error) {
	at := int64(-1)
	if err := l.Each(false, func(i int64, e []byte) bool {
		if bytes.Equal(e, pivot) {
			at = i
			return false
		}
		return true
	}); err != nil {
		return 0, err
	}
	if at < 0 {
		return -1, nil
	}
	if !before {
		at++
	}
	if err := l.InsertAt(at, v); err != nil {
		return 0, err
	}
	return l.n, nil
}

// InsertAt puts v at index i (0 ≤ i ≤ Len), shifting the shorter side.
func (l *List) InsertAt(i int64, v []byte) error {
	l.changed = true
	if l.ver == 0 {
		l.items = slices.Insert(l.items, int(i), v)
		l.n++
		if !l.fits() {
			l.external()
		}
		return nil
	}
	if i <= l.n-i {
		// Elements 0..i-1 move one position towards the head.
		var side [][]byte
		if i > 0 {
			var err error
			if side, err = l.Range(0, i-1); err != nil {
				return err
			}
		}
		l.head--
		for j, e := range side {
			l.put(l.head+int64(j), e, true)
		}
	} else {
		side, err := l.Range(i, l.n-1)
		if err != nil {
			return err
		}
		for j, e := range side {
			l.put(l.head+i+1+int64(j), e, true)
		}
	}
	l.put(l.head+i, v, true)
	l.n++
	return nil
}

// Remove removes up to count elements equal to v (count 0: all; negative:
// from the tail) and returns how many it removed.
func (l *List) Remove(count int64, v []byte) (int64, error) {
	var drop []int64
	if err := l.Each(count < 0, func(i int64, e []byte) bool {
		if bytes.Equal(e, v) {
			drop = append(drop, i)
		}
		return count == 0 || int64(len(drop)) < max(count, -count)
	}); err != nil {
		return 0, err
	}
	if len(drop) == 0 {
		return 0, nil
	}
	slices.Sort(drop)
	if err := l.removeAt(drop); err != nil {
		return 0, err
	}
	return int64(len(drop)), nil
}

// removeAt removes the elements at the sorted indexes drop: an external
// list closes the gaps from whichever end moves fewer elements.
func (l *List) removeAt(drop []int64) error {
	l.changed = true
	if l.ver == 0 {
		for k := len(drop) - 1; k >= 0; k-- {
			l.items = slices.Delete(l.items, int(drop[k]), int(drop[k])+1)
		}
		l.n = int64(len(l.items))
		return nil
	}
	first, last := drop[0], drop[len(drop)-1]
	if first+1 <= l.n-last {
		// Keep 0..last that survive, packed towards the tail end.
		kept, err := l.keptBetween(0, last, drop)
		if err != nil {
			return err
		}
		newHead := l.head + int64(len(drop))
		for p := l.head; p < newHead; p++ {
			l.drop(p, true)
		}
		for j, e := range kept {
			l.put(newHead+int64(j), e, true)
		}
		l.head = newHead
	} else {
		kept, err := l.keptBetween(first, l.n-1, drop)
		if err != nil {
			return err
		}
		for j, e := range kept {
			l.put(l.head+first+int64(j), e, true)
		}
		for p := l.head + l.n - int64(len(drop)); p < l.head+l.n; p++ {
			l.drop(p, true)
		}
	}
	l.n -= int64(len(drop))
	return nil
}

// keptBetween returns the elements from..to not in drop.
func (l *List) keptBetween(from, to int64, drop []int64) ([][]byte, error) {
	idx := make([]int64, 0, to-from+1)
	for i, k := from, 0; i <= to; i++ {
		for k < len(drop) && drop[k] < i {
			k++
		}
		if k < len(drop) && drop[k] == i {
			continue
		}
		idx = append(idx, i)
	}
	return l.read(idx)
}

// Trim keeps elements start..stop (LTRIM's indexes) and deletes the rest.
func (l *List) Trim(start, stop int64) {
	start, stop = l.Normalize(start, stop)
	if start > stop || start >= l.n {
		start, stop = l.n, l.n-1 // nothing kept
	}
	if start == 0 && stop == l.n-1 {
		return
	}
	l.changed = true
	if l.ver == 0 {
		l.items = l.items[start : stop+1]
		l.n = int64(len(l.items))
		return
	}
	for i := int64(0); i < start; i++ {
		l.drop(l.head+i, false)
	}
	for i := stop + 1; i < l.n; i++ {
		l.drop(l.head+i, false)
	}
	l.head += start
	l.n = stop - start + 1
}

// Commit returns the new value (del: the list is now empty), whether
// the value changed, the element ops and whether they are phased: every
// store is of a position outside the old range and every delete of one
// outside the new range, so that the stores may be written before the
// value and the deletes after it, each group concurrently, with no intent
// record (the package comment). Call it when Changed.
func (l *List) Commit() (v keyspace.Value, del, valueChanged bool, ops []keyspace.Op, phased bool) {
	if l.n == 0 {
		return keyspace.Value{}, true, true, nil, false
	}
	v = keyspace.Value{Type: keyspace.TypeList, At: l.at, Ver: l.ver}
	if l.ver == 0 {
		size := 0
		for _, e := range l.items {
			size += len(e) + 4
		}
		b := encodeHead(encInline, l.n, size)
		for _, e := range l.items {
			b = appendString(b, e)
		}
		v.V = b
		return v, false, true, nil, false
	}
	v.V = binary.AppendVarint(encodeHead(encExternal, l.n, binary.MaxVarintLen64), l.head)
	ops = make([]keyspace.Op, 0, len(l.order))
	// Stores first, then deletes (the phased order).
	for _, del := range []bool{false, true} {
		for _, p := range l.order {
			if val := l.pend[p]; (val == nil) == del {
				ops = append(ops, keyspace.ElementOp(l.posKey(p), val, del))
			}
		}
	}
	changed := l.n != l.openN || l.head != l.openHead || l.ver != l.openVer
	return v, false, changed, ops, !l.shifted && l.ver == l.openVer
}
