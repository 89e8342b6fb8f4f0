package tune

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/bench"
)

// mech is one mechanism's synthetic figures at one size: ops/s per
// workload (store, retrieve, update, delete) and storage overhead.
type mech struct {
	name     string
	ops      [4]float64
	overhead float64
}

// synthetic builds a report of hybrid-mode results, MiB/s derived from
// ops/s and size as the bench does, plus a standalone result that must be
// ignored because hybrid results exist.
func synthetic(classes map[int][]mech) *bench.Report {
	rep := &bench.Report{Version: bench.ReportVersion}
	for size, ms := range classes {
		for _, m := range ms {
			for i, w := range sized {
				r := bench.Result{Workload: w, Size: size, Mechanism: m.name, Mode: bench.ModeHybrid,
					Seconds: 1, OpsPerSec: m.ops[i], StorageOverhead: m.overhead}
				if w != bench.Delete {
					r.MiBPerSec = m.ops[i] * float64(size) / (1 << 20)
				}
				rep.Results = append(rep.Results, r)
				r.Mode, r.OpsPerSec, r.StorageOverhead = bench.ModeStandalone, 1e9, 1
				rep.Results = append(rep.Results, r)
			}
		}
		// None and hashing are never candidates, however good.
		for i, w := range sized {
			rep.Results = append(rep.Results, bench.Result{Workload: w, Size: size, Mechanism: bench.None, Mode: bench.ModeRaw, OpsPerSec: 1e6, StorageOverhead: 1},
				bench.Result{Workload: w, Size: size, Mechanism: "hashing", Mode: bench.ModeHybrid, OpsPerSec: 1e6 + float64(i), StorageOverhead: 1})
		}
	}
	return rep
}

// The known answer, shaped like a mem-model run: at 64 B the headers make
// replication the cheapest; at 1 KiB packing meets a 4000 ops/s floor and
// is cheaper than splitting and replication; at 16 KiB packing's updates
// fall below it and splitting is the cheapest that meets it; at 256 KiB
// only splitting meets it at all.
var known = map[int][]mech{
	64: {
		{"replication", [4]float64{7500, 28000, 9900, 7300}, 4.49},
		{"packing", [4]float64{11900, 29700, 4700, 4800}, 5.01},
		{"splitting", [4]float64{4300, 7100, 2700, 2500}, 5.86},
	},
	1024: {
		{"replication", [4]float64{7500, 28000, 9600, 7300}, 3.12},
		{"packing", [4]float64{11800, 29000, 4900, 4700}, 1.78},
		{"splitting", [4]float64{4300, 7200, 2700, 2500}, 1.84},
	},
	16384: {
		{"replication", [4]float64{7400, 28000, 9300, 7100}, 3.01},
		{"packing", [4]float64{11700, 28000, 3900, 4900}, 1.53},
		{"splitting", [4]float64{4300, 7300, 4100, 4200}, 1.52},
	},
	262144: {
		{"replication", [4]float64{600, 1500, 580, 1690}, 3.00},
		{"packing", [4]float64{1000, 1600, 240, 350}, 1.75},
		{"splitting", [4]float64{4500, 4800, 4100, 4600}, 1.50},
	},
}

func choices(p *Plan) []string {
	var out []string
	for _, c := range p.Classes {
		out = append(out, c.Chosen)
	}
	return out
}

func TestChooseKnownAnswer(t *testing.T) {
	rep := synthetic(known)
	for _, tc := range []struct {
		name  string
		o     Options
		want  []string
		rules []array.Rule
	}{
		{"floor 4000 ops/s", Options{MinOps: 4000},
			[]string{"replication", "packing", "splitting", "splitting"},
			// Boundaries at the geometric means: √(64·1024) = 256,
			// √(1024·16384) = 4096.
			[]array.Rule{{Max: 256, RM: "replication"}, {Max: 4096, RM: "packing"}, {RM: "splitting"}}},
		{"no floor: least overhead everywhere", Options{},
			[]string{"replication", "packing", "splitting", "splitting"},
			[]array.Rule{{Max: 256, RM: "replication"}, {Max: 4096, RM: "packing"}, {RM: "splitting"}}},
		{"floor 4400 ops/s on stores and retrieves only: packing's slow updates do not count, it keeps 16 KiB", Options{MinOps: 4400, Workloads: []string{"store", "retrieve"}},
			[]string{"replication", "packing", "packing", "splitting"},
			[]array.Rule{{Max: 256, RM: "replication"}, {Max: 65536, RM: "packing"}, {RM: "splitting"}}},
		{"store and retrieve floors of 4000 ops/s and 60 MiB/s: the small sizes cannot move 60 MiB/s", Options{MinOps: 4000, MinMiBs: 60, Workloads: []string{"store", "retrieve"}, Mechanisms: []string{"replication", "packing", "splitting"}},
			nil, nil},
		{"replication only", Options{Mechanisms: []string{"replication"}},
			[]string{"replication", "replication", "replication", "replication"},
			[]array.Rule{{RM: "replication"}}},
		{"packing left out: splitting from 1 KiB", Options{MinOps: 2000, Mechanisms: []string{"replication", "splitting"}},
			[]string{"replication", "splitting", "splitting", "splitting"},
			[]array.Rule{{Max: 256, RM: "replication"}, {RM: "splitting"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Choose(rep, tc.o)
			if tc.want == nil {
				if !errors.Is(err, ErrUnreachable) {
					t.Fatalf("err %v, want ErrUnreachable", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Mode != bench.ModeHybrid {
				t.Errorf("mode %s, want hybrid", p.Mode)
			}
			if got := choices(p); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("chose %v, want %v", got, tc.want)
			}
			if len(p.Rules) != len(tc.rules) {
				t.Fatalf("rules %v, want %v", p.Rules, tc.rules)
			}
			for i := range p.Rules {
				if p.Rules[i] != tc.rules[i] {
					t.Errorf("rule %d: %+v, want %+v", i, p.Rules[i], tc.rules[i])
				}
			}
			for _, c := range p.Classes {
				for _, cand := range c.Candidates {
					if cand.Mechanism == "hashing" || cand.Mechanism == bench.None {
						t.Errorf("class %s: %s is a candidate", c.SizeLabel, cand.Mechanism)
					}
					if cand.Chosen && !cand.Meets {
						t.Errorf("class %s: chose %s below the floors", c.SizeLabel, cand.Mechanism)
					}
				}
			}
		})
	}
}

// TestChooseFloorsDetails checks the per-candidate figures: the slowest
// workload is the one the floor applies to, and the class ranges.
func TestChooseFloorsDetails(t *testing.T) {
	p, err := Choose(synthetic(known), Options{MinOps: 4000})
	if err != nil {
		t.Fatal(err)
	}
	c := p.Classes[2] // 16 KiB
	if c.Min != 4097 || c.Max != 65536 {
		t.Errorf("16 KiB class covers %d..%d, want 4097..65536", c.Min, c.Max)
	}
	if last := p.Classes[3]; last.Min != 65537 || last.Max != 0 || last.Range() != "≥ 64 KiB" {
		t.Errorf("last class %d..%d %q", last.Min, last.Max, last.Range())
	}
	for _, cand := range c.Candidates {
		switch cand.Mechanism {
		case "packing":
			if cand.OpsPerSec != 3900 || cand.OpsLimit != bench.Update || cand.Meets {
				t.Errorf("packing at 16 KiB: %+v, want limited to 3900 ops/s by updates, not meeting 4000", cand)
			}
			if want := 3900 * 16384.0 / (1 << 20); cand.MiBPerSec != want || cand.MiBLimit != bench.Update {
				t.Errorf("packing at 16 KiB: %v MiB/s by %s, want %v by update", cand.MiBPerSec, cand.MiBLimit, want)
			}
		case "splitting":
			if !cand.Meets || !cand.Chosen || cand.StorageOverhead != 1.52 {
				t.Errorf("splitting at 16 KiB: %+v", cand)
			}
		}
	}
	if p.Stalled != 0 {
		t.Errorf("%d stalled rates, want 0", p.Stalled)
	}
	// Equal value counts: weights ∝ size, overhead their weighted mean.
	total := 64.0 + 1024 + 16384 + 262144
	want := (64*4.49 + 1024*1.78 + 16384*1.52 + 262144*1.50) / total
	if math.Abs(p.StorageOverhead-want) > 1e-12 || math.Abs(p.Classes[0].Weight-64/total) > 1e-12 {
		t.Errorf("overhead %v weight %v, want %v and %v", p.StorageOverhead, p.Classes[0].Weight, want, 64/total)
	}
}

// TestChooseUnreachable: a floor no mechanism reaches names every class
// that misses it and the best throughput there.
func TestChooseUnreachable(t *testing.T) {
	_, err := Choose(synthetic(known), Options{MinOps: 8000})
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("err %v, want ErrUnreachable", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"size class 64 B (1 B–256 B): no mechanism reaches 8000 ops/s, the best available is 7300 ops/s (replication, slowest in delete)",
		"size class 16 KiB (4.0 KiB–64 KiB): no mechanism reaches 8000 ops/s, the best available is 7100 ops/s (replication, slowest in delete)",
		"size class 256 KiB (≥ 64 KiB): no mechanism reaches 8000 ops/s, the best available is 4100 ops/s (splitting, slowest in update)",
		"size class 1.0 KiB (257 B–4.0 KiB): no mechanism reaches 8000 ops/s, the best available is 7300 ops/s (replication, slowest in delete)",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	_, err = Choose(synthetic(known), Options{MinMiBs: 200, Workloads: []string{"retrieve"}})
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "size class 1.0 KiB (257 B–4.0 KiB): no mechanism reaches 200 MiB/s, the best available is 28.3 MiB/s (packing, slowest in retrieve)") {
		t.Errorf("MiB/s floor: %v", err)
	}
	if _, err := Choose(synthetic(known), Options{Workloads: []string{"mixed-store"}}); !errors.Is(err, ErrNoResults) {
		t.Errorf("floor on an absent workload: %v", err)
	}
	if _, err := Choose(&bench.Report{}, Options{}); !errors.Is(err, ErrNoResults) {
		t.Errorf("empty report: %v", err)
	}
}

func TestSample(t *testing.T) {
	sample := []SizeCount{{10, 100}, {12, 1}, {14, 1}, {3000, 5}, {3500, 1}, {200000, 2}, {0, 7}}
	got := SampleSizes(sample)
	// Buckets (4, 16], (1 KiB, 4 KiB], (64 KiB, 256 KiB]: medians.
	if want := []int{10, 3000, 200000}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("SampleSizes = %v, want %v", got, want)
	}
	p, err := Choose(synthetic(known), Options{MinOps: 4000, Sample: sample})
	if err != nil {
		t.Fatal(err)
	}
	// 64 B takes 10, 12, 14; 1 KiB takes 3000 and 3500 (≤ 4096); 256 KiB
	// takes 200000; 16 KiB nothing.
	b := []float64{10*100 + 12 + 14, 3000*5 + 3500, 0, 400000}
	total := b[0] + b[1] + b[2] + b[3]
	for i, c := range p.Classes {
		if math.Abs(c.Weight-b[i]/total) > 1e-12 {
			t.Errorf("class %s weight %v, want %v", c.SizeLabel, c.Weight, b[i]/total)
		}
	}
	if !strings.Contains(p.Weighting, "sample") {
		t.Errorf("weighting %q", p.Weighting)
	}
}

// TestChooseStandaloneOnly: a report without hybrid results is chosen
// from in standalone mode, and says so.
func TestChooseStandaloneOnly(t *testing.T) {
	rep := synthetic(known)
	var only []bench.Result
	for _, r := range rep.Results {
		switch r.Mode {
		case bench.ModeHybrid:
			r.Mode = bench.ModeStandalone
			only = append(only, r)
		case bench.ModeRaw:
			only = append(only, r)
		}
	}
	rep.Results = only
	p, err := Choose(rep, Options{MinOps: 4000})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(choices(p), ","); p.Mode != bench.ModeStandalone || got != "replication,packing,splitting,splitting" {
		t.Errorf("mode %s, chose %s", p.Mode, got)
	}
}

// TestUnder compares other thresholds on the same classes: init's default
// ones (replication to 8 KiB, packing to 32 KiB, splitting above) put
// 1 KiB values on replication and miss the floor at 16 KiB, where
// packing's updates are too slow.
func TestUnder(t *testing.T) {
	p, err := Choose(synthetic(known), Options{MinOps: 4000})
	if err != nil {
		t.Fatal(err)
	}
	q, err := p.Under([]array.Rule{{Max: 8 << 10, RM: "replication"}, {Max: 32 << 10, RM: "packing"}, {RM: "splitting"}}, "replication")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(choices(q), ","); got != "replication,replication,packing,splitting" {
		t.Errorf("under init's thresholds: %s", got)
	}
	if m := q.Missed(); len(m) != 1 || m[0] != "16 KiB" {
		t.Errorf("missed %v, want [16 KiB]", m)
	}
	if len(p.Missed()) != 0 || strings.Join(choices(p), ",") != "replication,packing,splitting,splitting" {
		t.Errorf("Under changed the plan: %v, missed %v", choices(p), p.Missed())
	}
	w := func(i int) float64 { return p.Classes[i].Weight }
	approx := w(0)*4.49 + w(1)*3.12 + w(2)*1.53 + w(3)*1.50
	if math.Abs(q.StorageOverhead-approx) > 1e-12 || q.StorageOverhead <= p.StorageOverhead {
		t.Errorf("overhead under init's thresholds %v, want %v (more than the plan's %v)", q.StorageOverhead, approx, p.StorageOverhead)
	}
	// Rules that stop short fall back to the default mechanism.
	if q, err := p.Under([]array.Rule{{Max: 100, RM: "packing"}}, "splitting"); err != nil || strings.Join(choices(q), ",") != "packing,splitting,splitting,splitting" {
		t.Errorf("under rules with a default: %v, %v", err, q)
	}
	if _, err := p.Under(nil, "hashing"); !errors.Is(err, ErrUnmeasured) || !strings.Contains(err.Error(), "hashing at 64 B") {
		t.Errorf("under hashing: %v", err)
	}
}
