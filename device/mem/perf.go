package mem

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Perf is the speed model of an emulated device: a fixed latency per
// operation plus device-wide throughput limits, so that benchmarks over
// emulated devices are bound by the devices, as they are over real SSDs,
// rather than by the host's CPU. Zero fields mean no limit.
//
// Latency is paid by every operation but overlaps between concurrent
// callers and between the ops of one Batch (a deep queue); the throughput
// limits are shared by all callers and charged for every op, batched or not.
type Perf struct {
	Latency     time.Duration // added to every operation (once per Batch)
	OpsPerSec   float64       // operations per second, over all callers
	BytesPerSec float64       // value bytes stored or retrieved per second
}

func (p Perf) validate() error {
	if p.Latency < 0 || p.OpsPerSec < 0 || p.BytesPerSec < 0 {
		return fmt.Errorf("negative field in %+v", p)
	}
	return nil
}

// burstWindow is how much unused throughput a device may bank. Small, so
// that an idle device cannot absorb a long burst faster than its rate, but
// larger than a timer's granularity, so that oversleeping is not lost.
const burstWindow = 10 * time.Millisecond

// bucket is a token bucket that lets callers go into debt: a request larger
// than the burst (one 2 MiB value) is admitted, and its caller waits until
// the debt is paid off. Every later caller queues behind that debt, which
// is what keeps the long-run rate exact.
type bucket struct {
	rate  float64 // tokens per second
	burst float64

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func newBucket(rate float64, now time.Time) *bucket {
	if rate == 0 {
		return nil
	}
	burst := max(1, rate*burstWindow.Seconds())
	return &bucket{rate: rate, burst: burst, tokens: burst, last: now}
}

// take removes n tokens at time now and returns how long the caller must
// wait before they are paid for. Tokens are not returned when the caller
// gives up waiting: like a cancelled command on a real drive, the device
// time is spent anyway.
func (b *bucket) take(now time.Time, n float64) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.After(b.last) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
		b.last = now
	}
	b.tokens -= n
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}

// level returns the tokens available at now, negative when in debt.
func (b *bucket) level(now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.tokens
	if now.After(b.last) {
		t = min(b.burst, t+now.Sub(b.last).Seconds()*b.rate)
	}
	return t
}

// sleepCtx waits for d or until ctx is done, whichever comes first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// delay charges ops operations and n bytes against the device's limits and
// sleeps until they are paid for, plus the latency when latency is set.
func (d *Device) delay(ctx context.Context, ops, n int, latency bool) error {
	var wait time.Duration
	if latency {
		wait = d.perf.Latency
	}
	if d.opsBucket != nil || d.bytesBucket != nil {
		now := d.now()
		var w time.Duration
		if d.opsBucket != nil && ops > 0 {
			w = d.opsBucket.take(now, float64(ops))
		}
		if d.bytesBucket != nil && n > 0 {
			w = max(w, d.bytesBucket.take(now, float64(n)))
		}
		wait += w
	}
	if wait <= 0 {
		return nil
	}
	return d.sleep(ctx, wait)
}
