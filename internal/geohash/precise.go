package geohash

import (
	"math"
	"math/big"
)

// Redis prints a STOREDIST score with all 17 digits, so a distance must
// be its C library's to the bit: a cgo build calls the C library's sin,
// cos and asin (libm_cgo.go). Without cgo they are evaluated here in
// double-double arithmetic (about 106 bits) and rounded once to a
// float64: correctly rounded, which glibc's are but for about one
// argument in a thousand (then a last digit differs); Go's math package's
// are up to an ulp (asin two) off, a last digit in a few distances out
// of ten.

// dd is an unevaluated sum hi+lo, |lo| ≤ ulp(hi)/2.
type dd struct{ hi, lo float64 }

func twoSum(a, b float64) dd {
	s := a + b
	bb := s - a
	return dd{s, (a - (s - bb)) + (b - bb)}
}

func quickTwoSum(a, b float64) dd {
	s := a + b
	return dd{s, b - (s - a)}
}

func (x dd) add(y dd) dd {
	s := twoSum(x.hi, y.hi)
	t := twoSum(x.lo, y.lo)
	s.lo += t.hi
	s = quickTwoSum(s.hi, s.lo)
	s.lo += t.lo
	return quickTwoSum(s.hi, s.lo)
}

func (x dd) mul(y dd) dd {
	p := x.hi * y.hi
	e := math.FMA(x.hi, y.hi, -p)
	e += x.hi*y.lo + x.lo*y.hi
	return quickTwoSum(p, e)
}

func (x dd) neg() dd { return dd{-x.hi, -x.lo} }

// ddOf splits f into a double-double.
func ddOf(f *big.Float) dd {
	hi, _ := f.Float64()
	lo, _ := new(big.Float).SetPrec(256).Sub(f, big.NewFloat(hi)).Float64()
	return dd{hi, lo}
}

// Constants: π/2 in three parts (the reduction subtracts up to 2·π/2
// from an exact float64), and 1/n! for the series.
var (
	halfPi [3]float64
	invFac [32]dd
)

func init() {
	// π to 80 digits.
	pi, _ := new(big.Float).SetPrec(256).SetString("3.14159265358979323846264338327950288419716939937510582097494459230781640628620899")
	h := new(big.Float).SetPrec(256).Quo(pi, big.NewFloat(2))
	for i := range halfPi {
		halfPi[i], _ = h.Float64()
		h.Sub(h, big.NewFloat(halfPi[i]))
	}
	fac := new(big.Float).SetPrec(256).SetInt64(1)
	one := new(big.Float).SetPrec(256).SetInt64(1)
	for n := range invFac {
		if n > 0 {
			fac.Mul(fac, big.NewFloat(float64(n)))
		}
		invFac[n] = ddOf(new(big.Float).SetPrec(256).Quo(one, fac))
	}
}

// sinCosDD is sin x and cos x, |x| ≤ 4, in double-double: x less k·π/2
// (|r| ≤ π/4), then Taylor series to r^29.
func sinCosDD(x float64) (s, c dd) {
	k := math.Round(x / halfPi[0])
	// k·π/2's parts are exact products for |k| ≤ 3 but the first, whose
	// error FMA keeps.
	p0 := k * halfPi[0]
	r := twoSum(x, -p0).add(dd{-math.FMA(k, halfPi[0], -p0), 0})
	r = r.add(dd{-k * halfPi[1], 0}).add(dd{-k * halfPi[2], 0})
	r2 := r.mul(r)
	// Horner: sin r = r(1 - r²/3! + r⁴/5! ...), cos r = 1 - r²/2! + ...
	ss, cc := dd{}, dd{}
	for n := 14; n >= 0; n-- {
		sign := 1.0
		if n%2 == 1 {
			sign = -1
		}
		st, ct := invFac[2*n+1], invFac[2*n]
		ss = ss.mul(r2).add(dd{sign * st.hi, sign * st.lo})
		cc = cc.mul(r2).add(dd{sign * ct.hi, sign * ct.lo})
	}
	ss = ss.mul(r)
	switch int(k) & 3 {
	case 0:
		return ss, cc
	case 1:
		return cc, ss.neg()
	case 2:
		return ss.neg(), cc.neg()
	default:
		return cc.neg(), ss
	}
}

func (x dd) float() float64 { return x.hi + x.lo }

func preciseSin(x float64) float64 { s, _ := sinCosDD(x); return s.float() }
func preciseCos(x float64) float64 { _, c := sinCosDD(x); return c.float() }

// preciseAsin is asin v for 0 ≤ v ≤ 1: Go's asin y, then Newton's step
// y + (v - sin y)/cos y, sin y in double-double (y's error squared times
// tan y / 2 is far below an ulp but for v within 1e-30 of 1).
func preciseAsin(v float64) float64 {
	y := math.Asin(v)
	s, c := sinCosDD(y)
	if c.hi == 0 {
		return y
	}
	d := dd{v, 0}.add(s.neg())
	return y + d.float()/c.float()
}
