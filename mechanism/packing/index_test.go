package packing

import (
	"slices"
	"testing"
)

// TestIndexOthers: a member listed by two sets (a move cut short) maps to
// the set holding its newer version, and the index names the other set
// as also listing it, whichever set is noted first; once that set is
// noted without the member (its leave), it is no longer named, and an
// emptied set is forgotten with its listings.
func TestIndexOthers(t *testing.T) {
	set := func(id uint64, version uint64, keys ...string) *parityFields {
		f := &parityFields{geometry: geometry{set: id, k: 4, r: 2, shardSize: 64, parity: []int{4, 5}}}
		for i, k := range keys {
			f.members = append(f.members, member{slot: i, dev: i, key: []byte(k), version: version})
		}
		return f
	}
	for _, oldFirst := range []bool{true, false} {
		x := newSetIndex()
		older, newer := set(1, 10, "a", "b"), set(2, 20, "a", "c")
		if oldFirst {
			x.note(older, 10)
			x.note(newer, 20)
		} else {
			x.note(newer, 20)
			x.note(older, 10)
		}
		a := memberKey([]byte("a"), 0)
		if e, ok := x.entry(a); !ok || e.g.set != 2 || e.m.version != 20 {
			t.Fatalf("oldFirst %v: a maps to %+v (found %v), want set 2 at version 20", oldFirst, e, ok)
		}
		if got := x.others[a]; !slices.Equal(got, []uint64{1}) {
			t.Fatalf("oldFirst %v: sets also listing a: %v, want [1]", oldFirst, got)
		}
		if got := x.others[memberKey([]byte("b"), 0)]; got != nil {
			t.Fatalf("oldFirst %v: b, in one set, is listed by others too: %v", oldFirst, got)
		}
		x.note(set(1, 10, "b"), 30) // a's leave of set 1
		if got, ok := x.others[a]; ok {
			t.Fatalf("oldFirst %v: after set 1 let a go, still named: %v", oldFirst, got)
		}
		x.note(newer, 20)
		x.note(set(1, 10, "a"), 40) // set 1 lists a again, at its older version
		if got := x.others[a]; !slices.Equal(got, []uint64{1}) {
			t.Fatalf("oldFirst %v: sets also listing a: %v, want [1]", oldFirst, got)
		}
		x.note(&parityFields{geometry: older.geometry}, 50) // set 1 emptied
		if got, ok := x.others[a]; ok {
			t.Fatalf("oldFirst %v: an emptied set still named: %v", oldFirst, got)
		}
	}
}
