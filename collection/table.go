package collection

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/kvarray/kvarray/keyspace"
)

// Field is one element of a collection and its value (a hash's field and
// value; a set's member, with no value).
type Field struct {
	Name, Value []byte
}

// table is a collection of named elements with values (a hash's fields;
// a set's members, with empty values) as a command sees it: read through
// its Source, the command's writes buffered until Commit. The type's
// file says when it converts and what its encodings are called.
type table struct {
	typ     byte
	ctx     context.Context
	src     Source
	maxElem int
	at      int64
	ver     uint64 // 0: inline
	n       int64
	openVer uint64 // as opened
	openN   int64
	fields  []Field // inline only
	changed bool
	// pend: an external table's writes, by field (nil value: deleted), in
	// the order made (order).
	pend  map[string][]byte
	order []string
	// read: elements Prefetch read (nil value: absent).
	read map[string][]byte
	// flags is an inline value's encoding byte less encInline's (a
	// type's own distinctions, e.g. a set named hashtable while inline).
	flags byte
	// convert says whether an inline table converts once it holds f
	// with value v (called after each insertion or change).
	convert func(f, v []byte) bool
}

// open decodes value v of type h.typ (found false: a new, empty one).
func (h *table) open(v keyspace.Value, found bool) error {
	if !found {
		return nil
	}
	if v.Type != h.typ {
		return keyspace.ErrWrongType
	}
	enc, n, rest, err := decodeHead(v.V)
	if err != nil {
		return err
	}
	h.at, h.n, h.openN = v.At, n, n
	if enc&^encFlags == encExternal {
		if v.Ver == 0 {
			return ErrBadValue
		}
		h.ver, h.openVer = v.Ver, v.Ver
		return nil
	}
	h.flags = enc & encFlags
	h.fields = make([]Field, 0, min(n, int64(len(rest))))
	for range n {
		var f Field
		if f.Name, rest, err = readString(rest); err != nil {
			return err
		}
		if f.Value, rest, err = readString(rest); err != nil {
			return err
		}
		h.fields = append(h.fields, f)
	}
	if len(rest) != 0 {
		return ErrBadValue
	}
	return nil
}

// Len is the number of elements.
func (h *table) Len() int64 { return h.n }

// Version is the version of an external table's elements, 0 for an
// inline one.
func (h *table) Version() uint64 { return h.ver }

func (h *table) inlineIndex(f []byte) int {
	return slices.IndexFunc(h.fields, func(x Field) bool { return bytes.Equal(x.Name, f) })
}

// Get returns field f's value.
func (h *table) Get(f []byte) ([]byte, bool, error) {
	if h.ver == 0 {
		if i := h.inlineIndex(f); i >= 0 {
			return h.fields[i].Value, true, nil
		}
		return nil, false, nil
	}
	if v, ok := h.pend[string(f)]; ok {
		return v, v != nil, nil
	}
	if v, ok := h.read[string(f)]; ok {
		return v, v != nil, nil
	}
	v, found, err := h.src.Element(h.ctx, h.elementKey(f))
	if err != nil {
		return nil, false, fmt.Errorf("collection: element %q: %w", truncated(f), err)
	}
	if found && h.long(f) {
		v, found, err = longElement(f, v)
	}
	return v, found, err
}

// Long elements. A field (or member) of at least maxElem bytes is stored
// under its name: its first maxElem-32 bytes, then its SHA-256, maxElem
// bytes in all; the element's value is then the whole field
// (appendString) and the value. A shorter field is its element key's
// suffix and its value the value as it is, so an element key's suffix of
// maxElem bytes always names a long field. Two long fields share a name
// only with a SHA-256 collision: the one stored reads as itself, the
// other as absent.

// long reports whether field f is stored under its name.
func (h *table) long(f []byte) bool { return len(f) >= h.maxElem }

// elementKey is the element key of field f.
func (h *table) elementKey(f []byte) []byte {
	if !h.long(f) {
		return keyspace.ElementKey(h.ver, f)
	}
	sum := sha256.Sum256(f)
	return keyspace.ElementKey(h.ver, append(slices.Clip(f[:h.maxElem-len(sum)]), sum[:]...))
}

// elementValue is what the element of field f with value v holds.
func (h *table) elementValue(f, v []byte) []byte {
	if v == nil || !h.long(f) {
		return v
	}
	return append(appendString(make([]byte, 0, len(f)+len(v)+binary.MaxVarintLen64), f), v...)
}

// longElement is the value of long field f from its element's bytes b:
// found false when the element is another field's.
func longElement(f, b []byte) ([]byte, bool, error) {
	name, v, err := readString(b)
	if err != nil {
		return nil, false, fmt.Errorf("collection: the element of a long field: %w", err)
	}
	if !bytes.Equal(name, f) {
		return nil, false, nil
	}
	return v, true, nil
}

// Prefetch reads the elements named names of an external table at once
// (the array serves concurrent reads in parallel), so that the command's
// Gets, Sets and Deletes of them read nothing more: a command of many
// fields or members costs about one read's time, not one per name.
func (h *table) Prefetch(names [][]byte) error {
	if h.ver == 0 || len(names) < 2 {
		return nil
	}
	keys := make([][]byte, len(names))
	for i, f := range names {
		keys[i] = h.elementKey(f)
	}
	vals, found, err := readAll(h.ctx, h.src, keys)
	if err != nil {
		return fmt.Errorf("collection: reading elements: %w", err)
	}
	if h.read == nil {
		h.read = make(map[string][]byte, len(keys))
	}
	for i, f := range names {
		v := vals[i]
		if found[i] && h.long(f) {
			if v, found[i], err = longElement(f, v); err != nil {
				return err
			}
		}
		if found[i] && v == nil {
			v = []byte{}
		}
		if !found[i] {
			v = nil
		}
		h.read[string(f)] = v
	}
	return nil
}

// Set sets field f to v and reports whether f is new.
func (h *table) Set(f, v []byte) (bool, error) {
	if h.ver == 0 {
		i := h.inlineIndex(f)
		if i >= 0 {
			h.fields[i].Value = v
		} else {
			h.fields = append(h.fields, Field{f, v})
			h.n++
		}
		h.changed = true
		if h.convert(f, v) {
			if err := h.external(); err != nil {
				return false, err
			}
		}
		return i < 0, nil
	}
	_, found, err := h.Get(f)
	if err != nil {
		return false, err
	}
	h.put(f, v)
	if !found {
		h.n++
	}
	return !found, nil
}

// Delete removes field f and reports whether it was there.
func (h *table) Delete(f []byte) (bool, error) {
	if h.ver == 0 {
		i := h.inlineIndex(f)
		if i < 0 {
			return false, nil
		}
		h.fields = slices.Delete(h.fields, i, i+1)
		h.n--
		h.changed = true
		return true, nil
	}
	_, found, err := h.Get(f)
	if err != nil || !found {
		return false, err
	}
	h.put(f, nil)
	h.n--
	return true, nil
}

func (h *table) put(f, v []byte) {
	if h.pend == nil {
		h.pend = map[string][]byte{}
	}
	if _, ok := h.pend[string(f)]; !ok {
		h.order = append(h.order, string(f))
	}
	if v == nil {
		h.pend[string(f)] = nil
	} else {
		h.pend[string(f)] = slices.Clip(v)
		if h.pend[string(f)] == nil {
			h.pend[string(f)] = []byte{}
		}
	}
	h.changed = true
}

// external makes an inline table external: every element becomes an
// array value.
func (h *table) external() error {
	h.ver = keyspace.NewVersion()
	for _, f := range h.fields {
		h.put(f.Name, f.Value)
	}
	h.fields = nil
	return nil
}

// All returns every element: an inline table's in insertion order, an
// external one's in byte order of the fields.
func (h *table) All() ([]Field, error) {
	if h.ver == 0 {
		return slices.Clone(h.fields), nil
	}
	out, _, err := h.scan(nil, -1)
	return out, err
}

// Scan returns up to about n fields after cursor after (nil: from the
// first) and the cursor of the next page (nil: none). An inline table
// returns every field at once, as Redis does for a listpack.
func (h *table) Scan(after []byte, n int) ([]Field, []byte, error) {
	if h.ver == 0 {
		return slices.Clone(h.fields), nil, nil
	}
	return h.scan(after, n)
}

// scan pages through the element keys (n < 0: all of them), reading the
// values; the command's own pending writes are merged in (All after a
// write in one command).
func (h *table) scan(after []byte, n int) ([]Field, []byte, error) {
	prefix := keyspace.ElementPrefix(h.ver)
	var keys [][]byte
	var next []byte
	var err error
	if n < 0 {
		keys, err = allKeys(h.ctx, h.src, prefix)
	} else {
		var ak []byte
		if after != nil {
			ak = append(slices.Clone(prefix), after...)
		}
		keys, next, err = h.src.ElementKeys(h.ctx, prefix, ak, max(n, 1))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("collection: listing a collection: %w", err)
	}
	vals, found, err := readAll(h.ctx, h.src, keys)
	if err != nil {
		return nil, nil, fmt.Errorf("collection: reading a collection: %w", err)
	}
	out := make([]Field, 0, len(keys))
	for i, k := range keys {
		f, v := k[len(prefix):], vals[i]
		if !found[i] {
			continue
		}
		if len(f) == h.maxElem { // a long field's name
			if f, v, err = readString(v); err != nil {
				return nil, nil, fmt.Errorf("collection: the element of a long field: %w", err)
			}
		}
		if _, ok := h.pend[string(f)]; !ok {
			out = append(out, Field{f, v})
		}
	}
	if len(h.pend) > 0 && n < 0 {
		for _, f := range h.order {
			if v := h.pend[f]; v != nil {
				out = append(out, Field{[]byte(f), v})
			}
		}
		slices.SortFunc(out, func(a, b Field) int { return bytes.Compare(a.Name, b.Name) })
	}
	if next != nil {
		next = next[len(prefix):]
	}
	return out, next, nil
}

// Changed reports whether the command changed the collection.
func (h *table) Changed() bool { return h.changed }

// Commit returns the new value (del: the collection is now empty and
// its key is to be deleted), whether the value changed (an external
// table whose elements changed but not their number keeps its value: the
// command writes its element ops alone) and the element ops. Call it
// when Changed.
func (h *table) Commit() (v keyspace.Value, del, valueChanged bool, ops []keyspace.Op) {
	if h.n == 0 {
		// Its remaining elements are the deleted ones: the value's
		// delete makes them garbage with the rest.
		return keyspace.Value{}, true, true, nil
	}
	v = keyspace.Value{Type: h.typ, At: h.at, Ver: h.ver}
	if h.ver == 0 {
		size := 0
		for _, f := range h.fields {
			size += len(f.Name) + len(f.Value) + 4
		}
		b := encodeHead(encInline|h.flags, h.n, size)
		for _, f := range h.fields {
			b = appendString(appendString(b, f.Name), f.Value)
		}
		v.V = b
		return v, false, true, nil
	}
	v.V = encodeHead(encExternal, h.n, 0)
	ops = make([]keyspace.Op, 0, len(h.order))
	for _, f := range h.order {
		val := h.pend[f]
		ops = append(ops, keyspace.ElementOp(h.elementKey([]byte(f)), h.elementValue([]byte(f), val), val == nil))
	}
	return v, false, h.n != h.openN || h.ver != h.openVer, ops
}

// truncated shortens a field for an error message.
func truncated(b []byte) []byte { return b[:min(len(b), 32)] }
