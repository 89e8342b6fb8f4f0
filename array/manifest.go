package array

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
)

// A huge value (more than one split of its mechanism) is written in one
// of two layouts, which split 0's header tells apart.
//
// The flat layout (every huge value written before manifests, and every
// huge value on an array from before banks): split s holds bytes
// [s·size, (s+1)·size), and every split carries split 0's version,
// length and split count. One split cannot be replaced without the
// others: a range write rewrote the whole value.
//
// The manifest layout (every huge value written now on a banked array):
// split 0 holds no user bytes but the manifest, the split size and the
// version of each data split; data split s ≥ 1 holds bytes
// [(s-1)·size, s·size) and is written as a value of its own (its header:
// 1 split, its own length, its own version), in the bank its version
// selects. Split 0's header counts the splits with manifestBit added,
// which no flat value has (at most bankBit splits), so the layout needs
// no new header field, and code from before manifests reads such a value
// as corrupt (its split count does not fit its length) rather than wrong.
//
// Invariants of the manifest layout:
//   - Split 0 is the commit point. A data split's piece counts only at
//     the version split 0 names; any other piece under the split's keys
//     (both banks) is an orphan, which repair sweeps.
//   - A write never overwrites a data split split 0 names: it writes the
//     split's new bytes in the other bank, with a new version, then split
//     0 in place, then releases the old pieces. A failure or crash at any
//     device operation leaves the old value or the new one, whole.
//   - So a range write (StoreRanges) rewrites only the splits its edits
//     touch, and split 0, rather than the whole value.
const manifestBit = bankBit

// manifestHead is the manifest's fixed part: the split size.
const manifestHead = 8

// layout is where a value's bytes are: which splits, at which version
// each. Read from split 0 (its header, and its payload for a manifest).
type layout struct {
	h0       format.Header // split 0's, as read
	splits   int           // internal splits, split 0 included
	size     int64         // bytes per split that holds bytes (the last may hold fewer)
	length   int64         // the value's
	manifest bool
	versions []uint64 // manifest: of splits 1..; versions[s-1] is split s's
}

// isManifest reports whether h is split 0's header of a value in the
// manifest layout.
func (a *Array) isManifest(h *format.Header) bool {
	return a.banked && h.Splits > manifestBit
}

// splitsOf is the number of splits of the value whose split 0 has header
// h (or of a data split's own write, for a manifest's data split).
func (a *Array) splitsOf(h *format.Header) int {
	if a.isManifest(h) {
		return int(h.Splits - manifestBit)
	}
	return int(max(h.Splits, 1))
}

// flatLayout is the layout of a value whose split 0 has header h, in the
// flat layout (or of one split).
func (a *Array) flatLayout(h *format.Header) (*layout, error) {
	n, size := int(h.Splits), int64(h.SplitLen)
	if h.ObjectLen > uint64(a.o.maxValue) || n <= 1 && uint64(size) != h.ObjectLen ||
		n > 1 && (uint64(n-1)*uint64(size) >= h.ObjectLen || uint64(n)*uint64(size) < h.ObjectLen) {
		return nil, fmt.Errorf("split 0 says %d splits of %d bytes for a %d-byte value: %w", n, size, h.ObjectLen, format.ErrCorrupt)
	}
	if n <= 1 {
		size = max(int64(h.ObjectLen), 1)
	}
	return &layout{h0: *h, splits: max(n, 1), size: size, length: int64(h.ObjectLen)}, nil
}

// decodeManifest is the layout of a manifest value whose split 0 has
// header h and payload p.
func (a *Array) decodeManifest(h *format.Header, p []byte) (*layout, error) {
	n := a.splitsOf(h)
	if n < 2 || len(p) != manifestHead+8*(n-1) {
		return nil, fmt.Errorf("split 0's manifest of %d bytes for %d splits: %w", len(p), n, format.ErrCorrupt)
	}
	y := &layout{h0: *h, splits: n, size: int64(binary.LittleEndian.Uint64(p)), length: int64(h.ObjectLen), manifest: true}
	if h.ObjectLen > uint64(a.o.maxValue) || y.size <= 0 || y.size > int64(a.o.maxValue) ||
		int64(n-2)*y.size >= y.length || int64(n-1)*y.size < y.length {
		return nil, fmt.Errorf("split 0's manifest says %d splits of %d bytes for a %d-byte value: %w", n-1, y.size, h.ObjectLen, format.ErrCorrupt)
	}
	y.versions = make([]uint64, n-1)
	for i := range y.versions {
		y.versions[i] = binary.LittleEndian.Uint64(p[manifestHead+8*i:])
		if y.versions[i] == 0 {
			return nil, fmt.Errorf("split 0's manifest names version 0 for split %d: %w", i+1, format.ErrCorrupt)
		}
	}
	return y, nil
}

// encode returns the manifest: split 0's payload.
func (y *layout) encode() []byte {
	p := binary.LittleEndian.AppendUint64(make([]byte, 0, manifestHead+8*len(y.versions)), uint64(y.size))
	for _, v := range y.versions {
		p = binary.LittleEndian.AppendUint64(p, v)
	}
	return p
}

// version is split s's.
func (y *layout) version(s int) uint64 {
	if y.manifest && s > 0 {
		return y.versions[s-1]
	}
	return y.h0.Version
}

// span is the bytes [lo, hi) of the value that split s holds.
func (y *layout) span(s int) (lo, hi int64) {
	if y.manifest {
		if s == 0 {
			return 0, 0
		}
		s--
	}
	lo = min(int64(s)*y.size, y.length)
	return lo, min(lo+y.size, y.length)
}

// first is the first split holding bytes.
func (y *layout) first() int {
	if y.manifest {
		return 1
	}
	return 0
}

// splitOf is the split holding byte off (off < length).
func (y *layout) splitOf(off int64) int { return int(off/y.size) + y.first() }

// hint is the header that split s's write carries, as far as split 0
// tells: split 0's own for split 0 and for every split of a flat value;
// for a manifest's data split, a value of its own at its version.
func (y *layout) hint(s int) *format.Header {
	h := y.h0
	if y.manifest && s > 0 {
		lo, hi := y.span(s)
		h.Version, h.Splits, h.SplitLen, h.ObjectLen = y.version(s), 1, uint32(hi-lo), uint64(hi-lo)
	}
	return &h
}

// keyIn is split s's key, at its version in y, wanting that version past
// split 0.
func (a *Array) keyIn(user []byte, y *layout, s int) mechanism.Key {
	k := a.splitKey(user, s, y.version(s))
	if s > 0 {
		k.Want = y.version(s)
	}
	return k
}

// matches reports whether h, the header a split s was read with, is of
// the value y describes: the mechanism verified the piece, not whose it is.
func (y *layout) matches(s int, h *format.Header) error {
	w := y.hint(s)
	if y.manifest && s > 0 {
		if h.Version != w.Version || h.Splits != 1 || h.ObjectLen != w.ObjectLen {
			return fmt.Errorf("split %d (version %d, %d splits, %d bytes) is not the one split 0 names (version %d, %d bytes): %w",
				s, h.Version, h.Splits, h.ObjectLen, w.Version, w.ObjectLen, format.ErrCorrupt)
		}
		return nil
	}
	if h.Splits != w.Splits || h.ObjectLen != w.ObjectLen || (s > 0 && h.Version != w.Version) {
		return fmt.Errorf("split %d (of %d splits, %d bytes in all) does not match split 0 (%d splits, %d in all): %w",
			s, h.Splits, h.ObjectLen, w.Splits, w.ObjectLen, format.ErrCorrupt)
	}
	return nil
}

// layoutOf returns the layout of the value whose split 0 l located. A
// manifest is read from split 0 (all of it: a mechanism's pieces of it,
// decoded), once per located.
func (a *Array) layoutOf(ctx context.Context, key []byte, l *located) (*layout, error) {
	if l.lay != nil {
		return l.lay, nil
	}
	h := l.header()
	if !a.isManifest(h) {
		y, err := a.flatLayout(h)
		l.lay = y
		return y, err
	}
	have := l.have
	if len(have) == 0 {
		// Located from the metadata cache: read where split 0 lives.
		fresh, err := a.locate(ctx, a.key(key, 0))
		if err != nil {
			return nil, fmt.Errorf("split 0's manifest: %w", err)
		}
		have = fresh.have
	}
	p, h0, err := a.retrieveSplit(ctx, l.m, a.key(key, 0), have, h.Version)
	if err != nil {
		return nil, fmt.Errorf("split 0's manifest: %w", err)
	}
	if h0.Version != h.Version || h0.Splits != h.Splits || h0.ObjectLen != h.ObjectLen {
		return nil, fmt.Errorf("split 0 read as version %d, located as %d: %w", h0.Version, h.Version, format.ErrCorrupt)
	}
	y, err := a.decodeManifest(&h0, p)
	l.lay = y
	return y, err
}

// maxDataSplits is the most splits that hold bytes a value of m may
// have: what split numbers can address (the bank bit aside, and split
// 0), and what a manifest in one split of m can name.
func (a *Array) maxDataSplits(m mechanism.Mechanism) int {
	if !a.banked {
		return format.MaxSplits
	}
	return min(manifestBit-2, (m.SplitCap()-manifestHead)/8)
}

// otherBank is split s's key in the bank its version in y does not use.
func (a *Array) otherBank(user []byte, y *layout, s int) mechanism.Key {
	return a.splitKey(user, s, y.version(s)^1)
}

// unreadable reports whether err says a value cannot be read (rather
// than that the read could not be made): a store then replaces it as if
// it had none.
func unreadable(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrDataLoss) || errors.Is(err, format.ErrCorrupt)
}

// bankVersions returns two new versions, vs[b] of bank b.
func (a *Array) bankVersions() [2]uint64 {
	var vs [2]uint64
	for vs[0] == 0 || vs[1] == 0 {
		v := a.env.Clock().Next()
		if vs[v&1] == 0 {
			vs[v&1] = v
		}
	}
	return vs
}
