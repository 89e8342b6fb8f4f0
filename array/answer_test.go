package array

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/faultdev"
	"github.com/kvarray/kvarray/device/mem"
)

// The lost-answer test is the crash test's (crash_test.go) twin for a
// process that lives on: the answer of each device operation of a
// workload is lost in turn. The operation reaches its device and takes
// effect, but the array is told the device failed (it died, or its
// connection broke, after taking the write), and the workload operation
// runs on to its end, degraded. That is the fault behind a set write that
// failed while one of its parities had landed (TestFailedSetLeavesNoParity).
// Then the process stops, and the crash test's check runs: restart,
// heal, scrub, lose a device, rebuild.
//
// Invariant: as the crash test's, where the workload operation counts as
// acknowledged if it returned no error, and as in flight (either value)
// if it failed; and a failure is itself a violation unless the operation
// wrote with Hashing, which tolerates no fault: one device's fault is
// within every other mechanism's tolerance (see mayFail).

// startAnswerLostProcess opens the array over mems with the answer of
// device operation at (counted from the end of the open, as
// startCrashProcess counts) lost.
func startAnswerLostProcess(t *testing.T, cc crashConfig, mems []*mem.Device, at int64) *crashProcess {
	t.Helper()
	p := &crashProcess{crash: faultdev.CrashAt(-1)} // counts; never crashes
	lose := &faultdev.Toggle{Injector: faultdev.OnIndex(at, nil)}
	counting := &faultdev.Toggle{Injector: p.crash}
	devs := make([]device.Device, len(mems))
	for i, m := range mems {
		devs[i] = faultdev.WrapAfter(faultdev.Wrap(m, jittered(counting, i, at)), lose)
	}
	a, err := Open(context.Background(), devs, cc.opts...)
	if err != nil {
		t.Fatal(err)
	}
	p.a = a
	counting.On()
	lose.On()
	return p
}

// everyAnswerLost loses the answer of every device operation of every
// workload operation in turn (everyPoint).
func (p *crashPlan) everyAnswerLost(t *testing.T) (points int, fails []crashFailure) {
	return p.everyPoint(t, func(j int, at int64, snap []*mem.Device, out outcomes) []crashFailure {
		o := p.ops[j]
		proc := startAnswerLostProcess(t, p.cc, snap, at)
		err := proc.apply(o)
		proc.stop() // the process stops: its background work too, before the restart
		c, fails := p.survived(j, at, out, err)
		return append(fails, p.check(t, snap, c)...)
	})
}

// survived returns what workload operation j, which met the fault at
// device operation at and returned err, left (the keys' outcomes before it
// being out): acknowledged if err is nil, else in flight, and a violation
// if it failed where mayFail does not allow it.
func (p *crashPlan) survived(j int, at int64, out outcomes, err error) (crashed, []crashFailure) {
	o := p.ops[j]
	var fails []crashFailure
	c := crashed{at: at, inFlight: j, out: out}
	switch {
	case o.settle:
		c.settled = true
	case err == nil:
		c.settled = true
		c.out.apply(o, nil)
	default:
		if !p.mayFail(out, o, err) {
			fails = append(fails, crashFailure{at: at, op: j, class: "failed within tolerance", phase: "write",
				key: o.key, detail: err.Error()})
		}
		c.out.apply(o, errInFlight)
	}
	return c, fails
}

// mayFail reports whether workload operation o may fail with err on an
// array one of whose devices failed under it, the keys' outcomes before
// it being out: when it writes with Hashing, which keeps one copy, and
// when it deletes a key that may be absent or hold a Hashing value (not
// found, or unavailable: with Hashing configured, absence cannot be
// proven while the primary is impaired).
func (p *crashPlan) mayFail(out outcomes, o crashOp, err error) bool {
	if o.using == "hashing" {
		return true
	}
	hashed := slices.ContainsFunc(out[o.key], func(v []byte) bool { return p.hashed[string(v)] })
	absent := out[o.key] == nil || out.allows(o.key, nil, ErrNotFound)
	if o.edit && hashed {
		return true // it reads the value first: perhaps a Hashing copy on the device down
	}
	return (o.del || o.edit) && (absent || hashed) && (errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnavailable))
}

// TestAnswerLostAtEveryOperation covers every device operation of a
// 100-operation workload (30 under -race; KVARRAY_ANSWER_OPS to change it).
func TestAnswerLostAtEveryOperation(t *testing.T) {
	everyConfig(t, workloadOps(t, "KVARRAY_ANSWER_OPS", 100, 30), "answers lost", (*crashPlan).everyAnswerLost)
}

// workloadOps returns how many workload operations a fault test runs:
// the value of the environment variable env if set, else 30 with -short,
// else race under the race detector (which slows it several times over),
// else def.
func workloadOps(t *testing.T, env string, def, race int) int {
	if s := os.Getenv(env); s != "" {
		n := 0
		if _, err := fmt.Sscan(s, &n); err != nil {
			t.Fatalf("%s=%q: %v", env, s, err)
		}
		return n
	}
	switch {
	case testing.Short():
		return 30
	case raceEnabled:
		return race
	}
	return def
}

// everyConfig runs fault test every over an n-operation workload in each
// crash configuration and reports its violations.
func everyConfig(t *testing.T, n int, how string, every func(*crashPlan, *testing.T) (int, []crashFailure)) {
	for _, cc := range crashConfigs() {
		t.Run(cc.name, func(t *testing.T) {
			p := newCrashPlan(t, cc, n)
			points, fails := every(p, t)
			p.report(t, how, points, fails)
		})
	}
}
