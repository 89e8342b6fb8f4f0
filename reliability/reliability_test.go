package reliability

import (
	"errors"
	"math"
	mathrand "math/rand"
	"math/rand/v2"
	"reflect"
	"testing"
	"testing/quick"
)

func near(t *testing.T, what string, got, want, rel float64) {
	t.Helper()
	if math.Abs(got-want) > rel*math.Abs(want) {
		t.Errorf("%s = %.12g, want %.12g (±%g relative)", what, got, want, rel)
	}
}

// TestChainByHand checks the exact solver against chains solved by hand.
func TestChainByHand(t *testing.T) {
	cases := []struct {
		name          string
		c             Chain
		exact, approx float64
	}{
		// One object, lost at rate λ = 1: MTTDL = 1/λ = 1, with or
		// without repair (there is nothing to repair before the loss).
		{"hashing", Chain{N: 1, F: 1, Lambda: 1, Mu: 10}, 1, 1},
		// Replication, 3 copies, λ = 1, μ = 10. First passages:
		//   E0 = 1/(3λ)                 = 1/3
		//   E1 = (1 + μ·E0)/(2λ) = (13/3)/2 = 13/6
		//   E2 = (1 + μ·E1)/(1λ) = 1 + 130/6 = 68/3
		//   MTTDL = 1/3 + 13/6 + 68/3 = (2 + 13 + 136)/6 = 151/6.
		// Cross-check by the absorption equations
		//   T0 = 1/3 + T1
		//   T1 = 1/12 + (2/12)·T2 + (10/12)·T0
		//   T2 = 1/11 + (10/11)·T1
		// Substituting: T1·(1 − 10/66 − 10/12) = 1/12 + 1/66 + 10/36,
		// i.e. T1/66 = 149/396, T1 = 149/6, T0 = 151/6. ✓
		// Equation 2: μ²/((3·2·1)·λ³) = 100/6.
		{"replication 3", Chain{N: 3, F: 3, Lambda: 1, Mu: 10}, 151.0 / 6, 100.0 / 6},
		// Splitting 4+2: N = 6 shards, data lost at f = r+1 = 3.
		//   E0 = 1/6
		//   E1 = (1 + 10/6)/5 = 8/15
		//   E2 = (1 + 10·8/15)/4 = (19/3)/4 = 19/12
		//   MTTDL = 10/60 + 32/60 + 95/60 = 137/60.
		// Equation 2: μ²/((6·5·4)·λ³) = 100/120.
		{"splitting 4+2", Chain{N: 6, F: 3, Lambda: 1, Mu: 10}, 137.0 / 60, 100.0 / 120},
		// RAID 5's textbook result for f = 2:
		//   ((2N−1)λ + μ) / (N(N−1)λ²), N = 5, λ = 2, μ = 7
		//   = (9·2 + 7)/(20·4) = 25/80.
		// Equation 2: μ/(N(N−1)λ²) = 7/80.
		{"f=2 textbook", Chain{N: 5, F: 2, Lambda: 2, Mu: 7}, 25.0 / 80, 7.0 / 80},
		// No repair: MTTDL is the sum of the mean sojourns,
		// 1/(3λ) + 1/(2λ) + 1/λ = 11/6 for λ = 1; equation 2 has μ^2 = 0.
		{"no repair", Chain{N: 3, F: 3, Lambda: 1, Mu: 0}, 11.0 / 6, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.c.MTTDL()
			if err != nil {
				t.Fatal(err)
			}
			near(t, "MTTDL", got, tc.exact, 1e-12)
			got, err = tc.c.Approx()
			if err != nil {
				t.Fatal(err)
			}
			near(t, "Approx", got, tc.approx, 1e-12)
		})
	}
}

// TestSystemByHand checks equation 1 with N_RS and the space overhead,
// for 6 devices of 1 TB (C = 6e12 bytes), objects of O = 1 MB, device
// MTTF 1e6 hours (λ = 1e-6/h), MTTR 10 hours (μ = 0.1/h), M = 0.1 MB.
//
//	Replication 3:  N_RS = 6e12 / (3·1e6)        = 2e6
//	                MTTDL_set ≈ μ²/(3·2·1·λ³)     = 0.01/6e-18 = 1.6667e15 h
//	                MTTDL ≈ 1.6667e15 / 2e6       = 8.3333e8 h
//	                space: 3
//	Splitting 4+2:  N_RS = 6e12 / (6·1e6/4)      = 4e6
//	                MTTDL_set ≈ μ²/(6·5·4·λ³)     = 0.01/1.2e-16 = 8.3333e13 h
//	                MTTDL ≈ 8.3333e13 / 4e6       = 2.0833e7 h
//	                space: 6/4 = 1.5
//	Packing 4+2:    N_RS = 6e12 / (6·(1e6+1e5))  = 9.0909e5
//	                MTTDL ≈ 8.3333e13 / 9.0909e5  = 9.1667e7 h
//	                space: 6·1.1e6/(4·1e6) = 1.65
//	Hashing:        N_RS = 6e12/1e6 = 6e6, MTTDL = 1e6/6e6 = 1/6 h
//	                (exact: no repair can help a single copy), space 1.
//
// The exact values are within 2·f·n·λ/μ ≤ 2·3·6·1e-5 = 3.6e-4 of the
// approximations.
func TestSystemByHand(t *testing.T) {
	s := System{MTTF: 1e6, Mu: 0.1, Capacity: 6e12, Object: 1e6, Metadata: 1e5}
	cases := []struct {
		m           Mechanism
		sets, mttdl float64
		space       float64
	}{
		{NewHashing(), 6e6, 1.0 / 6, 1},
		{NewReplication(3), 2e6, 0.01 / 6e-18 / 2e6, 3},
		{NewSplitting(4, 2), 4e6, 0.01 / 1.2e-16 / 4e6, 1.5},
		{NewPacking(4, 2), 6e12 / 6.6e6, 0.01 / 1.2e-16 / (6e12 / 6.6e6), 1.65},
	}
	for _, tc := range cases {
		t.Run(tc.m.String(), func(t *testing.T) {
			r, err := Evaluate(tc.m, s)
			if err != nil {
				t.Fatal(err)
			}
			near(t, "Sets", r.Sets, tc.sets, 1e-12)
			near(t, "MTTDLApprox", r.MTTDLApprox, tc.mttdl, 1e-12)
			near(t, "MTTDL", r.MTTDL, tc.mttdl, 3.6e-4)
			if r.MTTDL < r.MTTDLApprox {
				t.Errorf("exact %g below the approximation %g", r.MTTDL, r.MTTDLApprox)
			}
			near(t, "SpaceOverhead", r.SpaceOverhead, tc.space, 1e-12)
		})
	}
}

// TestCostsByHand checks Table 4 for 6 devices.
//
//	Hashing:        1 write, 1 read; throughput 6 and 6 device-units.
//	Replication 3:  3 writes → 6/3 = 2; 1 read → 6; space 1/3.
//	Splitting 4+2:  6 writes → 1; 1..4 reads → 6/4 = 1.5 .. 6; space 4/6.
//	Packing 4+2:    (4+2)/4 = 1.5 .. 1+2 = 3 writes → 6/3 = 2 .. 6/1.5 = 4;
//	                updates 3..6; 1 read → 6; space 4/6.
func TestCostsByHand(t *testing.T) {
	cases := []struct {
		m                   Mechanism
		store, update, read Range
		writeTput, readTput Range
		spaceUtilization    float64
	}{
		{NewHashing(), Range{1, 1}, Range{1, 1}, Range{1, 1}, Range{6, 6}, Range{6, 6}, 1},
		{NewReplication(3), Range{3, 3}, Range{3, 3}, Range{1, 1}, Range{2, 2}, Range{6, 6}, 1.0 / 3},
		{NewSplitting(4, 2), Range{6, 6}, Range{6, 6}, Range{1, 4}, Range{1, 1}, Range{1.5, 6}, 4.0 / 6},
		{NewPacking(4, 2), Range{1.5, 3}, Range{3, 6}, Range{1, 1}, Range{2, 4}, Range{6, 6}, 4.0 / 6},
	}
	for _, tc := range cases {
		t.Run(tc.m.String(), func(t *testing.T) {
			c, err := tc.m.Costs(6)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []struct {
				name      string
				got, want Range
			}{{"store", c.StoreWrites, tc.store}, {"update", c.UpdateWrites, tc.update}, {"read", c.RetrieveReads, tc.read},
				{"write throughput", c.WriteThroughput, tc.writeTput}, {"read throughput", c.ReadThroughput, tc.readTput}} {
				near(t, f.name+".Min", f.got.Min, f.want.Min, 1e-12)
				near(t, f.name+".Max", f.got.Max, f.want.Max, 1e-12)
			}
			near(t, "SpaceUtilization", c.SpaceUtilization, tc.spaceUtilization, 1e-12)
		})
	}
	if _, err := NewSplitting(4, 2).Costs(5); !errors.Is(err, ErrParams) {
		t.Errorf("splitting 4+2 on 5 devices: %v, want ErrParams", err)
	}
}

func TestInvalid(t *testing.T) {
	for _, c := range []Chain{
		{N: 0, F: 1, Lambda: 1, Mu: 1}, {N: 3, F: 4, Lambda: 1, Mu: 1}, {N: 3, F: 0, Lambda: 1, Mu: 1},
		{N: 3, F: 2, Lambda: 0, Mu: 1}, {N: 3, F: 2, Lambda: 1, Mu: -1}, {N: 3, F: 2, Lambda: math.NaN(), Mu: 1},
	} {
		if _, err := c.MTTDL(); !errors.Is(err, ErrParams) {
			t.Errorf("%+v: MTTDL error %v, want ErrParams", c, err)
		}
		if _, err := c.Approx(); !errors.Is(err, ErrParams) {
			t.Errorf("%+v: Approx error %v, want ErrParams", c, err)
		}
	}
	good := System{MTTF: 1, Mu: 1, Capacity: 1, Object: 1}
	for _, m := range []Mechanism{{Name: "raid5"}, NewReplication(0), NewSplitting(0, 2), NewPacking(4, -1)} {
		if _, err := Evaluate(m, good); !errors.Is(err, ErrParams) {
			t.Errorf("%+v: error %v, want ErrParams", m, err)
		}
	}
	for _, s := range []System{{Mu: 1, Capacity: 1, Object: 1}, {MTTF: 1, Mu: 1, Object: 1}, {MTTF: 1, Mu: 1, Capacity: 1}, {MTTF: 1, Mu: math.Inf(1), Capacity: 1, Object: 1}} {
		if _, err := Evaluate(NewHashing(), s); !errors.Is(err, ErrParams) {
			t.Errorf("%+v: error %v, want ErrParams", s, err)
		}
	}
}

func TestFallingFactorial(t *testing.T) {
	// (6)_(2) = 6·5·4, (3)_(0) = 3, (3)_(2) = 3!.
	for _, c := range []struct{ a, b, want int }{{6, 2, 120}, {3, 0, 3}, {3, 2, 6}} {
		if got := FallingFactorial(c.a, c.b); got != float64(c.want) {
			t.Errorf("(%d)_(%d) = %g, want %d", c.a, c.b, got, c.want)
		}
	}
}

// randomChain draws a chain with μ/λ from 1 to 1e9.
type randomChain struct{ Chain }

// Generate implements quick.Generator (which takes a math/rand source).
func (randomChain) Generate(r *mathrand.Rand, _ int) reflect.Value {
	n := 1 + r.Intn(20)
	return reflect.ValueOf(randomChain{Chain{N: n, F: 1 + r.Intn(n), Lambda: math.Pow(10, -7+4*r.Float64()), Mu: math.Pow(10, -2+4*r.Float64())}})
}

// quickConfig draws from a seeded generator, logged so that a failure can
// be replayed.
func quickConfig(t *testing.T) *quick.Config {
	seed := rand.Int64()
	t.Logf("seed %d", seed)
	return &quick.Config{MaxCount: 2000, Rand: mathrand.New(mathrand.NewSource(seed))}
}

// TestApproxAgreesWhenRepairIsFast: equation 2 is the exact MTTDL's
// leading term, below it and within 2·f·N·λ/μ of it when μ ≫ λ.
func TestApproxAgreesWhenRepairIsFast(t *testing.T) {
	check := func(rc randomChain) bool {
		c := rc.Chain
		c.Mu = max(c.Mu, 1e4*float64(c.N)*c.Lambda)
		exact, err1 := c.MTTDL()
		approx, err2 := c.Approx()
		if err1 != nil || err2 != nil {
			return false
		}
		bound := 2 * float64(c.F*c.N) * c.Lambda / c.Mu
		if c.F == 1 {
			bound = 1e-12
		}
		ok := exact >= approx*(1-1e-12) && (exact-approx)/approx <= bound
		if !ok {
			t.Logf("%+v: exact %g approx %g, relative gap %g > %g", c, exact, approx, (exact-approx)/approx, bound)
		}
		return ok
	}
	if err := quick.Check(check, quickConfig(t)); err != nil {
		t.Error(err)
	}
}

// TestMoreParityMoreMTTDL: one more tolerated loss (Table 3: ↑f ⇑) raises
// the MTTDL, by orders of magnitude when μ ≫ λ; one more object in the
// set with the same tolerance lowers it (↑N ↓).
func TestMoreParityMoreMTTDL(t *testing.T) {
	check := func(rc randomChain) bool {
		c := rc.Chain
		base, _ := c.MTTDL()
		more := c
		more.N, more.F = c.N+1, c.F+1 // one more parity object
		moreData := c
		moreData.N++ // one more data object, same parity
		up, _ := more.MTTDL()
		down, _ := moreData.MTTDL()
		ok := up > base && down < base
		if !ok {
			t.Logf("%+v: MTTDL %g, with one more parity %g, with one more data object %g", c, base, up, down)
		}
		return ok
	}
	if err := quick.Check(check, quickConfig(t)); err != nil {
		t.Error(err)
	}
	// And through the mechanisms' geometry, the whole system's MTTDL.
	s := System{MTTF: 1e6, Mu: 1, Capacity: 1e13, Object: 4096}
	prev := 0.0
	for r := 0; r <= 4; r++ {
		res, err := Evaluate(NewSplitting(4, r), s)
		if err != nil {
			t.Fatal(err)
		}
		if res.MTTDL <= prev*100 {
			t.Errorf("splitting 4+%d: MTTDL %g, not orders of magnitude above 4+%d's %g", r, res.MTTDL, r-1, prev)
		}
		prev = res.MTTDL
	}
}

// TestFasterRepairMoreMTTDL: raising μ (Table 3: ↓MTTR ⇑) raises the
// MTTDL of every set that tolerates a loss, and leaves f = 1 alone.
func TestFasterRepairMoreMTTDL(t *testing.T) {
	check := func(rc randomChain, factor uint8) bool {
		c := rc.Chain
		faster := c
		faster.Mu = c.Mu * (1.5 + float64(factor))
		a, _ := c.MTTDL()
		b, _ := faster.MTTDL()
		ok := b > a || (c.F == 1 && b == a)
		if !ok {
			t.Logf("%+v: MTTDL %g, with μ×%g %g", c, a, faster.Mu/c.Mu, b)
		}
		return ok
	}
	if err := quick.Check(check, quickConfig(t)); err != nil {
		t.Error(err)
	}
}
