package format

import (
	"bytes"
	"errors"
	"testing"
)

// TestPeekHeader: the header of a value's first bytes parses as Decode's
// does, with the fields it has; too few bytes for a header is corrupt.
func TestPeekHeader(t *testing.T) {
	h := Header{RM: RMSplitting, EC: 1, Splits: 3, SplitLen: 10, ObjectLen: 25, Version: 77, Fields: []byte{1, 2, 3, 4, 5, 6, 7}}
	b := Encode(&h, []byte("0123456789"))
	for _, n := range []int{HeaderLen, HeaderLen + 3, HeaderLen + 7, len(b)} {
		got, fl, err := PeekHeader(b[:n])
		if err != nil || fl != 7 || got.Version != 77 || got.Splits != 3 || got.ObjectLen != 25 || !bytes.Equal(got.Fields, h.Fields[:min(7, n-HeaderLen)]) {
			t.Errorf("%d bytes: %+v, %d fields, %v", n, got, fl, err)
		}
	}
	if _, _, err := PeekHeader(b[:HeaderLen-1]); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a cut header: %v", err)
	}
}
