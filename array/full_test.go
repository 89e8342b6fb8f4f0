package array

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/faultdev"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/mechanism"
)

// fullMechanisms are the mechanisms the full-device tests write with, each
// tolerating two lost devices.
var fullMechanisms = []string{"replication", "splitting", "packing"}

// acked is what a test stored and had acknowledged, to read back.
type acked struct {
	t    *testing.T
	a    *Array
	rng  *rand.Rand
	want map[string][]byte
}

func newAcked(t *testing.T, a *Array) *acked {
	return &acked{t: t, a: a, rng: newRand(t), want: map[string][]byte{}}
}

// store stores keys key-0000 to key-n-1, with fullMechanisms in turn,
// each of them acknowledged.
func (w *acked) store(round, n int) {
	w.t.Helper()
	for k := range n {
		key := fmt.Sprintf("key-%04d", k)
		rm := fullMechanisms[k%len(fullMechanisms)]
		v := randBytes(w.rng, 100+w.rng.IntN(6000))
		if err := w.a.Store(ctx, []byte(key), v, Using(rm)); err != nil {
			w.t.Fatalf("round %d: store %s with %s: %v", round, key, rm, err)
		}
		w.want[key] = v
	}
}

// check reads back every value stored.
func (w *acked) check(what string) {
	w.t.Helper()
	for key, v := range w.want {
		got, err := w.a.Retrieve(ctx, []byte(key))
		if err != nil || string(got) != string(v) {
			w.t.Fatalf("%s: %s reads %d bytes of %d: %v", what, key, len(got), len(v), err)
		}
	}
}

// waitCaughtUp waits, generously, for device i to be healthy with
// nothing left to resync.
func waitCaughtUp(t *testing.T, a *Array, i int) {
	t.Helper()
	waitState(t, a, i, mechanism.Healthy)
	deadline := time.Now().Add(2 * time.Minute)
	for a.env.MissedCount(i) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("device %d healthy with %d keys still to resync after 2 minutes", i, a.env.MissedCount(i))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitState waits, generously, for device i to reach want.
func waitState(t *testing.T, a *Array, i int, want mechanism.State) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for a.DeviceState(i) != want {
		if time.Now().After(deadline) {
			t.Fatalf("device %d is %v after 2 minutes, want %v", i, a.DeviceState(i), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFullDevice: a device whose writes fail with device.ErrFull (as
// Pebble on ENOSPC, Redis on OOM) turns full, not failed: writes go on
// degraded and are recorded, reads are still served by it (with two
// other devices failed, keys whose last readable piece is on it read),
// a resync while it is still full fails and leaves it full, and once
// space is back the automatic resync re-admits it, caught up, with no
// reopen of the array. Every acknowledged value reads back throughout.
func TestFullDevice(t *testing.T) {
	toggles := make([]*faultdev.Toggle, 6)
	r := newRigWrapped(t, 6, device.Limits{MaxValueLen: 4 << 10}, func(i int, m *mem.Device) device.Device {
		toggles[i] = &faultdev.Toggle{Injector: faultdev.OnWrites(faultdev.Always(faultdev.ErrInjectedFull))}
		return faultdev.Wrap(m, toggles[i])
	}, everyMechanism(), WithDefault("replication"), WithAutoResync(20*time.Millisecond))
	w := newAcked(t, r.a)
	store, check := w.store, w.check
	store(0, 120)
	const full = 2
	toggles[full].On()
	store(1, 80) // overwrites and keys the device has: degraded
	if got := r.a.DeviceState(full); got != mechanism.Full {
		t.Fatalf("device %d is %v after writes failed with ErrFull, want full", full, got)
	}
	if r.a.env.MissedCount(full) == 0 {
		t.Fatalf("device %d is full with no write recorded as missed", full)
	}
	store(2, 80)
	st, err := r.a.Status(ctx)
	if err != nil || st.Devices[full].State != "full" {
		t.Fatalf("status: device %d is %+v (%v), want full", full, st.Devices[full], err)
	}
	check("one device full")

	// Reads still go to it: with the devices after it down, the keys
	// whose other readable pieces were there read from it.
	r.mems[3].Fail()
	r.mems[4].Fail()
	for k := 80; k < 120; k++ { // written before it was full, not since
		key := fmt.Sprintf("key-%04d", k)
		if _, err := r.a.Retrieve(ctx, []byte(key)); err != nil {
			t.Fatalf("with devices 3 and 4 failed and %d full: %s: %v", full, key, err)
		}
	}
	r.mems[3].Recover()
	r.mems[4].Recover()
	waitState(t, r.a, 3, mechanism.Healthy)
	waitState(t, r.a, 4, mechanism.Healthy)

	if _, err := r.a.Resync(ctx, full); !errors.Is(err, ErrStillFull) {
		t.Fatalf("resync of a device still full: %v, want ErrStillFull", err)
	}
	if got := r.a.DeviceState(full); got != mechanism.Full {
		t.Fatalf("device %d is %v after a resync while full, want full", full, got)
	}

	toggles[full].Off() // space is back
	waitCaughtUp(t, r.a, full)
	check("space back")
	// Caught up: its pieces are current, read with two others down.
	r.mems[0].Fail()
	r.mems[1].Fail()
	check("device back, devices 0 and 1 failed")
}

// TestTooManyFull: with more devices full than a write tolerates, the
// write is refused with an error wrapping device.ErrFull that names the
// devices, nothing acknowledged; reads go on; once space is back on all
// of them, writes are taken again.
func TestTooManyFull(t *testing.T) {
	toggles := make([]*faultdev.Toggle, 6)
	r := newRigWrapped(t, 6, device.Limits{}, func(i int, m *mem.Device) device.Device {
		toggles[i] = &faultdev.Toggle{Injector: faultdev.OnWrites(faultdev.Always(faultdev.ErrInjectedFull))}
		return faultdev.Wrap(m, toggles[i])
	}, everyMechanism(), WithDefault("replication"), WithAutoResync(20*time.Millisecond))
	r.mustStore("key-before", []byte("before"))
	for _, tg := range toggles {
		tg.On()
	}
	var err error
	// The first writes find the devices full; the later ones know.
	for k := range 30 {
		err = r.a.Store(ctx, []byte(fmt.Sprintf("key-during-%d", k%10)), []byte("during"))
		if err == nil {
			t.Fatal("a store with every device full was acknowledged")
		}
	}
	if !errors.Is(err, device.ErrFull) || !strings.Contains(err.Error(), "full") {
		t.Fatalf("store with every device full: %v, want device.ErrFull", err)
	}
	if !strings.Contains(err.Error(), "devices [") {
		t.Fatalf("store with every device full: %v, want the devices named", err)
	}
	r.mustRead("key-before", []byte("before"))
	for i := range toggles {
		if got := r.a.DeviceState(i); got != mechanism.Full {
			t.Fatalf("device %d is %v, want full", i, got)
		}
		toggles[i].Off()
	}
	for i := range toggles {
		waitState(t, r.a, i, mechanism.Healthy)
	}
	r.mustStore("key-after", []byte("after"))
	r.mustRead("key-after", []byte("after"))
	r.mustRead("key-before", []byte("before"))
	if _, err := r.a.Retrieve(ctx, []byte("key-during-0")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the refused store: %v, want not found", err)
	}
}
