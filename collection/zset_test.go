package collection

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/kvarray/kvarray/keyspace"
)

// openZ opens key's sorted set with limits lim.
func openZ(t *testing.T, s *keyspace.Store, key string, lim Limits) *ZSet {
	t.Helper()
	ctx := context.Background()
	v, err := s.Load(ctx, 0, []byte(key))
	z, err := OpenZSet(ctx, StoreSource(s), v, err == nil, lim, s.MaxElement())
	if err != nil {
		t.Fatal(err)
	}
	return z
}

// zmodel is the sorted set the test expects: member → score.
type zmodel map[string]float64

func (m zmodel) sorted() []ZEntry {
	out := make([]ZEntry, 0, len(m))
	for k, s := range m {
		out = append(out, ZEntry{[]byte(k), s})
	}
	slices.SortFunc(out, CompareEntries)
	return out
}

func sameEntries(t *testing.T, what string, got, want []ZEntry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d entries %v, want %d %v", what, len(got), got, len(want), want)
	}
	for i := range got {
		if string(got[i].Member) != string(want[i].Member) || got[i].Score != want[i].Score {
			t.Fatalf("%s: entry %d is %q %v, want %q %v", what, i, got[i].Member, got[i].Score, want[i].Member, want[i].Score)
		}
	}
}

// scoresToTry mixes negative, positive, zero, infinite and tied scores
// (the encoding of scores into index keys must order all of them).
var scoresToTry = []float64{math.Inf(-1), -1e300, -2.5, -1, -math.SmallestNonzeroFloat64, 0, math.SmallestNonzeroFloat64, 0.1, 1, 1, 2.5, 1e300, math.Inf(1)}

// TestZSet: a random workload of adds, score changes and removals
// against a model, in both encodings (inline below the thresholds,
// external past them), checking every kind of range, ranks and counts,
// after the array is reopened too.
func TestZSet(t *testing.T) {
	for _, lim := range []Limits{DefaultLimits, {ZSetEntries: 0, ZSetValue: 0}} {
		t.Run(fmt.Sprintf("entries%d", lim.ZSetEntries), func(t *testing.T) {
			eachArray(t, func(t *testing.T, reopen func() *keyspace.Store) {
				s := reopen()
				r := rand.New(rand.NewPCG(1, uint64(lim.ZSetEntries)))
				model := zmodel{}
				for round := range 12 {
					z := openZ(t, s, "z", lim)
					for range 15 {
						m := fmt.Sprintf("m%02d", r.IntN(40))
						if r.IntN(4) == 0 {
							ok, err := z.Delete([]byte(m))
							if err != nil {
								t.Fatal(err)
							}
							if _, had := model[m]; had != ok {
								t.Fatalf("Delete(%s) = %v, model had it: %v", m, ok, had)
							}
							delete(model, m)
							continue
						}
						sc := scoresToTry[r.IntN(len(scoresToTry))]
						added, err := z.Set([]byte(m), sc)
						if err != nil {
							t.Fatal(err)
						}
						if _, had := model[m]; had == added {
							t.Fatalf("Set(%s): added %v, model had it: %v", m, added, had)
						}
						model[m] = sc
					}
					commit(t, s, "z", z)
					if round%4 == 3 {
						s = reopen()
					}
					checkZ(t, openZ(t, s, "z", lim), model, lim)
				}
			})
		})
	}
}

// checkZ compares z with model through every read.
func checkZ(t *testing.T, z *ZSet, model zmodel, lim Limits) {
	t.Helper()
	want := model.sorted()
	if z.Len() != int64(len(want)) {
		t.Fatalf("Len %d, model %d", z.Len(), len(want))
	}
	if len(want) == 0 {
		return
	}
	if enc := z.Encoding(); (enc == "skiplist") != (len(want) > lim.ZSetEntries || z.Version() != 0) {
		t.Fatalf("encoding %s with %d entries, limit %d", enc, len(want), lim.ZSetEntries)
	}
	all, err := z.All()
	if err != nil {
		t.Fatal(err)
	}
	sameEntries(t, "All", all, want)
	for i, e := range want {
		rank, sc, found, err := z.Rank(e.Member)
		if err != nil || !found || rank != int64(i) || sc != e.Score {
			t.Fatalf("Rank(%s) = %d %v %v %v, want %d %v", e.Member, rank, sc, found, err, i, e.Score)
		}
	}
	n := int64(len(want))
	for _, w := range [][2]int64{{0, 0}, {0, n - 1}, {1, n / 2}, {n - 1, n - 1}} {
		if w[0] > w[1] || w[0] < 0 {
			continue
		}
		got, err := z.ByRank(w[0], w[1])
		if err != nil {
			t.Fatal(err)
		}
		sameEntries(t, fmt.Sprintf("ByRank(%d, %d)", w[0], w[1]), got, want[w[0]:w[1]+1])
	}
	for _, lo := range scoresToTry {
		for _, hi := range scoresToTry {
			for _, ex := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
				sr := ScoreRange{lo, hi, ex[0], ex[1]}
				var in []ZEntry
				for _, e := range want {
					if sr.aboveMin(e.Score) && sr.belowMax(e.Score) {
						in = append(in, e)
					}
				}
				got, err := z.ByScore(sr, 0, -1, false)
				if err != nil {
					t.Fatal(err)
				}
				sameEntries(t, fmt.Sprintf("ByScore(%+v)", sr), got, in)
				if len(in) > 2 {
					got, err := z.ByScore(sr, 1, 1, false)
					if err != nil {
						t.Fatal(err)
					}
					sameEntries(t, "ByScore LIMIT 1 1", got, in[1:2])
					got, err = z.ByScore(sr, 1, 1, true)
					if err != nil {
						t.Fatal(err)
					}
					sameEntries(t, "ByScore REV LIMIT 1 1", got, in[len(in)-2:len(in)-1])
				}
			}
		}
	}
	// Lex ranges over the members (the model's scores differ; ByLex
	// goes by member order, which is what Redis gives for equal scores).
	byMember := slices.Clone(want)
	slices.SortFunc(byMember, func(a, b ZEntry) int { return slices.Compare(a.Member, b.Member) })
	for _, lr := range []LexRange{{NoMin: true, NoMax: true}, {Min: []byte("m10"), Max: []byte("m20")},
		{Min: []byte("m10"), MinEx: true, Max: []byte("m20"), MaxEx: true}, {Min: []byte("m3"), NoMax: true}, {NoMin: true, Max: []byte("m05")}} {
		var in []ZEntry
		for _, e := range byMember {
			if lr.aboveMin(e.Member) && lr.belowMax(e.Member) {
				in = append(in, e)
			}
		}
		got, err := z.ByLex(lr, 0, -1, false, true)
		if err != nil {
			t.Fatal(err)
		}
		sameEntries(t, fmt.Sprintf("ByLex(%q..%q)", lr.Min, lr.Max), got, in)
	}
}

// TestZSetConversion: a sorted set converts to skiplist at the 129th
// entry and at a member longer than the value limit, never back.
func TestZSetConversion(t *testing.T) {
	eachArray(t, func(t *testing.T, reopen func() *keyspace.Store) {
		s := reopen()
		z := openZ(t, s, "z", DefaultLimits)
		for i := range 128 {
			if _, err := z.Set([]byte(fmt.Sprint(i)), float64(i)); err != nil {
				t.Fatal(err)
			}
		}
		if z.Encoding() != "listpack" {
			t.Fatalf("128 entries: %s", z.Encoding())
		}
		if _, err := z.Set([]byte("x"), -1); err != nil {
			t.Fatal(err)
		}
		if z.Encoding() != "skiplist" {
			t.Fatalf("129 entries: %s", z.Encoding())
		}
		commit(t, s, "z", z)
		z = openZ(t, s, "z", DefaultLimits)
		for i := range 128 {
			if _, err := z.Delete([]byte(fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
		}
		commit(t, s, "z", z)
		z = openZ(t, s, "z", DefaultLimits)
		if z.Encoding() != "skiplist" || z.Len() != 1 {
			t.Fatalf("after removals: %s, %d", z.Encoding(), z.Len())
		}
		long := openZ(t, s, "long", DefaultLimits)
		if _, err := long.Set(make([]byte, 65), 1); err != nil || long.Encoding() != "skiplist" {
			t.Fatalf("a 65-byte member: %v, %s", err, long.Encoding())
		}
	})
}

// TestZSetLongMembers: members longer than an index key holds (their
// keys hold a name: a prefix and a digest) read back whole by every
// read, in order, beside short ones and across a reopen; two that share
// all of their keys' prefix are told apart; removals leave nothing.
func TestZSetLongMembers(t *testing.T) {
	eachArray(t, func(t *testing.T, reopen func() *keyspace.Store) {
		s := reopen()
		lim := Limits{ZSetEntries: 0, ZSetValue: 64}
		room := s.MaxElement() - zOverhead
		model := zmodel{}
		z := openZ(t, s, "z", lim)
		for i, n := range []int{1, room - 1, room, room + 1, 2 * room, 100 << 10} {
			m := fmt.Sprintf("%c", 'a'+i) + strings.Repeat("x", n-1)
			if _, err := z.Set([]byte(m), float64(i%3)); err != nil {
				t.Fatalf("a member of %d bytes: %v", n, err)
			}
			model[m] = float64(i % 3)
		}
		// Two long members alike up to past their keys' prefix.
		same := strings.Repeat("s", room)
		for i, m := range []string{same + "1", same + "2"} {
			if _, err := z.Set([]byte(m), float64(10+i)); err != nil {
				t.Fatal(err)
			}
			model[m] = float64(10 + i)
		}
		commit(t, s, "z", z)
		s = reopen()
		checkZ(t, openZ(t, s, "z", lim), model, lim)
		z = openZ(t, s, "z", lim)
		if sc, found, err := z.Score([]byte(same + "3")); err != nil || found {
			t.Errorf("a long member never added: %v %v %v", sc, found, err)
		}
		fs, _, err := z.Scan(nil, 100)
		if err != nil || len(fs) != len(model) {
			t.Fatalf("Scan: %d entries, %v", len(fs), err)
		}
		for _, f := range fs {
			if _, ok := model[string(f.Name)]; !ok {
				t.Errorf("Scan gave a member not added (%d bytes)", len(f.Name))
			}
		}
		for m := range model {
			if _, err := z.Delete([]byte(m)); err != nil {
				t.Fatal(err)
			}
		}
		commit(t, s, "z", z)
		if z := openZ(t, s, "z", lim); z.Len() != 0 {
			t.Errorf("after removing every member: %d", z.Len())
		}
	})
}

// TestScoreKeyOrder: the index keys of scores sort as the scores do.
func TestScoreKeyOrder(t *testing.T) {
	for i, a := range scoresToTry {
		for _, b := range scoresToTry[i:] {
			ka, kb := scoreKey(nil, a), scoreKey(nil, b)
			if c := slices.Compare(ka, kb); c != cmpf(a, b) {
				t.Errorf("scoreKey(%v) vs scoreKey(%v): %d", a, b, c)
			}
			if scoreOfKey(ka) != a {
				t.Errorf("scoreOfKey(scoreKey(%v)) = %v", a, scoreOfKey(ka))
			}
		}
	}
}

func cmpf(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestFormatScore: scores print as Redis 7.0 prints them.
func TestFormatScore(t *testing.T) {
	for f, want := range map[float64]string{1: "1", 0.1: "0.10000000000000001", 1e20: "1e+20", -2.5: "-2.5",
		math.Inf(1): "inf", math.Inf(-1): "-inf", 1.5e-7: "1.4999999999999999e-07"} {
		if got := FormatScore(f); got != want {
			t.Errorf("FormatScore(%v) = %s, want %s", f, got, want)
		}
	}
	if got := ScanScore(1e18); got != "1000000000000000000" {
		t.Errorf("ScanScore(1e18) = %s", got)
	}
}

// TestZSetFloor: popping the lowest entries of an external sorted set
// (DeleteLowest) moves the start of its listings past them, and an entry
// added below that start, or a score lowered below it, is still found
// by every read.
func TestZSetFloor(t *testing.T) {
	eachArray(t, func(t *testing.T, reopen func() *keyspace.Store) {
		s := reopen()
		lim := Limits{ZSetEntries: 0, ZSetValue: 64}
		r := rand.New(rand.NewPCG(3, 4))
		model := zmodel{}
		for round := range 20 {
			z := openZ(t, s, "z", lim)
			for range 6 {
				m := fmt.Sprintf("m%02d", r.IntN(60))
				sc := float64(r.IntN(40) - 10)
				if _, err := z.Set([]byte(m), sc); err != nil {
					t.Fatal(err)
				}
				model[m] = sc
			}
			commit(t, s, "z", z)
			z = openZ(t, s, "z", lim)
			if k := int64(r.IntN(4)); k > 0 && z.Len() > k {
				es, err := z.ByRank(0, k-1)
				if err != nil {
					t.Fatal(err)
				}
				sameEntries(t, "lowest", es, model.sorted()[:k])
				if err := z.DeleteLowest(es); err != nil {
					t.Fatal(err)
				}
				for _, e := range es {
					delete(model, string(e.Member))
				}
				commit(t, s, "z", z)
			}
			if round%5 == 4 {
				s = reopen()
			}
			checkZ(t, openZ(t, s, "z", lim), model, lim)
		}
		if z := openZ(t, s, "z", lim); z.floor == nil {
			t.Error("no floor after the pops")
		}
	})
}

// TestZSetListingShort: a listing of an external sorted set that gives
// fewer entries than the set counts (here an index element gone from
// under it, as a listing from too few devices would miss one) fails the
// read with ErrIncomplete instead of answering with what it found.
func TestZSetListingShort(t *testing.T) {
	eachArray(t, func(t *testing.T, reopen func() *keyspace.Store) {
		s := reopen()
		lim := Limits{ZSetEntries: 0, ZSetValue: 64}
		z := openZ(t, s, "z", lim)
		for i := range 3 {
			if _, err := z.Set([]byte(fmt.Sprint("m", i)), float64(i)); err != nil {
				t.Fatal(err)
			}
		}
		commit(t, s, "z", z)
		z = openZ(t, s, "z", lim)
		if err := s.A.Delete(context.Background(), keyspace.ElementKey(z.Version(), z.indexSub(ZEntry{[]byte("m0"), 0}))); err != nil {
			t.Fatal(err)
		}
		if _, err := z.ByRank(0, 2); !errors.Is(err, ErrIncomplete) {
			t.Errorf("ByRank over a listing one short: %v, want ErrIncomplete", err)
		}
	})
}
