// Package bitops is Redis 7.0's bit arithmetic on string values
// (src/bitops.c) with no I/O: BITOP's combination, BITPOS's search,
// BITFIELD's integer fields and their overflow rules. The server parses
// arguments, reads and stores values, and replies.
//
// Bit 0 of a value is the most significant bit of its first byte, as in
// Redis; bytes past a value's end read as zero. Functions never keep or
// modify their inputs unless documented (Field.Apply edits the buffer it
// is given, which the caller owns).
package bitops

import (
	"errors"
	"math"
	"math/bits"
	"strconv"
)

// Op is a BITOP operation.
type Op int

// BITOP's operations.
const (
	And Op = iota
	Or
	Xor
	Not
)

// ParseOp reads BITOP's operation name, case-insensitively.
func ParseOp(name string) (Op, bool) {
	switch len(name) {
	case 2, 3:
	default:
		return 0, false
	}
	var b [3]byte
	for i := range len(name) {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[i] = c
	}
	switch string(b[:len(name)]) {
	case "and":
		return And, true
	case "or":
		return Or, true
	case "xor":
		return Xor, true
	case "not":
		return Not, true
	}
	return 0, false
}

// Combine is BITOP: srcs combined byte by byte, shorter ones padded with
// zeroes, into a new value as long as the longest (NOT takes one source).
func Combine(op Op, srcs [][]byte) []byte {
	n := 0
	for _, s := range srcs {
		n = max(n, len(s))
	}
	if n == 0 {
		return nil
	}
	out := make([]byte, n)
	copy(out, srcs[0])
	switch op {
	case Not:
		for i := range out {
			out[i] = ^out[i]
		}
	case And:
		for _, s := range srcs[1:] {
			for i := range out {
				if i < len(s) {
					out[i] &= s[i]
				} else {
					out[i] = 0
				}
			}
		}
	case Or:
		for _, s := range srcs[1:] {
			for i, b := range s {
				out[i] |= b
			}
		}
	case Xor:
		for _, s := range srcs[1:] {
			for i, b := range s {
				out[i] ^= b
			}
		}
	}
	return out
}

// Range resolves Redis's start and end indices (negative from the end)
// over a value of length bytes, counted in bits when inBits: the first
// and last bit or byte, and false when the range is empty.
func Range(start, end, length int64, inBits bool) (int64, int64, bool) {
	total := length
	if inBits {
		total *= 8
	}
	if start < 0 {
		start = max(total+start, 0)
	}
	if end < 0 {
		end = max(total+end, 0)
	}
	end = min(end, total-1)
	return start, end, start <= end && total > 0
}

// Pos is BITPOS over v: the first bit equal to bit in [first, last]
// (bits when inBits, else bytes; both already resolved by Range), or -1.
// Looking for a 0 with no end given, the value is taken as padded with
// zeroes on the right, so the answer can be the bit just after it;
// endGiven makes that -1.
func Pos(v []byte, bit int, first, last int64, inBits, endGiven bool) int64 {
	lo, hi := first, last
	if !inBits {
		lo, hi = first*8, last*8+7
	}
	skip := byte(0xff) // a byte holding no wanted bit
	if bit == 1 {
		skip = 0
	}
	for i := lo; i <= hi; {
		b := v[i/8]
		if i%8 == 0 && i+7 <= hi {
			if b != skip {
				return i + int64(bits.LeadingZeros8(b^skip))
			}
			i += 8
			continue
		}
		if (b>>(7-i%8))&1 == byte(bit) {
			return i
		}
		i++
	}
	if bit == 0 && !endGiven {
		return hi + 1
	}
	return -1
}

// Overflow is BITFIELD's OVERFLOW behaviour.
type Overflow int

// BITFIELD's overflow behaviours.
const (
	Wrap Overflow = iota
	Sat
	Fail
)

// ParseOverflow reads OVERFLOW's argument, case-insensitively.
func ParseOverflow(s string) (Overflow, bool) {
	switch upper(s) {
	case "WRAP":
		return Wrap, true
	case "SAT":
		return Sat, true
	case "FAIL":
		return Fail, true
	}
	return 0, false
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// Redis's BITFIELD argument errors (without the "ERR " of the reply).
var (
	//lint:ignore ST1005 Redis's own wording, in its reply
	ErrType   = errors.New("Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.")
	ErrOffset = errors.New("bit offset is not an integer or out of range")
)

// Type is a field's type: signed or not, and its width in bits.
type Type struct {
	Signed bool
	Bits   uint
}

// ParseType reads "i1".."i64" or "u1".."u63".
func ParseType(s string) (Type, error) {
	if len(s) < 2 || s[0] != 'i' && s[0] != 'u' {
		return Type{}, ErrType
	}
	n, err := strconv.ParseInt(s[1:], 10, 64)
	if err != nil || strconv.FormatInt(n, 10) != s[1:] || n < 1 || s[0] == 'i' && n > 64 || s[0] == 'u' && n > 63 {
		return Type{}, ErrType
	}
	return Type{Signed: s[0] == 'i', Bits: uint(n)}, nil
}

// ParseOffset reads a field's bit offset: a number, or "#n" for the n-th
// field of type t (n times its width). maxBytes is proto-max-bulk-len:
// the offset's byte must be below it.
func ParseOffset(s string, t Type, maxBytes int64) (uint64, error) {
	hash := len(s) > 0 && s[0] == '#'
	if hash {
		s = s[1:]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || strconv.FormatInt(n, 10) != s {
		return 0, ErrOffset
	}
	if hash {
		n *= int64(t.Bits) // wraps as Redis's long long multiply does
	}
	if n < 0 || n>>3 >= maxBytes {
		return 0, ErrOffset
	}
	return uint64(n), nil
}

// Field is one BITFIELD operation.
type Field struct {
	Kind     Kind
	Type     Type
	Offset   uint64
	Arg      int64 // SET's value, INCRBY's increment
	Overflow Overflow
}

// Kind is GET, SET or INCRBY.
type Kind int

// BITFIELD's operations.
const (
	Get Kind = iota
	Set
	IncrBy
)

// Last is the last bit a field covers.
func (f Field) Last() uint64 { return f.Offset + uint64(f.Type.Bits) - 1 }

// getU reads bits bits at bit offset off of p (zero past its end).
func getU(p []byte, off uint64, n uint) uint64 {
	var v uint64
	for j := range uint64(n) {
		o := off + j
		bit := uint64(0)
		if i := o >> 3; i < uint64(len(p)) {
			bit = uint64(p[i]>>(7-o&7)) & 1
		}
		v = v<<1 | bit
	}
	return v
}

// setU writes the low n bits of v at bit offset off of p, which covers
// them.
func setU(p []byte, off uint64, n uint, v uint64) {
	for j := range uint64(n) {
		o := off + j
		bit := byte(v>>(uint64(n)-1-j)) & 1
		m := byte(1) << (7 - o&7)
		p[o>>3] = p[o>>3]&^m | bit<<(7-o&7)
	}
}

func getS(p []byte, off uint64, n uint) int64 {
	v := int64(getU(p, off, n))
	if n < 64 && v&(1<<(n-1)) != 0 {
		v |= -1 << n
	}
	return v
}

// overflowU is checkUnsignedBitfieldOverflow: 0, or ±1 with the value
// to store under ow (ignored for Fail).
func overflowU(value uint64, incr int64, n uint, ow Overflow) (int, uint64) {
	maxv := uint64(1)<<n - 1
	if n == 64 {
		maxv = math.MaxUint64
	}
	maxincr := int64(maxv - value)
	minincr := int64(-value)
	wrap := func() uint64 { return (value + uint64(incr)) &^ (math.MaxUint64 << n) }
	switch {
	case value > maxv || incr > 0 && incr > maxincr:
		if ow == Wrap {
			return 1, wrap()
		}
		return 1, maxv
	case incr < 0 && incr < minincr:
		if ow == Wrap {
			return 1, wrap() // Redis reports 1 here too after wrapping
		}
		return -1, 0
	}
	return 0, 0
}

// overflowS is checkSignedBitfieldOverflow.
func overflowS(value, incr int64, n uint, ow Overflow) (int, int64) {
	maxv := int64(math.MaxInt64)
	if n != 64 {
		maxv = 1<<(n-1) - 1
	}
	minv := -maxv - 1
	maxincr := int64(uint64(maxv) - uint64(value))
	minincr := minv - value
	wrap := func() int64 {
		c := uint64(value) + uint64(incr)
		if n < 64 {
			mask := uint64(math.MaxUint64) << n
			if c&(1<<(n-1)) != 0 {
				c |= mask
			} else {
				c &^= mask
			}
		}
		return int64(c)
	}
	switch {
	case value > maxv || n != 64 && incr > maxincr || value >= 0 && incr > 0 && incr > maxincr:
		if ow == Wrap {
			return 1, wrap()
		}
		return 1, maxv
	case value < minv || n != 64 && incr < minincr || value < 0 && incr < 0 && incr < minincr:
		if ow == Wrap {
			return 1, wrap()
		}
		return -1, minv
	}
	return 0, 0
}

// Apply runs f on p, which for SET and INCRBY covers f's bits (the
// caller grew it). It returns the reply (nil for an overflow under
// FAIL, which writes nothing) and whether the stored bits changed.
func (f Field) Apply(p []byte) (reply *int64, changed bool) {
	n := f.Type.Bits
	if f.Type.Signed {
		old := getS(p, f.Offset, n)
		if f.Kind == Get {
			return &old, false
		}
		next, ret := f.Arg, old
		var of int
		var lim int64
		if f.Kind == IncrBy {
			of, lim = overflowS(old, f.Arg, n, f.Overflow)
			next = old + f.Arg
			if of != 0 {
				next = lim
			}
			ret = next
		} else if of, lim = overflowS(next, 0, n, f.Overflow); of != 0 {
			next = lim
		}
		if of != 0 && f.Overflow == Fail {
			return nil, false
		}
		setU(p, f.Offset, n, uint64(next))
		return &ret, old != next
	}
	old := getU(p, f.Offset, n)
	if f.Kind == Get {
		r := int64(old)
		return &r, false
	}
	next, ret := uint64(f.Arg), old
	var of int
	var lim uint64
	if f.Kind == IncrBy {
		next = old + uint64(f.Arg)
		if of, lim = overflowU(old, f.Arg, n, f.Overflow); of != 0 {
			next = lim
		}
		ret = next
	} else if of, lim = overflowU(next, 0, n, f.Overflow); of != 0 {
		next = lim
	}
	if of != 0 && f.Overflow == Fail {
		return nil, false
	}
	setU(p, f.Offset, n, next)
	r := int64(ret)
	return &r, old != next
}
