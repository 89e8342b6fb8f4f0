package array

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/faultdev"
	"github.com/kvarray/kvarray/device/mem"
)

// The failed-write test is the crash test's (crash_test.go) twin for a
// process that lives on through a fault: each device operation of a
// workload fails in turn, without effect, and from that moment the next
// device fails too, until the workload operation ends (two disks filling
// up at once, a controller losing two drives). The operation ends degraded
// or failed; the devices then answer again, and the same process goes on:
// the next workload operations run (continueAfter), the two devices are
// resynced, another device is lost and rebuilt before any scrub, then the
// crash test's heal, scrub and loss follow.
//
// Invariant: as the crash test's, with the operation counted as
// acknowledged if it returned no error and as in flight (either value) if
// it failed; a failure is itself a violation unless mayFail allows it
// (Hashing), since two devices are within every other mechanism's
// tolerance. No restart means no settling after an unclean shutdown: what
// a failed write left must be settled by the process that saw it fail.

// failProcess is a process whose devices fail as the test describes.
type failProcess struct {
	a    *Array
	at   int64
	n    atomic.Int64 // device operations so far
	dev  atomic.Int64 // device of operation at, once reached; -1 before
	quit atomic.Bool  // the devices answer again
}

// startFailProcess opens the array over mems with device operation at
// (counted from the end of the open) failing, and the next device with it.
func startFailProcess(t *testing.T, cc crashConfig, mems []*mem.Device, at int64) *failProcess {
	t.Helper()
	p := &failProcess{at: at}
	p.dev.Store(-1)
	on := &atomic.Bool{}
	devs := make([]device.Device, len(mems))
	for i, m := range mems {
		devs[i] = faultdev.Wrap(m, jittered(faultdev.InjectorFunc(func(op faultdev.Op) error {
			if !on.Load() || p.quit.Load() || op.Kind == faultdev.OpInfo {
				return nil
			}
			if p.n.Add(1)-1 == p.at {
				p.dev.Store(int64(i))
				return faultdev.ErrInjected
			}
			if d := p.dev.Load(); d >= 0 && (i == int(d) || i == (int(d)+1)%len(mems)) {
				return faultdev.ErrInjected
			}
			return nil
		}), i, at))
	}
	a, err := Open(context.Background(), devs, cc.opts...)
	if err != nil {
		t.Fatal(err)
	}
	a.unclean.Store(false) // a live process's copy (see startCrashProcess)
	p.a = a
	on.Store(true)
	return p
}

// everyFailedWrite fails every device operation of every workload
// operation in turn (everyPoint).
func (p *crashPlan) everyFailedWrite(t *testing.T) (points int, fails []crashFailure) {
	return p.everyPoint(t, func(j int, at int64, snap []*mem.Device, out outcomes) []crashFailure {
		o := p.ops[j]
		proc := startFailProcess(t, p.cc, snap, at)
		defer proc.a.halt()
		err := applyOp(proc.a, o)
		if o.del && errors.Is(err, ErrNotFound) {
			err = nil
		}
		proc.quit.Store(true)
		c, fails := p.survived(j, at, out, err)
		r := &rig{t: t, a: proc.a, mems: snap, opts: p.cc.opts}
		return append(fails, p.verify(t, r, c, true)...)
	})
}

// TestFailedWriteAtEveryOperation covers every device operation of a
// 100-operation workload (20 under -race; KVARRAY_FAIL_OPS to change it).
func TestFailedWriteAtEveryOperation(t *testing.T) {
	everyConfig(t, workloadOps(t, "KVARRAY_FAIL_OPS", 100, 20), "writes failed", (*crashPlan).everyFailedWrite)
}
