package fanout

import (
	"errors"
	"sync/atomic"
	"testing"
)

// TestEach: every call runs, at most width at once, and the error is the
// first by index.
func TestEach(t *testing.T) {
	var ran, now, most atomic.Int64
	e3, e7 := errors.New("3"), errors.New("7")
	err := Each(100, 4, func(i int) error {
		n := now.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		defer now.Add(-1)
		ran.Add(1)
		switch i {
		case 3:
			return e3
		case 7:
			return e7
		}
		return nil
	})
	if err != e3 || ran.Load() != 100 || most.Load() > 4 {
		t.Errorf("Each: %v, %d calls, %d at once", err, ran.Load(), most.Load())
	}
	if err := Each(0, 4, func(int) error { return e3 }); err != nil {
		t.Errorf("Each of none: %v", err)
	}
}
