// Package hll is Redis 7.0's HyperLogLog (src/hyperloglog.c) over the
// bytes of a Redis string value, with no I/O: the server reads a value,
// hands it here and stores what comes back.
//
// Invariants: every value this package returns is byte for byte what
// Redis 7.0.15 would hold after the same operations — the 16-byte "HYLL"
// header (encoding, three zero bytes, the cached cardinality little endian
// with bit 63 set when stale), then 16384 six-bit registers either dense
// (12288 bytes, LSB first) or sparse (ZERO, XZERO and VAL opcodes), the
// same MurmurHash64A seed, the same sparse-to-dense promotion points
// (a register above 32, or the sparse form growing past sparseMax bytes)
// and the same estimator (Ertl's improved raw estimate). A value Redis
// can read, this package can read, and the reverse; DUMP/RESTORE or RDB
// carry them unchanged. Inputs are never modified: functions return new
// slices.
package hll

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
)

const (
	p          = 14
	q          = 64 - p
	registers  = 1 << p
	pMask      = registers - 1
	regBits    = 6
	regMax     = 1<<regBits - 1
	headerSize = 16
	// DenseSize is the length of a dense HyperLogLog value.
	DenseSize = headerSize + (registers*regBits+7)/8

	dense  = 0
	sparse = 1

	xzeroBit     = 0x40
	valBit       = 0x80
	valMaxValue  = 32
	valMaxLen    = 4
	zeroMaxLen   = 64
	xzeroMaxLen  = 16384
	alphaInf     = 0.721347520444481703680
	murmurSeed   = 0xadc83b19
	cacheInvalid = 1 << 7 // of card[7]

	// DefaultSparseMax is Redis's hll-sparse-max-bytes default.
	DefaultSparseMax = 3000
)

// Sentinel errors, with Redis's replies.
var (
	// ErrNotHLL: the value is not a HyperLogLog (Redis's WRONGTYPE reply).
	//lint:ignore ST1005 Redis's own wording, in its reply
	ErrNotHLL = errors.New("WRONGTYPE Key is not a valid HyperLogLog string value.")
	// ErrCorrupt: the header is right but the registers do not decode.
	ErrCorrupt = errors.New("INVALIDOBJ Corrupted HLL object detected")
)

// MurmurHash64A is Redis's hash of an element (little-endian reads).
func MurmurHash64A(key []byte, seed uint64) uint64 {
	const m = 0xc6a4a7935bd1e995
	const r = 47
	n := len(key)
	h := seed ^ uint64(n)*m
	for len(key) >= 8 {
		k := binary.LittleEndian.Uint64(key)
		k *= m
		k ^= k >> r
		k *= m
		h ^= k
		h *= m
		key = key[8:]
	}
	if len(key) > 0 {
		for i := len(key) - 1; i >= 0; i-- {
			h ^= uint64(key[i]) << (8 * i)
		}
		h *= m
	}
	h ^= h >> r
	h *= m
	h ^= h >> r
	return h
}

// patLen is the register an element goes to and the length of its run
// of zeroes plus one (hllPatLen).
func patLen(ele []byte) (int, uint8) {
	hash := MurmurHash64A(ele, murmurSeed)
	index := int(hash & pMask)
	hash >>= p
	hash |= 1 << q
	count := uint8(1)
	for bit := uint64(1); hash&bit == 0; bit <<= 1 {
		count++
	}
	return index, count
}

// New is an empty HyperLogLog as PFADD creates it: sparse, all XZERO.
func New() []byte {
	n := (registers + xzeroMaxLen - 1) / xzeroMaxLen
	v := make([]byte, headerSize, headerSize+2*n)
	copy(v, "HYLL")
	v[4] = sparse
	for left := registers; left > 0; left -= xzeroMaxLen {
		v = appendXZero(v, min(left, xzeroMaxLen))
	}
	return v
}

// Check is isHLLObjectOrReply: nil when v is a HyperLogLog, else ErrNotHLL.
func Check(v []byte) error {
	if len(v) < headerSize || string(v[:4]) != "HYLL" || v[4] > sparse ||
		v[4] == dense && len(v) != DenseSize {
		return ErrNotHLL
	}
	return nil
}

// Encoding is "dense" or "sparse" (PFDEBUG ENCODING); v must pass Check.
func Encoding(v []byte) string {
	if v[4] == dense {
		return "dense"
	}
	return "sparse"
}

func invalidate(v []byte) { v[15] |= cacheInvalid }

// Dense register access (HLL_DENSE_GET_REGISTER / SET_REGISTER). The C
// macros read the byte after the last one (sds's terminator), which
// contributes nothing; here it is skipped.
func getReg(r []byte, i int) uint8 {
	b := i * regBits / 8
	fb := uint(i * regBits & 7)
	v := uint(r[b]) >> fb
	if b+1 < len(r) {
		v |= uint(r[b+1]) << (8 - fb)
	}
	return uint8(v & regMax)
}

func setReg(r []byte, i int, val uint8) {
	b := i * regBits / 8
	fb := uint(i * regBits & 7)
	r[b] &^= byte(regMax << fb)
	r[b] |= byte(uint(val) << fb)
	if b+1 < len(r) {
		r[b+1] &^= byte(regMax >> (8 - fb))
		r[b+1] |= byte(uint(val) >> (8 - fb))
	}
}

// Sparse opcodes.
func isZero(b byte) bool  { return b&0xc0 == 0 }
func isXZero(b byte) bool { return b&0xc0 == xzeroBit }
func isVal(b byte) bool   { return b&valBit != 0 }
func zeroLen(b byte) int  { return int(b&0x3f) + 1 }
func xzeroLen(b0, b1 byte) int {
	return (int(b0&0x3f)<<8 | int(b1)) + 1
}
func valValue(b byte) uint8       { return (b>>2)&0x1f + 1 }
func valLen(b byte) int           { return int(b&3) + 1 }
func valOp(val uint8, n int) byte { return byte(int(val-1)<<2|(n-1)) | valBit }
func zeroOp(n int) byte           { return byte(n - 1) }
func appendXZero(v []byte, n int) []byte {
	return append(v, byte((n-1)>>8)|xzeroBit, byte((n-1)&0xff))
}
func appendZeros(v []byte, n int) []byte {
	if n > zeroMaxLen {
		return appendXZero(v, n)
	}
	return append(v, zeroOp(n))
}

// walk calls fn for each run of the sparse opcodes in ops: its first
// register, length and value. It returns the number of registers
// covered, which a valid HyperLogLog has at exactly 16384; it stops
// (returning -1) at a VAL run past the end, as Redis's decoders do.
func walk(ops []byte, fn func(first, n int, val uint8)) int {
	idx := 0
	for i := 0; i < len(ops); {
		switch b := ops[i]; {
		case isZero(b):
			n := zeroLen(b)
			fn(idx, n, 0)
			idx += n
			i++
		case isXZero(b):
			if i+1 >= len(ops) {
				return -1
			}
			n := xzeroLen(b, ops[i+1])
			fn(idx, n, 0)
			idx += n
			i += 2
		default:
			n := valLen(b)
			if idx+n > registers {
				return -1
			}
			fn(idx, n, valValue(b))
			idx += n
			i++
		}
	}
	return idx
}

// toDense is hllSparseToDense: v unchanged if it is dense already.
func toDense(v []byte) ([]byte, error) {
	if v[4] == dense {
		return v, nil
	}
	d := make([]byte, DenseSize)
	copy(d, v[:headerSize])
	d[4] = dense
	r := d[headerSize:]
	n := walk(v[headerSize:], func(first, n int, val uint8) {
		if val != 0 {
			for i := first; i < first+n; i++ {
				setReg(r, i, val)
			}
		}
	})
	if n != registers {
		return nil, ErrCorrupt
	}
	return d, nil
}

// ToDense is PFDEBUG TODENSE: the dense value, and whether it changed.
func ToDense(v []byte) ([]byte, bool, error) {
	if err := Check(v); err != nil {
		return nil, false, err
	}
	d, err := toDense(v)
	if err != nil {
		return nil, false, err
	}
	return d, v[4] == sparse, nil
}

// Registers is PFDEBUG GETREG's: the 16384 registers and the value in
// dense form (Redis converts the key).
func Registers(v []byte) ([]uint8, []byte, error) {
	d, _, err := ToDense(v)
	if err != nil {
		return nil, nil, err
	}
	out := make([]uint8, registers)
	for i := range out {
		out[i] = getReg(d[headerSize:], i)
	}
	return out, d, nil
}

// Decode is PFDEBUG DECODE: the sparse opcodes as text.
func Decode(v []byte) (string, error) {
	if err := Check(v); err != nil {
		return "", err
	}
	if v[4] != sparse {
		return "", errors.New("HLL encoding is not sparse")
	}
	var b strings.Builder
	ops := v[headerSize:]
	for i := 0; i < len(ops); {
		switch op := ops[i]; {
		case isZero(op):
			fmt.Fprintf(&b, "z:%d ", zeroLen(op))
			i++
		case isXZero(op):
			next := byte(0)
			if i+1 < len(ops) {
				next = ops[i+1]
			}
			fmt.Fprintf(&b, "Z:%d ", xzeroLen(op, next))
			i += 2
		default:
			fmt.Fprintf(&b, "v:%d,%d ", valValue(op), valLen(op))
			i++
		}
	}
	return strings.TrimRight(b.String(), " "), nil
}

// set is hllDenseSet / hllSparseSet: register index to count if count is
// greater. It returns the (possibly new, possibly promoted) value and
// whether the register changed; ErrCorrupt for sparse opcodes that do
// not cover the register.
func set(v []byte, index int, count uint8, sparseMax int) ([]byte, bool, error) {
	if v[4] == dense {
		r := v[headerSize:]
		if count > getReg(r, index) {
			setReg(r, index, count)
			return v, true, nil
		}
		return v, false, nil
	}
	if count > valMaxValue {
		return promote(v, index, count)
	}
	// Step 1: the opcode covering index.
	ops := v[headerSize:]
	pos, prev, first, span := 0, -1, 0, 0
	for pos < len(ops) {
		oplen := 1
		switch b := ops[pos]; {
		case isZero(b):
			span = zeroLen(b)
		case isVal(b):
			span = valLen(b)
		default:
			if pos+1 >= len(ops) {
				return nil, false, ErrCorrupt
			}
			span = xzeroLen(b, ops[pos+1])
			oplen = 2
		}
		if index <= first+span-1 {
			break
		}
		prev = pos
		pos += oplen
		first += span
	}
	if span == 0 || pos >= len(ops) {
		return nil, false, ErrCorrupt
	}
	op := ops[pos]
	var runlen, oldlen int
	switch {
	case isZero(op):
		runlen, oldlen = zeroLen(op), 1
	case isXZero(op):
		runlen, oldlen = xzeroLen(op, ops[pos+1]), 2
	default:
		runlen, oldlen = valLen(op), 1
	}
	out := v
	switch {
	case isVal(op) && valValue(op) >= count:
		return v, false, nil // case A
	case (isVal(op) || isZero(op)) && runlen == 1:
		out = clone(v) // cases B and C
		out[headerSize+pos] = valOp(count, 1)
	default:
		// Case D: split the opcode into up to three.
		last := first + span - 1
		seq := make([]byte, 0, 5)
		if isVal(op) {
			cur := valValue(op)
			if index != first {
				seq = append(seq, valOp(cur, index-first))
			}
			seq = append(seq, valOp(count, 1))
			if index != last {
				seq = append(seq, valOp(cur, last-index))
			}
		} else {
			if index != first {
				seq = appendZeros(seq, index-first)
			}
			seq = append(seq, valOp(count, 1))
			if index != last {
				seq = appendZeros(seq, last-index)
			}
		}
		delta := len(seq) - oldlen
		if delta > 0 && len(v)+delta > sparseMax {
			return promote(v, index, count)
		}
		out = make([]byte, 0, len(v)+delta)
		out = append(out, v[:headerSize+pos]...)
		out = append(out, seq...)
		out = append(out, v[headerSize+pos+oldlen:]...)
	}
	// Step 4: merge adjacent VALs of one value, up to 5 opcodes from prev.
	i := headerSize + max(prev, 0)
	for scan := 5; i < len(out) && scan > 0; scan-- {
		b := out[i]
		if isXZero(b) {
			i += 2
			continue
		}
		if isZero(b) {
			i++
			continue
		}
		if i+1 < len(out) && isVal(out[i+1]) && valValue(b) == valValue(out[i+1]) {
			if n := valLen(b) + valLen(out[i+1]); n <= valMaxLen {
				out[i+1] = valOp(valValue(b), n)
				out = append(out[:i], out[i+1:]...)
				continue
			}
		}
		i++
	}
	invalidate(out)
	return out, true, nil
}

// promote converts v to dense and sets the register there (the register
// always changes: it was below count).
func promote(v []byte, index int, count uint8) ([]byte, bool, error) {
	d, err := toDense(v)
	if err != nil {
		return nil, false, err
	}
	setReg(d[headerSize:], index, count)
	return d, true, nil
}

func clone(v []byte) []byte { return append([]byte(nil), v...) }

// Add is PFADD's: the elements added to v (exists false: a new
// HyperLogLog, which counts as updated), the resulting value and whether
// it changed. With an update the cached cardinality is marked stale.
func Add(v []byte, exists bool, sparseMax int, elems ...[]byte) ([]byte, bool, error) {
	updated := false
	if !exists {
		v, updated = New(), true
	} else {
		if err := Check(v); err != nil {
			return nil, false, err
		}
		if v[4] == dense {
			v = clone(v)
		}
	}
	for _, e := range elems {
		i, n := patLen(e)
		var changed bool
		var err error
		if v, changed, err = set(v, i, n, sparseMax); err != nil {
			return nil, false, err
		}
		updated = updated || changed
	}
	if updated {
		invalidate(v)
	}
	return v, updated, nil
}

// histogram is the register histogram of a valid value's registers;
// false if its sparse opcodes do not cover exactly 16384 registers.
func histogram(v []byte) ([64]int, bool) {
	var h [64]int
	r := v[headerSize:]
	if v[4] == dense {
		for i := 0; i < registers; i++ {
			h[getReg(r, i)]++
		}
		return h, true
	}
	n := walk(r, func(_, n int, val uint8) { h[val] += n })
	return h, n == registers
}

func sigma(x float64) float64 {
	if x == 1 {
		return math.Inf(1)
	}
	y, z := 1.0, x
	for {
		x *= x
		zp := z
		z += float64(x * y)
		y += y
		if zp == z {
			return z
		}
	}
}

func tau(x float64) float64 {
	if x == 0 || x == 1 {
		return 0
	}
	y, z := 1.0, 1-x
	for {
		x = math.Sqrt(x)
		zp := z
		y *= 0.5
		d := 1 - x
		z -= float64(float64(d*d) * y)
		if zp == z {
			return z / 3
		}
	}
}

// estimate is hllCount's estimator over a register histogram. The
// explicit float64 conversions keep Go from fusing multiply-adds where C
// (x86-64, no -ffp-contract) does not.
func estimate(h [64]int) uint64 {
	const m = float64(registers)
	z := float64(m * tau((m-float64(h[q+1]))/m))
	for j := q; j >= 1; j-- {
		z += float64(h[j])
		z *= 0.5
	}
	z += float64(m * sigma(float64(h[0])/m))
	return uint64(math.Round(alphaInf * m * m / z))
}

// Count is PFCOUNT of one key: the cardinality, from the cache when it is
// valid; else computed, and the value with the cache written (store
// true), which Redis stores although PFCOUNT reads.
func Count(v []byte) (card uint64, next []byte, store bool, err error) {
	if err := Check(v); err != nil {
		return 0, nil, false, err
	}
	if v[15]&cacheInvalid == 0 {
		return binary.LittleEndian.Uint64(v[8:16]), v, false, nil
	}
	h, ok := histogram(v)
	if !ok {
		return 0, nil, false, ErrCorrupt
	}
	card = estimate(h)
	next = clone(v)
	binary.LittleEndian.PutUint64(next[8:16], card)
	return card, next, true, nil
}

// Union is the registers' maximum over HyperLogLogs (hllMerge, for
// PFCOUNT of many keys and PFMERGE).
type Union struct {
	max [registers]uint8
	// Dense: one of the merged values was dense (PFMERGE's target then is).
	Dense bool
}

// Merge takes v's registers into u.
func (u *Union) Merge(v []byte) error {
	if err := Check(v); err != nil {
		return err
	}
	if v[4] == dense {
		u.Dense = true
		r := v[headerSize:]
		for i := range u.max {
			u.max[i] = max(u.max[i], getReg(r, i))
		}
		return nil
	}
	n := walk(v[headerSize:], func(first, n int, val uint8) {
		if val != 0 {
			for i := first; i < first+n; i++ {
				u.max[i] = max(u.max[i], val)
			}
		}
	})
	if n != registers {
		return ErrCorrupt
	}
	return nil
}

// Count is the union's cardinality (PFCOUNT key key…).
func (u *Union) Count() uint64 {
	var h [64]int
	for _, r := range u.max {
		h[r]++
	}
	return estimate(h)
}

// Store is PFMERGE's write of the union into dest (exists false:
// absent), which Merge has seen: the new value, dense when one of the
// inputs was.
func (u *Union) Store(dest []byte, exists bool, sparseMax int) ([]byte, error) {
	v := dest
	if !exists {
		v = New()
	} else {
		v = clone(v)
	}
	if u.Dense {
		var err error
		if v, err = toDense(v); err != nil {
			return nil, err
		}
	}
	for i, r := range u.max {
		if r == 0 {
			continue
		}
		// Redis ignores hllSparseSet's failure here (dest was merged, so
		// it decodes).
		if next, _, err := set(v, i, r, sparseMax); err == nil {
			v = next
		}
	}
	invalidate(v)
	return v, nil
}
