package collection

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/keyspace"
)

// writeList opens key's list with limits lim, runs fn on it and applies
// what it changed in the phased order when Commit allows it (stores,
// value, deletes), as the server does.
func writeList(t *testing.T, s *keyspace.Store, key string, lim Limits, fn func(l *List)) *List {
	t.Helper()
	ctx := context.Background()
	v, err := s.Load(ctx, 0, []byte(key))
	l, err := OpenList(ctx, StoreSource(s), v, err == nil, lim)
	if err != nil {
		t.Fatal(err)
	}
	fn(l)
	if !l.Changed() {
		return l
	}
	nv, del, changed, ops, _ := l.Commit()
	var vop []keyspace.Op
	if changed {
		vop = []keyspace.Op{s.Op(0, []byte(key), nv, del)}
	}
	// Element stores, the value, element deletes: every order Commit
	// produces is valid applied so.
	var stores, dels []keyspace.Op
	for _, op := range ops {
		if op.Del {
			dels = append(dels, op)
		} else {
			stores = append(stores, op)
		}
	}
	for _, op := range slices.Concat(stores, vop, dels) {
		if err := s.Apply(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// TestListModel runs random list operations on inline and external
// lists (a small size limit makes most external) against a slice, and
// checks every element and the length after each, across a restart.
func TestListModel(t *testing.T) {
	eachArray(t, func(t *testing.T, reopen func() *keyspace.Store) {
		s := reopen()
		rng := rand.New(rand.NewPCG(1, 2))
		lim := DefaultLimits
		lim.ListSize = 6
		var model [][]byte
		elem := func() []byte { return fmt.Appendf(nil, "%d", rng.IntN(8)) }
		check := func(step int, what string) {
			t.Helper()
			l := writeList(t, s, "l", lim, func(*List) {})
			got, err := l.Range(0, -1)
			if err != nil || int64(len(model)) != l.Len() || !slices.EqualFunc(got, model, bytes.Equal) {
				t.Fatalf("step %d (%s): list %q (len %d, %v), want %q", step, what, got, l.Len(), err, model)
			}
		}
		for step := range 400 {
			var what string
			writeList(t, s, "l", lim, func(l *List) {
				switch op := rng.IntN(9); op {
				case 0, 1:
					left := op == 0
					vs := [][]byte{elem(), elem()}
					what = fmt.Sprintf("push left=%v %q", left, vs)
					l.Push(left, vs...)
					for _, v := range vs {
						if left {
							model = slices.Insert(model, 0, v)
						} else {
							model = append(model, v)
						}
					}
				case 2, 3:
					left, n := op == 2, int64(rng.IntN(3)+1)
					what = fmt.Sprintf("pop left=%v %d", left, n)
					out, err := l.Pop(left, n)
					if err != nil {
						t.Fatal(err)
					}
					for _, v := range out {
						var w []byte
						if left {
							w, model = model[0], model[1:]
						} else {
							w, model = model[len(model)-1], model[:len(model)-1]
						}
						if !bytes.Equal(v, w) {
							t.Fatalf("step %d: popped %q, want %q", step, v, w)
						}
					}
				case 4:
					pivot, v, before := elem(), elem(), rng.IntN(2) == 0
					what = fmt.Sprintf("insert %q before=%v %q", v, before, pivot)
					n, err := l.Insert(pivot, v, before)
					if err != nil {
						t.Fatal(err)
					}
					if i := slices.IndexFunc(model, func(e []byte) bool { return bytes.Equal(e, pivot) }); i >= 0 {
						if !before {
							i++
						}
						model = slices.Insert(model, i, v)
					} else if n != -1 && len(model) > 0 {
						t.Fatalf("step %d: insert found a missing pivot", step)
					}
				case 5:
					count, v := int64(rng.IntN(5)-2), elem()
					what = fmt.Sprintf("remove %d %q", count, v)
					if _, err := l.Remove(count, v); err != nil {
						t.Fatal(err)
					}
					model = removeModel(model, count, v)
				case 6:
					if len(model) == 0 {
						return
					}
					i, v := int64(rng.IntN(len(model))), elem()
					what = fmt.Sprintf("set %d %q", i, v)
					l.Set(i, v)
					model[i] = v
				case 7:
					start, stop := int64(rng.IntN(4)), int64(-1-rng.IntN(3))
					if rng.IntN(6) == 0 {
						start, stop = 5, 2 // empties the list
					}
					what = fmt.Sprintf("trim %d %d", start, stop)
					l.Trim(start, stop)
					n := int64(len(model))
					b := stop
					if b < 0 {
						b += n
					}
					a, b := start, min(b, n-1)
					if a > b {
						model = nil
					} else {
						model = model[a : b+1]
					}
				case 8:
					if len(model) > 0 {
						i := rng.Int64N(int64(len(model)))
						what = fmt.Sprintf("index %d", i)
						v, ok, err := l.Index(-1 - i)
						if err != nil || !ok || !bytes.Equal(v, model[int64(len(model))-1-i]) {
							t.Fatalf("step %d: index %d: %q %v %v", step, -1-i, v, ok, err)
						}
					}
				}
			})
			check(step, what)
			if step == 200 {
				s = reopen()
				check(step, "after a restart")
			}
		}
	})
}

func removeModel(m [][]byte, count int64, v []byte) [][]byte {
	m = slices.Clone(m)
	if count < 0 {
		slices.Reverse(m)
	}
	var out [][]byte
	left := max(count, -count)
	for _, e := range m {
		if bytes.Equal(e, v) && (count == 0 || left > 0) {
			left--
			continue
		}
		out = append(out, e)
	}
	if count < 0 {
		slices.Reverse(out)
	}
	return out
}

// TestListCosts: on an external list, a push and a pop write only their
// element and the value (phased, no intent record needed), and LRANGE of
// a few elements reads only those, whatever the length.
func TestListCosts(t *testing.T) {
	eachArray(t, func(t *testing.T, reopen func() *keyspace.Store) {
		s := reopen()
		lim := DefaultLimits
		lim.ListSize = 4
		writeList(t, s, "q", lim, func(l *List) {
			for i := range 1000 {
				l.Push(false, fmt.Append(nil, i))
			}
		})
		l := writeList(t, s, "q", lim, func(l *List) { l.Push(true, []byte("h")) })
		if _, _, _, ops, phased := l.Commit(); len(ops) != 1 || !phased {
			t.Errorf("a push: %d element ops, phased %v", len(ops), phased)
		}
		l = writeList(t, s, "q", lim, func(l *List) {
			if out, err := l.Pop(false, 1); err != nil || string(out[0]) != "999" {
				t.Errorf("pop: %q %v", out, err)
			}
		})
		if _, _, _, ops, phased := l.Commit(); len(ops) != 1 || !ops[0].Del || !phased {
			t.Errorf("a pop: %d element ops, phased %v", len(ops), phased)
		}
		src := &countingSource{Source: StoreSource(s)}
		ctx := context.Background()
		v, _ := s.Load(ctx, 0, []byte("q"))
		l, err := OpenList(ctx, src, v, true, lim)
		if err != nil {
			t.Fatal(err)
		}
		got, err := l.Range(500, 502)
		if err != nil || len(got) != 3 || string(got[0]) != "499" || src.reads.Load() != 3 || src.lists.Load() != 0 {
			t.Errorf("LRANGE 500 502: %q %v; %d reads, %d listings", got, err, src.reads.Load(), src.lists.Load())
		}
		l = writeList(t, s, "q", lim, func(l *List) { l.InsertAt(2, []byte("x")) })
		if _, _, _, ops, phased := l.Commit(); len(ops) != 3 || phased {
			t.Errorf("an insert at 2: %d element ops, phased %v (want 3, false)", len(ops), phased)
		}
	})
}

type countingSource struct {
	Source
	reads, lists atomic.Int64
}

func (c *countingSource) Element(ctx context.Context, ek []byte) ([]byte, bool, error) {
	c.reads.Add(1)
	return c.Source.Element(ctx, ek)
}

func (c *countingSource) ElementKeys(ctx context.Context, prefix, after []byte, n int, opts ...array.ListOption) ([][]byte, []byte, error) {
	c.lists.Add(1)
	return c.Source.ElementKeys(ctx, prefix, after, n, opts...)
}
