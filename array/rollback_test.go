package array

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/faultdev"
	"github.com/kvarray/kvarray/device/redis"
	"github.com/kvarray/kvarray/device/redis/redistest"
	"github.com/kvarray/kvarray/format"
)

// TestScrubRollback is issue 14's scrub-rollback scenario: six
// redis-server devices with append-only files, the paper's hybrid setup,
// a concurrent write load; devices 1 and 4 are killed under the load, then
// device 3; then all are restarted (with what they had acknowledged: stale
// for what they missed), and the array is opened again, as the next
// `kvarray` command would. Then Scrub(repair) runs: first cut off part way
// (its context cancelled after a few hundred device operations, at
// several points), then whole.
//
// Invariant, checked after the reopen and after each scrub: every key
// reads back byte-exact as its last acknowledged value or a value whose
// write failed after it (a key whose writes all failed: absent too); and
// no scrub moves a key off a value a read already returned.
func TestScrubRollback(t *testing.T) {
	// appendfsync always: a device must keep what it acknowledged. With
	// everysec, Redis answers a write before the AOF holds it while a
	// background fsync runs, and a killed server forgets it: no record
	// can say what a device lost after acknowledging (docs/config.md).
	srvs := redistest.StartN(t, 6, "--appendonly", "yes", "--appendfsync", "always")
	open := func(cut faultdev.Injector) []device.Device {
		devs := make([]device.Device, len(srvs))
		for i, s := range srvs {
			d, err := redis.Open(context.Background(), s.URL(0), redis.WithTimeout(time.Second))
			if err != nil {
				devs[i] = device.Unavailable(s.URL(0), err)
				continue
			}
			devs[i] = faultdev.Wrap(d, cut)
		}
		return devs
	}
	pass := faultdev.InjectorFunc(func(faultdev.Op) error { return nil })
	opts := hybridAll()
	a, err := Create(context.Background(), open(pass), opts...)
	if err != nil {
		t.Fatal(err)
	}

	// Each key belongs to one writer, so that its writes are in order and
	// outcomes is exact for it.
	const writers, nkeys = 4, 240
	out := outcomes{}
	origin := map[string]int{} // value -> its write's number, for messages
	var mu sync.Mutex
	var acked, failedWrites atomic.Int64
	load := func(rounds int, seed uint64) {
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, uint64(w)))
				for range rounds {
					k := fmt.Sprintf("key-%04d", w+writers*rng.IntN(nkeys/writers))
					v := randBytes(rng, paperSizes(rng))
					err := a.Store(context.Background(), []byte(k), v)
					mu.Lock()
					out.record(k, v, err)
					origin[string(v)] = len(origin)
					mu.Unlock()
					if err == nil {
						acked.Add(1)
					} else {
						failedWrites.Add(1)
					}
				}
			}()
		}
		wg.Wait()
	}
	seed := testSeed(t)       // a replay repeats the writes; the kills' timing varies
	load(nkeys/writers, seed) // every key about once
	// Kill under load: the kills land while writes are in flight.
	during := func(rounds int, seed uint64, fault func()) {
		done := make(chan struct{})
		go func() { load(rounds, seed); close(done) }()
		time.Sleep(20 * time.Millisecond)
		fault()
		<-done
	}
	during(60, seed+1, func() { srvs[1].Kill(); srvs[4].Kill() })
	during(60, seed+2, func() { srvs[3].Kill() })
	load(20, seed+3)
	t.Logf("%d writes acknowledged, %d failed; states %v", acked.Load(), failedWrites.Load(), statesOf(a))
	// Abandon this process (closing would only close its devices) and
	// bring every server back with what it had.
	_ = a.Close()
	for _, i := range []int{1, 4, 3} {
		srvs[i].Restart()
	}

	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range out {
			if !yield(k) {
				return
			}
		}
	})
	first := map[string][]byte{}
	var violations []string
	unreadableSeen := 0
	check := func(a *Array, step string) {
		// Kinds of violation: a read error where a value must be
		// readable, bytes of another (older) write, and a value that a
		// scrub moved off what a read had returned.
		var unreadable, older, moved int
		for _, k := range keys {
			got, err := a.Retrieve(context.Background(), []byte(k))
			what := ""
			switch was, seen := first[k]; {
			case !out.allows(k, got, err) && err != nil:
				unreadable++
				what = out.describe(k, got, err, origin) + "; pieces: " + piecesOf(a, k, origin)
			case !out.allows(k, got, err):
				older++
				what = out.describe(k, got, err, origin) + "; pieces: " + piecesOf(a, k, origin)
			case seen && (err != nil || !bytes.Equal(got, was)):
				moved++
				what = fmt.Sprintf("moved off the %d bytes read before: %d bytes, %v", len(was), len(got), err)
			case err == nil:
				first[k] = bytes.Clone(got)
			}
			switch {
			case what == "" || unreadable+older+moved > 5:
			case err != nil && older+moved == 0:
				t.Logf("%s: %s: %s", step, k, what)
			default:
				violations = append(violations, fmt.Sprintf("%s: %s: %s", step, k, what))
			}
		}
		var missed []int
		for d := 0; d < a.N(); d++ {
			missed = append(missed, a.env.MissedCount(d))
		}
		summary := fmt.Sprintf("%s: of %d keys, %d unreadable, %d older than acknowledged, %d moved back by repair; states %v, records %v",
			step, len(keys), unreadable, older, moved, statesOf(a), missed)
		if older+moved > 0 {
			violations = append(violations, summary)
		}
		unreadableSeen += unreadable
		t.Log(summary)
	}

	// The next process: open, read, scrub cut short at a few points, scrub.
	var ops atomic.Int64
	var cancel atomic.Pointer[context.CancelFunc]
	var cutAt atomic.Int64
	cutter := faultdev.InjectorFunc(func(faultdev.Op) error {
		if n := ops.Add(1); n == cutAt.Load() {
			if c := cancel.Load(); c != nil {
				(*c)()
			}
		}
		return nil
	})
	b, err := Open(context.Background(), open(cutter), opts...)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	check(b, "after the restart")
	for _, at := range []int64{300, 1500, 4000} {
		ctx, c := context.WithCancel(context.Background())
		cancel.Store(&c)
		ops.Store(0)
		cutAt.Store(at)
		rep, err := b.Scrub(ctx, true)
		c()
		t.Logf("scrub cut after %d device ops: %v; %d keys, %d problems", at, err, rep.Keys, rep.Problems())
		check(b, fmt.Sprintf("after a scrub cut after %d device ops", at))
	}
	cutAt.Store(-1)
	rep, err := b.Scrub(context.Background(), true)
	if err != nil {
		violations = append(violations, fmt.Sprintf("full scrub: %v", err))
	}
	t.Logf("full scrub: %d keys, %d problems, errors %v", rep.Keys, rep.Problems(), rep.Errors)
	check(b, "after the full scrub")
	_ = b.Close()
	c, err := Open(context.Background(), open(pass), opts...)
	if err != nil {
		t.Fatalf("reopen after scrub: %v", err)
	}
	defer c.Close()
	check(c, "after reopening")
	for _, v := range violations {
		t.Errorf("%s", v)
	}
	if unreadableSeen > 0 {
		t.Errorf("%d reads found a value unreadable (see above)", unreadableSeen)
	}
}

func statesOf(a *Array) []string {
	var out []string
	for i := 0; i < a.N(); i++ {
		out = append(out, a.DeviceState(i).String())
	}
	return out
}

// piecesOf describes what each device holds under key's split-0 data and
// bank keys, for a violation's message: the mechanism, version and the
// workload write of each piece, and whether the array's records say the
// device missed a write of the key.
func piecesOf(a *Array, key string, origin map[string]int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "primary %d", a.primary([]byte(key), 0))
	for d := 0; d < a.N(); d++ {
		for _, kind := range []format.Kind{format.KindData, format.KindBank} {
			ik := format.Key([]byte(key), 0, kind)
			raw, err := a.env.Device(d).Retrieve(context.Background(), ik)
			if err != nil {
				if a.env.Missing(d, ik) {
					fmt.Fprintf(&b, " [dev %d kind %x: %v, missed]", d, kind, err)
				}
				continue
			}
			format.Unkey(ik, raw, 0)
			v, err := format.Decode(raw)
			if err != nil {
				fmt.Fprintf(&b, " [dev %d kind %x: %v]", d, kind, err)
				continue
			}
			fmt.Fprintf(&b, " [dev %d kind %x: rm %d v %d splits %d len %d missed %v]", d, kind, v.RM, v.Version, v.Splits, v.ObjectLen, a.env.Missing(d, ik))
		}
	}
	return b.String()
}
