package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// Key distributions.
const (
	Uniform = "uniform"
	Zipfian = "zipfian"
)

// key returns the user key of key number i: "kvbench" and 10 digits.
func key(dst []byte, i int64) []byte {
	dst = append(dst[:0], "kvbench"...)
	const width = 10
	var digits [20]byte
	d := strconv.AppendInt(digits[:0], i, 10)
	for range width - len(d) {
		dst = append(dst, '0')
	}
	return append(dst, d...)
}

// chooser picks key numbers in [0, n) for retrieves and updates.
type chooser interface{ next() int64 }

type uniform struct {
	r *rand.Rand
	n int64
}

func (u uniform) next() int64 { return u.r.Int64N(u.n) }

// zipf is YCSB's Zipfian generator (Gray et al., "Quickly generating
// billion-record synthetic databases"): item i (0-based) is drawn with
// probability proportional to 1/(i+1)^θ, for any θ in (0, 1) — YCSB's
// default 0.99, which math/rand's Zipf (s > 1) cannot produce. The items
// are then scrambled by a hash, as YCSB's scrambled Zipfian does, so that
// the popular keys are spread over the devices instead of being the
// first ones stored.
type zipf struct {
	r                        *rand.Rand
	n                        int64
	theta, alpha, zetan, eta float64
	half                     float64 // 1 + 0.5^θ
}

// zeta is ζ(n, θ) = Σ 1/i^θ for i = 1..n, an O(n) sum computed once per
// phase and shared by its workers.
func zeta(n int64, theta float64) float64 {
	var s float64
	for i := int64(1); i <= n; i++ {
		s += 1 / math.Pow(float64(i), theta)
	}
	return s
}

func newZipf(r *rand.Rand, n int64, theta float64, zetan float64) *zipf {
	z := &zipf{r: r, n: n, theta: theta, zetan: zetan}
	zeta2 := 1 + math.Pow(0.5, theta)
	z.alpha = 1 / (1 - theta)
	z.eta = (1 - math.Pow(2/float64(n), 1-theta)) / (1 - zeta2/zetan)
	z.half = zeta2
	return z
}

func (z *zipf) rank() int64 {
	u := z.r.Float64()
	uz := u * z.zetan
	switch {
	case uz < 1:
		return 0
	case uz < z.half:
		return 1
	}
	return min(z.n-1, int64(float64(z.n)*math.Pow(z.eta*u-z.eta+1, z.alpha)))
}

func (z *zipf) next() int64 {
	return int64(xxhash.Sum64String(strconv.FormatInt(z.rank(), 10)) % uint64(z.n))
}

// chooserFactory makes one chooser per worker, each with its own seeded
// source, so that a run is reproducible from its seed.
func chooserFactory(dist string, theta float64, n int64, seed uint64) (func(worker int) chooser, error) {
	if n < 1 {
		return nil, fmt.Errorf("no keys to choose from")
	}
	src := func(w int) *rand.Rand { return rand.New(rand.NewPCG(seed, uint64(w)+1)) }
	switch dist {
	case Uniform, "":
		return func(w int) chooser { return uniform{src(w), n} }, nil
	case Zipfian:
		if !(theta > 0 && theta < 1) {
			return nil, fmt.Errorf("zipfian θ %v: want 0 < θ < 1", theta)
		}
		zn := zeta(n, theta)
		return func(w int) chooser { return newZipf(src(w), n, theta, zn) }, nil
	}
	return nil, fmt.Errorf("key distribution %q: want %s or %s", dist, Uniform, Zipfian)
}
