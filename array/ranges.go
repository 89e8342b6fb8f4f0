package array

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
)

// Partial I/O: reading and writing part of a value (GETRANGE, STRLEN,
// SETRANGE, APPEND).
//
// A range read locates the value's split 0 as every read does (one read
// of its primary piece: its header says the mechanism, the split count and
// the length), then reads only the splits the ranges cover, and within a
// split only what its mechanism needs: a Splitting split reads only the
// data shards covering the range (rangeRetriever), each a whole internal
// value with its own header checksum, so a shard read alone is verified;
// a bad or missing one makes that split alone be read and reconstructed as
// a whole read would. Replication, Hashing and Packing pieces are the
// whole split: they are read (verified, repaired) as Retrieve does, and
// sliced.
//
// A range write is, in this first version, a read-modify-write of the
// whole value under the key's lock, by Store's path: it is exactly as
// crash safe as Store (the old value or the new one, whole), and moves the
// whole value. Rewriting only the splits a range touches needs per-split
// versions (today every split of a huge value carries split 0's version
// and length, and its bank follows that version), see docs/partial-io.md.

// Range is Len bytes of a value from byte Off; fewer where the value ends
// before Off+Len, none when it ends before Off.
type Range struct{ Off, Len int64 }

// Edit writes Data at byte Off of a value.
type Edit struct {
	Off  int64
	Data []byte
}

// ErrBadRange is a negative offset or length.
var ErrBadRange = errors.New("bad range")

// rangeRetriever is implemented by mechanisms that can read part of a
// split without the rest (Splitting). hint describes split k's write: the
// header of a piece of the value's split 0, with SplitLen set to split k's
// length. The result is bytes [lo, hi) of the split, verified.
type rangeRetriever interface {
	RetrieveRange(ctx context.Context, k mechanism.Key, hint *format.Header, have []mechanism.Piece, lo, hi int) ([]byte, format.Header, error)
}

// Len returns the length of key's value. It reads no more than the
// primary's piece of split 0 (its header has the length), and nothing
// when the metadata cache knows the key.
func (a *Array) Len(ctx context.Context, key []byte) (int64, error) {
	if err := a.checkUserKey(key); err != nil {
		return 0, opError("len", key, err)
	}
	var n int64
	_, err := a.run(ctx, key, "len", func() ([]byte, error) {
		if a.tinyKey(key) {
			v, found, err := a.tinyLookup(ctx, key)
			if err != nil || found {
				n = int64(len(v))
				return nil, err
			}
		}
		if e, ok := a.meta.get(key); ok {
			if e.m == nil {
				return nil, ErrNotFound // known to have no value
			}
			n = int64(e.hdr.ObjectLen)
			return nil, nil
		}
		l, err := a.locate(ctx, a.key(key, 0))
		a.noted(key, l, err)
		if err != nil {
			return nil, err
		}
		n = int64(l.header().ObjectLen)
		return nil, nil
	})
	return n, err
}

// RetrieveRange returns n bytes of key's value from byte off (fewer where
// the value ends), reading only the splits, and of a Splitting split only
// the shards, that cover them.
func (a *Array) RetrieveRange(ctx context.Context, key []byte, off, n int64) ([]byte, error) {
	out, _, err := a.RetrieveRanges(ctx, key, Range{off, n})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// RetrieveRanges returns the bytes of each range of key's value, and the
// value's length, from one read under the key's lock (so they are of one
// value): a caller that keeps a header at the start of the value reads it
// and the range it wants together.
func (a *Array) RetrieveRanges(ctx context.Context, key []byte, rs ...Range) ([][]byte, int64, error) {
	if err := a.checkUserKey(key); err != nil {
		return nil, 0, opError("retrieve range", key, err)
	}
	var out [][]byte
	var total int64
	_, err := a.run(ctx, key, "retrieve range", func() ([]byte, error) {
		var err error
		out, total, err = a.retrieveRanges(ctx, key, rs)
		return nil, err
	})
	return out, total, err
}

// part is the share of one range in one split: bytes [lo, hi) of the
// split go to out[r][dst:].
type part struct {
	r      int
	lo, hi int
	dst    int64
}

// retrieveRanges runs under key's lock.
func (a *Array) retrieveRanges(ctx context.Context, key []byte, rs []Range) ([][]byte, int64, error) {
	for _, r := range rs {
		if r.Off < 0 || r.Len < 0 {
			return nil, 0, fmt.Errorf("range of %d bytes from %d: %w", r.Len, r.Off, ErrBadRange)
		}
	}
	if a.tinyKey(key) {
		v, found, err := a.tinyLookup(ctx, key)
		if err != nil {
			return nil, 0, err
		}
		if found {
			return sliceRanges(v, rs), int64(len(v)), nil
		}
	}
	if e, v, known := a.meta.lookup(key, true); known {
		if e.m == nil {
			return nil, 0, ErrNotFound
		}
		if out, total, ok := e.headRanges(rs); ok {
			return out, total, nil
		}
		if v != nil {
			return sliceRanges(v, rs), int64(len(v)), nil
		}
	}
	a.meta.missed()
	var want int64 // bytes asked for, at most peekMax+1
	for _, r := range rs {
		want = min(want+min(r.Len, peekMax+1), peekMax+1)
	}
	// A header read alone sizes the buffers before anything verifies it:
	// only for small ranges.
	l, primary := a.peekIf(ctx, key, want <= peekMax)
	if l != nil {
		// Any failure: the value is located as any read locates it.
		if out, total, err := a.rangesOf(ctx, key, rs, l); err == nil {
			return out, total, nil
		}
		primary = nil
	}
	var err error
	if primary != nil {
		l, err = a.locateFrom(ctx, a.key(key, 0), primary)
	} else {
		l, err = a.locate(ctx, a.key(key, 0))
	}
	a.noted(key, l, err)
	if err != nil {
		return nil, 0, err
	}
	a.env.Clock().Observe(l.header().Version)
	return a.rangesOf(ctx, key, rs, l)
}

// sliceRanges copies the ranges rs out of a whole value v.
func sliceRanges(v []byte, rs []Range) [][]byte {
	out := make([][]byte, len(rs))
	for i, r := range rs {
		lo := min(r.Off, int64(len(v)))
		out[i] = bytes.Clone(v[lo:min(lo+r.Len, int64(len(v)))])
		if out[i] == nil {
			out[i] = []byte{}
		}
	}
	return out
}

// headerVerifier is implemented by mechanisms whose range reads verify
// the header of the value's split 0 themselves (Splitting with block
// tables: every block read is checked against a checksum seeded with the
// write's version and the shard's place, and the write must be whole), so
// that the header may be read alone, unverified (a partial device read),
// rather than with the whole primary piece.
type headerVerifier interface {
	VerifiesHeader(h *format.Header, fieldsLen int) bool
}

// peekMax is the most bytes a range read asks for that may read the
// value's header alone (peekIf).
const peekMax = 1 << 20

// peekIf, when ok, reads the header of key's split 0 alone from its primary (its
// first bytes: a partial device read) and returns it as located when its
// mechanism verifies it in range reads (headerVerifier); nil otherwise,
// and when the primary cannot answer. Nothing is learned from it (no
// clock, no metadata cache): it is not verified yet. A key that the
// metadata cache knows has no value, or a value of a mechanism that does
// not verify headers, is not peeked at: locate reads it at once.
//
// primary, when not nil, is the primary's answer as a whole read's
// (mechanism.Env.Piece): a device that cannot read part of a value (a
// Pebble device) returned it whole, or the read failed (a key not
// stored). locateFrom takes it instead of reading the primary again,
// which would double the reads of a key the metadata cache does not know
// (every SET of a new key reads its old state first).
func (a *Array) peekIf(ctx context.Context, key []byte, ok bool) (l *located, primary []mechanism.Piece) {
	if !ok {
		return nil, nil
	}
	if e, ok := a.meta.get(key); ok {
		if _, hv := e.m.(headerVerifier); !hv {
			return nil, nil
		}
	}
	k0 := a.key(key, 0)
	parts := []mechanism.Part{{Dev: k0.Primary, Key: k0.Data(), Len: format.HeaderLen + 16}}
	a.env.ReadParts(ctx, parts)
	if p, whole := a.env.Piece(&parts[0]); whole {
		primary = []mechanism.Piece{p}
	}
	if parts[0].Err != nil {
		return nil, primary
	}
	h, fl, err := format.PeekHeader(parts[0].Result)
	if err != nil {
		return nil, primary
	}
	m, ok := a.byRM[h.RM]
	if hv, is := m.(headerVerifier); !ok || !is || !hv.VerifiesHeader(&h, fl) {
		return nil, primary
	}
	// The fields read, at their full length (the rest is the mechanism's
	// to read if it needs it).
	f := make([]byte, fl)
	copy(f, h.Fields)
	h.Fields = f
	return &located{m: m, hdr: h}, nil
}

// rangesOf reads the ranges of key's value, whose split 0 l located.
func (a *Array) rangesOf(ctx context.Context, key []byte, rs []Range, l *located) ([][]byte, int64, error) {
	y, err := a.layoutOf(ctx, key, l)
	if err != nil {
		return nil, 0, err
	}
	total := y.length
	out := make([][]byte, len(rs))
	bySplit := map[int][]part{}
	for i, r := range rs {
		lo := min(r.Off, total)
		hi := lo + min(r.Len, total-lo)
		out[i] = make([]byte, hi-lo)
		for s := y.splitOf(lo); lo < hi; s++ {
			base, end := y.span(s)
			bySplit[s] = append(bySplit[s], part{r: i, lo: int(max(lo, base) - base), hi: int(min(hi, end) - base), dst: max(lo, base) - lo})
			if end >= hi {
				break
			}
		}
	}
	splits := make([]int, 0, len(bySplit))
	for s := range bySplit {
		splits = append(splits, s)
	}
	slices.Sort(splits)
	err = a.forSplits(ctx, len(splits), func(i int) error {
		return a.readParts(ctx, key, splits[i], l, y, bySplit[splits[i]], out)
	})
	if err != nil {
		return nil, 0, err
	}
	return out, total, nil
}

// readParts reads the parts of split s of the value that l located (its
// split 0), whose layout is y, into out.
func (a *Array) readParts(ctx context.Context, key []byte, s int, l *located, y *layout, parts []part, out [][]byte) error {
	k, have := a.key(key, 0), l.have
	if s > 0 {
		k, have = a.keyIn(key, y, s), nil
	}
	if rr, ok := l.m.(rangeRetriever); ok {
		lo, hi := y.span(s)
		hint := *y.hint(s)
		hint.SplitLen = uint32(hi - lo)
		if y.manifest && s > 0 {
			// A data split the manifest names was stored whole before
			// split 0 named it.
			ctx = mechanism.WithCommitted(ctx)
		}
		for _, p := range parts {
			b, h, err := rr.RetrieveRange(ctx, k, &hint, have, p.lo, p.hi)
			if err != nil {
				return err
			}
			if err := y.matches(s, &h); err != nil {
				return err
			}
			copy(out[p.r][p.dst:], b)
		}
		return nil
	}
	var v []byte
	var err error
	if s > 0 {
		v, err = a.readSplit(ctx, key, y, s)
	} else {
		v, err = a.readSplit0(ctx, key, l, y)
	}
	if err != nil {
		return err
	}
	for _, p := range parts {
		copy(out[p.r][p.dst:], v[p.lo:p.hi])
	}
	return nil
}

// StoreRange writes data at byte off of key's value, which grows (zero
// filled) to reach off+len(data) if it is shorter; a key that does not
// exist is an empty value. It returns the value's new length. See
// StoreRanges.
func (a *Array) StoreRange(ctx context.Context, key []byte, off int64, data []byte, opts ...CallOption) (int64, error) {
	return a.StoreRanges(ctx, key, []Edit{{off, data}}, opts...)
}

// StoreRanges applies the edits, in order, to key's value as one store
// under the key's lock, and returns the value's new length. Edits of no
// bytes change nothing: when every edit is empty nothing is written (and a
// key that does not exist is not created). A huge value rewrites only
// the splits the edits touch (editSplits); any other is read, edited and
// stored whole, by Store's path. Either way a failure or crash leaves the
// old value or the new one, never a mix.
func (a *Array) StoreRanges(ctx context.Context, key []byte, edits []Edit, opts ...CallOption) (int64, error) {
	if err := a.checkUserKey(key); err != nil {
		return 0, opError("store range", key, err)
	}
	c := callOf(opts)
	var n int64
	_, err := a.run(ctx, key, "store range", func() ([]byte, error) {
		var err error
		n, err = a.storeRanges(ctx, key, edits, c)
		return nil, err
	})
	return n, err
}

// storeRanges runs under key's lock.
func (a *Array) storeRanges(ctx context.Context, key []byte, edits []Edit, c call) (int64, error) {
	var end int64
	writes := false
	for _, e := range edits {
		if e.Off < 0 {
			return 0, fmt.Errorf("edit at offset %d: %w", e.Off, ErrBadRange)
		}
		if len(e.Data) == 0 {
			continue
		}
		if e.Off > a.o.maxValue-int64(len(e.Data)) {
			return 0, fmt.Errorf("edit of %d bytes at offset %d, the largest value is %d bytes: %w", len(e.Data), e.Off, a.o.maxValue, ErrValueTooLarge)
		}
		end, writes = max(end, e.Off+int64(len(e.Data))), true
	}
	if writes {
		if n, ok, err := a.editSplits(ctx, key, edits, end, c); ok {
			return n, err
		}
	}
	cur, err := a.retrieve(ctx, key)
	switch {
	case errors.Is(err, ErrNotFound):
		cur = nil
	case err != nil:
		return 0, err
	}
	if !writes {
		return int64(len(cur)), nil
	}
	// A copy: what Retrieve returned may be a device's buffer.
	v := make([]byte, max(end, int64(len(cur))))
	copy(v, cur)
	for _, e := range edits {
		copy(v[e.Off:], e.Data)
	}
	m, err := a.prepareStore(key, v, c)
	if err != nil {
		return 0, err
	}
	return int64(len(v)), a.store(ctx, key, v, m, c)
}

// editSplits applies edits that write up to byte end to key's value when
// it is in the manifest layout (manifest.go) and stays so: it rewrites
// only the splits the edits touch (and those the value grows into), each
// in the bank its current version does not use and with a new version,
// then split 0 with the new manifest, then releases the replaced splits.
// A failure or crash at any device operation leaves the old value or the
// new one, whole. ok false: the value is not such a value (or would
// change mechanism or geometry), and nothing was written; the caller
// edits it whole. Under key's lock.
func (a *Array) editSplits(ctx context.Context, key []byte, edits []Edit, end int64, c call) (n int64, ok bool, err error) {
	if !a.banked {
		return 0, false, nil
	}
	if e, ok := a.meta.get(key); ok && (e.m == nil || !a.isManifest(&e.hdr)) {
		return 0, false, nil
	}
	if a.tinyKey(key) {
		if _, found, err := a.tinyLookup(ctx, key); err != nil || found {
			return 0, false, nil
		}
	}
	a.settleFirst(ctx, key)
	l, err := a.locate(ctx, a.key(key, 0))
	if err != nil || !a.isManifest(l.header()) {
		return 0, false, nil
	}
	y, err := a.layoutOf(ctx, key, l)
	if err != nil {
		return 0, false, nil
	}
	m, newLen := l.m, max(end, y.length)
	if mm, err := a.mechanismFor(int(newLen), c.rm); err != nil || mm != m || int64(m.SplitCap()) != y.size ||
		splitsFor(m, int(newLen)) > a.maxDataSplits(m) {
		return 0, false, nil
	}
	a.env.Clock().Observe(y.h0.Version)
	defer func() {
		if err != nil {
			a.unsettle(key)
			a.meta.forget(key)
		}
	}()
	ny := &layout{splits: splitsFor(m, int(newLen)) + 1, size: y.size, length: newLen, manifest: true}
	ny.versions = append(slices.Clone(y.versions), make([]uint64, ny.splits-y.splits)...)
	// The splits to write: those the edits cover, and, when the value
	// grows, its last split (if partial) and every split past it.
	touched := map[int]bool{}
	for _, e := range edits {
		for off := e.Off; off < e.Off+int64(len(e.Data)); off = (off/y.size + 1) * y.size {
			touched[ny.splitOf(off)] = true
		}
	}
	if newLen > y.length {
		for s := ny.splitOf(y.length); s < ny.splits; s++ {
			touched[s] = true
		}
	}
	splits := slices.Sorted(maps.Keys(touched))
	vs := a.bankVersions()
	data := make([][]byte, len(splits))
	err = a.forSplits(ctx, len(splits), func(i int) error {
		s := splits[i]
		lo, hi := ny.span(s)
		b := make([]byte, hi-lo)
		if s < y.splits {
			old, err := a.readSplit(ctx, key, y, s)
			if err != nil {
				return err
			}
			copy(b, old)
			ny.versions[s-1] = vs[y.version(s)&1^1]
		} else {
			ny.versions[s-1] = vs[0]
		}
		for _, e := range edits {
			if from, to := max(e.Off, lo), min(e.Off+int64(len(e.Data)), hi); from < to {
				copy(b[from-lo:], e.Data[from-e.Off:to-e.Off])
			}
		}
		data[i] = b
		return nil
	})
	if err != nil {
		return 0, true, err
	}
	v0 := a.env.Clock().Next()
	for !a.versionFits(v0, m, l) {
		v0 = a.env.Clock().Next()
	}
	k0 := a.key(key, 0)
	if err := a.env.Reachable(a.env.Span(k0, 0, min(m.Width(), a.env.N())), m.Tolerates()); err != nil {
		return 0, true, err
	}
	err = a.forSplits(ctx, len(splits), func(i int) error {
		s := splits[i]
		k := a.splitKey(key, s, ny.versions[s-1])
		if err := a.releaseMissed(ctx, k, ny.versions[s-1]); err != nil {
			return err
		}
		return m.Store(ctx, k, mechanism.Object{Splits: 1, ObjectLen: uint64(len(data[i])), Version: ny.versions[s-1]}, data[i], nil)
	})
	obj := mechanism.Object{Splits: uint32(ny.splits) + manifestBit, ObjectLen: uint64(newLen), Version: v0}
	if err == nil {
		err = a.releaseMissed(ctx, k0, v0)
	}
	if err == nil {
		err = m.Store(ctx, k0, obj, ny.encode(), &mechanism.Prev{Header: y.h0, Payload: l.payload})
		if err != nil && !errors.Is(err, mechanism.ErrCommitUnknown) {
			a.dropUncommitted(ctx, key, m, v0)
		}
	}
	if err != nil {
		return 0, true, err
	}
	ny.h0 = format.Header{RM: m.RM(), Splits: obj.Splits, SplitLen: uint32(len(ny.encode())), ObjectLen: obj.ObjectLen, Version: v0}
	a.meta.put(key, m, ny.h0, nil)
	// The replaced splits go, last first (see releaseInOrder).
	for i := len(splits) - 1; i >= 0; i-- {
		if s := splits[i]; s < y.splits {
			if err = l.m.Release(ctx, a.splitKey(key, s, y.version(s)), &mechanism.Prev{Header: *y.hint(s)}, 0); err != nil {
				return 0, true, fmt.Errorf("release previous split %d: %w", s, err)
			}
		}
	}
	return newLen, true, nil
}
