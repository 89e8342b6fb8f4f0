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

func TestLeaseBoundsWhatIsIssued(t *testing.T) {
	var c Clock
	tm := time.Unix(3000, 0)
	c.now = func() time.Time { return tm }
	lease := c.Lease(10 * time.Second)
	for range 100000 { // past one millisecond's logical counter
		c.Next()
	}
	tm = tm.Add(9 * time.Second)
	if v := c.Next(); v >= lease {
		t.Fatalf("version %d issued within the lease's span reaches the lease %d", v, lease)
	}
	var next Clock                                            // the successor observes the lease
	next.now = func() time.Time { return time.Unix(3000, 0) } // its wall clock went back
	next.Observe(lease)
	if v := next.Next(); v <= c.Last() {
		t.Fatalf("successor issued %d, not past %d", v, c.Last())
	}
}
