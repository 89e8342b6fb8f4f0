package array

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/kvarray/kvarray/mechanism"
)

// Fail-slow devices. With WithSlowDevices the array judges, every
// SlowPolicy.Every, each device's latency against its peers' (the Env
// times every batch: mechanism/slow.go). A device's latency is the 99th
// percentile of its last batches, or, when longer, how long its calls in
// flight have gone unanswered (a paused server is caught before its calls
// time out). It is slow when that passes both the floor and Ratio times
// its peers' (the median of their percentiles), or the ceiling while
// twice its peers', on slowStrikes judgements in a row. A slow device is
// marked mechanism.Slow: nothing is sent to it, so reads go to the other
// pieces and writes miss it and are recorded, as for a failed device.
//
// Invariants:
//   - At most one device is slow, and only while every other device is
//     healthy with nothing to resync: a slow device is one lost piece
//     that every value tolerates (the array marks no device slow once it
//     holds, or its rules store, a value of a mechanism that tolerates
//     none: flagUnprotected; before, a mechanism merely configured, as
//     Hashing always is for per-call use, turned detection off). When
//     another device fails (or is full, rebuilt or behind), the slow one
//     is re-admitted at once: a slow piece is better than no piece.
//   - A device back to healthy (rebuilt, resynced, re-admitted) is
//     judged only once it has been healthy for its Grace, on latencies
//     measured since: it is still compacting what it took in, and the
//     batches of its rebuild (each a chunk of pieces) are not its peers'
//     kind. A device healthy when the array opens is judged from the
//     start.
//   - A slow device is probed (one small read at a time) once it has been
//     slow for its hold; after slowProbes probes in a row under half the
//     threshold it is re-admitted by a resync, which repairs every write
//     it missed. Flapping is damped: a device marked slow again within
//     slowRelapse of its re-admission is held twice as long as the last
//     time (up to slowHoldMax).

// SlowPolicy says when a device is slow (see WithSlowDevices). Zero
// fields take the defaults.
type SlowPolicy struct {
	// Ratio: slow when its latency passes Ratio times its peers'
	// (default 5).
	Ratio float64
	// Floor: never slow under this latency (default 50ms), so that
	// microsecond devices are not judged by their noise.
	Floor time.Duration
	// Ceiling: slow past this latency whatever the ratio, while twice
	// its peers' (default 1s).
	Ceiling time.Duration
	// Every is how often latencies are judged (default 100ms).
	Every time.Duration
	// Grace: how long a device back to healthy (rebuilt, resynced,
	// re-admitted) goes unjudged (default 5s).
	Grace time.Duration
}

// WithSlowDevices turns fail-slow detection on (see SlowPolicy). A
// long-running process wants it (kvarray serve); one-off commands do not.
func WithSlowDevices(p SlowPolicy) Option {
	return func(o *options) {
		if p.Ratio <= 0 {
			p.Ratio = 5
		}
		if p.Floor <= 0 {
			p.Floor = 50 * time.Millisecond
		}
		if p.Ceiling <= 0 {
			p.Ceiling = time.Second
		}
		if p.Every <= 0 {
			p.Every = 100 * time.Millisecond
		}
		if p.Grace <= 0 {
			p.Grace = 5 * time.Second
		}
		o.slow = &p
	}
}

const (
	slowStrikes   = 3 // judgements in a row that find a device slow before it is marked
	slowSamples   = 8 // batches a percentile needs to count
	slowProbes    = 5 // fast probes in a row that re-admit a slow device
	slowHoldFirst = time.Second
	slowHoldMax   = time.Minute
	slowRelapse   = 30 * time.Second
)

// slowState is the fail-slow detector's memory.
type slowState struct {
	p        SlowPolicy
	mu       sync.Mutex
	strikes  []int
	since    []time.Time     // when marked slow
	hold     []time.Duration // how long it stays slow at least
	back     []time.Time     // when last re-admitted
	fast     []int           // probes in a row under half the threshold
	probing  []bool
	readmits []bool
	why      []string
	healthy  []time.Time // since when healthy, as last judged (zero: not healthy)
}

func newSlowState(p SlowPolicy, n int) *slowState {
	return &slowState{p: p, strikes: make([]int, n), since: make([]time.Time, n), hold: make([]time.Duration, n),
		back: make([]time.Time, n), fast: make([]int, n), probing: make([]bool, n), readmits: make([]bool, n), why: make([]string, n), healthy: make([]time.Time, n)}
}

// longHealthy is when a device healthy at open has been healthy since:
// its grace is for coming back, and a device that slows down in the
// first seconds of serving is judged at once.
var longHealthy = time.Unix(0, 1)

// startSlow starts the detector, when configured.
func (a *Array) startSlow() {
	if a.o.slow == nil {
		return
	}
	a.slow = newSlowState(*a.o.slow, a.env.N())
	for i := range a.env.N() {
		if a.env.State(i) == mechanism.Healthy {
			a.slow.healthy[i] = longHealthy
		}
	}
	a.env.TrackLatency(true)
	a.every(a.slow.p.Every, a.judgeSlow)
}

// threshold is the latency past which a device whose peers answer in
// peer is slow.
func (s *slowState) threshold(peer time.Duration) time.Duration {
	if peer <= 0 {
		return max(s.p.Floor, s.p.Ceiling)
	}
	return max(s.p.Floor, min(time.Duration(s.p.Ratio*float64(peer)), max(s.p.Ceiling, 2*peer)))
}

// judgeSlow is one judgement of the devices' latencies.
func (a *Array) judgeSlow() {
	s, n := a.slow, a.env.N()
	lat, p99 := make([]time.Duration, n), make([]time.Duration, n)
	for i := range n {
		p, stuck, cnt := a.env.Latency(i)
		if cnt >= slowSamples {
			p99[i] = p
		}
		lat[i] = max(p99[i], stuck)
	}
	// peer is the median of the others' percentiles (0: none measured).
	peer := func(i int) time.Duration {
		var o []time.Duration
		for j := range n {
			if j != i && p99[j] > 0 {
				o = append(o, p99[j])
			}
		}
		if len(o) == 0 {
			return 0
		}
		slices.Sort(o)
		return o[len(o)/2]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	slow := -1
	now := time.Now()
	for i := range n {
		switch a.env.State(i) {
		case mechanism.Slow:
			slow = i
		case mechanism.Healthy:
			if s.healthy[i].IsZero() {
				// Back from rebuilding, resync or failure: what it
				// answered until now does not count.
				s.healthy[i] = now
				a.env.ResetLatency(i)
				s.strikes[i] = 0
			}
			continue
		}
		s.healthy[i] = time.Time{}
	}
	// A value without redundancy (Hashing, one copy: the array's rules
	// store them, or a call asked for one) has no other piece to read or
	// write instead: skipping its device would fail it. Then no device is
	// judged slow (flagUnprotected is set once, at the first such store).
	a.hdrMu.Lock()
	unprotected := a.hdr.flags&flagUnprotected != 0
	a.hdrMu.Unlock()
	if unprotected {
		if slow >= 0 {
			a.readmitSlow(slow, "the array holds a value without redundancy")
		}
		clear(s.strikes)
		return
	}
	if slow >= 0 {
		for j := range n {
			if j != slow && (a.env.State(j) != mechanism.Healthy || a.env.MissedCount(j) > 0) {
				a.readmitSlow(slow, fmt.Sprintf("device %d is %v", j, a.env.State(j)))
				return
			}
		}
		a.probeSlow(slow, s.threshold(peer(slow)))
		return
	}
	for i := range n {
		if a.env.State(i) != mechanism.Healthy || a.env.MissedCount(i) > 0 {
			clear(s.strikes)
			return
		}
	}
	best := -1
	for i := range n {
		pe := peer(i)
		if now.Sub(s.healthy[i]) < s.p.Grace || lat[i] <= s.threshold(pe) {
			s.strikes[i] = 0
			continue
		}
		s.strikes[i]++
		if s.strikes[i] >= slowStrikes && (best < 0 || lat[i] > lat[best]) {
			best = i
		}
	}
	if best >= 0 {
		a.markSlowLocked(best, fmt.Sprintf("latency %v against its peers' %v (threshold %v)", lat[best], peer(best), s.threshold(peer(best))))
	}
}

// markSlowLocked marks device i slow, if it is healthy and so is every
// other device, with nothing to resync, for why, and reports whether it
// did. Called with s.mu held.
func (a *Array) markSlowLocked(i int, why string) bool {
	s := a.slow
	for j := range a.env.N() {
		if a.env.State(j) != mechanism.Healthy || a.env.MissedCount(j) > 0 {
			return false
		}
	}
	if !a.env.MarkSlow(i) {
		return false
	}
	now := time.Now()
	s.strikes[i], s.fast[i] = 0, 0
	s.since[i] = now
	if !s.back[i].IsZero() && now.Sub(s.back[i]) < slowRelapse {
		s.hold[i] = min(2*s.hold[i], slowHoldMax)
	} else {
		s.hold[i] = slowHoldFirst
	}
	s.why[i] = fmt.Sprintf("slow: %s; held at least %v", why, s.hold[i])
	return true
}

// probeSlow sends slow device i one probe, once its hold is over and no
// probe is in flight, and re-admits it after slowProbes fast ones. Called
// with s.mu held.
func (a *Array) probeSlow(i int, threshold time.Duration) {
	s := a.slow
	if s.probing[i] || s.readmits[i] || time.Since(s.since[i]) < s.hold[i] {
		return
	}
	s.probing[i] = true
	d := a.env.Device(i)
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		ctx, cancel := a.untilStop()
		defer cancel()
		ctx, cancelT := context.WithTimeout(ctx, max(4*s.p.Ceiling, 5*time.Second))
		defer cancelT()
		start := time.Now()
		_, err := d.Exist(ctx, spaceProbeKey)
		took := time.Since(start)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.probing[i] = false
		if a.env.State(i) != mechanism.Slow {
			return
		}
		switch {
		case err != nil:
			s.fast[i] = 0
			s.why[i] = fmt.Sprintf("slow: its probe failed: %v", err)
		case took >= threshold/2:
			s.fast[i] = 0
			s.why[i] = fmt.Sprintf("slow: its probe took %v (threshold %v)", took, threshold)
		default:
			s.fast[i]++
			if s.fast[i] >= slowProbes {
				a.readmitSlow(i, "it answers as fast as its peers")
			}
		}
	}()
}

// readmitSlow resyncs slow device i in the background: it is healthy
// again, and every write it missed is repaired. Called with s.mu held.
func (a *Array) readmitSlow(i int, why string) {
	s := a.slow
	if s.readmits[i] {
		return
	}
	s.readmits[i] = true
	s.back[i] = time.Now()
	s.why[i] = "slow, being re-admitted: " + why
	a.env.ResetLatency(i)
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		ctx, cancel := a.untilStop()
		defer cancel()
		_, _ = a.Resync(ctx, i)
		s.mu.Lock()
		s.readmits[i] = false
		s.mu.Unlock()
	}()
}

// slowReason says why device i is slow ("" when it is not, or the array
// does not judge latencies).
func (a *Array) slowReason(i int) string {
	if a.slow == nil || a.env.State(i) != mechanism.Slow {
		return ""
	}
	a.slow.mu.Lock()
	defer a.slow.mu.Unlock()
	return a.slow.why[i]
}

// SlowDevices lists the devices marked slow.
func (a *Array) SlowDevices() []int { return a.devicesIn(mechanism.Slow) }
