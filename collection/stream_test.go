package collection

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvarray/kvarray/keyspace"
)

// writeStream opens key's stream, runs fn on it and applies what it
// changed (the server writes the same ops as one intent record).
func writeStream(t *testing.T, s *keyspace.Store, key string, lim StreamLimits, fn func(st *Stream)) (*Stream, int) {
	t.Helper()
	ctx := context.Background()
	v, err := s.Load(ctx, 0, []byte(key))
	st, err := OpenStream(ctx, StoreSource(s), v, err == nil, lim)
	if err != nil {
		t.Fatal(err)
	}
	fn(st)
	if !st.Changed() {
		return st, 0
	}
	nv, del, _, ops := st.Commit()
	ops = append(ops, s.Op(0, []byte(key), nv, del))
	for _, op := range ops {
		if err := s.Apply(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	return st, len(ops)
}

// TestStreamModel runs random XADDs, XDELs and trims (exact and
// approximate, by length and by ID, with small nodes) against a slice of
// entries, and checks XRANGE and XREVRANGE in whole and in pages, the
// length and the first ID after each step, across restarts.
func TestStreamModel(t *testing.T) {
	eachArray(t, func(t *testing.T, reopen func() *keyspace.Store) {
		s := reopen()
		rng := rand.New(rand.NewPCG(3, 4))
		lim := StreamLimits{NodeEntries: 5, NodeBytes: 4096}
		var model []StreamEntry
		var last StreamID
		check := func(step int, what string) {
			t.Helper()
			st, _ := writeStream(t, s, "s", lim, func(*Stream) {})
			got, err := st.Range(StreamID{}, MaxStreamID, 0, false)
			if err != nil || st.Length != int64(len(model)) || !entriesEqual(got, model) {
				t.Fatalf("step %d (%s): %v (len %d, %v), want %v", step, what, got, st.Length, err, model)
			}
			rev, err := st.Range(StreamID{}, MaxStreamID, 3, true)
			want := slices.Clone(model[max(len(model)-3, 0):])
			slices.Reverse(want)
			if err != nil || !entriesEqual(rev, want) {
				t.Fatalf("step %d (%s): reverse %v (%v), want %v", step, what, rev, err, want)
			}
			if len(model) > 0 && st.FirstID != model[0].ID {
				t.Fatalf("step %d (%s): first ID %v, want %v", step, what, st.FirstID, model[0].ID)
			}
			if len(model) > 2 {
				a, b := model[1].ID, model[len(model)-2].ID
				mid, err := st.Range(a, b, 0, true)
				want := slices.Clone(model[1 : len(model)-1])
				slices.Reverse(want)
				if err != nil || !entriesEqual(mid, want) {
					t.Fatalf("step %d (%s): reverse %v..%v: %v (%v), want %v", step, what, a, b, mid, err, want)
				}
			}
		}
		for step := range 600 {
			var what string
			writeStream(t, s, "s", lim, func(st *Stream) {
				switch op := rng.IntN(10); {
				case op < 6:
					// Sparse ms, as a clock's.
					id, _ := st.NextID(last.Ms+uint64(rng.IntN(3))*uint64(1+rng.IntN(1000)), 0, true, false)
					f := [][]byte{[]byte("f"), fmt.Appendf(nil, "%d", step)}
					if err := st.Add(id, f); err != nil {
						t.Fatal(err)
					}
					model = append(model, StreamEntry{id, f})
					last = id
					what = "add " + id.String()
				case op == 6 && len(model) > 0:
					i := rng.IntN(len(model))
					id := model[i].ID
					n, err := st.Delete([]StreamID{id, {Ms: 1<<63 + 5}})
					if err != nil || n != 1 {
						t.Fatalf("delete %v: %d, %v", id, n, err)
					}
					model = slices.Delete(model, i, i+1)
					what = "delete " + id.String()
				case op == 7:
					maxLen := int64(rng.IntN(12))
					if _, err := st.Trim(false, maxLen, StreamID{}, false, 0); err != nil {
						t.Fatal(err)
					}
					model = model[max(len(model)-int(maxLen), 0):]
					what = fmt.Sprintf("trim maxlen %d", maxLen)
				case op == 8 && len(model) > 0:
					minID := model[rng.IntN(len(model))].ID
					if _, err := st.Trim(true, 0, minID, false, 0); err != nil {
						t.Fatal(err)
					}
					for len(model) > 0 && model[0].ID.Compare(minID) < 0 {
						model = model[1:]
					}
					what = "trim minid " + minID.String()
				case op == 9:
					// Approximate: whole nodes only, never below maxLen.
					maxLen := int64(rng.IntN(12))
					before := st.Length
					n, err := st.Trim(false, maxLen, StreamID{}, true, 100)
					if err != nil || before-n < min(maxLen, before) {
						t.Fatalf("approximate trim to %d of %d removed %d (%v)", maxLen, before, n, err)
					}
					model = model[n:]
					what = fmt.Sprintf("trim ~ %d", maxLen)
				}
			})
			check(step, what)
			if step%150 == 149 {
				s = reopen()
				check(step, "reopened")
			}
		}
	})
}

func entriesEqual(a, b []StreamEntry) bool {
	return slices.EqualFunc(a, b, func(x, y StreamEntry) bool {
		return x.ID == y.ID && slices.EqualFunc(x.Fields, y.Fields, bytes.Equal)
	})
}

// TestStreamApproxTrimNodes: MAXLEN ~ removes whole nodes only, as
// Redis's (the unit's "XADD with MAXLEN option and the '~' argument").
func TestStreamApproxTrimNodes(t *testing.T) {
	eachArray(t, func(t *testing.T, reopen func() *keyspace.Store) {
		s := reopen()
		lim := StreamLimits{NodeEntries: 100, NodeBytes: 4096}
		for j := range 1000 {
			writeStream(t, s, "s", lim, func(st *Stream) {
				if err := st.Add(StreamID{Ms: uint64(j + 1)}, [][]byte{[]byte("x"), []byte("y")}); err != nil {
					t.Fatal(err)
				}
				if _, err := st.Trim(false, 555, StreamID{}, true, 10000); err != nil {
					t.Fatal(err)
				}
			})
		}
		st, _ := writeStream(t, reopen(), "s", lim, func(*Stream) {})
		if st.Length != 600 {
			t.Fatalf("length %d, want 600", st.Length)
		}
	})
}

// TestStreamCosts: an XADD writes the entry and the value (and a node
// record once per node), whatever the stream's length; a head trim of
// one node deletes its entries and its record.
func TestStreamCosts(t *testing.T) {
	eachArray(t, func(t *testing.T, reopen func() *keyspace.Store) {
		s := reopen()
		lim := StreamLimits{NodeEntries: 10, NodeBytes: 0}
		for j := range 200 {
			_, n := writeStream(t, s, "s", lim, func(st *Stream) {
				if err := st.Add(StreamID{Ms: uint64(j + 1)}, [][]byte{[]byte("x"), []byte("y")}); err != nil {
					t.Fatal(err)
				}
			})
			want := 2
			if j > 0 && j%10 == 0 {
				want = 3 // the closed node's record
			}
			if n != want {
				t.Fatalf("XADD %d wrote %d ops, want %d", j, n, want)
			}
		}
		_, n := writeStream(t, s, "s", lim, func(st *Stream) {
			if k, err := st.Trim(false, 190, StreamID{}, true, 1000); err != nil || k != 10 {
				t.Fatalf("trimmed %d (%v), want 10", k, err)
			}
		})
		if n != 12 {
			t.Fatalf("a trim of one node wrote %d ops, want 12 (10 entries, the record, the value)", n)
		}
	})
}

// TestStreamGroups delivers, acknowledges and claims entries of a group
// and checks the pending entries and counts after a restart; a deleted
// consumer's pending entries are gone with it.
func TestStreamGroups(t *testing.T) {
	eachArray(t, func(t *testing.T, reopen func() *keyspace.Store) {
		s := reopen()
		lim := DefaultStreamLimits
		writeStream(t, s, "s", lim, func(st *Stream) {
			for j := range 10 {
				if err := st.Add(StreamID{Ms: uint64(j + 1)}, [][]byte{[]byte("n"), fmt.Appendf(nil, "%d", j)}); err != nil {
					t.Fatal(err)
				}
			}
			if !st.CreateGroup([]byte("g"), StreamID{}, 0) || st.CreateGroup([]byte("g"), StreamID{}, 0) {
				t.Fatal("CreateGroup")
			}
		})
		deliver := func(st *Stream, name string, n int) []StreamID {
			g := st.Group([]byte("g"))
			start, _ := g.LastID.Next()
			es, err := st.Range(start, MaxStreamID, n, false)
			if err != nil {
				t.Fatal(err)
			}
			c, _ := st.CreateConsumer(g, []byte(name), 1)
			var ids []StreamID
			for _, e := range es {
				st.Delivered(g, e.ID)
				old, had, err := st.PendingEntry(g, e.ID)
				if err != nil {
					t.Fatal(err)
				}
				st.SetPending(g, Pending{ID: e.ID, Consumer: c, DeliveryTime: 1, Count: 1}, old, had)
				ids = append(ids, e.ID)
			}
			return ids
		}
		writeStream(t, s, "s", lim, func(st *Stream) {
			if ids := deliver(st, "alice", 4); len(ids) != 4 {
				t.Fatalf("alice got %v", ids)
			}
			if ids := deliver(st, "bob", 3); len(ids) != 3 || ids[0].Ms != 5 {
				t.Fatalf("bob got %v", ids)
			}
		})
		s = reopen()
		writeStream(t, s, "s", lim, func(st *Stream) {
			g := st.Group([]byte("g"))
			if g.Pending != 7 || g.LastID.Ms != 7 || g.EntriesRead != 7 {
				t.Fatalf("group %+v", g)
			}
			for _, id := range []uint64{1, 2, 9} {
				if _, err := st.Ack(g, StreamID{Ms: id}); err != nil {
					t.Fatal(err)
				}
			}
			bob := g.Consumer([]byte("bob"))
			p, had, err := st.PendingEntry(g, StreamID{Ms: 3})
			if err != nil || !had || string(p.Consumer.Name) != "alice" {
				t.Fatalf("pending 3: %+v %v %v", p, had, err)
			}
			np := p
			np.Consumer = bob
			st.SetPending(g, np, p, true)
		})
		s = reopen()
		writeStream(t, s, "s", lim, func(st *Stream) {
			g := st.Group([]byte("g"))
			alice, bob := g.Consumer([]byte("alice")), g.Consumer([]byte("bob"))
			if g.Pending != 5 || alice.Pending != 1 || bob.Pending != 4 {
				t.Fatalf("pending %d, alice %d, bob %d; want 5, 1, 4", g.Pending, alice.Pending, bob.Pending)
			}
			var ids []uint64
			if err := st.PendingRange(g, StreamID{}, MaxStreamID, bob, func(p Pending) (bool, error) {
				ids = append(ids, p.ID.Ms)
				return true, nil
			}); err != nil || !slices.Equal(ids, []uint64{3, 5, 6, 7}) {
				t.Fatalf("bob's pending %v (%v)", ids, err)
			}
			if n := st.DeleteConsumer(g, []byte("bob")); n != 4 {
				t.Fatalf("DeleteConsumer: %d", n)
			}
		})
		s = reopen()
		writeStream(t, s, "s", lim, func(st *Stream) {
			g := st.Group([]byte("g"))
			var ids []uint64
			if err := st.PendingRange(g, StreamID{}, MaxStreamID, nil, func(p Pending) (bool, error) {
				ids = append(ids, p.ID.Ms)
				return true, nil
			}); err != nil || g.Pending != 1 || !slices.Equal(ids, []uint64{4}) {
				t.Fatalf("pending %d %v (%v), want [4]", g.Pending, ids, err)
			}
		})
	})
}

// TestStreamRangeNearMax: ranges at the top of the ID space, forward and
// reverse (the reverse windows must not wrap around).
func TestStreamRangeNearMax(t *testing.T) {
	eachArray(t, func(t *testing.T, reopen func() *keyspace.Store) {
		s := reopen()
		ids := []StreamID{{Ms: 1}, {Ms: 1 << 40}, {Ms: MaxStreamID.Ms - 3, Seq: 7}, {Ms: MaxStreamID.Ms, Seq: 1}, MaxStreamID}
		writeStream(t, s, "s", DefaultStreamLimits, func(st *Stream) {
			for _, id := range ids {
				if err := st.Add(id, [][]byte{[]byte("f"), []byte(id.String())}); err != nil {
					t.Fatal(err)
				}
			}
		})
		st, _ := writeStream(t, reopen(), "s", DefaultStreamLimits, func(*Stream) {})
		for _, c := range []struct {
			start, end StreamID
			want       []StreamID
		}{
			{ids[2], MaxStreamID, ids[2:]},
			{ids[3], MaxStreamID, ids[3:]},
			{StreamID{}, ids[1], ids[:2]},
			{StreamID{Ms: 2}, StreamID{Ms: MaxStreamID.Ms - 4}, ids[1:2]},
		} {
			for _, rev := range []bool{false, true} {
				got, err := st.Range(c.start, c.end, 0, rev)
				want := slices.Clone(c.want)
				if rev {
					slices.Reverse(want)
				}
				gotIDs := make([]StreamID, len(got))
				for i, e := range got {
					gotIDs[i] = e.ID
				}
				if err != nil || !slices.Equal(gotIDs, want) {
					t.Errorf("%v..%v rev %v: %v (%v), want %v", c.start, c.end, rev, gotIDs, err, want)
				}
			}
		}
	})
}
