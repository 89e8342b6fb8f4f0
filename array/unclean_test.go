package array

import (
	"sync/atomic"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/faultdev"
)

// TestUncleanShutdown: an array that its process never closed (a crash:
// the devices outlive the array, as their files outlive a killed
// process) opens as Unclean, and stays so across clean closes until a
// scrub with repair completes; a clean close then opens clean. A device
// that was down at the clean close, and so keeps an older open's header,
// does not make the next open unclean.
func TestUncleanShutdown(t *testing.T) {
	dir := t.TempDir()
	var down atomic.Int64
	down.Store(-1)
	open := func(create bool) (*Array, []device.Device) {
		t.Helper()
		return openPebble(t, dir, 4, create, func(i int) faultdev.Injector {
			return faultdev.InjectorFunc(func(faultdev.Op) error {
				if down.Load() == int64(i) {
					return faultdev.ErrInjected
				}
				return nil
			})
		})
	}
	expect := func(a *Array, want bool, when string) {
		t.Helper()
		st, err := a.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if a.Unclean() != want || st.Unclean != want {
			t.Fatalf("%s: Unclean() %v, Status().Unclean %v, want %v", when, a.Unclean(), st.Unclean, want)
		}
	}
	closeArray := func(a *Array) {
		t.Helper()
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}

	a, _ := open(true)
	expect(a, false, "created")
	if err := a.Store(ctx, []byte("key"), []byte("v1")); err != nil {
		t.Fatal(err)
	}
	closeArray(a)
	a, devs := open(false)
	expect(a, false, "after a clean close")
	if err := a.Store(ctx, []byte("key"), []byte("v2")); err != nil {
		t.Fatal(err)
	}
	// The crash: the process's array never closes; its devices' files
	// stay as they were.
	a.haltOnce.Do(a.halt)
	for _, d := range devs {
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	a, _ = open(false)
	expect(a, true, "after a crash")
	closeArray(a)
	a, _ = open(false)
	expect(a, true, "after a crash and a clean close, with no scrub")
	if _, err := a.Scrub(ctx, false); err != nil {
		t.Fatal(err)
	}
	expect(a, true, "after a scrub without repair")
	if _, err := a.Scrub(ctx, true); err != nil {
		t.Fatal(err)
	}
	expect(a, false, "after a scrub with repair")
	closeArray(a)
	a, _ = open(false)
	expect(a, false, "after the scrub and a clean close")

	// Device 2 misses the clean close (it fails first), keeping the
	// header of this open, flag and all.
	down.Store(2)
	if _, err := a.Retrieve(ctx, []byte("key")); err != nil {
		t.Fatal(err)
	}
	if err := a.Store(ctx, []byte("key"), []byte("v3")); err != nil {
		t.Fatal(err)
	}
	closeArray(a)
	down.Store(-1)
	a, _ = open(false)
	expect(a, false, "with a device back that was down at the clean close")
	if got, err := a.Retrieve(ctx, []byte("key")); err != nil || string(got) != "v3" {
		t.Fatalf("key: %q, %v", got, err)
	}
	closeArray(a)
}
