package collection

import (
	"context"
	"slices"
	"strconv"

	"github.com/kvarray/kvarray/keyspace"
)

// Sets: a table whose elements are the members, with empty values.
// Redis 7.0 has two encodings, and OBJECT ENCODING gives their names:
// intset while every member is an integer and there are at most
// lim.SetIntsetEntries of them, hashtable from the first other member
// on, never back. Stored:
//   - inline while an intset (members in numeric order, as an intset
//     lists them), and while a hashtable holds at most setInlineEntries
//     members of at most setInlineValue bytes (the flag setNamedTable
//     in the encoding byte keeps the hashtable name): kvarray's own
//     cheap small sets, which Redis 7.2 calls listpack;
//   - external past that: element key ElementKey(version, member), empty
//     value; SMEMBERS and SSCAN list them in byte order.

const (
	setNamedTable    = 0x10
	setInlineEntries = 128
	setInlineValue   = 64
)

// Set is one set as a command sees it (table.go).
type Set struct{ table }

// OpenSet returns set value v (found false: a new, empty set) for a
// command (OpenHash's arguments).
func OpenSet(ctx context.Context, src Source, v keyspace.Value, found bool, lim Limits, maxElem int) (*Set, error) {
	s := &Set{table{ctx: ctx, src: src, maxElem: maxElem, typ: keyspace.TypeSet}}
	s.convert = func(m, _ []byte) bool {
		if s.flags == 0 && !isInteger(m) {
			s.flags = setNamedTable // the name changes for good
		}
		if s.flags == 0 {
			return len(s.fields) > lim.SetIntsetEntries
		}
		return len(s.fields) > setInlineEntries || len(m) > setInlineValue
	}
	if err := s.open(v, found); err != nil {
		return nil, err
	}
	return s, nil
}

// isInteger reports whether m is an integer as Redis's intset holds one:
// a 64-bit decimal in canonical form.
func isInteger(m []byte) bool {
	n, err := strconv.ParseInt(string(m), 10, 64)
	return err == nil && strconv.FormatInt(n, 10) == string(m)
}

// Encoding is OBJECT ENCODING's name for the set as it is now.
func (s *Set) Encoding() string {
	if s.ver == 0 && s.flags == 0 {
		return "intset"
	}
	return "hashtable"
}

// Add adds member m and reports whether it is new.
func (s *Set) Add(m []byte) (bool, error) {
	if _, found, err := s.Get(m); err != nil || found {
		return false, err
	}
	return s.Set(m, []byte{})
}

// Has reports whether m is a member.
func (s *Set) Has(m []byte) (bool, error) {
	_, found, err := s.Get(m)
	return found, err
}

// Members returns every member (an intset's in numeric order).
func (s *Set) Members() ([][]byte, error) {
	all, err := s.All()
	if err != nil {
		return nil, err
	}
	s.sortInts(all)
	out := make([][]byte, len(all))
	for i, f := range all {
		out[i] = f.Name
	}
	return out, nil
}

// sortInts puts an intset's members in numeric order.
func (s *Set) sortInts(fs []Field) {
	if s.ver != 0 || s.flags != 0 {
		return
	}
	slices.SortFunc(fs, func(a, b Field) int {
		x, _ := strconv.ParseInt(string(a.Name), 10, 64)
		y, _ := strconv.ParseInt(string(b.Name), 10, 64)
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
}

// Commit is table's, an intset's members stored in numeric order.
func (s *Set) Commit() (keyspace.Value, bool, bool, []keyspace.Op) {
	s.sortInts(s.fields)
	return s.table.Commit()
}
