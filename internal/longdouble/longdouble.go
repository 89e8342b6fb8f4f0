// Package longdouble does INCRBYFLOAT's arithmetic as Redis does it: in C's
// long double, which on the x86-64 machines Redis is built for is the x87
// extended format (a 64-bit significand, 15-bit exponent), parsed as
// strtold parses and printed as "%.17Lf" with trailing zeros removed.
//
// A float64 gives other answers a user sees: 0.1 + 0.2 is
// 0.30000000000000004 in float64 and 0.3 in Redis; 9223372036854775807 + 0
// stays exact only with 64 significand bits; 1e400 is out of float64's
// range and inside long double's. Values here are big.Floats of 64 bits of
// precision, rounded to nearest-even as the x87 unit rounds, kept inside
// long double's range.
package longdouble

import (
	"math"
	"math/big"
	"strings"
)

// Prec is the x87 extended format's significand, in bits.
const Prec = 64

// maxExp and minExp bound long double's finite values: the largest is
// just under 2^16384, the smallest subnormal 2^-16445 (big.Float's
// exponent e means a value in [2^(e-1), 2^e)).
const (
	maxExp = 16384
	minExp = -16444
)

// maxLen is Redis's MAX_LONG_DOUBLE_CHARS: longer input is refused.
const maxLen = 5 * 1024

// Parse reads b as Redis's string2ld does: strtold's syntax (decimal or
// hexadecimal, an optional exponent, inf and infinity in any case), the
// whole string, no leading space, not NaN, and not out of long double's
// range (an overflow or an underflow to zero). It reports false for
// anything else.
func Parse(b []byte) (*big.Float, bool) {
	f, ok := parse(b, Prec)
	if !ok || !inRange(f) {
		return nil, false
	}
	return f, true
}

// parse reads b in strtold's syntax (Parse's) at prec bits.
func parse(b []byte, prec uint) (*big.Float, bool) {
	if len(b) == 0 || len(b) >= maxLen {
		return nil, false
	}
	s := string(b)
	body := strings.TrimLeft(s, "+-")
	if len(s)-len(body) > 1 {
		return nil, false
	}
	neg := s[0] == '-'
	if strings.EqualFold(body, "inf") || strings.EqualFold(body, "infinity") {
		return new(big.Float).SetInf(neg), true
	}
	// big.ParseFloat takes more than strtold: '_' separators and 0b/0o
	// prefixes. Leading spaces it refuses, as string2ld does.
	if strings.ContainsRune(body, '_') || len(body) > 1 && body[0] == '0' && strings.ContainsRune("bBoO", rune(body[1])) {
		return nil, false
	}
	f, _, err := big.ParseFloat(s, 0, prec, big.ToNearestEven)
	if err != nil {
		return nil, false
	}
	return f, true
}

// ParseDouble reads b as Redis's string2d reads a double (a sorted
// set's score): Parse's syntax, refusing what overflows a float64 or
// underflows to zero.
func ParseDouble(b []byte) (float64, bool) {
	f, ok := parse(b, 53)
	if !ok {
		return 0, false
	}
	x, _ := f.Float64()
	if !f.IsInf() && math.IsInf(x, 0) || f.Sign() != 0 && x == 0 {
		return 0, false
	}
	return x, true
}

// ParseDoubleLoose reads b as Redis's range parsing does with strtod
// (ZRANGEBYSCORE's min and max): leading white space allowed, the empty
// string 0, an overflow infinity, an underflow zero; not NaN.
func ParseDoubleLoose(b []byte) (float64, bool) {
	if len(b) == 0 {
		return 0, true
	}
	t := strings.TrimLeft(string(b), " \t\n\v\f\r")
	f, ok := parse([]byte(t), 53)
	if !ok {
		return 0, false
	}
	x, _ := f.Float64()
	return x, true
}

// inRange reports whether f is a finite value long double holds (zero
// included), or an infinity.
func inRange(f *big.Float) bool {
	if f.IsInf() || f.Sign() == 0 {
		return true
	}
	e := f.MantExp(nil)
	return e <= maxExp && e > minExp
}

// Add returns x + y and whether the sum is a finite long double: a sum
// that is NaN or overflows to infinity is refused, as INCRBYFLOAT refuses
// it ("increment would produce NaN or Infinity").
func Add(x, y *big.Float) (*big.Float, bool) {
	if x.IsInf() || y.IsInf() {
		return nil, false
	}
	z := new(big.Float).SetPrec(Prec).SetMode(big.ToNearestEven).Add(x, y)
	if z.Sign() != 0 && z.MantExp(nil) > maxExp {
		return nil, false
	}
	return z, true
}

// Format prints f as Redis's ld2string in its human mode: "%.17Lf", then
// trailing zeros after the point removed, then the point if nothing
// follows it; "-0" is "0"; infinities are "inf" and "-inf".
func Format(f *big.Float) string {
	if f.IsInf() {
		if f.Sign() > 0 {
			return "inf"
		}
		return "-inf"
	}
	s := f.Text('f', 17)
	if strings.IndexByte(s, '.') >= 0 {
		s = strings.TrimRight(s, "0")
		s = strings.TrimSuffix(s, ".")
	}
	if s == "-0" {
		s = "0"
	}
	return s
}
