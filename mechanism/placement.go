package mechanism

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sort"
)

// Placement is where the pieces of a split go: the sequence of devices a
// split's pieces take in order (offset 0 is the primary). It is a pure
// function of the key and of what the array header records, so that
// every open of an array finds every key where it was written.
//
// Unweighted (arrays whose devices are all the same size, and every array
// created before weights): the primary of split s of a key with hash h is
// (h+s) mod N and offset i is the i-th device after it, circularly.
//
// Weighted (the capacity ring): device j owns an arc of length w_j on a
// circle of circumference C = Σw, in device order. A split is a point x
// on the circle, uniform in [0, C); its offset i is the device whose arc
// holds x + i·step (mod C), with step = max w_j, for i < Slots() =
// ⌊C/step⌋; the devices that no such point reaches follow, in circular
// device order after the last one. This is systematic sampling with
// probability proportional to size: since x is uniform, the point of
// every offset is uniform too, so the piece at each offset lands on
// device j with probability w_j/C exactly, whatever the mechanism's width
// (replication's copies, splitting's k+r shards, a packing member alike),
// and the expected bytes on each device are proportional to its weight
// (given pieces of equal size at each offset, which every mechanism
// writes). Points step apart never share an arc (no arc is longer than
// step, and Slots()·step ≤ C), so the offsets below Slots() are distinct
// devices. With equal weights it is the unweighted placement's shape
// (consecutive devices).
//
// No placement can fill a device evenly whose share of the weight exceeds
// 1/W, where W is the widest mechanism: it can hold one piece of each
// split at most. CapWeights lowers such weights at creation; the space
// beyond goes unused.
type Placement struct {
	n      int
	weight []uint64 // nil: unweighted
	cum    []uint64 // cum[j] = Σ weight[:j]; len n+1
	total  uint64
	step   uint64
	slots  int
}

// ErrBadWeights: weights that cannot define a placement.
var ErrBadWeights = errors.New("bad device weights")

// maxTotalWeight bounds the sum of the weights, so that x + i·step never
// overflows (i < 2^16).
const maxTotalWeight = 1 << 44

// NewPlacement returns the placement over n devices with the given weights
// (nil or empty: unweighted). Weights must be positive, one per device,
// and sum to at most 2^44 (see NormalizeWeights).
func NewPlacement(n int, weights []uint64) (*Placement, error) {
	p := &Placement{n: n}
	if len(weights) == 0 {
		return p, nil
	}
	if len(weights) != n {
		return nil, fmt.Errorf("%d weights for %d devices: %w", len(weights), n, ErrBadWeights)
	}
	p.weight = slices.Clone(weights)
	p.cum = make([]uint64, n+1)
	for j, w := range weights {
		if w == 0 {
			return nil, fmt.Errorf("device %d has weight 0: %w", j, ErrBadWeights)
		}
		p.cum[j+1] = p.cum[j] + w
		p.step = max(p.step, w)
		if p.cum[j+1] > maxTotalWeight {
			return nil, fmt.Errorf("weights sum to more than 2^44: %w", ErrBadWeights)
		}
	}
	p.total = p.cum[n]
	p.slots = int(p.total / p.step)
	return p, nil
}

// Weighted reports whether the placement follows device weights.
func (p *Placement) Weighted() bool { return p.weight != nil }

// Weights returns the weights (nil when unweighted).
func (p *Placement) Weights() []uint64 { return slices.Clone(p.weight) }

// Slots is the number of leading offsets that follow the weights: a
// mechanism wider than this has its further pieces in device order.
func (p *Placement) Slots() int {
	if p.weight == nil {
		return p.n
	}
	return p.slots
}

// Place returns the primary and the ring point of split s of a key whose
// placement hash is h (the point is 0 when unweighted). Consecutive splits
// are a step apart, as a huge value's splits rotate over the devices.
func (p *Placement) Place(h uint64, s int) (primary int, point uint64) {
	if p.weight == nil {
		return int((h + uint64(s)) % uint64(p.n)), 0
	}
	x, _ := bits.Mul64(h, p.total)       // uniform in [0, total)
	x = (x + uint64(s)*p.step) % p.total // s < 2^16: no overflow
	return p.owner(x), x
}

// owner returns the device whose arc holds point x < total.
func (p *Placement) owner(x uint64) int {
	return sort.Search(p.n, func(j int) bool { return p.cum[j+1] > x })
}

// At returns the device of the piece at offset i (0 ≤ i < N) of split k.
func (p *Placement) At(k Key, i int) int {
	if p.weight == nil {
		return (k.Primary + i) % p.n
	}
	if i < p.slots {
		return p.owner((k.Point + uint64(i)*p.step) % p.total)
	}
	return p.Sequence(k)[i]
}

// Offset returns the offset of device dev in split k's sequence: the
// inverse of At.
func (p *Placement) Offset(k Key, dev int) int {
	if p.weight == nil {
		return (dev - k.Primary + p.n) % p.n
	}
	// The first offset whose point is at or past the arc's start, if the
	// point falls inside the arc; the primary's arc may also hold x.
	if d := (k.Point + p.total - p.cum[dev]) % p.total; d < p.weight[dev] {
		return 0
	}
	d := (p.cum[dev] + p.total - k.Point) % p.total // from x forward to the arc
	i := (d + p.step - 1) / p.step
	if i < uint64(p.slots) && i*p.step-d < p.weight[dev] {
		return int(i)
	}
	return slices.Index(p.Sequence(k), dev)
}

// Sequence returns the whole sequence of split k: every device once,
// offset 0 first.
func (p *Placement) Sequence(k Key) []int {
	seq := make([]int, 0, p.n)
	if p.weight == nil {
		for i := range p.n {
			seq = append(seq, (k.Primary+i)%p.n)
		}
		return seq
	}
	in := make([]bool, p.n)
	for i := range p.slots {
		d := p.owner((k.Point + uint64(i)*p.step) % p.total)
		seq = append(seq, d)
		in[d] = true
	}
	last := seq[len(seq)-1]
	for i := 1; i <= p.n; i++ {
		if d := (last + i) % p.n; !in[d] {
			seq = append(seq, d)
			in[d] = true
		}
	}
	return seq
}

// CapWeights returns weights lowered so that none exceeds 1/width of
// their sum (see Placement): with width pieces of a split on distinct
// devices, a device cannot take more than one piece in width, so weight
// beyond that would only make placement claim an evenness it cannot
// deliver. Weights already within the bound are returned unchanged.
func CapWeights(weights []uint64, width int) []uint64 {
	out := slices.Clone(weights)
	if width <= 1 || width > len(out) {
		return out
	}
	order := make([]int, len(out))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return out[order[a]] > out[order[b]] })
	var rest uint64
	for _, j := range order {
		rest += out[j]
	}
	// Cap the m largest at t = rest/(width-m), where rest is the sum of
	// the others, for the least m at which t is at least the next one.
	for m := 0; m < width; m++ {
		if m > 0 {
			rest -= out[order[m-1]]
		}
		t := rest / uint64(width-m)
		if m < len(order) && out[order[m]] <= t {
			if m > 0 {
				for _, j := range order[:m] {
					out[j] = max(t, 1)
				}
			}
			return out
		}
	}
	return out
}

// NormalizeWeights scales weights (capacities in bytes, say) down so that
// they sum to at most 2^32, keeping each at least 1. Their ratios, which
// are all placement uses, are kept to within one part in 2^32/N.
func NormalizeWeights(weights []uint64) []uint64 {
	out := slices.Clone(weights)
	var max64 uint64
	for _, w := range out {
		max64 = max(max64, w)
	}
	const limit = 1 << 32
	n := uint64(len(out))
	if n == 0 || max64 <= limit/n {
		return out
	}
	div := max64/(limit/n) + 1
	for i, w := range out {
		out[i] = max(w/div, 1)
	}
	return out
}

// Order returns every device once, in the order a placement-wide choice
// seeded by seed should prefer them: the sequence of a split whose hash
// is seed. A mechanism placing objects that belong to no one key
// (Packing's parities, chosen per set) takes its devices from it, so
// that they too fill devices in proportion to their weights.
func (p *Placement) Order(seed uint64) []int {
	seed *= 0x9E3779B97F4A7C15
	if p.weight == nil {
		return p.Sequence(Key{Primary: int(seed >> 33 % uint64(p.n))})
	}
	primary, x := p.Place(seed, 0)
	return p.Sequence(Key{Primary: primary, Point: x})
}
