package bitops

import (
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestFieldsAgainstBigInts checks SET and INCRBY under every overflow
// mode against arbitrary-precision arithmetic on random fields.
func TestFieldsAgainstBigInts(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 20000 {
		ty := Type{Signed: r.IntN(2) == 0}
		if ty.Signed {
			ty.Bits = uint(1 + r.IntN(64))
		} else {
			ty.Bits = uint(1 + r.IntN(63))
		}
		lo, hi := new(big.Int), new(big.Int).Lsh(big.NewInt(1), ty.Bits)
		if ty.Signed {
			lo.Neg(new(big.Int).Lsh(big.NewInt(1), ty.Bits-1))
			hi.Lsh(big.NewInt(1), ty.Bits-1)
		}
		hi.Sub(hi, big.NewInt(1)) // lo..hi inclusive
		span := new(big.Int).Lsh(big.NewInt(1), ty.Bits)
		buf := make([]byte, 10)
		for i := range buf {
			buf[i] = byte(r.Uint32())
		}
		f := Field{Type: ty, Offset: uint64(r.IntN(8)), Overflow: Overflow(r.IntN(3))}
		old := *must(Field{Kind: Get, Type: ty, Offset: f.Offset}.Apply(buf))
		f.Kind = Kind(1 + r.IntN(2))
		f.Arg = r.Int64() >> uint(r.IntN(64))
		if r.IntN(2) == 0 {
			f.Arg = -f.Arg
		}
		want := big.NewInt(f.Arg)
		if !ty.Signed && f.Kind == Set {
			want.SetUint64(uint64(f.Arg)) // Redis reads SET's value of a u field as unsigned
		}
		if f.Kind == IncrBy {
			want.Add(want, big.NewInt(old))
			if !ty.Signed {
				want = new(big.Int).Add(big.NewInt(f.Arg), new(big.Int).SetUint64(uint64(old)))
			}
		}
		overflow := want.Cmp(lo) < 0 || want.Cmp(hi) > 0
		var stored *big.Int
		switch {
		case !overflow:
			stored = want
		case f.Overflow == Wrap:
			stored = new(big.Int).Mod(new(big.Int).Sub(want, lo), span)
			stored.Add(stored, lo)
		case f.Overflow == Sat && want.Cmp(lo) < 0:
			stored = lo
		case f.Overflow == Sat:
			stored = hi
		}
		before := append([]byte(nil), buf...)
		got, _ := f.Apply(buf)
		if stored == nil {
			if got != nil || string(before) != string(buf) {
				t.Fatalf("%+v from %d: FAIL wrote or replied %v", f, old, got)
			}
			continue
		}
		now := *must(Field{Kind: Get, Type: ty, Offset: f.Offset}.Apply(buf))
		if !ty.Signed && big.NewInt(0).SetUint64(uint64(now)).Cmp(stored) != 0 || ty.Signed && big.NewInt(now).Cmp(stored) != 0 {
			t.Fatalf("%+v from %d: stored %d, want %v", f, old, now, stored)
		}
		wantReply := now
		if f.Kind == Set {
			wantReply = old
		}
		if got == nil || *got != wantReply {
			t.Fatalf("%+v from %d: replied %v, want %d", f, old, got, wantReply)
		}
	}
}

func must(v *int64, _ bool) *int64 { return v }

// TestPos checks BITPOS's search against a bit-by-bit scan.
func TestPos(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 5000 {
		v := make([]byte, 1+r.IntN(20))
		for i := range v {
			switch r.IntN(3) {
			case 0:
				v[i] = 0
			case 1:
				v[i] = 0xff
			default:
				v[i] = byte(r.Uint32())
			}
		}
		bit := r.IntN(2)
		inBits := r.IntN(2) == 0
		first, last, ok := Range(int64(r.IntN(200)-100), int64(r.IntN(200)-100), int64(len(v)), inBits)
		if !ok {
			continue
		}
		lo, hi := first, last
		if !inBits {
			lo, hi = first*8, last*8+7
		}
		want := int64(-1)
		for i := lo; i <= hi; i++ {
			if int(v[i/8]>>(7-i%8)&1) == bit {
				want = i
				break
			}
		}
		if got := Pos(v, bit, first, last, inBits, true); got != want {
			t.Fatalf("%x bit %d [%d,%d] bits %v: %d, want %d", v, bit, first, last, inBits, got, want)
		}
	}
}
