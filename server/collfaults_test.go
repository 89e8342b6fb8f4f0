package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/config"
	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/faultdev"
)

// The lost-answer and failed-write tests are the collection and stream
// crash tests' (collcrash_test.go, streamcrash_test.go) twins for a
// process that lives on through a device fault, as array/answer_test.go
// and array/failwrite_test.go are the array's crash test's. Each device
// operation of the workload (counted from the array's creation on) meets
// the fault in turn:
//
//   - lost answer (answerLost): the operation reaches its device and takes
//     effect, but the array is told the device failed (it died, or its
//     connection broke, after taking the write);
//   - failed write (writesFailed): the operation fails without effect, and
//     from then on so does every operation of its device and of the next
//     one, until the command that met it returns (two disks filling up at
//     once); the devices then answer again.
//
// The command runs on to its end, degraded, and the workload goes on
// until a command fails. Invariant, checked on the live server once the
// workload ends and again after a restart over the same devices: every
// key reads (HGETALL, SMEMBERS, LRANGE, ZRANGE WITHSCORES; the stream's
// XRANGE, its group's last-delivered ID and pending entries) exactly as
// the model after the acknowledged commands or, all keys at once, after
// the one that returned an error too (in flight: either outcome); counts
// (HLEN, SCARD, LLEN, ZCARD, XLEN, the group's pending count) exact; no
// read fails.

// answerLost loses the answer of device operation at (from the array's
// creation on; never if at < 0).
type answerLost struct {
	at int64
	n  atomic.Int64
	on atomic.Bool
}

func (f *answerLost) wrap(_ int, d device.Device) device.Device {
	return faultdev.WrapAfter(d, faultdev.InjectorFunc(func(op faultdev.Op) error {
		if !f.on.Load() || op.Kind == faultdev.OpInfo {
			return nil
		}
		if f.n.Add(1)-1 == f.at {
			return faultdev.ErrInjected
		}
		return nil
	}))
}

func (f *answerLost) arm()         { f.on.Store(true) }
func (f *answerLost) commandDone() {}
func (f *answerLost) count() int64 { return f.n.Load() }
func (f *answerLost) hit() bool    { return f.at >= 0 && f.n.Load() > f.at }
func (f *answerLost) lives() bool  { return true }

// writesFailed fails device operation at (from the array's creation on;
// never if at < 0) without effect, and every later operation on its
// device and the next, until the command that met it returns.
type writesFailed struct {
	at, devs int64
	n        atomic.Int64
	dev      atomic.Int64 // device of operation at once reached, else -1
	on, quit atomic.Bool
}

func newWritesFailed(at int64, devs int) *writesFailed {
	f := &writesFailed{at: at, devs: int64(devs)}
	f.dev.Store(-1)
	return f
}

func (f *writesFailed) wrap(i int, d device.Device) device.Device {
	return faultdev.Wrap(d, faultdev.InjectorFunc(func(op faultdev.Op) error {
		if !f.on.Load() || f.quit.Load() || op.Kind == faultdev.OpInfo {
			return nil
		}
		if f.n.Add(1)-1 == f.at {
			f.dev.Store(int64(i))
			return faultdev.ErrInjected
		}
		if d := f.dev.Load(); d >= 0 && (int64(i) == d || int64(i) == (d+1)%f.devs) {
			return faultdev.ErrInjected
		}
		return nil
	}))
}

func (f *writesFailed) arm() { f.on.Store(true) }

func (f *writesFailed) commandDone() {
	if f.dev.Load() >= 0 {
		f.quit.Store(true)
	}
}

func (f *writesFailed) count() int64 { return f.n.Load() }
func (f *writesFailed) hit() bool    { return f.dev.Load() >= 0 }
func (f *writesFailed) lives() bool  { return true }

// memHybridDevices is how many devices memHybrid has.
const memHybridDevices = 6

// TestCollectionAnswerLostAtEveryOperation: see the comment above.
func TestCollectionAnswerLostAtEveryOperation(t *testing.T) {
	seed, ops := collFaultWorkload(t)
	faultAtEveryPoint(t, seed, func(cfg *config.Config, at int64) int64 {
		return runCollFaulted(t, cfg, ops, &answerLost{at: at}, at)
	})
}

// TestCollectionFailedWriteAtEveryOperation: see the comment above.
func TestCollectionFailedWriteAtEveryOperation(t *testing.T) {
	seed, ops := collFaultWorkload(t)
	faultAtEveryPoint(t, seed, func(cfg *config.Config, at int64) int64 {
		return runCollFaulted(t, cfg, ops, newWritesFailed(at, memHybridDevices), at)
	})
}

// TestStreamAnswerLostAtEveryOperation: see the comment above.
func TestStreamAnswerLostAtEveryOperation(t *testing.T) {
	seed, ops := streamFaultWorkload(t)
	faultAtEveryPoint(t, seed, func(cfg *config.Config, at int64) int64 {
		return runStreamFaulted(t, cfg, ops, &answerLost{at: at}, at)
	})
}

// TestStreamFailedWriteAtEveryOperation: see the comment above.
func TestStreamFailedWriteAtEveryOperation(t *testing.T) {
	seed, ops := streamFaultWorkload(t)
	faultAtEveryPoint(t, seed, func(cfg *config.Config, at int64) int64 {
		return runStreamFaulted(t, cfg, ops, newWritesFailed(at, memHybridDevices), at)
	})
}

// The collection property test runs the collection and stream workloads'
// commands (collWorkload, streamWorkload) interleaved at random with
// device faults over time, through the server's admin commands, on a mem
// hybrid array: a device fails (KVARRAY.FAIL; at most two impaired at
// once, within every mechanism's tolerance), a failed one comes back and
// is resynced (KVARRAY.RECOVER), a device is replaced by an empty one and
// rebuilt (KVARRAY.REBUILD), a scrub repairs (KVARRAY.SCRUB REPAIR). At
// the end every device comes back and is resynced, and a scrub repairs.
// Invariant, after every step: every command and fault step succeeds
// (each fault is within tolerance); every key reads exactly as the model
// after the commands so far, counts included (readColls,
// readStreamState); after the final repair a scrub finds no problem.

// TestCollectionPropertyUnderFaults: see the comment above. Each run
// logs its seeds; SEED=n replays one.
func TestCollectionPropertyUnderFaults(t *testing.T) {
	seeds, steps := 4, 800
	switch {
	case testing.Short():
		seeds, steps = 1, 150
	case raceEnabled:
		seeds, steps = 2, 400
	}
	first := faultSeed()
	if os.Getenv("SEED") != "" {
		seeds = 1
	}
	for i := range seeds {
		seed := first + uint64(i)
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runCollProperty(t, seed, steps) })
	}
}

func runCollProperty(t *testing.T, seed uint64, steps int) {
	t.Logf("seed %d, %d steps", seed, steps)
	rng := rand.New(rand.NewPCG(seed, 11))
	colls, streams := collWorkload(seed, steps), streamWorkload(seed, steps)
	ts := startServer(t, memHybrid)
	rdb := ts.client(func(o *redis.Options) { o.Protocol = 2 })
	ctx := context.Background()
	do := func(step int, args ...string) *redis.Cmd {
		t.Helper()
		r := rdb.Do(ctx, toAny(args)...)
		if err := r.Err(); err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("seed %d step %d: %q: %v", seed, step, args, err)
		}
		return r
	}
	for _, args := range [][]string{
		{"CONFIG", "SET", "hash-max-listpack-entries", "3"},
		{"CONFIG", "SET", "set-max-intset-entries", "3"},
		{"CONFIG", "SET", "list-max-listpack-size", "3"},
		{"CONFIG", "SET", "zset-max-listpack-entries", "3"},
	} {
		do(-1, args...)
	}
	for _, args := range streamSetup {
		do(-1, args...)
	}
	coll, stream := collModel{}, streamState{pel: map[int]pendingState{}}
	check := func(step int, what string) {
		t.Helper()
		if got := readColls(t, rdb); !collEqual(got, coll) {
			t.Fatalf("seed %d step %d (%s): read %v, model %v", seed, step, what, got, coll)
		}
		got, err := readStreamState(rdb)
		if err != nil {
			t.Fatalf("seed %d step %d (%s): reading the stream: %v", seed, step, what, err)
		}
		if !streamEqual(got, stream) {
			t.Fatalf("seed %d step %d (%s): stream read %+v, model %+v", seed, step, what, got, stream)
		}
	}
	// impaired: the devices failed and not yet back.
	impaired := map[int]bool{}
	const maxImpaired = 2
	ci, si := 0, 0
	done := map[string]int{} // fault steps run, by kind
	for step := range steps {
		var what string
		switch x := rng.IntN(100); {
		case x < 40 && ci < len(colls):
			op := colls[ci]
			ci++
			do(step, op.args...)
			op.apply(coll)
			what = fmt.Sprintf("%q", op.args)
		case x < 75 && si < len(streams):
			op := streams[si]
			si++
			op.apply(&stream, streamReply(do(step, op.args...).Val()))
			what = fmt.Sprintf("%q", op.args)
		case x < 84:
			d := rng.IntN(memHybridDevices)
			if impaired[d] || len(impaired) >= maxImpaired {
				continue
			}
			do(step, "KVARRAY.FAIL", strconv.Itoa(d))
			done["fail"]++
			impaired[d] = true
			what = fmt.Sprintf("device %d failed (impaired %v)", d, impaired)
		case x < 91:
			if len(impaired) == 0 {
				continue
			}
			d := slices.Sorted(maps.Keys(impaired))[rng.IntN(len(impaired))]
			do(step, "KVARRAY.RECOVER", strconv.Itoa(d))
			done["recover"]++
			delete(impaired, d)
			what = fmt.Sprintf("device %d recovered and resynced", d)
		case x < 96:
			// A failed device, or a healthy one if one more is within
			// tolerance, replaced by an empty one and rebuilt.
			d := rng.IntN(memHybridDevices)
			if !impaired[d] && len(impaired) >= maxImpaired {
				continue
			}
			do(step, "KVARRAY.REBUILD", strconv.Itoa(d))
			done["rebuild"]++
			delete(impaired, d)
			what = fmt.Sprintf("device %d replaced and rebuilt (impaired %v)", d, impaired)
		default:
			do(step, "KVARRAY.SCRUB", "REPAIR")
			done["scrub"]++
			what = fmt.Sprintf("scrub repair (impaired %v)", impaired)
		}
		check(step, what)
	}
	t.Logf("%d collection and %d stream commands; fault steps %v", ci, si, done)
	for d := range impaired {
		do(steps, "KVARRAY.RECOVER", strconv.Itoa(d))
	}
	do(steps, "KVARRAY.SCRUB", "REPAIR")
	check(steps, "every device back, scrubbed")
	var rep array.ScrubReport
	out, _ := do(steps, "KVARRAY.SCRUB").Text()
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if p := rep.Problems(); p != 0 {
		t.Errorf("seed %d: the scrub after the final repair finds %d problems: %+v", seed, p, rep)
	}
}
