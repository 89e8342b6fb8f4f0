// Package hlc is a hybrid logical clock for write versions: versions are
// wall-clock milliseconds shifted left 16 bits plus a logical counter, so
// they track real time across restarts yet strictly increase within a
// process, and observing a version from disk moves the clock past it.
package hlc

import (
	"sync"
	"time"
)

// Clock issues strictly increasing versions. The zero value is ready.
type Clock struct {
	mu   sync.Mutex
	last uint64
	now  func() time.Time // for tests; nil means time.Now
}

// Next returns a version larger than every version issued or observed.
func (c *Clock) Next() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now
	if c.now != nil {
		now = c.now
	}
	v := uint64(now().UnixMilli()) << 16
	if v <= c.last {
		v = c.last + 1
	}
	c.last = v
	return v
}

// Observe moves the clock past v, a version read from a device.
func (c *Clock) Observe(v uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = max(c.last, v)
}

// Lease returns a version that the clock will not reach within span of
// wall-clock time from now, however many versions it issues meanwhile
// (fewer than 65,536 a millisecond): a bound a process can record
// durably so that its successor, observing it, issues only versions
// newer than every version this one issued in that time.
func (c *Clock) Lease(span time.Duration) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now
	if c.now != nil {
		now = c.now
	}
	return max(uint64(now().UnixMilli())<<16, c.last) + uint64(span.Milliseconds())<<16
}

// Last returns the newest version issued or observed.
func (c *Clock) Last() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// SetNow replaces the wall clock the clock follows (nil: time.Now): for
// tests of a clock that stands still or goes back.
func (c *Clock) SetNow(now func() time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
}
