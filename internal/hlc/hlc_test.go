package hlc

import (
	"testing"
	"time"
)

func TestStrictlyIncreasing(t *testing.T) {
	var c Clock
	frozen := time.Unix(1000, 0)
	c.now = func() time.Time { return frozen }
	prev := c.Next()
	for i := 0; i < 1000; i++ {
		v := c.Next()
		if v <= prev {
			t.Fatalf("version %d after %d", v, prev)
		}
		prev = v
	}
}

func TestObservePastFuture(t *testing.T) {
	var c Clock
	future := uint64(time.Now().Add(time.Hour).UnixMilli()) << 16
	c.Observe(future)
	if v := c.Next(); v <= future {
		t.Fatalf("version %d not past observed %d", v, future)
	}
}

func TestClockGoingBackwards(t *testing.T) {
	var c Clock
	tm := time.Unix(2000, 0)
	c.now = func() time.Time { return tm }
	a := c.Next()
	tm = tm.Add(-time.Minute)
	if b := c.Next(); b <= a {
		t.Fatalf("version went back: %d after %d", b, a)
	}
}
