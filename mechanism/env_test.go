package mechanism_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/internal/keylock"
	"github.com/kvarray/kvarray/mechanism"
)

// held is a device whose batches wait for release, then fail as a device
// that was closed under them does.
type held struct {
	device.Device
	started, release chan struct{}
}

func (h *held) Batch(ctx context.Context, ops []device.Op) error {
	close(h.started)
	<-h.release
	for i := range ops {
		ops[i].Err = device.ErrDeviceFailed
	}
	return device.ErrDeviceFailed
}

// TestReplacedDeviceFailingMarksNothing: the ops still running on a device
// that an online replace swapped out fail (it is closed), and that must
// not mark its successor failed: the replace would then find the new
// device refused, and the rebuild could not start.
func TestReplacedDeviceFailingMarksNothing(t *testing.T) {
	old := &held{Device: mem.New(), started: make(chan struct{}), release: make(chan struct{})}
	env := mechanism.NewEnv([]device.Device{old, mem.New()}, []string{"old", "other"}, device.Limits{})
	done := make(chan struct{})
	ops := []mechanism.Op{{Dev: 0, Op: device.Op{Kind: device.OpRetrieve, Key: []byte("k\x00\x00\x00")}}}
	go func() {
		defer close(done)
		env.Do(context.Background(), ops)
	}()
	<-old.started
	env.SetDevice(0, mem.New())
	close(old.release)
	<-done
	if st := env.State(0); st != mechanism.Healthy {
		t.Fatalf("the new device 0 is %v after its predecessor's op failed", st)
	}

	// The same failure on the device in place marks it.
	_, gen := env.DeviceGen(0)
	failsTo(t, env, 0, gen, mechanism.Failed, "after a failure of its own")
	// And an older generation's does not.
	env.SetState(1, mechanism.Healthy)
	_, g1 := env.DeviceGen(1)
	env.SetDevice(1, mem.New())
	failsTo(t, env, 1, g1, mechanism.Healthy, "after its predecessor's failure")
}

// failsTo reports the failure of a call to device i sent at generation g,
// and checks that the device is then in state want.
func failsTo(t *testing.T, env *mechanism.Env, i int, g mechanism.Gen, want mechanism.State, what string) {
	t.Helper()
	env.MarkFailed(i, g)
	if st := env.State(i); st != want {
		t.Fatalf("device %d is %v %s, want %v", i, st, what, want)
	}
}

// TestLateFailureAfterResyncMarksNothing: an operation sent while a device
// was down can report its failure after a resync brought the device back
// (it was in flight, or its goroutine not yet scheduled); that must not
// fail the device again, or the resync's own repairs (and every read
// after it) would find it down, one device more than the faults. A
// failure of an operation sent after the resync still marks it.
func TestLateFailureAfterResyncMarksNothing(t *testing.T) {
	env := mechanism.NewEnv([]device.Device{mem.New(), mem.New()}, []string{"a", "b"}, device.Limits{})
	_, before := env.DeviceGen(0)
	failsTo(t, env, 0, before, mechanism.Failed, "after a failure")
	_, down := env.DeviceGen(0) // sent while it was down
	env.SetState(0, mechanism.Healthy)
	failsTo(t, env, 0, down, mechanism.Healthy, "after a failure of a call sent before its resync")
	failsTo(t, env, 0, before, mechanism.Healthy, "after a failure of a call sent before it failed")
	_, after := env.DeviceGen(0)
	failsTo(t, env, 0, after, mechanism.Failed, "after a failure of a call sent after its resync")
	// A device healthy all along is failed by any of its calls' failures.
	_, g := env.DeviceGen(1)
	failsTo(t, env, 1, g, mechanism.Failed, "after a failure")
}

// TestRecordKeepsTwoCopies: a device that misses a write is recorded on
// two other devices. When one of the devices the record goes to first
// fails under its write, the next takes it, so that the record survives
// any one holder failing. Invariant: a fresh Env over the devices that
// answer (a restart with one holder down) still knows the miss.
func TestRecordKeepsTwoCopies(t *testing.T) {
	ctx := context.Background()
	const n = 6
	mems := make([]*mem.Device, n)
	devs := make([]device.Device, n)
	names := make([]string, n)
	for i := range mems {
		mems[i] = mem.New()
		devs[i], names[i] = mems[i], fmt.Sprint("dev", i)
	}
	env := mechanism.NewEnv(devs, names, device.Limits{}.WithDefaults())
	key := format.Key([]byte("k"), 0, format.KindData)
	mems[3].Fail() // misses the write
	mems[4].Fail() // the first device its record goes to, failing under it
	err := env.Write(ctx, key, []int{3, 5, 0}, [][]byte{[]byte("a"), []byte("b"), []byte("c")}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !env.Missing(3, key) {
		t.Fatal("the miss of device 3 is not recorded")
	}
	for _, down := range []int{4, 5, 0, 1} { // each possible holder down at the restart
		again := mechanism.NewEnv(devs, names, device.Limits{}.WithDefaults())
		for _, d := range []int{3, 4, down} {
			again.SetState(d, mechanism.Failed)
		}
		if err := again.LoadRecords(ctx); err != nil {
			t.Fatal(err)
		}
		if !again.Missing(3, key) {
			t.Fatalf("with device %d down too, a restart no longer knows device 3 missed the write", down)
		}
	}
}

// TestQuiesceWaitsForMissesUnderATurn: a write that found a device Failed
// records the miss after its Do returns (Acknowledge), still holding its
// key's turn. A resync that marks the device Healthy meanwhile must see
// that miss: Quiesce returns only once the turn ends. Invariant: after
// Quiesce, every miss of an operation that started before it is recorded
// (without it, Packing's background replay recorded a parity stale after
// a resync had finished, and a second pair of failures lost a set).
func TestQuiesceWaitsForMissesUnderATurn(t *testing.T) {
	ctx := context.Background()
	devs := []device.Device{mem.New(), mem.New(), mem.New(), mem.New()}
	env := mechanism.NewEnv(devs, []string{"a", "b", "c", "d"}, device.Limits{}.WithDefaults())
	locks := keylock.New(keylock.WithHolder(env))
	key := format.Key([]byte("k"), 0, format.KindData)
	env.SetState(1, mechanism.Failed)

	missed := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		tk, err := locks.Lock(ctx, []byte("k"))
		if err != nil {
			done <- err
			return
		}
		defer tk.Release()
		ops := []mechanism.Op{{Dev: 0}, {Dev: 1}, {Dev: 2}}
		for i := range ops {
			ops[i].Op = device.Op{Kind: device.OpStore, Key: key, Value: []byte("v")}
		}
		env.Do(ctx, ops)
		close(missed)
		time.Sleep(20 * time.Millisecond) // the resync runs meanwhile
		done <- env.Acknowledge(ctx, ops)
	}()
	<-missed
	env.SetState(1, mechanism.Healthy)
	env.Quiesce()
	if got := env.Missed(1); len(got) != 1 || string(got[0]) != string(key) {
		t.Fatalf("after Quiesce device 1's records are %q, want the key the running write missed", got)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
