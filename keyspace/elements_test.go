package keyspace

import (
	"context"
	"fmt"
	"github.com/kvarray/kvarray/array"
	"testing"
)

func noLock([]byte) (func(), error) { return func() {}, nil }

// TestReclaim: a deleted collection's elements are reclaimed a bounded
// page at a time, its garbage record last; a record whose key still
// holds its version (the delete after it failed) is dropped and the
// elements stay; a renamed collection's elements are not garbage.
func TestReclaim(t *testing.T) {
	ctx := context.Background()
	eachArray(t, func(t *testing.T, a *array.Array) {
		s, err := Open(ctx, a, DefaultDatabases)
		if err != nil {
			t.Fatal(err)
		}
		ver := NewVersion()
		for i := range 100 {
			if err := s.Apply(ctx, ElementOp(ElementKey(ver, fmt.Appendf(nil, "f%03d", i)), []byte("v"), false)); err != nil {
				t.Fatal(err)
			}
		}
		v := Value{V: []byte{1, 100}, Type: TypeHash, Ver: ver}
		if err := s.Save(ctx, 0, []byte("h"), v); err != nil {
			t.Fatal(err)
		}
		elements := func() int {
			ks, err := a.Keys(ctx, ElementPrefix(ver))
			if err != nil {
				t.Fatal(err)
			}
			return len(ks)
		}
		// A record left by a failed delete: the collection is alive.
		if err := s.discard(ctx, ver, s.Phys(0), []byte("h")); err != nil {
			t.Fatal(err)
		}
		if n, more, err := s.Reclaim(ctx, noLock, 1000); err != nil || n != 0 || more {
			t.Fatalf("Reclaim of a live collection's record: %d %v %v", n, more, err)
		}
		if got := elements(); got != 100 {
			t.Fatalf("%d elements after a stale record's reclaim, want 100", got)
		}
		// RENAME: the elements move with the value.
		if err := s.Save(ctx, 0, []byte("h2"), v); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DeleteKeep(ctx, 0, []byte("h"), true); err != nil {
			t.Fatal(err)
		}
		if n, _, err := s.Reclaim(ctx, noLock, 1000); err != nil || n != 0 || elements() != 100 {
			t.Fatalf("Reclaim after a rename: %d %v, %d elements", n, err, elements())
		}
		// DEL: reclaimed in steps of at most the budget.
		if ok, err := s.Delete(ctx, 0, []byte("h2")); err != nil || !ok {
			t.Fatalf("Delete: %v %v", ok, err)
		}
		total := 0
		for range 10 {
			n, more, err := s.Reclaim(ctx, noLock, 30)
			if err != nil || n > 30 {
				t.Fatalf("Reclaim step: %d %v", n, err)
			}
			total += n
			if !more {
				break
			}
		}
		if total != 100 || elements() != 0 {
			t.Errorf("reclaimed %d, %d elements left", total, elements())
		}
		if recs, _ := a.Keys(ctx, []byte{Internal, recGarbage}); len(recs) != 0 {
			t.Errorf("%d garbage records left", len(recs))
		}
		// An overwrite of a collection by a string makes garbage too.
		ver2 := NewVersion()
		s.Apply(ctx, ElementOp(ElementKey(ver2, []byte("x")), nil, false))
		s.Save(ctx, 0, []byte("h3"), Value{V: []byte{1, 1}, Type: TypeHash, Ver: ver2})
		s.Set(ctx, 0, []byte("h3"), []byte("string"), 0)
		if _, _, err := s.Reclaim(ctx, noLock, 1000); err != nil {
			t.Fatal(err)
		}
		if ks, _ := a.Keys(ctx, ElementPrefix(ver2)); len(ks) != 0 {
			t.Error("an overwritten collection's elements were not reclaimed")
		}
	})
}
