package keyspace

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/kvarray/kvarray/array"
)

// Partial reads and writes of Redis values (GETRANGE, STRLEN, SETRANGE,
// APPEND) through the array's range API: the keyspace header and the
// range are read together, the header alone gives the length, and a write
// edits the value where it is (array.StoreRanges) rather than being
// handed the whole new value. Offsets here are the Redis value's; the
// array's are shifted by the header (1 byte, or 9 with an expiry).

// ErrNoValue is a range write to a key that has no live value (absent,
// expired, or not in the keyspace's format): the caller writes a whole
// new value instead (a range write keeps the value's expiry and header).
var ErrNoValue = errors.New("keyspace: no value to edit in place")

// LoadRange returns n bytes of key's Redis value from byte off (fewer
// where it ends), the value's length and its header (V nil), reading only
// the keyspace header and the range. An expired value is
// array.ErrNotFound (wrapped).
func (s *Store) LoadRange(ctx context.Context, db int, key []byte, off, n int64) ([]byte, int64, Value, error) {
	var rs []array.Range
	if n > 0 {
		rs = []array.Range{{Off: off, Len: n}}
	} else if off < 0 || n < 0 {
		return nil, 0, Value{}, fmt.Errorf("key %q in db %d: range of %d bytes at %d: %w", key, db, n, off, array.ErrBadRange)
	}
	parts, length, head, err := s.LoadRanges(ctx, db, key, rs...)
	var part []byte
	if len(parts) > 0 {
		part = parts[0]
	}
	return part, length, head, err
}

// LoadRanges is LoadRange of several ranges of one value (Off and Len in
// the Redis value), read in one call: the bytes of each (fewer where the
// value ends).
func (s *Store) LoadRanges(ctx context.Context, db int, key []byte, ranges ...array.Range) ([][]byte, int64, Value, error) {
	// The Redis value starts at byte 1 or 9 of the array value: each range
	// is read as if at 1 and 8 bytes longer, and what the header says is
	// taken from it.
	rs := []array.Range{{Len: headLen}}
	for _, r := range ranges {
		if r.Off < 0 || r.Len < 0 {
			return nil, 0, Value{}, fmt.Errorf("key %q in db %d: range of %d bytes at %d: %w", key, db, r.Len, r.Off, array.ErrBadRange)
		}
		rs = append(rs, array.Range{Off: 1 + min(r.Off, math.MaxInt64-9), Len: min(r.Len, math.MaxInt64-headLen) + headLen - 1})
	}
	got, total, err := s.A.RetrieveRanges(ctx, s.Key(db, key), rs...)
	if err != nil {
		return nil, 0, Value{}, keyErr(db, key, "", err)
	}
	if len(got[0]) > 0 && got[0][0]&tagType != 0 {
		return nil, 0, Value{}, keyErr(db, key, "", ErrWrongType)
	}
	head, hl, err := DecodeHead(got[0])
	if err != nil {
		return nil, 0, Value{}, keyErr(db, key, "", err)
	}
	if Expired(head.At, NowMs()) {
		return nil, 0, Value{}, keyErr(db, key, " expired", array.ErrNotFound)
	}
	parts := make([][]byte, len(ranges))
	for i, r := range ranges {
		part := got[i+1][min(hl-1, len(got[i+1])):]
		parts[i] = part[:min(int64(len(part)), r.Len)]
	}
	return parts, total - int64(hl), head, nil
}

// Len is the length of key's Redis value, from its header: the value is
// not read.
func (s *Store) Len(ctx context.Context, db int, key []byte) (int64, error) {
	_, n, _, err := s.LoadRange(ctx, db, key, 0, 0)
	return n, err
}

// SetRange writes data at byte off of key's live Redis value (growing it,
// zero filled, if it is shorter), marks the value raw (Value.Raw) and
// keeps its expiry, and returns its new length. A key with no live value
// is ErrNoValue, a value that would grow past limit bytes
// array.ErrValueTooLarge, both with nothing written. The caller holds the
// key's lock (as for every read-modify-write).
func (s *Store) SetRange(ctx context.Context, db int, key []byte, off int64, data []byte, limit int64) (int64, error) {
	return s.edit(ctx, db, key, func(int64) []array.Edit { return []array.Edit{{Off: off, Data: data}} }, limit, false)
}

// SetRanges is SetRange of several edits (offsets in the Redis value),
// written in one call.
func (s *Store) SetRanges(ctx context.Context, db int, key []byte, edits []array.Edit, limit int64) (int64, error) {
	return s.edit(ctx, db, key, func(int64) []array.Edit { return edits }, limit, false)
}

// Append is SetRange at the end of the value.
func (s *Store) Append(ctx context.Context, db int, key []byte, data []byte, limit int64) (int64, error) {
	return s.edit(ctx, db, key, func(n int64) []array.Edit { return []array.Edit{{Off: n, Data: data}} }, limit, true)
}

// edit writes the edits at(length) returns (offsets in the Redis value)
// to key's live value. The value becomes raw (Value.Raw) when an edit is
// not empty, or always with alwaysRaw: Redis's APPEND makes the value raw
// even when it appends nothing, its SETRANGE of nothing leaves it as it
// is.
func (s *Store) edit(ctx context.Context, db int, key []byte, at func(length int64) []array.Edit, limit int64, alwaysRaw bool) (int64, error) {
	p := s.Phys(db)
	var n int64
	_, err := s.write(ctx, p, key, func(old state) (state, error) {
		switch {
		case old.unknown:
			return old, old.err
		case !old.exists, old.foreign, Expired(old.at, NowMs()):
			return old, ErrNoValue
		case old.typ != TypeString:
			return old, ErrWrongType
		}
		var edits []array.Edit
		some := false
		for _, e := range at(old.length) {
			if e.Off < 0 || len(e.Data) > 0 && e.Off > limit-int64(len(e.Data)) {
				return old, fmt.Errorf("%d bytes at offset %d, the largest value is %d bytes: %w", len(e.Data), e.Off, limit, array.ErrValueTooLarge)
			}
			some = some || len(e.Data) > 0
			edits = append(edits, array.Edit{Off: int64(old.head) + e.Off, Data: e.Data})
		}
		if !old.raw && (some || alwaysRaw) {
			tag := byte(tagRaw)
			if old.at != 0 {
				tag |= tagExpiry
			}
			edits = append(edits, array.Edit{Data: []byte{tag}})
		}
		total, err := s.A.StoreRanges(ctx, RawKey(p, key), edits)
		n = total - int64(old.head)
		now := old
		now.raw, now.length = true, n
		return now, err
	}, false, true)
	if err != nil {
		return 0, keyErr(db, key, "", err)
	}
	return n, nil
}
