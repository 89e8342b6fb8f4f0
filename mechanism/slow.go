package mechanism

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvarray/kvarray/device"
)

// Fail-slow devices. While latency tracking is on (TrackLatency), Env
// times every batch it sends to a device, and keeps each device's last
// latencyWindow batch latencies and how long its oldest call in flight has
// gone without an answer (Latency): a device that stopped answering (a
// paused server) shows in the second before its first call times out.
// The array decides from these which device is slow against its peers
// (array/slow.go) and marks it Slow: from then on Do sends it nothing,
// reads and writes alike fail at once with ErrMarkedSlow, so that reads
// go to the other pieces and writes miss it and are recorded, exactly as
// for a failed device, until a resync re-admits it. Only the array's
// decision makes a device Slow: nothing in Env does.

// ErrMarkedSlow is the error of an operation not sent to a device because
// it is marked Slow. It wraps device.ErrDeviceFailed, so that a read
// falls back to the other pieces and a write counts it as a device that
// missed it (acknowledged within tolerance, and recorded).
var ErrMarkedSlow = fmt.Errorf("marked slow: skipped until it answers as fast as its peers and is resynced: %w", device.ErrDeviceFailed)

// latencyWindow is how many of a device's latest batch latencies its
// percentile is taken over.
const latencyWindow = 128

// latency is one device's record of its batch latencies.
type latency struct {
	mu      sync.Mutex
	samples [latencyWindow]time.Duration
	n       int // samples taken since the last reset
	// inflight counts its batches running; busySince is when the count
	// last rose from zero, progress when a batch last ended (Unix ns).
	inflight  atomic.Int64
	busySince atomic.Int64
	progress  atomic.Int64
}

func (l *latency) begin() time.Time {
	now := time.Now()
	if l.inflight.Add(1) == 1 {
		l.busySince.Store(now.UnixNano())
	}
	return now
}

func (l *latency) end(start time.Time) {
	now := time.Now()
	l.mu.Lock()
	l.samples[l.n%latencyWindow] = now.Sub(start)
	l.n++
	l.mu.Unlock()
	l.progress.Store(now.UnixNano())
	l.inflight.Add(-1)
}

// TrackLatency turns latency tracking on (or off): Latency has nothing to
// report without it, and it costs every batch two clock reads and a lock.
func (e *Env) TrackLatency(on bool) { e.latOn.Store(on) }

// Latency returns device i's 99th percentile batch latency over its last
// latencyWindow batches (and how many of those it has: n), and how long
// its calls in flight have gone without one of them answering (stuck; 0
// with none in flight).
func (e *Env) Latency(i int) (p99, stuck time.Duration, n int) {
	l := &e.lat[i]
	if l.inflight.Load() > 0 {
		since := max(l.busySince.Load(), l.progress.Load())
		stuck = max(time.Duration(time.Now().UnixNano()-since), 0)
	}
	l.mu.Lock()
	n = min(l.n, latencyWindow)
	s := slices.Clone(l.samples[:n])
	l.mu.Unlock()
	if n == 0 {
		return 0, stuck, 0
	}
	slices.Sort(s)
	return s[(n*99)/100], stuck, n
}

// ResetLatency forgets device i's latencies: a device re-admitted after
// it was slow is judged by what it does from then on.
func (e *Env) ResetLatency(i int) {
	l := &e.lat[i]
	l.mu.Lock()
	l.n = 0
	l.mu.Unlock()
}

// MarkSlow marks device i Slow if it is Healthy, and reports whether it
// did. The state's epoch advances, so that the calls already sent to it,
// when they fail (a paused server's time out), do not mark it Failed: it
// is skipped either way, and the array's probes decide when it is back.
func (e *Env) MarkSlow(i int) bool {
	for {
		v := e.states[i].Load()
		if State(v&stateMask) != Healthy {
			return false
		}
		if e.states[i].CompareAndSwap(v, v&^stateMask|uint32(Slow)+1<<8) {
			return true
		}
	}
}
