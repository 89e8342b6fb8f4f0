package hll

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
)

// SelfTest is PFSELFTEST: Redis's checks of the dense register access and
// of the estimator's error, dense and sparse side by side up to 10^7
// elements. A failure is Redis's TESTFAILED message.
func SelfTest(sparseMax int) error { return selfTest(sparseMax, 1000, 10_000_000) }

// selfTest is SelfTest with cycles rounds of the register test and up to
// n elements.
func selfTest(sparseMax, cycles int, n uint64) error {
	d := make([]byte, DenseSize)
	r := d[headerSize:]
	var want [registers]uint8
	for range cycles {
		for i := range want {
			want[i] = uint8(rand.IntN(regMax + 1))
			setReg(r, i, want[i])
		}
		for i := range want {
			if got := getReg(r, i); got != want[i] {
				return fmt.Errorf("TESTFAILED Register %d should be %d but is %d", i, want[i], got)
			}
		}
	}
	clear(r)
	d[4] = dense
	s := New()
	relerr := 1.04 / math.Sqrt(registers)
	checkpoint := uint64(1)
	seed := rand.Uint64()
	var ele [8]byte
	for j := uint64(1); j <= n; j++ {
		binary.LittleEndian.PutUint64(ele[:], j^seed)
		i, n := patLen(ele[:])
		d, _, _ = set(d, i, n, sparseMax)
		var err error
		if s, _, err = set(s, i, n, sparseMax); err != nil {
			return fmt.Errorf("TESTFAILED %v", err)
		}
		if j != checkpoint {
			continue
		}
		if j < uint64(sparseMax)/2 && s[4] != sparse {
			return fmt.Errorf("TESTFAILED sparse encoding not used")
		}
		hd, _ := histogram(d)
		hs, _ := histogram(s)
		card := estimate(hd)
		if card != estimate(hs) {
			return fmt.Errorf("TESTFAILED dense/sparse disagree")
		}
		maxerr := uint64(math.Ceil(relerr * 6 * float64(checkpoint)))
		if j == 10 {
			maxerr = 1
		}
		abserr := int64(checkpoint) - int64(card)
		if abserr < 0 {
			abserr = -abserr
		}
		if uint64(abserr) > maxerr {
			return fmt.Errorf("TESTFAILED Too big error. card:%d abserr:%d", checkpoint, abserr)
		}
		checkpoint *= 10
	}
	return nil
}
