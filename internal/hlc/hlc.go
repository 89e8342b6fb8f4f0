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
