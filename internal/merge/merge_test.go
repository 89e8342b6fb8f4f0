package merge

import (
	"fmt"
	"iter"
	"slices"
	"testing"
)

func stream(name string, keys ...string) iter.Seq[Entry[string]] {
	return func(yield func(Entry[string]) bool) {
		for _, k := range keys {
			if !yield(Entry[string]{Key: []byte(k), Val: name}) {
				return
			}
		}
	}
}

func TestSorted(t *testing.T) {
	got := []string{}
	for g := range Sorted([]iter.Seq[Entry[string]]{
		stream("a", "", "b", "d"),
		stream("b"),
		stream("c", "a", "b", "c", "d\x00"),
	}) {
		var from []string
		for _, e := range g.Entries {
			from = append(from, e.Val)
		}
		got = append(got, fmt.Sprintf("%q%v", g.Key, from))
	}
	want := []string{`""[a]`, `"a"[c]`, `"b"[a c]`, `"c"[c]`, `"d"[a]`, `"d\x00"[c]`}
	if !slices.Equal(got, want) {
		t.Fatalf("merged %v, want %v", got, want)
	}
}

// TestSortedStops: a consumer that stops early stops every stream, and a
// stream is read no further than the merge needs.
func TestSortedStops(t *testing.T) {
	pulled := 0
	long := func(yield func(Entry[string]) bool) {
		for i := range 1000 {
			pulled++
			if !yield(Entry[string]{Key: fmt.Appendf(nil, "%04d", i)}) {
				return
			}
		}
	}
	n := 0
	for range Sorted([]iter.Seq[Entry[string]]{long, stream("x", "0002")}) {
		if n++; n == 3 {
			break
		}
	}
	if pulled > 4 {
		t.Fatalf("pulled %d entries for 3 merged keys", pulled)
	}
}
