// Package collection encodes Redis's collections (hashes, sets, lists,
// sorted sets and streams) as keyspace values and array elements. The server parses
// commands and writes replies; everything about how a collection lives on
// the array is here, one file per type.
//
// Invariants:
//   - A collection's value (under its key, keyspace.Value with its Type)
//     starts with an encoding byte, then the element count (uvarint).
//     Inline encodings (Redis's listpack, encInline) hold the elements
//     after the count, in insertion order; external ones (encExternal)
//     hold nothing more (a list: its head's position, list.go): each
//     element is an array value of its own under
//     keyspace.ElementKey(version, element), the version being the
//     value's (keyspace.Value.Ver, never 0 for them, 0 for inline ones).
//   - The count is exact: every command that adds or removes elements
//     rewrites the value with the new count in the same all-or-nothing
//     write as the elements (the server applies a command's ops as one
//     intent record when there are more than one, package server's
//     tx.go).
//   - A collection converts from inline to external once it has more
//     elements than Limits allows or an element longer than it allows,
//     as Redis does, and never back (Redis keeps a hashtable too).
//   - An empty collection does not exist: the command that removes the
//     last element deletes the value.
//   - A command works on one collection object (Hash...), which reads
//     through a Source (the server's transaction overlay) and buffers its
//     writes; Commit turns them into keyspace ops and the new value.
package collection

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/internal/fanout"
	"github.com/kvarray/kvarray/keyspace"
)

// Source reads a collection's elements, as the command sees them (the
// server reads through its transaction's overlay).
type Source interface {
	// Element reads the array value under element key ek.
	Element(ctx context.Context, ek []byte) ([]byte, bool, error)
	// ElementKeys lists, in byte order, at most n element keys that
	// start with prefix and come after after (nil: from the first), and
	// the cursor of the next page (nil: none); opts are the array's
	// (array.Fresh: a listing that sees every write before it, not the
	// up-to-a-second-old device cursors a page before left at after).
	ElementKeys(ctx context.Context, prefix, after []byte, n int, opts ...array.ListOption) ([][]byte, []byte, error)
}

// Limits are Redis's conversion thresholds (hash-max-listpack-entries
// and -value...).
type Limits struct {
	HashEntries, HashValue int
	SetIntsetEntries       int
	// ListSize is list-max-listpack-size: n > 0 elements, or n < 0 for
	// 4 KiB << (-n-1) bytes of them.
	ListSize               int
	ZSetEntries, ZSetValue int
}

// DefaultLimits are Redis 7.0's defaults.
var DefaultLimits = Limits{HashEntries: 128, HashValue: 64, SetIntsetEntries: 512, ListSize: -2, ZSetEntries: 128, ZSetValue: 64}

// Encodings: the first byte of a collection's value.
const (
	encInline   = 0
	encExternal = 1
	// encFlags are bits of an inline value's encoding byte that its type
	// uses (a set's intset or hashtable name).
	encFlags = 0xF0
)

// ErrBadValue is a collection value that does not decode.
var ErrBadValue = errors.New("collection: malformed collection value")

// ErrIncomplete is a listing of an external collection's elements that
// returned fewer than the collection counts. Its count is exact, so the
// listing missed some: the array listed them from fewer devices than hold
// them (more failed than it tolerates). A command must fail on it, never
// act on the elements it did list (a ZPOPMIN would pop nothing and say
// so).
var ErrIncomplete = errors.New("collection: a listing returned fewer elements than the collection holds")

// ErrElementTooLong is an element longer than an element key can hold.
var ErrElementTooLong = errors.New("element too long")

// Encoding is the name OBJECT ENCODING gives the collection value v.
func Encoding(v keyspace.Value) string {
	external := len(v.V) > 0 && v.V[0] == encExternal
	switch v.Type {
	case keyspace.TypeHash:
		if external {
			return "hashtable"
		}
		return "listpack"
	case keyspace.TypeSet:
		if external || len(v.V) > 0 && v.V[0]&setNamedTable != 0 {
			return "hashtable"
		}
		return "intset"
	case keyspace.TypeList:
		return "quicklist"
	case keyspace.TypeZSet:
		if external {
			return "skiplist"
		}
		return "listpack"
	case keyspace.TypeStream:
		return "stream"
	}
	return "unknown"
}

// decodeHead returns a collection value's encoding, count and the bytes
// that follow.
func decodeHead(b []byte) (enc byte, n int64, rest []byte, err error) {
	// Flags are an inline value's only.
	if len(b) < 2 || b[0]&^encFlags > encExternal || b[0]&encFlags != 0 && b[0]&^encFlags != encInline {
		return 0, 0, nil, ErrBadValue
	}
	c, k := binary.Uvarint(b[1:])
	if k <= 0 {
		return 0, 0, nil, ErrBadValue
	}
	return b[0], int64(c), b[1+k:], nil
}

func encodeHead(enc byte, n int64, capacity int) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+capacity)
	return binary.AppendUvarint(append(b, enc), uint64(n))
}

// appendString appends a length-prefixed string.
func appendString(b, s []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// readString reverses appendString.
func readString(b []byte) ([]byte, []byte, error) {
	l, k := binary.Uvarint(b)
	if k <= 0 || l > uint64(len(b)-k) {
		return nil, nil, ErrBadValue
	}
	return b[k : k+int(l) : k+int(l)], b[k+int(l):], nil
}

// listPage is how many element keys a listing page asks for.
const listPage = 1024

// allKeys lists every element key under prefix.
func allKeys(ctx context.Context, src Source, prefix []byte) ([][]byte, error) {
	var out [][]byte
	var after []byte
	for {
		// Fresh: a later page's after may be where an earlier
		// command's listing left its (older) device cursors.
		page, next, err := src.ElementKeys(ctx, prefix, after, listPage, array.Fresh())
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if next == nil {
			return out, nil
		}
		after = next
	}
}

// readAll reads the values of keys, concurrently (the array serves
// concurrent reads in parallel); a key that vanished reads nil, false.
func readAll(ctx context.Context, src Source, keys [][]byte) ([][]byte, []bool, error) {
	vals := make([][]byte, len(keys))
	found := make([]bool, len(keys))
	err := fanout.Each(len(keys), 32, func(i int) error {
		var err error
		vals[i], found[i], err = src.Element(ctx, keys[i])
		return err
	})
	return vals, found, err
}

// CopyElements returns the ops that copy the elements of collection
// value v (external: under a new version) and the copy's value (COPY).
func CopyElements(ctx context.Context, src Source, v keyspace.Value) (keyspace.Value, []keyspace.Op, error) {
	if v.Ver == 0 {
		v.V = slices.Clone(v.V)
		return v, nil, nil
	}
	prefix := keyspace.ElementPrefix(v.Ver)
	keys, err := allKeys(ctx, src, prefix)
	if err != nil {
		return keyspace.Value{}, nil, fmt.Errorf("collection: copying: %w", err)
	}
	vals, found, err := readAll(ctx, src, keys)
	if err != nil {
		return keyspace.Value{}, nil, fmt.Errorf("collection: copying: %w", err)
	}
	nv := v
	nv.V = slices.Clone(v.V)
	nv.Ver = keyspace.NewVersion()
	ops := make([]keyspace.Op, 0, len(keys))
	for i, k := range keys {
		if found[i] {
			ops = append(ops, keyspace.ElementOp(keyspace.ElementKey(nv.Ver, k[len(prefix):]), vals[i], false))
		}
	}
	return nv, ops, nil
}

// StoreSource is the Source of the keyspace's elements as stored (no
// transaction's overlay), for a program that writes a collection's ops
// as it goes (the tests).
func StoreSource(s *keyspace.Store) Source { return storeSource{s} }

type storeSource struct{ s *keyspace.Store }

func (s storeSource) Element(ctx context.Context, ek []byte) ([]byte, bool, error) {
	return s.s.Element(ctx, ek)
}

func (s storeSource) ElementKeys(ctx context.Context, prefix, after []byte, n int, opts ...array.ListOption) ([][]byte, []byte, error) {
	return s.s.A.KeysFrom(ctx, prefix, after, n, opts...)
}
