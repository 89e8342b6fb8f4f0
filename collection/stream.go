package collection

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/keyspace"
)

// Streams. A stream is always external (its value has a version from the
// first XADD or XGROUP CREATE MKSTREAM): the value holds the stream's
// counters (length, last, first and max-deleted IDs, entries added), the
// state of its tail node and its consumer groups with their consumers;
// the elements are, under the value's version:
//   - 'e' ‖ ms ‖ seq (8 bytes each, big-endian): an entry, so entries
//     sort in ID order. Its value: the start ID of its node (16 bytes),
//     then the field and value count and the strings (appendString).
//   - 'n' ‖ start ID: a closed node, Redis's listpack of at most
//     stream-node-max-entries entries: its live entry count, last ID and
//     the next node's start ID. The tail node lives in the stream's value
//     until an XADD closes it. Nodes exist so that approximate trims
//     (MAXLEN ~, MINID ~, LIMIT) remove what Redis removes: whole nodes
//     from the head.
//   - 'p' ‖ group id (4 bytes) ‖ entry ID: a pending entry of the group
//     (its PEL): the owning consumer's id, the delivery time and count.
//     Group and consumer ids are never reused within a stream, so an
//     XGROUP DESTROY or DELCONSUMER is one value write: the pending
//     entries of a group or consumer that no longer exists read as absent
//     (and are reclaimed with the stream).
//
// Costs in array operations: XADD is the entry's store and the value's
// (and a node record's store once per node); a head trim deletes the
// entries it removes after one listing of them, plus a node record read
// per node; XRANGE is one listing of the keys it returns and their reads;
// XREVRANGE lists backwards in windows of doubling width, so about the
// same. The server writes a command's ops as one intent record.

// StreamID is an entry ID.
type StreamID struct{ Ms, Seq uint64 }

// MaxStreamID is the largest ID.
var MaxStreamID = StreamID{math.MaxUint64, math.MaxUint64}

func (a StreamID) String() string {
	return strconv.FormatUint(a.Ms, 10) + "-" + strconv.FormatUint(a.Seq, 10)
}

// Compare orders IDs.
func (a StreamID) Compare(b StreamID) int {
	switch {
	case a.Ms < b.Ms:
		return -1
	case a.Ms > b.Ms:
		return 1
	case a.Seq < b.Seq:
		return -1
	case a.Seq > b.Seq:
		return 1
	}
	return 0
}

// IsZero reports whether a is 0-0.
func (a StreamID) IsZero() bool { return a.Ms == 0 && a.Seq == 0 }

// Next is the ID after a; ok false for the maximum.
func (a StreamID) Next() (StreamID, bool) {
	switch {
	case a.Seq < math.MaxUint64:
		return StreamID{a.Ms, a.Seq + 1}, true
	case a.Ms < math.MaxUint64:
		return StreamID{a.Ms + 1, 0}, true
	}
	return a, false
}

// Prev is the ID before a; ok false for 0-0.
func (a StreamID) Prev() (StreamID, bool) {
	switch {
	case a.Seq > 0:
		return StreamID{a.Ms, a.Seq - 1}, true
	case a.Ms > 0:
		return StreamID{a.Ms - 1, math.MaxUint64}, true
	}
	return a, false
}

func (a StreamID) bytes() []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, a.Ms)
	binary.BigEndian.PutUint64(b[8:], a.Seq)
	return b
}

func idFrom(b []byte) StreamID {
	return StreamID{binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:16])}
}

// StreamEntry is an entry: its ID and its fields and values, alternating.
// Fields nil: the entry was deleted (a pending entry's history).
type StreamEntry struct {
	ID     StreamID
	Fields [][]byte
}

// StreamLimits are stream-node-max-entries and -bytes.
type StreamLimits struct{ NodeEntries, NodeBytes int64 }

// DefaultStreamLimits are Redis 7.0's.
var DefaultStreamLimits = StreamLimits{NodeEntries: 100, NodeBytes: 4096}

// StreamGroup is a consumer group.
type StreamGroup struct {
	Name   []byte
	id     uint32
	LastID StreamID
	// EntriesRead is Redis's entries-read, -1 when not known.
	EntriesRead int64
	Pending     int64
	Consumers   []*StreamConsumer
	nextCid     uint32
	// pelMax is the largest ID ever added to the PEL: an entry after it
	// cannot be pending (XREADGROUP > reads no PEL then).
	pelMax StreamID
}

// StreamConsumer is a group's consumer.
type StreamConsumer struct {
	Name     []byte
	id       uint32
	SeenTime int64
	Pending  int64
}

// Pending is a pending entry.
type Pending struct {
	ID           StreamID
	Consumer     *StreamConsumer
	DeliveryTime int64
	Count        int64
}

// ErrStreamID is an ID or an XSETID argument the stream refuses (the
// message is Redis's).
var ErrStreamID = errors.New("ERR The ID specified in XADD is equal or smaller than the target stream top item")

// RefusedError is an argument a stream command refuses; its text is
// Redis's reply.
type RefusedError string

func (e RefusedError) Error() string { return string(e) }

// Stream is one stream as a command sees it.
type Stream struct {
	ctx    context.Context
	src    Source
	lim    StreamLimits
	exists bool
	at     int64
	ver    uint64

	Length       int64
	LastID       StreamID
	FirstID      StreamID
	MaxDeleted   StreamID
	EntriesAdded int64

	// The tail node: its start ID, entries ever added to it (live or
	// deleted), their size and how many are live; headNode is the first
	// node's start (equal to tailStart when there is one node). tailOpen
	// false: no tail node (the next XADD starts one).
	tailOpen                       bool
	tailStart, headNode            StreamID
	tailTotal, tailBytes, tailLive int64

	Groups  []*StreamGroup
	nextGid uint32

	changed bool
	pend    map[string][]byte // element writes by element key (nil: deleted)
	order   []string
}

// OpenStream returns stream value v (found false: none yet) for a
// command.
func OpenStream(ctx context.Context, src Source, v keyspace.Value, found bool, lim StreamLimits) (*Stream, error) {
	s := &Stream{ctx: ctx, src: src, lim: lim}
	if !found {
		return s, nil
	}
	if v.Type != keyspace.TypeStream {
		return nil, keyspace.ErrWrongType
	}
	if err := s.decode(v); err != nil {
		return nil, err
	}
	return s, nil
}

// Exists reports whether the stream exists (before or after the command's
// writes).
func (s *Stream) Exists() bool { return s.exists }

// Changed reports whether the command changed the stream.
func (s *Stream) Changed() bool { return s.changed }

// Create makes an empty stream of a missing key (XADD, MKSTREAM).
func (s *Stream) Create() {
	if !s.exists {
		s.exists, s.changed = true, true
		s.ver = keyspace.NewVersion()
	}
}

// byte reader for decode.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	x, k := binary.Uvarint(r.b)
	if k <= 0 {
		r.err = ErrBadValue
		return 0
	}
	r.b = r.b[k:]
	return x
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	x, k := binary.Varint(r.b)
	if k <= 0 {
		r.err = ErrBadValue
		return 0
	}
	r.b = r.b[k:]
	return x
}

func (r *reader) id() StreamID { return StreamID{r.uvarint(), r.uvarint()} }

func (r *reader) str() []byte {
	if r.err != nil {
		return nil
	}
	var s []byte
	s, r.b, r.err = readString(r.b)
	return slices.Clone(s)
}

func appendID(b []byte, id StreamID) []byte {
	return binary.AppendUvarint(binary.AppendUvarint(b, id.Ms), id.Seq)
}

func (s *Stream) decode(v keyspace.Value) error {
	enc, n, rest, err := decodeHead(v.V)
	if err != nil || enc != encExternal || v.Ver == 0 {
		return ErrBadValue
	}
	s.exists, s.at, s.ver, s.Length = true, v.At, v.Ver, n
	r := &reader{b: rest}
	s.LastID, s.FirstID, s.MaxDeleted = r.id(), r.id(), r.id()
	s.EntriesAdded = int64(r.uvarint())
	s.tailOpen = r.uvarint() == 1
	s.tailStart, s.headNode = r.id(), r.id()
	s.tailTotal, s.tailBytes, s.tailLive = int64(r.uvarint()), int64(r.uvarint()), int64(r.uvarint())
	s.nextGid = uint32(r.uvarint())
	ng := r.uvarint()
	for i := uint64(0); i < ng && r.err == nil; i++ {
		g := &StreamGroup{Name: r.str(), id: uint32(r.uvarint()), LastID: r.id(), EntriesRead: r.varint(),
			Pending: int64(r.uvarint()), nextCid: uint32(r.uvarint()), pelMax: r.id()}
		nc := r.uvarint()
		for j := uint64(0); j < nc && r.err == nil; j++ {
			g.Consumers = append(g.Consumers, &StreamConsumer{Name: r.str(), id: uint32(r.uvarint()),
				SeenTime: r.varint(), Pending: int64(r.uvarint())})
		}
		s.Groups = append(s.Groups, g)
	}
	if r.err != nil || len(r.b) != 0 {
		return ErrBadValue
	}
	return nil
}

func (s *Stream) encode() []byte {
	b := encodeHead(encExternal, s.Length, 128)
	b = appendID(appendID(appendID(b, s.LastID), s.FirstID), s.MaxDeleted)
	b = binary.AppendUvarint(b, uint64(s.EntriesAdded))
	open := uint64(0)
	if s.tailOpen {
		open = 1
	}
	b = binary.AppendUvarint(b, open)
	b = appendID(appendID(b, s.tailStart), s.headNode)
	for _, x := range []int64{s.tailTotal, s.tailBytes, s.tailLive} {
		b = binary.AppendUvarint(b, uint64(x))
	}
	b = binary.AppendUvarint(b, uint64(s.nextGid))
	b = binary.AppendUvarint(b, uint64(len(s.Groups)))
	for _, g := range s.Groups {
		b = appendString(b, g.Name)
		b = binary.AppendUvarint(b, uint64(g.id))
		b = appendID(b, g.LastID)
		b = binary.AppendVarint(b, g.EntriesRead)
		b = binary.AppendUvarint(b, uint64(g.Pending))
		b = binary.AppendUvarint(b, uint64(g.nextCid))
		b = appendID(b, g.pelMax)
		b = binary.AppendUvarint(b, uint64(len(g.Consumers)))
		for _, c := range g.Consumers {
			b = appendString(b, c.Name)
			b = binary.AppendUvarint(b, uint64(c.id))
			b = binary.AppendVarint(b, c.SeenTime)
			b = binary.AppendUvarint(b, uint64(c.Pending))
		}
	}
	return b
}

// Element keys.

func (s *Stream) sub(kind byte, parts ...[]byte) []byte {
	k := keyspace.ElementKey(s.ver, []byte{kind})
	for _, p := range parts {
		k = append(k, p...)
	}
	return k
}

func (s *Stream) entryKey(id StreamID) []byte { return s.sub('e', id.bytes()) }
func (s *Stream) nodeKey(id StreamID) []byte  { return s.sub('n', id.bytes()) }

func gidBytes(g uint32) []byte { return binary.BigEndian.AppendUint32(nil, g) }

func (s *Stream) pelPrefix(g *StreamGroup) []byte { return s.sub('p', gidBytes(g.id)) }
func (s *Stream) pelKey(g *StreamGroup, id StreamID) []byte {
	return s.sub('p', gidBytes(g.id), id.bytes())
}

func (s *Stream) put(k []byte, v []byte) {
	if s.pend == nil {
		s.pend = map[string][]byte{}
	}
	if _, ok := s.pend[string(k)]; !ok {
		s.order = append(s.order, string(k))
	}
	if v == nil {
		s.pend[string(k)] = nil
	} else {
		s.pend[string(k)] = append(make([]byte, 0, len(v)), v...)
	}
	s.changed = true
}

func (s *Stream) get(k []byte) ([]byte, bool, error) {
	if v, ok := s.pend[string(k)]; ok {
		return v, v != nil, nil
	}
	v, found, err := s.src.Element(s.ctx, k)
	if err != nil {
		return nil, false, fmt.Errorf("collection: stream element: %w", err)
	}
	return v, found, nil
}

// keys lists up to n element keys under prefix after after (nil: from
// the first), with the command's own writes merged in.
func (s *Stream) keys(prefix, after []byte, n int) ([][]byte, error) {
	var out [][]byte
	var bound []byte // the last key listed, when more may follow
	for a := after; ; {
		page, next, err := s.src.ElementKeys(s.ctx, prefix, a, max(n-len(out), 1), array.Fresh())
		if err != nil {
			return nil, fmt.Errorf("collection: listing a stream: %w", err)
		}
		for _, k := range page {
			if _, mine := s.pend[string(k)]; !mine {
				out = append(out, k)
			}
		}
		if next == nil {
			bound = nil
			break
		}
		bound, a = next, next
		if len(page) > 0 {
			bound = page[len(page)-1]
		}
		if len(out) >= n {
			break
		}
	}
	for k, v := range s.pend {
		kb := []byte(k)
		if v != nil && bytes.HasPrefix(kb, prefix) && (after == nil || bytes.Compare(kb, after) > 0) &&
			(bound == nil || bytes.Compare(kb, bound) <= 0) {
			out = append(out, kb)
		}
	}
	slices.SortFunc(out, bytes.Compare)
	if len(out) > n {
		out = out[:n]
	}
	return out, nil
}

// entry decoding: node start, then the fields.
func encodeEntry(node StreamID, fields [][]byte) []byte {
	size := 16 + 2
	for _, f := range fields {
		size += len(f) + 2
	}
	b := append(make([]byte, 0, size), node.bytes()...)
	b = binary.AppendUvarint(b, uint64(len(fields)))
	for _, f := range fields {
		b = appendString(b, f)
	}
	return b
}

func decodeEntry(b []byte) (StreamID, [][]byte, error) {
	if len(b) < 16 {
		return StreamID{}, nil, ErrBadValue
	}
	r := &reader{b: b[16:]}
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)) {
		return StreamID{}, nil, ErrBadValue
	}
	fields := make([][]byte, 0, n)
	for range n {
		fields = append(fields, r.str())
	}
	if r.err != nil || len(r.b) != 0 {
		return StreamID{}, nil, ErrBadValue
	}
	return idFrom(b), fields, nil
}

// NextID is the ID an XADD with ms-* (seqAuto) or * (msAuto, now the
// clock) gets; ok false when none is left (the last ID is the maximum).
func (s *Stream) NextID(now uint64, ms uint64, msAuto, seqAuto bool) (StreamID, bool) {
	switch {
	case msAuto:
		if now > s.LastID.Ms {
			return StreamID{now, 0}, true
		}
		return s.LastID.Next()
	case seqAuto:
		if ms > s.LastID.Ms {
			return StreamID{ms, 0}, true
		}
		if ms == s.LastID.Ms {
			if s.LastID.Seq == math.MaxUint64 {
				return StreamID{}, false
			}
			return StreamID{ms, s.LastID.Seq + 1}, true
		}
		return StreamID{}, false
	}
	return StreamID{}, false
}

// Add appends an entry with id, which must be after LastID (and not
// 0-0).
func (s *Stream) Add(id StreamID, fields [][]byte) error {
	if id.Compare(s.LastID) <= 0 {
		return ErrStreamID
	}
	s.Create()
	size := int64(2)
	for _, f := range fields {
		size += int64(len(f)) + 1
	}
	if s.tailOpen && (s.lim.NodeBytes > 0 && s.tailBytes+size >= s.lim.NodeBytes ||
		s.lim.NodeEntries > 0 && s.tailTotal >= s.lim.NodeEntries || s.tailLive == 0) {
		// Close the tail node: its record, pointing at the new one.
		s.put(s.nodeKey(s.tailStart), encodeNode(s.tailLive, s.LastID, id))
		s.tailOpen = false
	}
	if !s.tailOpen {
		if s.Length == 0 {
			s.headNode = id
		}
		s.tailOpen, s.tailStart, s.tailTotal, s.tailBytes, s.tailLive = true, id, 0, 0, 0
	}
	s.put(s.entryKey(id), encodeEntry(s.tailStart, fields))
	s.tailTotal++
	s.tailLive++
	s.tailBytes += size
	if s.Length == 0 {
		s.FirstID = id
	}
	s.Length++
	s.LastID = id
	s.EntriesAdded++
	return nil
}

func encodeNode(live int64, last, next StreamID) []byte {
	b := binary.AppendUvarint(nil, uint64(live))
	return append(appendID(b, last), next.bytes()...)
}

// node is a node's state: the tail's from the value, a closed one's from
// its record.
type node struct {
	start, last, next StreamID
	live              int64
	tail              bool
}

func (s *Stream) readNode(start StreamID) (node, error) {
	if s.tailOpen && start == s.tailStart {
		return node{start: start, last: s.LastID, live: s.tailLive, tail: true}, nil
	}
	b, found, err := s.get(s.nodeKey(start))
	if err != nil {
		return node{}, err
	}
	if !found {
		return node{}, fmt.Errorf("collection: stream node %v missing: %w", start, ErrBadValue)
	}
	r := &reader{b: b}
	n := node{start: start, live: int64(r.uvarint()), last: r.id()}
	if r.err != nil || len(r.b) != 16 {
		return node{}, ErrBadValue
	}
	n.next = idFrom(r.b)
	return n, nil
}

func (s *Stream) writeNode(n node) {
	if n.tail {
		s.tailLive = n.live
		s.changed = true
		return
	}
	s.put(s.nodeKey(n.start), encodeNode(n.live, n.last, n.next))
}

// Get reads the entry with id.
func (s *Stream) Get(id StreamID) ([][]byte, bool, error) {
	if !s.exists {
		return nil, false, nil
	}
	b, found, err := s.get(s.entryKey(id))
	if err != nil || !found {
		return nil, false, err
	}
	_, f, err := decodeEntry(b)
	return f, err == nil, err
}

// readEntries reads the entries under keys (one that vanished since
// its listing is left out).
func (s *Stream) readEntries(keys [][]byte) ([]StreamEntry, error) {
	vals := make([][]byte, len(keys))
	found := make([]bool, len(keys))
	var fetch [][]byte
	var at []int
	for i, k := range keys {
		if v, ok := s.pend[string(k)]; ok {
			vals[i], found[i] = v, v != nil
			continue
		}
		fetch = append(fetch, k)
		at = append(at, i)
	}
	fv, ff, err := readAll(s.ctx, s.src, fetch)
	if err != nil {
		return nil, fmt.Errorf("collection: reading stream entries: %w", err)
	}
	for j, i := range at {
		vals[i], found[i] = fv[j], ff[j]
	}
	out := make([]StreamEntry, 0, len(keys))
	for i, k := range keys {
		if !found[i] {
			continue
		}
		_, f, err := decodeEntry(vals[i])
		if err != nil {
			return nil, err
		}
		out = append(out, StreamEntry{ID: idFrom(k[len(k)-16:]), Fields: f})
	}
	return out, nil
}

// Range returns up to count entries (count ≤ 0: all) with IDs in
// [start, end], from start, or from end when rev.
func (s *Stream) Range(start, end StreamID, count int, rev bool) ([]StreamEntry, error) {
	if !s.exists || s.Length == 0 || start.Compare(end) > 0 {
		return nil, nil
	}
	if count <= 0 {
		count = math.MaxInt
	}
	start = maxID(start, s.FirstID)
	end = minID(end, s.LastID)
	if start.Compare(end) > 0 {
		return nil, nil
	}
	var keys [][]byte
	var err error
	if rev {
		keys, err = s.revKeys(start, end, count)
	} else {
		keys, err = s.fwdKeys(start, end, count)
	}
	if err != nil {
		return nil, err
	}
	return s.readEntries(keys)
}

func maxID(a, b StreamID) StreamID {
	if a.Compare(b) >= 0 {
		return a
	}
	return b
}

func minID(a, b StreamID) StreamID {
	if a.Compare(b) <= 0 {
		return a
	}
	return b
}

// fwdKeys lists up to count entry keys in [start, end].
func (s *Stream) fwdKeys(start, end StreamID, count int) ([][]byte, error) {
	prefix := s.sub('e')
	var after []byte
	if p, ok := start.Prev(); ok {
		after = s.entryKey(p)
	}
	endKey := s.entryKey(end)
	var out [][]byte
	for len(out) < count {
		want := min(count-len(out), listPage)
		page, err := s.keys(prefix, after, want)
		if err != nil {
			return nil, err
		}
		for _, k := range page {
			if bytes.Compare(k, endKey) > 0 {
				return out, nil
			}
			out = append(out, k)
		}
		if len(page) < want {
			break
		}
		after = page[len(page)-1]
	}
	return out, nil
}

// revKeys lists up to count entry keys in [start, end], the last first:
// forward listings of windows ending at end, each twice as wide (in
// milliseconds) as the one before.
func (s *Stream) revKeys(start, end StreamID, count int) ([][]byte, error) {
	var out [][]byte
	hi := end
	width := uint64(1)
	for len(out) < count {
		lo := start
		if hi.Ms-start.Ms > width { // hi ≥ start: no overflow
			lo = StreamID{hi.Ms - width, 0}
		}
		win, err := s.fwdKeys(lo, hi, math.MaxInt)
		if err != nil {
			return nil, err
		}
		for i := len(win) - 1; i >= 0 && len(out) < count; i-- {
			out = append(out, win[i])
		}
		if lo == start {
			break
		}
		var ok bool
		if hi, ok = lo.Prev(); !ok {
			break
		}
		if width < 1<<62 {
			width *= 2
		}
	}
	return out, nil
}

// Delete removes the entries ids and returns how many were there.
func (s *Stream) Delete(ids []StreamID) (int64, error) {
	if !s.exists {
		return 0, nil
	}
	var n int64
	firstGone := false
	for _, id := range ids {
		b, found, err := s.get(s.entryKey(id))
		if err != nil {
			return n, err
		}
		if !found {
			continue
		}
		start, _, err := decodeEntry(b)
		if err != nil {
			return n, err
		}
		nd, err := s.readNode(start)
		if err != nil {
			return n, err
		}
		nd.live--
		s.writeNode(nd)
		s.put(s.entryKey(id), nil)
		s.Length--
		n++
		if id.Compare(s.MaxDeleted) > 0 {
			s.MaxDeleted = id
		}
		if id == s.FirstID {
			firstGone = true
		}
	}
	if firstGone {
		if err := s.refreshFirst(); err != nil {
			return n, err
		}
	}
	return n, nil
}

// refreshFirst finds FirstID (after a delete or trim of the first entry).
func (s *Stream) refreshFirst() error {
	s.changed = true
	if s.Length == 0 {
		s.FirstID = StreamID{}
		return nil
	}
	k, err := s.keys(s.sub('e'), nil, 1)
	if err != nil {
		return err
	}
	if len(k) == 0 {
		return fmt.Errorf("collection: stream of %d entries lists none: %w", s.Length, ErrBadValue)
	}
	s.FirstID = idFrom(k[0][len(k[0])-16:])
	return nil
}

// Trim removes entries from the head, Redis's way (streamTrim): by
// maxLen (byID false) or below minID; approx trims whole nodes only;
// limit > 0 caps the entries removed (approx only). It returns how many.
func (s *Stream) Trim(byID bool, maxLen int64, minID StreamID, approx bool, limit int64) (int64, error) {
	if !s.exists {
		return 0, nil
	}
	var deleted int64
	for s.Length > 0 {
		if !byID && s.Length <= maxLen {
			break
		}
		nd, err := s.readNode(s.headNode)
		if err != nil {
			return deleted, err
		}
		if limit > 0 && deleted+nd.live > limit {
			break
		}
		remove := !byID && s.Length-nd.live >= maxLen || byID && nd.last.Compare(minID) < 0
		if remove {
			if err := s.dropHead(nd, nd.live); err != nil {
				return deleted, err
			}
			deleted += nd.live
			if nd.tail {
				s.tailOpen = false
				break
			}
			s.put(s.nodeKey(nd.start), nil)
			s.headNode = nd.next
			s.changed = true
			continue
		}
		if approx {
			break
		}
		keys, err := s.keys(s.sub('e'), nil, int(nd.live))
		if err != nil {
			return deleted, err
		}
		k := 0
		for k < len(keys) && (!byID && s.Length > maxLen || byID && idFrom(keys[k][len(keys[k])-16:]).Compare(minID) < 0) {
			s.put(keys[k], nil)
			s.Length--
			nd.live--
			deleted++
			k++
		}
		s.writeNode(nd)
		break
	}
	if deleted > 0 {
		if err := s.refreshFirst(); err != nil {
			return deleted, err
		}
	}
	return deleted, nil
}

// dropHead deletes the first n entries (the head node's live ones).
func (s *Stream) dropHead(nd node, n int64) error {
	if n == 0 {
		return nil
	}
	keys, err := s.keys(s.sub('e'), nil, int(n))
	if err != nil {
		return err
	}
	for _, k := range keys {
		s.put(k, nil)
	}
	s.Length -= int64(len(keys))
	return nil
}

// SetID is XSETID: the last ID, and with entriesAdded ≥ 0 the entries
// added and max deleted ID; it returns Redis's error messages.
func (s *Stream) SetID(id StreamID, entriesAdded int64, maxDel StreamID, withExtra bool) error {
	if withExtra {
		if id.Compare(maxDel) < 0 {
			return RefusedError("ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id")
		}
		if s.Length > entriesAdded {
			return RefusedError("ERR The entries_added specified in XSETID is smaller than the target stream length")
		}
	}
	if s.Length > 0 {
		// The last entry there is, not the last ID given (Redis's
		// streamLastValidID).
		last, err := s.Range(StreamID{}, MaxStreamID, 1, true)
		if err != nil {
			return err
		}
		if len(last) > 0 && id.Compare(last[0].ID) < 0 {
			return RefusedError("ERR The ID specified in XSETID is smaller than the target stream top item")
		}
	}
	s.LastID = id
	if withExtra {
		s.EntriesAdded = entriesAdded
		s.MaxDeleted = maxDel
	}
	s.changed = true
	return nil
}

// Groups.

// Group returns the group named name.
func (s *Stream) Group(name []byte) *StreamGroup {
	for _, g := range s.Groups {
		if bytes.Equal(g.Name, name) {
			return g
		}
	}
	return nil
}

// CreateGroup adds group name at id; false when it exists.
func (s *Stream) CreateGroup(name []byte, id StreamID, entriesRead int64) bool {
	if s.Group(name) != nil {
		return false
	}
	s.nextGid++
	// In name order, as Redis's radix tree lists them.
	i, _ := slices.BinarySearchFunc(s.Groups, name, func(g *StreamGroup, n []byte) int { return bytes.Compare(g.Name, n) })
	s.Groups = slices.Insert(s.Groups, i, &StreamGroup{Name: slices.Clone(name), id: s.nextGid, LastID: id, EntriesRead: entriesRead})
	s.changed = true
	return true
}

// DestroyGroup removes group name; false when there is none. Its
// pending entries are left to the stream's reclaim.
func (s *Stream) DestroyGroup(name []byte) bool {
	i := slices.IndexFunc(s.Groups, func(g *StreamGroup) bool { return bytes.Equal(g.Name, name) })
	if i < 0 {
		return false
	}
	s.Groups = slices.Delete(s.Groups, i, i+1)
	s.changed = true
	return true
}

// SetGroupID moves group g's last delivered ID (XGROUP SETID).
func (s *Stream) SetGroupID(g *StreamGroup, id StreamID, entriesRead int64) {
	g.LastID, g.EntriesRead = id, entriesRead
	s.changed = true
}

// Consumer returns g's consumer name (nil: none).
func (g *StreamGroup) Consumer(name []byte) *StreamConsumer {
	for _, c := range g.Consumers {
		if bytes.Equal(c.Name, name) {
			return c
		}
	}
	return nil
}

func (g *StreamGroup) consumerByID(id uint32) *StreamConsumer {
	for _, c := range g.Consumers {
		if c.id == id {
			return c
		}
	}
	return nil
}

// CreateConsumer adds consumer name to g (seen now) and reports whether
// it is new.
func (s *Stream) CreateConsumer(g *StreamGroup, name []byte, now int64) (*StreamConsumer, bool) {
	if c := g.Consumer(name); c != nil {
		return c, false
	}
	g.nextCid++
	c := &StreamConsumer{Name: slices.Clone(name), id: g.nextCid, SeenTime: now}
	i, _ := slices.BinarySearchFunc(g.Consumers, name, func(c *StreamConsumer, n []byte) int { return bytes.Compare(c.Name, n) })
	g.Consumers = slices.Insert(g.Consumers, i, c)
	s.changed = true
	return c, true
}

// Seen marks consumer c seen at now.
func (s *Stream) Seen(c *StreamConsumer, now int64) {
	c.SeenTime = now
	s.changed = true
}

// DeleteConsumer removes g's consumer name and returns how many entries
// it had pending (they leave the PEL with it), -1 when there is none.
func (s *Stream) DeleteConsumer(g *StreamGroup, name []byte) int64 {
	i := slices.IndexFunc(g.Consumers, func(c *StreamConsumer) bool { return bytes.Equal(c.Name, name) })
	if i < 0 {
		return -1
	}
	n := g.Consumers[i].Pending
	g.Pending -= n
	g.Consumers = slices.Delete(g.Consumers, i, i+1)
	s.changed = true
	return n
}

func encodePending(p Pending) []byte {
	b := binary.AppendUvarint(nil, uint64(p.Consumer.id))
	b = binary.AppendVarint(b, p.DeliveryTime)
	return binary.AppendUvarint(b, uint64(p.Count))
}

func (g *StreamGroup) decodePending(id StreamID, b []byte) (Pending, bool, error) {
	r := &reader{b: b}
	cid, t, n := uint32(r.uvarint()), r.varint(), int64(r.uvarint())
	if r.err != nil || len(r.b) != 0 {
		return Pending{}, false, ErrBadValue
	}
	c := g.consumerByID(cid)
	if c == nil {
		return Pending{}, false, nil // its consumer was deleted
	}
	return Pending{ID: id, Consumer: c, DeliveryTime: t, Count: n}, true, nil
}

// PendingEntry reads g's pending entry id.
func (s *Stream) PendingEntry(g *StreamGroup, id StreamID) (Pending, bool, error) {
	if id.Compare(g.pelMax) > 0 {
		return Pending{}, false, nil
	}
	b, found, err := s.get(s.pelKey(g, id))
	if err != nil || !found {
		return Pending{}, false, err
	}
	return g.decodePending(id, b)
}

// SetPending stores p in g's PEL: old is what it replaces (found false:
// nothing), for the consumers' counts.
func (s *Stream) SetPending(g *StreamGroup, p Pending, old Pending, found bool) {
	if found {
		old.Consumer.Pending--
	} else {
		g.Pending++
	}
	p.Consumer.Pending++
	if p.ID.Compare(g.pelMax) > 0 {
		g.pelMax = p.ID
	}
	s.put(s.pelKey(g, p.ID), encodePending(p))
}

// Ack removes g's pending entry id and reports whether it was pending.
func (s *Stream) Ack(g *StreamGroup, id StreamID) (bool, error) {
	p, found, err := s.PendingEntry(g, id)
	if err != nil || !found {
		return false, err
	}
	p.Consumer.Pending--
	g.Pending--
	s.put(s.pelKey(g, id), nil)
	return true, nil
}

// PendingRange calls fn on g's pending entries in [start, end] in ID
// order (consumer nil: all consumers'), until fn returns false.
func (s *Stream) PendingRange(g *StreamGroup, start, end StreamID, consumer *StreamConsumer, fn func(Pending) (bool, error)) error {
	if start.Compare(end) > 0 || g.Pending == 0 {
		return nil
	}
	prefix := s.pelPrefix(g)
	var after []byte
	if p, ok := start.Prev(); ok {
		after = s.pelKey(g, p)
	}
	endKey := s.pelKey(g, end)
	for {
		page, err := s.keys(prefix, after, 256)
		if err != nil {
			return err
		}
		if len(page) == 0 {
			return nil
		}
		for i, k := range page {
			if bytes.Compare(k, endKey) > 0 {
				page = page[:i]
				break
			}
		}
		vals := make([][]byte, len(page))
		found := make([]bool, len(page))
		var fetch [][]byte
		var at []int
		for i, k := range page {
			if v, ok := s.pend[string(k)]; ok {
				vals[i], found[i] = v, v != nil
				continue
			}
			fetch = append(fetch, k)
			at = append(at, i)
		}
		fv, ff, err := readAll(s.ctx, s.src, fetch)
		if err != nil {
			return fmt.Errorf("collection: reading pending entries: %w", err)
		}
		for j, i := range at {
			vals[i], found[i] = fv[j], ff[j]
		}
		for i, k := range page {
			if !found[i] {
				continue
			}
			p, ok, err := g.decodePending(idFrom(k[len(k)-16:]), vals[i])
			if err != nil {
				return err
			}
			if !ok || consumer != nil && p.Consumer != consumer {
				continue
			}
			more, err := fn(p)
			if err != nil || !more {
				return err
			}
		}
		if len(page) < 256 {
			return nil
		}
		after = page[len(page)-1]
	}
}

// EstimateEntriesRead is Redis's streamEstimateDistanceFromFirstEverEntry:
// the entries-read counter of a group at id, -1 when it cannot be known.
func (s *Stream) EstimateEntriesRead(id StreamID) int64 {
	if s.EntriesAdded == 0 {
		return 0
	}
	if s.Length == 0 && id.Compare(s.LastID) < 1 {
		return s.EntriesAdded
	}
	switch c := id.Compare(s.LastID); {
	case c == 0:
		return s.EntriesAdded
	case c > 0:
		return -1
	}
	if s.MaxDeleted.IsZero() || s.MaxDeleted.Compare(s.FirstID) < 0 {
		switch c := id.Compare(s.FirstID); {
		case c < 0:
			return s.EntriesAdded - s.Length
		case c == 0:
			return s.EntriesAdded - s.Length + 1
		}
	}
	return -1
}

// HasTombstones is Redis's streamRangeHasTombstones from start to the
// end.
func (s *Stream) HasTombstones(start StreamID) bool {
	if s.Length == 0 || s.MaxDeleted.IsZero() {
		return false
	}
	if s.FirstID.Compare(s.MaxDeleted) > 0 {
		return false
	}
	return start.Compare(s.MaxDeleted) <= 0
}

// Lag is a group's lag (XINFO), ok false when it cannot be known.
func (s *Stream) Lag(g *StreamGroup) (int64, bool) {
	if s.EntriesAdded == 0 {
		return 0, true
	}
	if g.EntriesRead >= 0 && !s.HasTombstones(g.LastID) {
		return s.EntriesAdded - g.EntriesRead, true
	}
	if r := s.EstimateEntriesRead(g.LastID); r >= 0 {
		return s.EntriesAdded - r, true
	}
	return 0, false
}

// Delivered advances g past id, an entry delivered with >
// (streamReplyWithRange's counters).
func (s *Stream) Delivered(g *StreamGroup, id StreamID) {
	if id.Compare(g.LastID) <= 0 {
		return
	}
	if g.EntriesRead >= 0 && !s.HasTombstones(id) {
		g.EntriesRead++
	} else if s.EntriesAdded > 0 {
		g.EntriesRead = s.EstimateEntriesRead(id)
	}
	g.LastID = id
	s.changed = true
}

// Commit returns the new value and the element ops (del is always false:
// an empty stream exists). Call it when Changed.
func (s *Stream) Commit() (v keyspace.Value, del, valueChanged bool, ops []keyspace.Op) {
	v = keyspace.Value{Type: keyspace.TypeStream, At: s.at, Ver: s.ver, V: s.encode()}
	ops = make([]keyspace.Op, 0, len(s.order))
	for _, k := range s.order {
		val := s.pend[k]
		ops = append(ops, keyspace.ElementOp([]byte(k), val, val == nil))
	}
	return v, false, true, ops
}
