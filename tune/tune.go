// Package tune chooses hybrid thresholds from a bench report: for each
// value size the report measured (a size class), the reliability
// mechanism with the least storage overhead among those whose measured
// throughput meets the user's floors, and from those choices the rules
// that send each range of value sizes to its mechanism. It is what the
// KVMD paper calls automatic thresholds; `kvarray tune` drives it.
//
// The choice is only as good as the report: it is made on measured ops/s,
// MiB/s and storage overhead (keys and headers included), not on a model,
// so it reflects the devices and load the bench ran on.
package tune

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/dustin/go-humanize"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/bench"
	"github.com/kvarray/kvarray/mechanism/packing"
	"github.com/kvarray/kvarray/mechanism/replication"
	"github.com/kvarray/kvarray/mechanism/splitting"
)

// Errors Choose wraps.
var (
	// ErrNoResults: the report holds no measurement tune can use.
	ErrNoResults = errors.New("no usable bench results")
	// ErrUnreachable: in some size class no mechanism meets the floors.
	ErrUnreachable = errors.New("throughput floor not reachable")
	// ErrUnmeasured: thresholds send a size class to a mechanism the
	// report has no figures for there.
	ErrUnmeasured = errors.New("mechanism not measured")
)

// DefaultMechanisms are the candidates: the mechanisms that survive a
// device failure. Hashing is left out on purpose: it is always the
// cheapest and fastest, and loses data with any device.
var DefaultMechanisms = []string{replication.Name, packing.Name, splitting.Name}

// Options say what Choose optimises under.
type Options struct {
	// MinOps and MinMiBs are the floors: every workload of Workloads
	// must reach MinOps operations per second and (deletes excepted,
	// which move no value bytes) MinMiBs MiB of user values per second
	// in a size class for a mechanism to be chosen there. 0 is no floor.
	MinOps  float64 `json:"min_ops_per_sec"`
	MinMiBs float64 `json:"min_mib_per_sec"`
	// Workloads the floors apply to; empty means every workload of fixed
	// value sizes (store, retrieve, update, delete) the report holds.
	Workloads []string `json:"workloads"`
	// Mechanisms are the candidates; empty means DefaultMechanisms.
	Mechanisms []string `json:"mechanisms"`
	// Sample weighs the size classes by the user bytes of the values it
	// holds that fall in each class's range; without one, every class
	// is taken to hold the same number of values. The weights only
	// matter for the predicted overall storage overhead and MTTDL.
	Sample []SizeCount `json:"-"`
}

// SizeCount is one bin of a histogram of value sizes.
type SizeCount struct {
	Size  int64 `json:"size"`
	Count int64 `json:"count"`
}

// Rate is one workload's measured throughput.
type Rate struct {
	Workload  string  `json:"workload"`
	OpsPerSec float64 `json:"ops_per_sec"`
	MiBPerSec float64 `json:"mib_per_sec"` // 0 for deletes
	// Stalled: the host kept the bench from running for more than 5% of
	// the phase, so the number may understate the array.
	Stalled bool `json:"stalled,omitempty"`
}

// Candidate is one mechanism in one size class.
type Candidate struct {
	Mechanism string `json:"mechanism"`
	Rates     []Rate `json:"rates"`
	// OpsPerSec and MiBPerSec are the slowest of Rates (MiB/s over the
	// workloads that move values), the numbers the floors apply to;
	// OpsLimit and MiBLimit name the workloads they come from.
	OpsPerSec float64 `json:"ops_per_sec"`
	OpsLimit  string  `json:"ops_limited_by"`
	MiBPerSec float64 `json:"mib_per_sec"`
	MiBLimit  string  `json:"mib_limited_by,omitempty"`
	// StorageOverhead is device bytes per user byte (keys and values),
	// the largest the bench measured for this class and mechanism.
	StorageOverhead float64 `json:"storage_overhead"`
	// Meets: every floor is reached. Chosen: the class's choice.
	Meets  bool `json:"meets_floors"`
	Chosen bool `json:"chosen"`
}

// Class is one measured value size and the range of sizes it stands for.
type Class struct {
	Size      int    `json:"size"`
	SizeLabel string `json:"size_label"`
	// Min and Max bound the value sizes the class stands for (Max 0: any
	// larger): the boundaries sit at the geometric mean of neighbouring
	// measured sizes, where the paper's 8 and 32 KiB sit between its 4,
	// 16 and 64 KiB.
	Min int64 `json:"min"`
	Max int64 `json:"max"`
	// Weight is the class's share of user bytes (see Options.Sample).
	Weight     float64     `json:"weight"`
	Candidates []Candidate `json:"candidates"`
	Chosen     string      `json:"chosen"`
}

// Plan is Choose's answer.
type Plan struct {
	// Mode of the results chosen from: hybrid where the report has it
	// (what the thresholds will run in: every store reads first), else
	// standalone.
	Mode      string   `json:"mode"`
	Workloads []string `json:"workloads"`
	Classes   []Class  `json:"classes"`
	// Rules are the hybrid thresholds, ascending, the last without Max.
	Rules []array.Rule `json:"rules"`
	// StorageOverhead is the classes' chosen overheads weighted by their
	// share of user bytes.
	StorageOverhead float64 `json:"storage_overhead"`
	// Weighting says where the weights come from.
	Weighting string `json:"weighting"`
	// Stalled counts the rates chosen from that the host stalled (see
	// Rate.Stalled): the choice may then reflect the host's load.
	Stalled int `json:"stalled"`
}

// sized are the workloads of fixed value sizes, in a run's order.
var sized = []string{bench.Store, bench.Retrieve, bench.Update, bench.Delete}

// Choose picks a mechanism per size class of rep and the thresholds that
// follow. Every class's error is reported at once, each naming the class
// and the best throughput available there.
func Choose(rep *bench.Report, o Options) (*Plan, error) {
	mechs := o.Mechanisms
	if len(mechs) == 0 {
		mechs = DefaultMechanisms
	}
	m := index(rep, mechs)
	if len(m.sizes) == 0 {
		return nil, fmt.Errorf("%w: the report has no store, retrieve, update or delete results of %s", ErrNoResults, strings.Join(mechs, ", "))
	}
	p := &Plan{Mode: m.mode, Workloads: o.Workloads}
	if len(p.Workloads) == 0 {
		p.Workloads = slices.DeleteFunc(slices.Clone(sized), func(w string) bool { return !slices.Contains(m.workloads, w) })
	}
	for _, w := range p.Workloads {
		if !slices.Contains(m.workloads, w) {
			return nil, fmt.Errorf("%w: the floors apply to %s, but the report has no %s results (it has %s)", ErrNoResults, w, w, strings.Join(m.workloads, ", "))
		}
	}

	var errs []error
	var short []string // the classes where the floors are unreachable
	for i, size := range m.sizes {
		c := Class{Size: size, SizeLabel: humanize.IBytes(uint64(size)), Min: 1}
		if i > 0 {
			c.Min = boundary(m.sizes[i-1], size) + 1
		}
		if i+1 < len(m.sizes) {
			c.Max = boundary(size, m.sizes[i+1])
		}
		for _, mech := range mechs {
			if cand, ok := m.candidate(size, mech, p.Workloads); ok {
				for _, r := range cand.Rates {
					if r.Stalled {
						p.Stalled++
					}
				}
				cand.Meets = cand.OpsPerSec >= o.MinOps && (o.MinMiBs == 0 || (cand.MiBLimit != "" && cand.MiBPerSec >= o.MinMiBs))
				c.Candidates = append(c.Candidates, cand)
			}
		}
		if len(c.Candidates) == 0 {
			errs = append(errs, fmt.Errorf("%w: size class %s: no mechanism was measured in every workload of %s", ErrNoResults, c.SizeLabel, strings.Join(p.Workloads, ", ")))
		} else if best := choose(c.Candidates); best < 0 {
			short = append(short, unreachable(c, o))
		} else {
			c.Candidates[best].Chosen = true
			c.Chosen = c.Candidates[best].Mechanism
		}
		p.Classes = append(p.Classes, c)
	}
	if len(short) > 0 {
		errs = append(errs, fmt.Errorf("%w: %s", ErrUnreachable, strings.Join(short, "; ")))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	p.Rules = rules(p.Classes)
	p.weigh(o.Sample)
	return p, nil
}

// measured are a report's usable results: of the candidate mechanisms, in
// one mode, of the sized workloads.
type measured struct {
	// mode is hybrid where the report has it (what the thresholds will
	// run in: every store reads first), else standalone.
	mode      string
	res       map[measure]bench.Result
	sizes     []int    // ascending
	workloads []string // present
}

type measure struct {
	size           int
	mech, workload string
}

func index(rep *bench.Report, mechs []string) *measured {
	m := &measured{mode: bench.ModeStandalone, res: map[measure]bench.Result{}}
	if slices.ContainsFunc(rep.Results, func(r bench.Result) bool { return r.Mode == bench.ModeHybrid && r.Size > 0 }) {
		m.mode = bench.ModeHybrid
	}
	for _, r := range rep.Results {
		if r.Size <= 0 || r.Mode != m.mode || !slices.Contains(mechs, r.Mechanism) || !slices.Contains(sized, r.Workload) {
			continue
		}
		m.res[measure{r.Size, r.Mechanism, r.Workload}] = r
		if !slices.Contains(m.sizes, r.Size) {
			m.sizes = append(m.sizes, r.Size)
		}
		if !slices.Contains(m.workloads, r.Workload) {
			m.workloads = append(m.workloads, r.Workload)
		}
	}
	slices.Sort(m.sizes)
	return m
}

// candidate gathers mech's figures at size: its rates in workloads, the
// slowest of them, and its storage overhead. A mechanism not measured in
// every one of workloads is no candidate.
func (m *measured) candidate(size int, mech string, workloads []string) (Candidate, bool) {
	cand := Candidate{Mechanism: mech, OpsPerSec: math.Inf(1), MiBPerSec: math.Inf(1)}
	for _, w := range workloads {
		r, ok := m.res[measure{size, mech, w}]
		if !ok {
			return Candidate{}, false
		}
		cand.Rates = append(cand.Rates, Rate{Workload: w, OpsPerSec: r.OpsPerSec, MiBPerSec: r.MiBPerSec, Stalled: stalled(r)})
		if r.OpsPerSec < cand.OpsPerSec {
			cand.OpsPerSec, cand.OpsLimit = r.OpsPerSec, w
		}
		if w != bench.Delete && r.MiBPerSec < cand.MiBPerSec {
			cand.MiBPerSec, cand.MiBLimit = r.MiBPerSec, w
		}
	}
	if math.IsInf(cand.MiBPerSec, 1) {
		cand.MiBPerSec = 0 // deletes only: no value bytes
	}
	// The overhead of the stored state, whichever phase measured it.
	for _, w := range sized {
		if r, ok := m.res[measure{size, mech, w}]; ok {
			cand.StorageOverhead = max(cand.StorageOverhead, r.StorageOverhead)
		}
	}
	return cand, cand.StorageOverhead > 0
}

// choose returns the index of the candidate that meets the floors with
// the least storage overhead (the faster on a tie), or -1.
func choose(cs []Candidate) int {
	best := -1
	for i, c := range cs {
		if !c.Meets {
			continue
		}
		if best < 0 || cmp.Or(cmp.Compare(c.StorageOverhead, cs[best].StorageOverhead), cmp.Compare(cs[best].OpsPerSec, c.OpsPerSec)) < 0 {
			best = i
		}
	}
	return best
}

// unreachable describes a class where no candidate meets the floors: the
// highest ops/s and MiB/s available there, and from which mechanism.
func unreachable(c Class, o Options) string {
	var ops, mib Candidate
	for _, cand := range c.Candidates {
		if cand.OpsPerSec > ops.OpsPerSec {
			ops = cand
		}
		if cand.MiBPerSec > mib.MiBPerSec {
			mib = cand
		}
	}
	var floors, best []string
	if o.MinOps > 0 {
		floors = append(floors, fmt.Sprintf("%.0f ops/s", o.MinOps))
		best = append(best, fmt.Sprintf("%.0f ops/s (%s, slowest in %s)", ops.OpsPerSec, ops.Mechanism, ops.OpsLimit))
	}
	if o.MinMiBs > 0 {
		floors = append(floors, fmt.Sprintf("%g MiB/s", o.MinMiBs))
		best = append(best, fmt.Sprintf("%.1f MiB/s (%s, slowest in %s)", mib.MiBPerSec, mib.Mechanism, mib.MiBLimit))
	}
	return fmt.Sprintf("size class %s (%s): no mechanism reaches %s, the best available is %s",
		c.SizeLabel, c.Range(), strings.Join(floors, " and "), strings.Join(best, " and "))
}

// boundary is the largest value size that belongs with the smaller of two
// neighbouring measured sizes a < b: their geometric mean, rounded down.
func boundary(a, b int) int64 {
	m := int64(math.Sqrt(float64(a) * float64(b)))
	return min(max(m, int64(a)), int64(b)-1)
}

// rules merges neighbouring classes with the same choice into one rule
// each; the last takes every larger size.
func rules(cs []Class) []array.Rule {
	var rs []array.Rule
	for i, c := range cs {
		if i+1 < len(cs) && cs[i+1].Chosen == c.Chosen {
			continue
		}
		rs = append(rs, array.Rule{Max: c.Max, RM: c.Chosen})
	}
	return rs
}

// weigh sets the classes' weights from sample (or equal value counts) and
// the predicted overall storage overhead.
func (p *Plan) weigh(sample []SizeCount) {
	total := 0.0
	for i := range p.Classes {
		c := &p.Classes[i]
		c.Weight = float64(c.Size) // one value of the class's size
		if len(sample) > 0 {
			c.Weight = 0
			for _, s := range sample {
				if s.Size >= c.Min && (c.Max == 0 || s.Size <= c.Max) {
					c.Weight += float64(s.Size) * float64(s.Count)
				}
			}
		}
		total += c.Weight
	}
	p.Weighting = "the same number of values in every size class"
	if len(sample) > 0 {
		p.Weighting = "the sample's user bytes in each size class"
	}
	for i := range p.Classes {
		if total > 0 {
			p.Classes[i].Weight /= total
		}
	}
	p.StorageOverhead = p.overhead()
}

// overhead is the chosen overheads weighted by the classes' weights.
func (p *Plan) overhead() float64 {
	o := 0.0
	for i := range p.Classes {
		o += p.Classes[i].Weight * p.Classes[i].chosen().StorageOverhead
	}
	return o
}

// Under returns a copy of p with each class's choice made by other
// thresholds, as the array makes it (the first rule whose Max is at least
// the value's size, else def), floors met or not: to compare them, say a
// config's current thresholds, on the same classes and weights.
func (p *Plan) Under(rules []array.Rule, def string) (*Plan, error) {
	q := *p
	q.Rules = slices.Clone(rules)
	q.Classes = make([]Class, len(p.Classes))
	var missing []string
	for i, c := range p.Classes {
		c.Chosen = def
		for _, r := range rules {
			if r.Max == 0 || int64(c.Size) <= r.Max {
				c.Chosen = r.RM
				break
			}
		}
		c.Candidates = slices.Clone(c.Candidates)
		found := false
		for j := range c.Candidates {
			c.Candidates[j].Chosen = c.Candidates[j].Mechanism == c.Chosen
			found = found || c.Candidates[j].Chosen
		}
		if !found {
			missing = append(missing, fmt.Sprintf("%s at %s", c.Chosen, c.SizeLabel))
		}
		q.Classes[i] = c
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrUnmeasured, strings.Join(missing, ", "))
	}
	q.StorageOverhead = q.overhead()
	return &q, nil
}

// Missed returns the size classes whose choice misses the floors (none
// for a plan from Choose; see Under).
func (p *Plan) Missed() []string {
	var out []string
	for i := range p.Classes {
		if c := &p.Classes[i]; !c.chosen().Meets {
			out = append(out, c.SizeLabel)
		}
	}
	return out
}

// chosen returns the chosen candidate (zero if none).
func (c *Class) chosen() Candidate {
	for _, cand := range c.Candidates {
		if cand.Chosen {
			return cand
		}
	}
	return Candidate{}
}

// ChosenCandidate returns the class's chosen candidate and whether there
// is one.
func (c *Class) ChosenCandidate() (Candidate, bool) {
	cand := c.chosen()
	return cand, cand.Chosen
}

// Range prints the sizes the class stands for: "1 B–2.0 KiB", "≥ 33 KiB".
func (c *Class) Range() string {
	if c.Max == 0 {
		return "≥ " + humanize.IBytes(uint64(c.Min))
	}
	return humanize.IBytes(uint64(c.Min)) + "–" + humanize.IBytes(uint64(c.Max))
}

// stalled mirrors the report table's mark: the host stalled the bench for
// more than 5% of the phase.
func stalled(r bench.Result) bool { return r.HostStallMs/1000 > 0.05*r.Seconds }

// SampleSizes returns the value sizes to bench for a sample: one per
// power-of-4 bucket of sizes that holds values ((1, 4], (4, 16], ...
// (4 KiB, 16 KiB], ...), the bucket's median value size, so that a bench
// over them has one size class per bucket and the class boundaries fall
// between the buckets' typical sizes.
func SampleSizes(sample []SizeCount) []int {
	buckets := map[int][]SizeCount{}
	for _, s := range sample {
		if s.Size > 0 && s.Count > 0 {
			b := 0
			for v := s.Size - 1; v > 0; v >>= 2 {
				b++
			}
			buckets[b] = append(buckets[b], s)
		}
	}
	var sizes []int
	for _, bin := range buckets {
		slices.SortFunc(bin, func(a, b SizeCount) int { return cmp.Compare(a.Size, b.Size) })
		var n int64
		for _, s := range bin {
			n += s.Count
		}
		var seen int64
		for _, s := range bin {
			if seen += s.Count; 2*seen >= n {
				sizes = append(sizes, int(s.Size))
				break
			}
		}
	}
	slices.Sort(sizes)
	return sizes
}
