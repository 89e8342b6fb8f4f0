package mechanism

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestUnweightedPlacementIsHashModN(t *testing.T) {
	p, err := NewPlacement(5, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []uint64{0, 3, 7, 1<<63 + 11} {
		for s := range 3 {
			primary, _ := p.Place(h, s)
			if want := int((h + uint64(s)) % 5); primary != want {
				t.Fatalf("hash %d split %d: primary %d, want %d", h, s, primary, want)
			}
			k := Key{Primary: primary}
			for i := range 5 {
				if d := p.At(k, i); d != (primary+i)%5 || p.Offset(k, d) != i {
					t.Fatalf("primary %d offset %d: device %d, offset back %d", primary, i, d, p.Offset(k, d))
				}
			}
		}
	}
}

// TestWeightedSequence: every split's sequence is a permutation of the
// devices, At and Offset agree with it, and the primary is its first.
func TestWeightedSequence(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		n := 2 + rng.IntN(14)
		w := make([]uint64, n)
		for j := range w {
			w[j] = 1 + rng.Uint64N(1000)
		}
		p, err := NewPlacement(n, w)
		if err != nil {
			t.Fatal(err)
		}
		for range 200 {
			primary, x := p.Place(rng.Uint64(), rng.IntN(3))
			k := Key{Primary: primary, Point: x}
			seq := p.Sequence(k)
			if len(seq) != n {
				t.Fatalf("weights %v: sequence %v", w, seq)
			}
			sorted := slices.Sorted(slices.Values(seq))
			for j := range n {
				if sorted[j] != j {
					t.Fatalf("weights %v: sequence %v is not a permutation", w, seq)
				}
			}
			if seq[0] != primary {
				t.Fatalf("weights %v: sequence %v, primary %d", w, seq, primary)
			}
			for i, d := range seq {
				if p.At(k, i) != d || p.Offset(k, d) != i {
					t.Fatalf("weights %v point %d: offset %d is device %d, At %d, Offset back %d", w, x, i, d, p.At(k, i), p.Offset(k, d))
				}
			}
		}
	}
}

// TestWeightedShares: the piece at each offset below Slots lands on each
// device in proportion to its weight.
func TestWeightedShares(t *testing.T) {
	w := []uint64{1, 1, 2, 1, 1, 1}
	p, err := NewPlacement(len(w), w)
	if err != nil {
		t.Fatal(err)
	}
	if p.Slots() != 3 {
		t.Fatalf("slots %d, want 3", p.Slots())
	}
	const splits = 70000
	counts := make([][]int, 3)
	for i := range counts {
		counts[i] = make([]int, len(w))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range splits {
		primary, x := p.Place(rng.Uint64(), 0)
		for i := range 3 {
			counts[i][p.At(Key{Primary: primary, Point: x}, i)]++
		}
	}
	for i := range counts {
		for j, c := range counts[i] {
			want := float64(w[j]) / 7
			if got := float64(c) / splits; math.Abs(got-want) > 0.01 {
				t.Errorf("offset %d on device %d: share %.4f, want %.4f", i, j, got, want)
			}
		}
	}
}

func TestCapWeights(t *testing.T) {
	for _, c := range []struct {
		in    []uint64
		width int
		want  []uint64
	}{
		{[]uint64{2, 1, 1, 1, 1, 1}, 3, []uint64{2, 1, 1, 1, 1, 1}},
		{[]uint64{5, 2, 2, 2}, 3, []uint64{3, 2, 2, 2}},
		{[]uint64{9, 9, 1, 1, 1, 1}, 3, []uint64{4, 4, 1, 1, 1, 1}},
		{[]uint64{9, 1, 1}, 3, []uint64{1, 1, 1}},
		{[]uint64{9, 1, 1}, 1, []uint64{9, 1, 1}},
	} {
		got := CapWeights(c.in, c.width)
		if !slices.Equal(got, c.want) {
			t.Errorf("CapWeights(%v, %d) = %v, want %v", c.in, c.width, got, c.want)
		}
		var sum uint64
		for _, x := range got {
			sum += x
		}
		if c.width > 1 && uint64(c.width)*slices.Max(got) > sum {
			t.Errorf("CapWeights(%v, %d) = %v: a device above 1/%d of the sum", c.in, c.width, got, c.width)
		}
	}
}

func TestNormalizeWeights(t *testing.T) {
	tb := uint64(1) << 40
	got := NormalizeWeights([]uint64{4 * tb, 8 * tb, 4 * tb, 1})
	var sum uint64
	for _, x := range got {
		sum += x
	}
	if sum > 1<<32 || got[1]-2*got[0] > 1 || got[2] != got[0] || got[3] != 1 {
		t.Fatalf("NormalizeWeights = %v (sum %d)", got, sum)
	}
	if _, err := NewPlacement(4, got); err != nil {
		t.Fatal(err)
	}
}

func TestBadWeights(t *testing.T) {
	for _, w := range [][]uint64{{1, 0, 1}, {1, 1}, {1 << 43, 1 << 43, 1 << 43}} {
		if _, err := NewPlacement(3, w); !errors.Is(err, ErrBadWeights) {
			t.Errorf("weights %v: %v, want ErrBadWeights", w, err)
		}
	}
}

// TestOrder: the unweighted order is the one Packing chose its parities
// by (devices from a seeded start, circularly); the weighted one prefers
// devices in proportion to their weights.
func TestOrder(t *testing.T) {
	p, _ := NewPlacement(6, nil)
	for _, id := range []uint64{1, 99, 1 << 40} {
		start := int((id * 0x9E3779B97F4A7C15) >> 33 % 6)
		if got := p.Order(id); got[0] != start || got[1] != (start+1)%6 || len(got) != 6 {
			t.Fatalf("order of %d: %v, want from %d", id, got, start)
		}
	}
	w := []uint64{1, 3, 1, 1, 1, 1}
	p, _ = NewPlacement(6, w)
	first := make([]int, 6)
	for id := range uint64(80000) {
		first[p.Order(id)[0]]++
	}
	for j, c := range first {
		if got, want := float64(c)/80000, float64(w[j])/8; math.Abs(got-want) > 0.01 {
			t.Errorf("device %d first in %.4f of orders, want %.4f", j, got, want)
		}
	}
}

// BenchmarkPlacement measures what placement adds to every operation:
// placing a split and listing its first three devices.
func BenchmarkPlacement(b *testing.B) {
	for _, tc := range []struct {
		name string
		w    []uint64
	}{
		{"unweighted-12", nil},
		{"weighted-12", []uint64{2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			p, _ := NewPlacement(12, tc.w)
			sum := 0
			for i := range b.N {
				primary, x := p.Place(uint64(i)*0x9E3779B97F4A7C15, 0)
				k := Key{Primary: primary, Point: x}
				for j := range 3 {
					sum += p.At(k, j)
				}
			}
			if sum < 0 {
				b.Fatal(sum)
			}
		})
	}
}
