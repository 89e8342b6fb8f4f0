package collection

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/kvarray/kvarray/keyspace"
)

// writeSet opens key's set, runs fn on it and applies what it changed.
func writeSet(t *testing.T, s *keyspace.Store, key string, fn func(x *Set)) *Set {
	t.Helper()
	ctx := context.Background()
	v, err := s.Load(ctx, 0, []byte(key))
	x, err := OpenSet(ctx, StoreSource(s), v, err == nil, DefaultLimits, s.MaxElement())
	if err != nil {
		t.Fatal(err)
	}
	fn(x)
	commit(t, s, key, x)
	return x
}

// TestSet: an intset keeps numeric order and its name up to 512
// integers; a string makes it a hashtable for good; a large set's
// members read back after a restart, count exact.
func TestSet(t *testing.T) {
	eachArray(t, func(t *testing.T, reopen func() *keyspace.Store) {
		s := reopen()
		writeSet(t, s, "i", func(x *Set) {
			for _, m := range []string{"10", "-3", "7", "7"} {
				x.Add([]byte(m))
			}
		})
		x := writeSet(t, s, "i", func(*Set) {})
		if ms, _ := x.Members(); x.Encoding() != "intset" || !slices.EqualFunc(ms, []string{"-3", "7", "10"}, func(a []byte, b string) bool { return string(a) == b }) {
			t.Errorf("intset: %s %q", x.Encoding(), ms)
		}
		writeSet(t, s, "i", func(x *Set) {
			x.Add([]byte("a"))
			x.Delete([]byte("a"))
		})
		if x := writeSet(t, s, "i", func(*Set) {}); x.Encoding() != "hashtable" || x.Len() != 3 {
			t.Errorf("after a string came and went: %s, %d members", x.Encoding(), x.Len())
		}
		writeSet(t, s, "ints", func(x *Set) {
			for i := range 513 {
				x.Add(fmt.Append(nil, i))
			}
		})
		if x := writeSet(t, s, "ints", func(*Set) {}); x.Encoding() != "hashtable" || x.Version() == 0 {
			t.Errorf("513 integers: %s, version %d", x.Encoding(), x.Version())
		}
		s = reopen()
		x = writeSet(t, s, "ints", func(x *Set) {
			if ok, _ := x.Has([]byte("512")); !ok {
				t.Error("member 512 lost")
			}
			x.Delete([]byte("0"))
		})
		if x.Len() != 512 {
			t.Errorf("after a restart and a removal: %d members", x.Len())
		}
		ms, err := writeSet(t, s, "ints", func(*Set) {}).Members()
		if err != nil || len(ms) != 512 {
			t.Errorf("Members: %d, %v", len(ms), err)
		}
	})
}
