package collection

import (
	"context"

	"github.com/kvarray/kvarray/keyspace"
)

// Hashes. Inline (listpack): the value holds field, value, field,
// value... in insertion order (HGETALL's order, as Redis's listpack).
// External (hashtable): element key ElementKey(version, field), element
// value the field's value; HGETALL and HSCAN list the element keys in
// byte order. A hash converts past lim.HashEntries fields or a field or
// value longer than lim.HashValue, as Redis.

// Hash is one hash as a command sees it (table.go).
type Hash struct{ table }

// OpenHash returns hash value v (found false: a new, empty hash) for a
// command: lim are the conversion thresholds, maxElem the longest field
// an element key can hold (keyspace.Store.MaxElement).
func OpenHash(ctx context.Context, src Source, v keyspace.Value, found bool, lim Limits, maxElem int) (*Hash, error) {
	h := &Hash{table{ctx: ctx, src: src, maxElem: maxElem, typ: keyspace.TypeHash}}
	h.convert = func(f, v []byte) bool {
		return len(h.fields) > lim.HashEntries || len(f) > lim.HashValue || len(v) > lim.HashValue
	}
	if err := h.open(v, found); err != nil {
		return nil, err
	}
	return h, nil
}

// Encoding is OBJECT ENCODING's name for the hash as it is now.
func (h *Hash) Encoding() string {
	if h.ver != 0 {
		return "hashtable"
	}
	return "listpack"
}
