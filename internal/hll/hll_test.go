package hll

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestSelfTest runs PFSELFTEST's checks up to 10^5 elements (PFSELFTEST
// goes to 10^7: seconds, minutes under the race detector).
func TestSelfTest(t *testing.T) {
	if err := selfTest(DefaultSparseMax, 20, 100_000); err != nil {
		t.Fatal(err)
	}
}

// TestSparseDenseAgree: the same elements added to a sparse and a dense
// HyperLogLog give the same registers and count, through promotion.
func TestSparseDenseAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	s, d := New(), New()
	d, _, err := ToDense(d)
	if err != nil {
		t.Fatal(err)
	}
	for n := range 5000 {
		e := []byte(strconv.FormatUint(r.Uint64(), 16))
		if s, _, err = Add(s, true, DefaultSparseMax, e); err != nil {
			t.Fatal(err)
		}
		if d, _, err = Add(d, true, DefaultSparseMax, e); err != nil {
			t.Fatal(err)
		}
		if n%500 == 0 {
			cs, _, _, err1 := Count(s)
			cd, _, _, err2 := Count(d)
			if err1 != nil || err2 != nil || cs != cd {
				t.Fatalf("after %d: sparse %d (%v), dense %d (%v)", n+1, cs, err1, cd, err2)
			}
		}
	}
	if Encoding(s) != "dense" {
		t.Errorf("5000 elements: still %s", Encoding(s))
	}
	rs, _, _ := Registers(s)
	rd, _, _ := Registers(d)
	for i := range rs {
		if rs[i] != rd[i] {
			t.Fatalf("register %d: %d promoted, %d dense", i, rs[i], rd[i])
		}
	}
}

// TestCorruptionDetected: random bytes written over a HyperLogLog never
// panic, and a header that is not Redis's is ErrNotHLL.
func TestCorruptionDetected(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	corrupt := 0
	for range 100 {
		v := New()
		elems := make([][]byte, r.IntN(1500))
		for i := range elems {
			elems[i] = []byte(strconv.Itoa(r.Int()))
		}
		v, _, _ = Add(v, true, DefaultSparseMax, elems...)
		for range 1 + r.IntN(5) {
			v[r.IntN(len(v))] = byte(r.Uint32())
		}
		if _, _, _, err := Count(v); err != nil {
			corrupt++
			if !errors.Is(err, ErrNotHLL) && !errors.Is(err, ErrCorrupt) {
				t.Fatal(err)
			}
		}
		var u Union
		_ = u.Merge(v)
		_, _, _ = Add(v, true, DefaultSparseMax, []byte("x"))
	}
	if corrupt == 0 {
		t.Error("no corruption detected in 100 corrupted values")
	}
	if err := Check([]byte("HYLX\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")); !errors.Is(err, ErrNotHLL) {
		t.Errorf("bad magic: %v", err)
	}
}
