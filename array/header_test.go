package array

import (
	"errors"
	"slices"
	"testing"

	"github.com/kvarray/kvarray/format"
)

// TestHeaderLayouts: every layout the header has had decodes to what was
// encoded (no epochs; epochs; weights; a clock lease with or without
// weights), the clock lease's flag stays out of the array's flags, and a
// lease flag without its bytes is corrupt, not misread.
func TestHeaderLayouts(t *testing.T) {
	id := newID()
	for _, h := range []header{
		{id: id, n: 3, pos: 1, flags: flagBanked},
		{id: id, n: 3, pos: 2, flags: flagBanked, epoch: 7, vec: []uint64{7, 6, 7}},
		{id: id, n: 3, pos: 0, epoch: 7, vec: []uint64{7, 6, 7}, weights: []uint64{1, 2, 3}},
		{id: id, n: 3, pos: 0, flags: flagMixed, epoch: 9, vec: []uint64{9, 9, 9}, clock: 1 << 40},
		{id: id, n: 1, pos: 0, epoch: 9, vec: []uint64{9}, weights: []uint64{5}, clock: 1<<40 + 3},
	} {
		got, err := decodeHeader(h.encode())
		if err != nil {
			t.Fatalf("%+v: %v", h, err)
		}
		if got.id != h.id || got.n != h.n || got.pos != h.pos || got.flags != h.flags || got.epoch != h.epoch ||
			!slices.Equal(got.vec, h.vec) || !slices.Equal(got.weights, h.weights) || got.clock != h.clock {
			t.Fatalf("encoded %+v, decoded %+v", h, got)
		}
	}
	// The flag of a lease whose bytes are cut off.
	fh := format.Header{RM: format.RMNone, Splits: 1}
	p := make([]byte, headerPayloadLen)
	p[20] = flagClock
	if _, err := decodeHeader(format.Encode(&fh, p)); !errors.Is(err, format.ErrCorrupt) {
		t.Fatalf("a lease flag without a lease: %v, want corrupt", err)
	}
}
