// Package splitting is the Splitting mechanism (KVMD's RAID 6 counterpart):
// one split's user bytes are cut into k equal data shards, r parity shards
// are computed with an erasure code, and the k+r shards are stored under the
// split's data key on the k+r devices of its placement, shard i on the
// device at offset i (Env.At: Primary+i mod N on an unweighted array).
// Any k good shards of one write rebuild the split; more than r bad ones
// are reported as data loss, never as wrong bytes.
//
// Every shard is a complete internal value (format.Header ‖ RM fields ‖
// shard bytes) with RM format.RMSplitting, EC erasure.ReedSolomon and
// SplitLen the user bytes of the split, so the zero padding of the last
// data shards is stripped without any other shard. The RM fields are
// FieldsLen bytes:
//
//	off size field
//	0   1    k, data shards
//	1   1    r, parity shards
//	2   1    index of this shard (0..k-1 data, k..k+r-1 parity)
//	3   4    shard size in bytes, little-endian
//
// Invariants:
//
//   - Shards are combined only when they agree on everything one store
//     writes into them: version, code, k, r, shard size, split and object
//     lengths; and a shard counts only on the device its index names. A
//     stale shard (an older version) or a foreign piece (another RM) is
//     treated like a missing one, so it is never mixed into a result.
//   - The version returned is the newest one that has at least k good
//     shards. An older version is only considered within the width of the
//     newest one seen: shards beyond it are leftovers of an older, wider
//     geometry whose newer write may well have been acknowledged.
//   - k and r are read from the pieces, not from the configuration, so a
//     split written under another geometry is still read, repaired and
//     released correctly.
//   - Repairs write only devices that answered: a device that reported
//     device.ErrDeviceFailed is left for rebuild.
//   - Writes are out of place but for the primary's shard: shards 1.. of a
//     write go under the data key or the bank key, as the version selects
//     (mechanism.Banked), and the array gives an overwrite a version of
//     the other bank than the value it replaces (WritesOutOfPlace). An
//     overwrite cut short (a crash, devices failing under it) therefore
//     leaves the old value's shards 1.. whole, w-1 ≥ k of them: the old
//     value or the new one reads back, never neither. The primary's
//     shard, the commit point, is written after the others, and only once
//     they reached their quorum: a store that fails leaves the primary
//     naming the old value (or absence, or another mechanism's piece), so
//     the next store's version picks the bank the old value is not in.
//     Once the primary's shard was sent, a failure says nothing of whether
//     it landed (the answer may be what was lost): the store's error wraps
//     mechanism.ErrCommitUnknown, and its other shards stay.
//     Written with the others, a failed store's shard 0 would name its own
//     bank, and a second failed store would then overwrite the old value's
//     shards. A shard counts only under the key its version selects.
//   - A good shard 0 on the primary names the version to read: only its
//     bank is read. Without one, both banks are read and the newest write
//     with k shards wins, as for any lost piece.
package splitting

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
	"sync"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/erasure"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
)

// Name is the mechanism's name in configs.
const Name = "splitting"

// Defaults when a geometry is not configured: RAID 6 over six devices, as
// in the KVMD evaluation.
const (
	DefaultK = 4
	DefaultR = 2
)

// FieldsLen is the length of the fixed RM fields of every shard; a block
// table may follow them (see BlockSize).
const FieldsLen = 7

// BlockSize is the unit of a range read within a shard. The RM fields of a
// shard end with a table of one CRC32C per BlockSize bytes of its payload
// (the last block shorter), each taken over the write's version, the
// shard's index and the block's number, then the block (blockCRC): a
// block read alone (a partial device read) is verified by its table entry,
// read alone too, and a block of another write, shard or position fails
// it. The piece's own checksum still covers everything, table included,
// for whole reads. Shards written without a table (before it existed, or
// on devices too small for one) are read as before.
const BlockSize = 4096

// alignFrom is how many blocks a shard must hold at least for the largest
// shard to be cut to whole blocks (see newSplitting).
const alignFrom = 100

// blocks is how many blocks a shard of size bytes has.
func blocks(size int) int { return (size + BlockSize - 1) / BlockSize }

// fieldsLen is the length of the RM fields of a shard of size bytes with
// its block table.
func fieldsLen(size int) int { return FieldsLen + 4*blocks(size) }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// blockCRC is the checksum of block b (its bytes) of shard index of the
// write of version v.
func blockCRC(v uint64, index, b int, block []byte) uint32 {
	var seed [13]byte
	binary.LittleEndian.PutUint64(seed[:], v)
	seed[8] = byte(index)
	binary.LittleEndian.PutUint32(seed[9:], uint32(b))
	return crc32.Update(crc32.Update(0, castagnoli, seed[:]), castagnoli, block)
}

// maxField is the largest k, r or index the one-byte fields hold.
const maxField = math.MaxUint8

// New returns a Factory for Splitting with k data and r parity shards; 0
// takes DefaultK or DefaultR. The factory refuses a geometry the codec does
// not support or that needs more than the array's devices.
func New(k, r int) mechanism.Factory {
	if k == 0 {
		k = DefaultK
	}
	if r == 0 {
		r = DefaultR
	}
	return func(env *mechanism.Env) (mechanism.Mechanism, error) { return newSplitting(env, k, r) }
}

// splitting is the mechanism bound to one Env.
type splitting struct {
	env      *mechanism.Env
	k, r     int
	codec    erasure.Codec
	splitCap int
	tables   bool // shards are written with their block table
}

func newSplitting(env *mechanism.Env, k, r int) (*splitting, error) {
	if k < 1 || r < 0 || k > maxField || r > maxField {
		return nil, fmt.Errorf("%s: k=%d r=%d, want 1 ≤ k ≤ %d and 0 ≤ r ≤ %d", Name, k, r, maxField, maxField)
	}
	if k+r > env.N() {
		return nil, fmt.Errorf("%s: k=%d r=%d needs %d devices, the array has %d", Name, k, r, k+r, env.N())
	}
	codec, err := erasure.Lookup(erasure.ReedSolomon, k, r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	avail := env.Limits().MaxValueLen - format.HeaderLen - FieldsLen
	if avail < 1 {
		return nil, fmt.Errorf("%s: device values of %d bytes cannot hold a header and a shard", Name, env.Limits().MaxValueLen)
	}
	// The largest shard that fits with its block table, if one does.
	maxShard := avail * BlockSize / (BlockSize + 4)
	for maxShard > 0 && maxShard+4*blocks(maxShard) > avail {
		maxShard--
	}
	for maxShard+1+4*blocks(maxShard+1) <= avail {
		maxShard++
	}
	tables := maxShard >= 1
	if !tables {
		maxShard = avail
	}
	if tables && maxShard >= alignFrom*BlockSize {
		// Whole blocks: the shards of a huge value then start at
		// multiples of BlockSize of the value, and a block-aligned range
		// of it reads one block, not two (less than 1% of the shard).
		maxShard -= maxShard % BlockSize
	}
	return &splitting{env: env, k: k, r: r, codec: codec, splitCap: splitCap(codec, maxShard), tables: tables}, nil
}

// splitCap is the largest split whose shards fit in maxShard bytes and
// whose length fits the header's 32-bit SplitLen. ShardSize grows with n,
// so a binary search finds it whatever padding the codec needs.
func splitCap(c erasure.Codec, maxShard int) int {
	lo, hi := 0, min(c.K()*maxShard, math.MaxUint32)
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if c.ShardSize(mid) <= maxShard {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// RM implements mechanism.Mechanism.
func (m *splitting) RM() format.RM { return format.RMSplitting }

// Name implements mechanism.Mechanism.
func (m *splitting) Name() string { return Name }

// SplitCap implements mechanism.Mechanism.
func (m *splitting) SplitCap() int { return m.splitCap }

// Width implements mechanism.Mechanism.
func (m *splitting) Width() int { return m.k + m.r }

// Tolerates implements mechanism.Mechanism.
func (m *splitting) Tolerates() int { return m.r }

// WritesOutOfPlace tells the array that shards 1.. are written under the
// key the version selects (see the package invariants): an overwrite must
// get a version of the other bank than the value it replaces, and only
// the primary's piece of that value is overwritten.
func (m *splitting) WritesOutOfPlace() bool { return true }

// shape is what one store writes identically into all the shards of a
// split; shards combine only when their shapes are equal.
type shape struct {
	version   uint64
	objectLen uint64
	splits    uint32
	splitLen  uint32
	ec        format.EC
	k, r      int
	shardSize int
	blocks    bool // the shards carry block tables
}

func (g *shape) width() int { return g.k + g.r }

// fieldsLen is the length of the RM fields of g's shards.
func (g *shape) fieldsLen() int {
	if g.blocks {
		return fieldsLen(g.shardSize)
	}
	return FieldsLen
}

// header returns the header of shard index of g, whose bytes are shard
// (for its block table). fields is a buffer of g.fieldsLen() bytes at
// least.
func (g *shape) header(fields []byte, index int, shard []byte) format.Header {
	f := fields[:g.fieldsLen()]
	putFields(f, g.k, g.r, index, g.shardSize)
	if g.blocks {
		for b := range blocks(g.shardSize) {
			block := shard[b*BlockSize : min((b+1)*BlockSize, len(shard))]
			binary.LittleEndian.PutUint32(f[FieldsLen+4*b:], blockCRC(g.version, index, b, block))
		}
	}
	return format.Header{RM: format.RMSplitting, EC: g.ec, Splits: g.splits, SplitLen: g.splitLen,
		ObjectLen: g.objectLen, Version: g.version, Fields: f}
}

func putFields(f []byte, k, r, index, shardSize int) {
	f[0], f[1], f[2] = byte(k), byte(r), byte(index)
	binary.LittleEndian.PutUint32(f[3:], uint32(shardSize))
}

// geometry returns the k and r a header of ours records, and false for a
// header that is not a well-formed Splitting one.
func (m *splitting) geometry(h *format.Header) (k, r int, ok bool) {
	if h == nil || h.RM != format.RMSplitting || len(h.Fields) < FieldsLen || (len(h.Fields)-FieldsLen)%4 != 0 {
		return 0, 0, false
	}
	k, r = int(h.Fields[0]), int(h.Fields[1])
	return k, r, k >= 1 && k+r <= m.env.N()
}

// widthOf is the width a header of ours records, or our own for any other
// header, as the span to read or clean up.
func (m *splitting) widthOf(h *format.Header) int {
	if k, r, ok := m.geometry(h); ok {
		return k + r
	}
	return m.k + m.r
}

func (m *splitting) codecFor(ec format.EC, k, r int) (erasure.Codec, error) {
	if ec == erasure.ReedSolomon && k == m.k && r == m.r {
		return m.codec, nil
	}
	return erasure.Lookup(ec, k, r)
}

// parse checks that v is a well-formed shard of ours whose payload matches
// its recorded geometry, and returns its shape and index.
func (m *splitting) parse(v *format.Value) (shape, int, bool) {
	g, index, ok := m.shapeOf(&v.Header)
	if !ok || g.shardSize != len(v.Payload) {
		return shape{}, 0, false
	}
	return g, index, true
}

// shapeOf returns the shape and index a shard's header records, and false
// when they are not a well-formed shard's of ours. The header's RM fields
// must be whole (their block table included).
func (m *splitting) shapeOf(h *format.Header) (shape, int, bool) {
	k, r, ok := m.geometry(h)
	if !ok {
		return shape{}, 0, false
	}
	f := h.Fields
	index, size := int(f[2]), int(binary.LittleEndian.Uint32(f[3:]))
	blocked := len(f) > FieldsLen
	if index >= k+r || blocked && len(f) != fieldsLen(size) {
		return shape{}, 0, false
	}
	c, err := m.codecFor(h.EC, k, r)
	if err != nil || c.ShardSize(int(h.SplitLen)) != size {
		return shape{}, 0, false
	}
	return shape{version: h.Version, objectLen: h.ObjectLen, splits: h.Splits, splitLen: h.SplitLen,
		ec: h.EC, k: k, r: r, shardSize: size, blocks: blocked}, index, true
}

// Store implements mechanism.Mechanism: it encodes value, writes the k+r
// shards, and then removes what the previous value (prev) left under the
// other bank or beyond the new width.
func (m *splitting) Store(ctx context.Context, k mechanism.Key, obj mechanism.Object, value []byte, prev *mechanism.Prev) error {
	if len(value) > m.splitCap {
		return fmt.Errorf("%s: store split %d of %q: %d bytes, a split holds %d: %w",
			Name, k.Split, k.User, len(value), m.splitCap, device.ErrValueTooLarge)
	}
	vals, buf, err := m.encode(obj, value)
	if err != nil {
		return fmt.Errorf("%s: store split %d of %q: %w", Name, k.Split, k.User, err)
	}
	err = m.write(ctx, k, obj.Version, vals, obj.Precommit)
	// Devices do not retain values once a store returns (device
	// contract), so the pieces' memory is free again.
	putBuf(buf)
	if err != nil {
		return fmt.Errorf("%s: store split %d of %q: %w", Name, k.Split, k.User, err)
	}
	if prev != nil {
		w, pv, pw := m.k+m.r, prev.Header.Version, m.widthOf(&prev.Header)
		// Shards 1.. of prev are under its bank's key: all of them are
		// left over when the new write used the other bank, those past
		// the new width when it used the same one (in place).
		from := w
		if mechanism.Banked(1, pv) != mechanism.Banked(1, obj.Version) {
			from = 1
		}
		if from < pw {
			if err := m.env.Delete(ctx, k.PieceKey(1, pv), m.env.Span(k, from, pw), pw-from); err != nil {
				return fmt.Errorf("%s: drop old shards of split %d of %q: %w", Name, k.Split, k.User, err)
			}
		}
	}
	return nil
}

// write stores the pieces of a write of version v, piece i on the device
// at offset i under k.PieceKey(i, v). Up to r may miss their devices
// (recorded for resync); the others still rebuild the split. The primary's
// piece goes last, once the others reached their quorum (see the package
// invariants). A failure once it was sent wraps mechanism.ErrCommitUnknown.
// precommit (see mechanism.Object) runs in between, ready when k of the
// others landed.
func (m *splitting) write(ctx context.Context, k mechanism.Key, v uint64, vals [][]byte, precommit func(context.Context, bool) error) error {
	w := len(vals)
	devs := m.env.Span(k, 0, w)
	if err := m.env.Reachable(devs, m.r); err != nil {
		return err
	}
	ops := make([]mechanism.Op, w)
	for i, d := range devs {
		ops[i] = mechanism.Op{Dev: d, Op: device.Op{Kind: device.OpStore, Key: k.PieceKey(i, v), Value: vals[i]}}
	}
	var before func(int) error
	if precommit != nil {
		before = func(landed int) error { return precommit(ctx, landed >= m.k) }
	}
	if err := m.env.DoPrimaryLast(ctx, ops, m.r, before); err != nil {
		return err
	}
	err := mechanism.Quorum(ops, m.r)
	if err == nil {
		err = m.env.Acknowledge(ctx, ops)
	}
	if err != nil && !errors.Is(ops[0].Err, mechanism.ErrMarkedFailed) {
		return fmt.Errorf("%w: %w", mechanism.ErrCommitUnknown, err)
	}
	return err
}

// encode returns the k+r encoded pieces of value, and the pooled buffer
// that holds them, to be given back with putBuf once they are written. All
// pieces, and the shards that cannot alias value (the padded tail and the
// parity), share that one buffer; the full data shards are read straight
// from value, so the user bytes are copied once, into the pieces.
func (m *splitting) encode(obj mechanism.Object, value []byte) ([][]byte, *[]byte, error) {
	k, w, n := m.k, m.k+m.r, len(value)
	s := m.codec.ShardSize(n)
	g := shape{version: obj.Version, objectLen: obj.ObjectLen, splits: obj.Splits, splitLen: uint32(n),
		ec: erasure.ReedSolomon, k: k, r: m.r, shardSize: s, blocks: m.tables && s > 0}
	pl := format.HeaderLen + g.fieldsLen() + s
	full := min(n/s, k)
	bp := getBuf(w*pl + (w-full)*s)
	buf := *bp
	scratch := buf[w*pl:]
	ptrs := make([][]byte, 2*w)
	shards, vals := ptrs[:w:w], ptrs[w:]
	for i := range shards {
		if i < full {
			shards[i] = value[i*s : (i+1)*s : (i+1)*s]
			continue
		}
		shards[i], scratch = scratch[:s:s], scratch[s:]
		if i < k {
			// The buffer is recycled: the padding must be zeroed here.
			clear(shards[i][copy(shards[i], value[min(i*s, n):]):])
		}
	}
	if err := m.codec.Encode(shards); err != nil {
		putBuf(bp)
		return nil, nil, err
	}
	fields := make([]byte, g.fieldsLen())
	for i := range vals {
		h := g.header(fields, i, shards[i])
		vals[i] = format.Append(buf[i*pl:i*pl:(i+1)*pl], &h, shards[i])
	}
	return vals, bp, nil
}

// Store's buffers are pooled by power-of-two size class: allocating them
// fresh cost more than the parity itself (zeroing, then page faults on
// cold memory). Classes start at 4 KiB, below which allocation is cheap,
// and stop at 64 MiB, past any split of a 2 MiB-value device.
const (
	minPoolClass = 12
	maxPoolClass = 26
)

var bufPools [maxPoolClass + 1]sync.Pool // of *[]byte with cap 1<<class

// getBuf returns a buffer of n bytes with arbitrary contents.
func getBuf(n int) *[]byte {
	c := bits.Len(uint(max(n, 1) - 1))
	if c < minPoolClass || c > maxPoolClass {
		b := make([]byte, n)
		return &b
	}
	if p, ok := bufPools[c].Get().(*[]byte); ok {
		*p = (*p)[:n]
		return p
	}
	b := make([]byte, n, 1<<c)
	return &b
}

func putBuf(p *[]byte) {
	c := bits.Len(uint(cap(*p)) - 1)
	if c >= minPoolClass && c <= maxPoolClass && cap(*p) == 1<<c {
		bufPools[c].Put(p)
	}
}

// Retrieve implements mechanism.Mechanism. When the primary's shard is
// good, only the other k-1 data shards are read; if they are all good and
// of its write, they are joined without decoding. Otherwise every shard is
// read, the newest write with k good shards is decoded and the bad shards
// are rewritten.
func (m *splitting) Retrieve(ctx context.Context, k mechanism.Key, have []mechanism.Piece) ([]byte, format.Header, error) {
	if len(have) > 0 && have[0].OK() && have[0].Dev == k.Primary {
		p0 := &have[0]
		if g, index, ok := m.parse(&p0.Value); ok && index == 0 && (k.Want == 0 || g.version == k.Want) {
			if g.k == 1 {
				return p0.Value.Payload[:g.splitLen:g.splitLen], p0.Value.Header, nil
			}
			pieces := m.readAt(ctx, k, g.version, 0, g.k, have)
			if m.allOf(&g, pieces) {
				return join(&g, pieces, nil), p0.Value.Header, nil
			}
			// Keep what the caller read beyond the data shards.
			have = append(pieces, have...)
		}
	}
	r, err := m.heal(ctx, k, have, 0)
	if err != nil {
		return nil, format.Header{}, err
	}
	return join(&r.shape, nil, r.shards), r.header, nil
}

// readAt reads the pieces of a write of version v at offsets [from, to)
// from the primary, each under the key v selects for it, reusing have.
func (m *splitting) readAt(ctx context.Context, k mechanism.Key, v uint64, from, to int, have []mechanism.Piece) []mechanism.Piece {
	if !mechanism.Banked(1, v) {
		return m.env.ReadSpan(ctx, k, from, to, have)
	}
	var out []mechanism.Piece
	if from == 0 {
		out = m.env.ReadSpan(ctx, k, 0, 1, have)
	}
	if to > max(from, 1) {
		out = append(out, m.env.ReadBankSpan(ctx, k, max(from, 1), to, have)...)
	}
	return out
}

// allOf reports whether pieces[i] is a good shard i of g for every i.
func (m *splitting) allOf(g *shape, pieces []mechanism.Piece) bool {
	for i := range pieces {
		if !pieces[i].OK() {
			return false
		}
		if s, index, ok := m.parse(&pieces[i].Value); !ok || index != i || s != *g {
			return false
		}
	}
	return true
}

// join returns the user bytes of g from its data shards, given either as
// pieces or as shards.
func join(g *shape, pieces []mechanism.Piece, shards [][]byte) []byte {
	out := make([]byte, g.splitLen)
	off := 0
	for i := 0; i < g.k && off < len(out); i++ {
		if pieces != nil {
			off += copy(out[off:], pieces[i].Value.Payload)
		} else {
			off += copy(out[off:], shards[i])
		}
	}
	return out
}

// Repair implements mechanism.Mechanism. It returns an error when a
// rewrite failed, with the count of the rewrites that succeeded.
func (m *splitting) Repair(ctx context.Context, k mechanism.Key, hint *format.Header) (int, error) {
	return m.RepairWith(ctx, k, hint, nil)
}

// RepairWith is Repair reusing pieces already read (a rebuild's scan of
// the other devices, still current): only the devices of the span that
// have gives no piece for are read.
func (m *splitting) RepairWith(ctx context.Context, k mechanism.Key, hint *format.Header, have []mechanism.Piece) (int, error) {
	r, err := m.heal(ctx, k, have, m.widthOf(hint))
	if err != nil {
		return 0, err
	}
	if r.rewriteErr != nil {
		return r.rewritten, fmt.Errorf("%s: repair split %d of %q: %w", Name, k.Split, k.User, r.rewriteErr)
	}
	if have != nil {
		// A rebuild's restore: the other bank is Scrub's to clean.
		return r.rewritten, nil
	}
	dropped, err := m.dropOtherBank(ctx, k, &r)
	if err != nil {
		return r.rewritten + dropped, fmt.Errorf("%s: repair split %d of %q: %w", Name, k.Split, k.User, err)
	}
	return r.rewritten + dropped, nil
}

// dropOtherBank deletes the pieces past the primary under the key that the
// chosen write does not use: the shards of the value it replaced, or of a
// store cut short, and under the data key any piece another mechanism
// left there. None belongs to the current value, and one left behind could
// be read as current once the primary is lost.
func (m *splitting) dropOtherBank(ctx context.Context, k mechanism.Key, r *healed) (int, error) {
	other := !mechanism.Banked(1, r.version)
	w := r.width()
	for j := range r.pieces {
		w = max(w, m.env.Offset(k, r.pieces[j].Dev)+1)
	}
	var pieces []mechanism.Piece
	if other {
		pieces = m.env.ReadBankSpan(ctx, k, 1, w, r.pieces)
	} else {
		pieces = m.env.ReadSpan(ctx, k, 1, w, r.pieces)
	}
	var devs []int
	for i := range pieces {
		err := pieces[i].Err
		// A stale piece (its device missed a write of this key) goes
		// too: the delete that lands clears the record.
		if err == nil || errors.Is(err, format.ErrCorrupt) || errors.Is(err, errForeign) ||
			errors.Is(err, errMisplace) || errors.Is(err, errBank) || errors.Is(err, mechanism.ErrStale) {
			devs = append(devs, pieces[i].Dev)
		}
	}
	if len(devs) == 0 {
		return 0, nil
	}
	key := k.Data()
	if other {
		key = k.Bank()
	}
	if err := m.env.Delete(ctx, key, devs, len(devs)); err != nil {
		return 0, fmt.Errorf("drop the other bank's shards: %w", err)
	}
	return len(devs), nil
}

// Release implements mechanism.Mechanism. It removes the shards of both
// banks: those of the other bank are what a store cut short left. The
// primary's shard goes first, alone: once it is gone the value is, and a
// release cut short leaves no primary's shard short of its other shards.
func (m *splitting) Release(ctx context.Context, k mechanism.Key, prev *mechanism.Prev, keep int) error {
	w := m.widthOf(&prev.Header)
	// Degraded: a device that misses a delete is recorded, and its shard
	// never serves again (see mechanism.Env.Do).
	del := func(key []byte, from int) error {
		if from >= w {
			return nil
		}
		if err := m.env.Delete(ctx, key, m.env.Span(k, from, w), w); err != nil {
			return fmt.Errorf("%s: release split %d of %q: %w", Name, k.Split, k.User, err)
		}
		return nil
	}
	if keep == 0 {
		if err := m.env.Delete(ctx, k.Data(), m.env.Span(k, 0, 1), 1); err != nil {
			return fmt.Errorf("%s: release split %d of %q: %w", Name, k.Split, k.User, err)
		}
		keep = 1
	}
	var bankErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		bankErr = del(k.Bank(), 1)
	}()
	err := del(k.Data(), keep)
	wg.Wait()
	return errors.Join(err, bankErr)
}

// healed is the outcome of heal: the chosen write, all of its shards, and
// what rewriting the bad ones did.
type healed struct {
	shape
	shards     [][]byte
	header     format.Header
	rewritten  int
	rewriteErr error
	// pieces read, both banks where both were read, and which of them
	// hold a good shard of the chosen write.
	pieces []mechanism.Piece
	used   []bool
}

// Reasons a piece that was read and verified is still not used.
var (
	errForeign  = errors.New("not a well-formed splitting shard")
	errMisplace = errors.New("shard on the wrong device")
	errBank     = errors.New("shard under the other bank's key")
	errStale    = errors.New("shard of another write")
)

// slot is one piece read for heal: the piece at offset off from the
// primary, under the data key or the bank key.
type slot struct {
	off   int
	shape shape
	good  bool
}

// heal reads the shards of k (at least w devices from the primary, more
// when a shard records a wider geometry; have is reused), chooses the
// newest write with k good shards, reconstructs its missing shards and
// rewrites them on the devices that answer. A good shard 0 on the primary
// names the write: only its bank is read. Otherwise both banks are.
func (m *splitting) heal(ctx context.Context, k mechanism.Key, have []mechanism.Piece, w int) (healed, error) {
	w = min(max(w, m.k+m.r), m.env.N())
	banks := []bool{false, true}
	primary := m.env.ReadSpan(ctx, k, 0, 1, have)
	if p := &primary[0]; p.OK() {
		if g, index, ok := m.parse(&p.Value); ok && index == 0 && (k.Want == 0 || g.version == k.Want) {
			banks = []bool{mechanism.Banked(1, g.version)}
		}
	}
	var pieces []mechanism.Piece
	var slots []slot
	// read reads the banks (past the primary) over [1, w), and again over
	// a wider span while a good shard records a wider geometry.
	read := func(banks []bool) {
		for {
			pieces = append(pieces[:0], primary...)
			for _, bank := range banks {
				if bank {
					pieces = append(pieces, m.env.ReadBankSpan(ctx, k, 1, w, have)...)
				} else {
					pieces = append(pieces, m.env.ReadSpan(ctx, k, 1, w, have)...)
				}
			}
			have = append(have, pieces...)
			slots = make([]slot, len(pieces))
			next := w
			for j := range pieces {
				p := &pieces[j]
				off := m.env.Offset(k, p.Dev)
				slots[j].off = off
				if !p.OK() {
					continue
				}
				s, index, ok := m.parse(&p.Value)
				switch {
				case !ok:
					p.Err = errForeign
				case index != off:
					p.Err = fmt.Errorf("%w: shard %d found at offset %d", errMisplace, index, off)
				case mechanism.Banked(off, s.version) != p.Bank:
					p.Err = fmt.Errorf("%w: version %d", errBank, s.version)
				default:
					slots[j].shape, slots[j].good = s, true
					next = max(next, s.width())
				}
			}
			if next <= w {
				return
			}
			w = next
		}
	}
	read(banks)
	g, ok := choose(k, slots)
	if !ok && len(banks) == 1 {
		// The primary's write is not whole (a store cut short after its
		// shard 0 landed): the value it replaced is in the other bank.
		read([]bool{false, true})
		g, ok = choose(k, slots)
	}
	if !ok {
		if allNotFound(pieces) && k.Want == 0 {
			return healed{}, fmt.Errorf("%s split %d of key %q: %w", Name, k.Split, k.User, device.ErrNotFound)
		}
		if err := ctx.Err(); err != nil {
			return healed{}, fmt.Errorf("%s: retrieve split %d of %q: %w", Name, k.Split, k.User, err)
		}
		return healed{}, mechanism.Lost(k, Name, pieces, shortfall(k, pieces, slots))
	}

	codec, err := m.codecFor(g.ec, g.k, g.r)
	if err != nil {
		return healed{}, fmt.Errorf("%s: split %d of %q: %w", Name, k.Split, k.User, err)
	}
	r := healed{shape: g, shards: make([][]byte, g.width()), pieces: pieces, used: make([]bool, len(pieces))}
	// failed[i]: the device at offset i reported itself failed.
	failed := make([]bool, g.width())
	for j := range slots {
		sl := &slots[j]
		if sl.off >= g.width() {
			continue
		}
		if sl.good && sl.shape == g {
			r.shards[sl.off], r.used[j] = pieces[j].Value.Payload, true
			if r.header.RM == 0 {
				r.header = pieces[j].Value.Header
			}
		}
		if errors.Is(pieces[j].Err, device.ErrDeviceFailed) {
			failed[sl.off] = true
		}
	}
	var bad []int
	for i := range r.shards {
		if r.shards[i] == nil {
			bad = append(bad, i)
		}
	}
	if len(bad) == 0 {
		return r, nil
	}
	// Rebuild into one buffer: zero-length entries with capacity are
	// filled in place by the codec.
	buf := make([]byte, len(bad)*g.shardSize)
	for j, i := range bad {
		r.shards[i] = buf[j*g.shardSize : j*g.shardSize : (j+1)*g.shardSize]
	}
	if err := codec.Reconstruct(r.shards); err != nil {
		return healed{}, fmt.Errorf("%s: reconstruct split %d of %q: %w", Name, k.Split, k.User, err)
	}
	r.rewritten, r.rewriteErr = m.rewrite(ctx, k, &g, r.shards, failed, bad)
	return r, nil
}

// choose returns the shape of the newest write with at least k good shards
// in place. See the package invariants for why an older write only counts
// within the width of the newest.
func choose(k mechanism.Key, slots []slot) (shape, bool) {
	usable := func(sl *slot) bool { return sl.good && (k.Want == 0 || sl.shape.version == k.Want) }
	var newest uint64
	newestWidth := 0
	for j := range slots {
		sl := &slots[j]
		if !usable(sl) {
			continue
		}
		if v := sl.shape.version; v > newest {
			newest, newestWidth = v, sl.shape.width()
		} else if v == newest {
			newestWidth = max(newestWidth, sl.shape.width())
		}
	}
	var best shape
	bestN, found := 0, false
	for j := range slots {
		if !usable(&slots[j]) {
			continue
		}
		g := &slots[j].shape
		if found && (g.version < best.version || *g == best) {
			continue
		}
		// One shard per offset: a version's shard has one key there.
		n := 0
		for i := range slots {
			if slots[i].good && slots[i].shape == *g && (g.version == newest || slots[i].off < newestWidth) {
				n++
			}
		}
		if n >= g.k && (!found || g.version > best.version || n > bestN) {
			best, bestN, found = *g, n, true
		}
	}
	return best, found
}

// rewrite stores shards[i] of g for each i in bad whose device did not
// report itself failed, and returns how many stores succeeded and why the
// others failed. A failed rewrite leaves the shard for a later repair; it
// does not make the read fail.
func (m *splitting) rewrite(ctx context.Context, k mechanism.Key, g *shape, shards [][]byte, failed []bool, bad []int) (int, error) {
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	pl := format.HeaderLen + g.fieldsLen() + g.shardSize
	buf := make([]byte, 0, len(bad)*pl)
	ops := make([]mechanism.Op, 0, len(bad))
	fields := make([]byte, g.fieldsLen())
	for _, i := range bad {
		if failed[i] {
			continue
		}
		h := g.header(fields, i, shards[i])
		start := len(buf)
		buf = format.Append(buf, &h, shards[i])
		ops = append(ops, mechanism.Op{Dev: m.env.At(k, i),
			Op: device.Op{Kind: device.OpStore, Key: k.PieceKey(i, g.version), Value: buf[start:len(buf):len(buf)]}})
	}
	m.env.Do(ctx, ops)
	n := 0
	var errs []error
	for i := range ops {
		if ops[i].Err == nil {
			n++
		} else {
			errs = append(errs, ops[i].Err)
		}
	}
	return n, errors.Join(errs...)
}

// shortfall explains a loss: it marks the verified shards that are not of
// the newest usable write as stale, so that the error lists every unusable
// shard, and says how many good shards the newest write kept.
func shortfall(k mechanism.Key, pieces []mechanism.Piece, slots []slot) string {
	var newest *shape
	for j := range slots {
		if slots[j].good && (k.Want == 0 || slots[j].shape.version == k.Want) && (newest == nil || slots[j].shape.version > newest.version) {
			newest = &slots[j].shape
		}
	}
	n := 0
	for j := range pieces {
		switch {
		case !slots[j].good:
		case newest != nil && slots[j].shape == *newest:
			n++
		default:
			pieces[j].Err = fmt.Errorf("%w: version %d", errStale, slots[j].shape.version)
		}
	}
	if newest == nil {
		return fmt.Sprintf("no good shard in %d pieces", len(pieces))
	}
	return fmt.Sprintf("%d good shards of version %d, %d needed", n, newest.version, newest.k)
}

func allNotFound(pieces []mechanism.Piece) bool {
	for i := range pieces {
		if !errors.Is(pieces[i].Err, device.ErrNotFound) {
			return false
		}
	}
	return true
}

// RetrieveRange returns bytes [lo, hi) of split k's user bytes and the
// header they were found with, reading only the data shards that cover
// the range. hint describes split k's write: a header of one of the
// value's shards (split 0's primary piece, which the array reads first)
// with SplitLen set to split k's length (the last split of a huge value is
// shorter). Its geometry says which shards cover the range and what each
// must be, so that split k's own shard 0 is not read unless the range
// covers it. have holds pieces already read.
//
// Each shard is a whole internal value with its own checksum, so a shard
// read alone is verified. Its write must also be whole (whole): at least k
// of its shards on their devices, which the headers of the shards not read
// say (partial reads of their first bytes), so that a range read returns
// the write a whole read would, never one that a store cut short left on
// fewer than k devices; unless the caller knows the write completed
// (mechanism.WithCommitted). A covering shard that is missing, corrupt, stale
// or of another write is never sliced from, nor a write that is not
// whole: the split is then read as Retrieve reads it (every shard, the
// newest write with k good ones decoded, bad shards rewritten) and the
// range sliced from that. Only this split is reconstructed, never the
// rest of the value.
func (m *splitting) RetrieveRange(ctx context.Context, k mechanism.Key, hint *format.Header, have []mechanism.Piece, lo, hi int) ([]byte, format.Header, error) {
	if g, ok := m.expected(k, hint); ok && 0 <= lo && lo <= hi && hi <= int(g.splitLen) {
		if lo == hi {
			return []byte{}, g.bare(), nil
		}
		first, last := lo/g.shardSize, (hi-1)/g.shardSize
		whole := func() bool { return mechanism.Committed(ctx) || m.whole(ctx, k, &g, first, last, have) }
		if g.blocks {
			if out, ok := m.readBlocks(ctx, k, &g, lo, hi); ok && whole() {
				return out, g.bare(), nil
			}
		}
		pieces := m.readAt(ctx, k, g.version, first, last+1, have)
		good := true
		for j := range pieces {
			s, index, ok := m.parse(&pieces[j].Value)
			if !pieces[j].OK() || !ok || index != first+j || s != g ||
				pieces[j].Bank != mechanism.Banked(index, g.version) {
				good = false
				break
			}
		}
		if good && whole() {
			out := make([]byte, 0, hi-lo)
			for j := range pieces {
				base := (first + j) * g.shardSize
				p := pieces[j].Value.Payload
				out = append(out, p[max(lo-base, 0):min(hi-base, len(p))]...)
			}
			return out, pieces[0].Value.Header, nil
		}
		// Keep what was read: the split's reconstruction reuses it.
		have = append(pieces, have...)
	}
	v, h, err := m.Retrieve(ctx, k, have)
	if err != nil {
		return nil, format.Header{}, err
	}
	if lo < 0 || lo > hi || hi > len(v) {
		return nil, format.Header{}, fmt.Errorf("%s: range [%d, %d) of split %d of %q, which holds %d bytes: %w",
			Name, lo, hi, k.Split, k.User, len(v), format.ErrCorrupt)
	}
	return v[lo:hi:hi], h, nil
}

// expected returns the shape that the shards of split k must have when
// hint describes its write (see RetrieveRange), and false when hint is not
// a Splitting header of ours or is not of k.Want's write.
func (m *splitting) expected(k mechanism.Key, hint *format.Header) (shape, bool) {
	kk, r, ok := m.geometry(hint)
	if !ok || (k.Want != 0 && hint.Version != k.Want) {
		return shape{}, false
	}
	c, err := m.codecFor(hint.EC, kk, r)
	if err != nil {
		return shape{}, false
	}
	// Every shard of one write has a block table or none.
	return shape{version: hint.Version, objectLen: hint.ObjectLen, splits: hint.Splits, splitLen: hint.SplitLen,
		ec: hint.EC, k: kk, r: r, shardSize: c.ShardSize(int(hint.SplitLen)), blocks: len(hint.Fields) > FieldsLen}, true
}

// whole reports whether the write g of split k, whose shards first..last
// were read and verified, has at least g.k shards in place: those, the
// good ones of g in have, and those whose header (the first bytes of the
// piece, read alone) is one of g's at its offset. A header read alone is
// not verified (the checksum covers the whole piece): a damaged one only
// makes the count smaller, and the read then falls back to a whole read.
func (m *splitting) whole(ctx context.Context, k mechanism.Key, g *shape, first, last int, have []mechanism.Piece) bool {
	n := last - first + 1
	known := make([]bool, g.width())
	for j := range have {
		p := &have[j]
		off := m.env.Offset(k, p.Dev)
		if off >= g.width() || off >= first && off <= last || known[off] || !p.OK() || p.Bank != mechanism.Banked(off, g.version) {
			continue
		}
		if s, index, ok := m.parse(&p.Value); ok && index == off && s == *g {
			known[off] = true
			n++
		}
	}
	if n >= g.k {
		return true
	}
	var parts []mechanism.Part
	for off := range g.width() {
		if (off < first || off > last) && !known[off] {
			parts = append(parts, mechanism.Part{Dev: m.env.At(k, off), Key: k.PieceKey(off, g.version),
				Len: format.HeaderLen + FieldsLen})
		}
	}
	m.env.ReadParts(ctx, parts)
	for _, p := range parts {
		if p.Err != nil {
			continue
		}
		h, fl, err := format.PeekHeader(p.Result)
		if err != nil || fl != g.fieldsLen() || len(h.Fields) != FieldsLen {
			continue
		}
		off := m.env.Offset(k, p.Dev)
		kk, r, ok := m.geometry(&h)
		if ok && kk == g.k && r == g.r && int(h.Fields[2]) == off && int(binary.LittleEndian.Uint32(h.Fields[3:])) == g.shardSize &&
			h.Version == g.version && h.EC == g.ec && h.Splits == g.splits && h.SplitLen == g.splitLen && h.ObjectLen == g.objectLen {
			n++
		}
	}
	return n >= g.k
}

// bare is the header of g's shards without RM fields: what a range read
// that read no header returns.
func (g *shape) bare() format.Header {
	return format.Header{RM: format.RMSplitting, EC: g.ec, Splits: g.splits, SplitLen: g.splitLen,
		ObjectLen: g.objectLen, Version: g.version}
}

// readBlocks reads bytes [lo, hi) of split k of write g by partial device
// reads: of each covering shard, the blocks holding the range and their
// entries of its block table, and verifies each block against its entry
// (blockCRC: the write's version, the shard's index and the block's
// number are in it). It reads no header: a block that verifies is of
// write g, at its place. false: a read failed or a block did not verify.
func (m *splitting) readBlocks(ctx context.Context, k mechanism.Key, g *shape, lo, hi int) ([]byte, bool) {
	s := g.shardSize
	first, last := lo/s, (hi-1)/s
	type span struct{ index, b0, b1, lo, hi int } // blocks b0..b1 of shard index, bytes lo..hi of it wanted
	var spans []span
	var parts []mechanism.Part
	for i := first; i <= last; i++ {
		slo, shi := max(lo-i*s, 0), min(hi-i*s, s)
		sp := span{index: i, b0: slo / BlockSize, b1: (shi - 1) / BlockSize, lo: slo, hi: shi}
		spans = append(spans, sp)
		dev, key := m.env.At(k, i), k.PieceKey(i, g.version)
		parts = append(parts,
			mechanism.Part{Dev: dev, Key: key, Off: format.HeaderLen + FieldsLen + 4*sp.b0, Len: 4 * (sp.b1 - sp.b0 + 1)},
			mechanism.Part{Dev: dev, Key: key, Off: format.HeaderLen + g.fieldsLen() + sp.b0*BlockSize, Len: min((sp.b1+1)*BlockSize, s) - sp.b0*BlockSize})
	}
	m.env.ReadParts(ctx, parts)
	out := make([]byte, 0, hi-lo)
	for j, sp := range spans {
		table, data := &parts[2*j], &parts[2*j+1]
		if table.Err != nil || data.Err != nil || len(table.Result) != table.Len || len(data.Result) != data.Len {
			return nil, false
		}
		for b := sp.b0; b <= sp.b1; b++ {
			block := data.Result[(b-sp.b0)*BlockSize : min((b-sp.b0+1)*BlockSize, len(data.Result))]
			if blockCRC(g.version, sp.index, b, block) != binary.LittleEndian.Uint32(table.Result[4*(b-sp.b0):]) {
				return nil, false
			}
		}
		base := sp.b0 * BlockSize
		out = append(out, data.Result[sp.lo-base:sp.hi-base]...)
	}
	return out, true
}

// VerifiesHeader tells the array that a range read of a value whose split
// 0 header is h (read alone, fieldsLen bytes of RM fields) verifies that
// header itself: the shards carry block tables, whose checksums are seeded
// with the write's version and each shard's place, and a range read
// counts the write's shards (RetrieveRange) before it returns any byte.
func (m *splitting) VerifiesHeader(h *format.Header, fieldsLen int) bool {
	_, _, ok := m.geometry(&format.Header{RM: h.RM, Fields: h.Fields[:min(len(h.Fields), FieldsLen)]})
	return ok && len(h.Fields) >= FieldsLen && fieldsLen > FieldsLen && h.Splits >= 1 && uint64(h.SplitLen) <= h.ObjectLen
}
