package mem

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device"
)

// fakeClock stands in for the host's clock so that what the speed model
// charges is checked exactly: sleeping advances the clock by the amount
// asked for, as if the timer were perfect.
type fakeClock struct {
	mu    sync.Mutex
	t     time.Time
	slept []time.Duration
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept = append(c.slept, d)
	c.t = c.t.Add(d)
	return ctx.Err()
}

func (c *fakeClock) total() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s time.Duration
	for _, d := range c.slept {
		s += d
	}
	return s
}

func (c *fakeClock) take() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.slept
	c.slept = nil
	return s
}

func newFake(t *testing.T, p Perf, opts ...Option) (*Device, *fakeClock) {
	t.Helper()
	c := &fakeClock{t: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)}
	opts = append(opts, WithPerf(p), withClock(c.now, c.sleep))
	return New(opts...), c
}

func near(a, b time.Duration) bool { return (a - b).Abs() < time.Microsecond }

func TestBucket(t *testing.T) {
	t0 := time.Unix(0, 0)
	if newBucket(0, t0) != nil {
		t.Fatal("rate 0 made a bucket; it means unlimited")
	}
	b := newBucket(1000, t0) // burst: 10 ms worth = 10 tokens
	if got := b.level(t0); got != 10 {
		t.Fatalf("new bucket holds %v tokens, want a full burst of 10", got)
	}
	if w := b.take(t0, 10); w != 0 {
		t.Fatalf("taking the burst waits %v, want 0", w)
	}
	if w := b.take(t0, 1); !near(w, time.Millisecond) {
		t.Fatalf("one token past the burst waits %v, want 1ms", w)
	}
	if got := b.level(t0); math.Abs(got+1) > 1e-9 {
		t.Fatalf("level = %v, want -1 (in debt)", got)
	}
	if got := b.level(t0.Add(time.Millisecond)); math.Abs(got) > 1e-9 {
		t.Fatalf("level after 1ms = %v, want 0 (debt paid)", got)
	}
	if got := b.level(t0.Add(time.Second)); got != 10 {
		t.Fatalf("level after 1s idle = %v, want the burst cap of 10", got)
	}
	// A request larger than the burst is admitted and paid off over time.
	t1 := t0.Add(time.Second)
	if w := b.take(t1, 100); !near(w, 90*time.Millisecond) {
		t.Fatalf("100 tokens from a full bucket of 10 wait %v, want 90ms", w)
	}
	// A clock that goes backwards refills nothing and does not panic.
	if w := b.take(t0, 1); !near(w, 91*time.Millisecond) {
		t.Fatalf("take with an earlier time waits %v, want 91ms", w)
	}
}

func TestPerfOpsRate(t *testing.T) {
	d, c := newFake(t, Perf{OpsPerSec: 1000})
	ctx := t.Context()
	for i := range 100 {
		if err := d.Store(ctx, fmt.Appendf(nil, "key-%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	// 10 ops ride the burst, the other 90 pay 1ms each.
	if got := c.total(); !near(got, 90*time.Millisecond) {
		t.Fatalf("100 ops at 1000 ops/s slept %v, want 90ms", got)
	}
	if n := len(c.slept); n != 90 {
		t.Fatalf("%d sleeps, want 90", n)
	}
}

func TestPerfBytesRate(t *testing.T) {
	d, c := newFake(t, Perf{BytesPerSec: 10000}) // burst 100 bytes
	ctx := t.Context()
	v := make([]byte, 1000)
	for i := range 10 {
		if err := d.Store(ctx, fmt.Appendf(nil, "key-%d", i), v); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.total(); !near(got, 990*time.Millisecond) {
		t.Fatalf("10 KB stored at 10 KB/s slept %v, want 990ms", got)
	}
	c.take()
	// Reads are charged the size of the value returned.
	if _, err := d.Retrieve(ctx, []byte("key-0")); err != nil {
		t.Fatal(err)
	}
	if got := c.take(); len(got) != 1 || !near(got[0], 100*time.Millisecond) {
		t.Fatalf("retrieving 1000 bytes slept %v, want [100ms]", got)
	}
	// Ops that move no value bytes are not charged bytes.
	_ = d.Delete(ctx, []byte("key-0"))
	_, _ = d.Exist(ctx, []byte("key-1"))
	if got := c.take(); len(got) != 0 {
		t.Fatalf("delete and exist slept %v, want nothing", got)
	}
}

func TestPerfLatency(t *testing.T) {
	const lat = 5 * time.Millisecond
	d, c := newFake(t, Perf{Latency: lat})
	ctx := t.Context()
	k := []byte("key-1")
	_ = d.Store(ctx, k, []byte("v"))
	_, _ = d.Retrieve(ctx, k)
	_, _ = d.Retrieve(ctx, []byte("missing")) // a miss is still a command
	_, _ = d.Exist(ctx, k)
	_ = d.Iterate(ctx, nil, func([]byte) error { return nil })
	_ = d.Delete(ctx, k)
	got := c.take()
	if len(got) != 6 {
		t.Fatalf("6 ops slept %d times (%v), want 6", len(got), got)
	}
	for _, s := range got {
		if s != lat {
			t.Fatalf("an op slept %v, want the latency %v", s, lat)
		}
	}
	// Calls rejected before reaching the device cost no device time.
	_, _ = d.Info(ctx)
	_ = d.Store(ctx, []byte("k"), nil)
	_ = d.Store(ctx, k, make([]byte, device.DefaultMaxValueLen+1))
	d.Fail()
	_ = d.Store(ctx, k, nil)
	d.Recover()
	if got := c.take(); len(got) != 0 {
		t.Fatalf("rejected calls slept %v, want nothing", got)
	}
}

func TestPerfBatch(t *testing.T) {
	const lat = 2 * time.Millisecond
	d, c := newFake(t, Perf{Latency: lat, OpsPerSec: 1000, BytesPerSec: 10000})
	ctx := t.Context()
	var ops []device.Op
	for i := range 20 {
		ops = append(ops, device.Op{Kind: device.OpExist, Key: fmt.Appendf(nil, "key-%d", i)})
	}
	ops = append(ops, device.Op{Kind: device.OpExist, Key: []byte("bad")}) // invalid: not charged
	if err := d.Batch(ctx, ops); err != nil {
		t.Fatal(err)
	}
	// One latency for the whole batch, one token per valid op: 10 ride
	// the burst, 10 wait 1ms each.
	if got := c.take(); len(got) != 1 || !near(got[0], lat+10*time.Millisecond) {
		t.Fatalf("batch of 20 ops slept %v, want [12ms]", got)
	}
	if lvl := d.opsBucket.level(c.now()); math.Abs(lvl-2) > 1e-6 {
		t.Fatalf("ops bucket at %v tokens after the batch, want 2", lvl)
	}

	// Written bytes are charged before the batch is applied, read bytes
	// after, once their size is known.
	c.t = c.t.Add(time.Second) // refill
	ops = []device.Op{{Kind: device.OpStore, Key: []byte("key-v"), Value: make([]byte, 1100)}}
	if err := d.Batch(ctx, ops); err != nil || ops[0].Err != nil {
		t.Fatal(err, ops[0].Err)
	}
	if got := c.take(); len(got) != 1 || !near(got[0], lat+100*time.Millisecond) {
		t.Fatalf("batch storing 1100 bytes slept %v, want [102ms]", got)
	}
	c.t = c.t.Add(time.Second)
	ops = []device.Op{{Kind: device.OpRetrieve, Key: []byte("key-v")}}
	if err := d.Batch(ctx, ops); err != nil || ops[0].Err != nil {
		t.Fatal(err, ops[0].Err)
	}
	if got := c.take(); len(got) != 2 || got[0] != lat || !near(got[1], 100*time.Millisecond) {
		t.Fatalf("batch retrieving 1100 bytes slept %v, want [2ms 100ms]", got)
	}
}

// TestPerfBatchReadCancelled: a context that ends while the read bytes are
// being paid for withholds the values but keeps the writes, which were
// applied and whose results say so.
func TestPerfBatchReadCancelled(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	ctx, cancel := context.WithCancel(t.Context())
	calls := 0
	sleep := func(ctx context.Context, d time.Duration) error {
		if calls++; calls == 2 {
			cancel()
		}
		return c.sleep(ctx, d)
	}
	d := New(WithPerf(Perf{Latency: time.Millisecond, BytesPerSec: 1000}), withClock(c.now, sleep))
	ops := []device.Op{
		{Kind: device.OpStore, Key: []byte("key-1"), Value: make([]byte, 10)},
		{Kind: device.OpRetrieve, Key: []byte("key-1")},
	}
	if err := d.Batch(ctx, ops); err != nil {
		t.Fatal(err)
	}
	if ops[0].Err != nil {
		t.Fatalf("store: %v", ops[0].Err)
	}
	if ops[1].Err == nil || ops[1].Found || ops[1].Result != nil {
		t.Fatalf("retrieve after cancellation: Found=%v Result=%q Err=%v", ops[1].Found, ops[1].Result, ops[1].Err)
	}
	if ok, err := d.Exist(t.Context(), []byte("key-1")); err != nil || !ok {
		t.Fatalf("the store of a batch whose reads were cancelled is missing: %v, %v", ok, err)
	}
	if s := d.Stats(); s.BytesRead != 0 || s.BytesWritten != 10 {
		t.Fatalf("Stats = %+v, want 10 bytes written, none read", s)
	}
}
