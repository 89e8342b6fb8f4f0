package array

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/faultdev"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/mechanism"
)

// TestFailEachOperationInTurn is Pebble's TestErrors for the array: a fixed
// workload over all four mechanisms runs once per device operation, with
// the i-th operation on one device failing (and the device with it; with
// "two", the next device fails with it). Every
// call must end in success or an error, never in wrong bytes; after the
// device is resynced, and again after another device is lost and
// rebuilt, every acknowledged value must read back byte-exact, and a value
// whose write failed must read as one of the values it may have.
func TestFailEachOperationInTurn(t *testing.T) {
	type op struct {
		del   bool
		key   string
		value []byte
	}
	rng := newRand(t)
	var ops []op
	for i := 0; i < 60; i++ {
		key := fmt.Sprint("key-", rng.IntN(8))
		if rng.IntN(5) == 0 {
			ops = append(ops, op{del: true, key: key})
			continue
		}
		ops = append(ops, op{key: key, value: randBytes(rng, []int{100, 4 << 10, 16 << 10, 64 << 10}[rng.IntN(4)])})
	}
	// A packed value overwritten at its size: a logged update, whatever
	// the random part did.
	for range 3 {
		ops = append(ops, op{key: "packed", value: randBytes(rng, 16<<10)})
	}
	const dev = 3
	// With two, device dev+1 fails too from the moment dev's operation
	// failed (two disks filling up at once): writes go on degraded, within
	// every mechanism's tolerance.
	run := func(inner faultdev.Injector, two bool) (*rig, outcomes) {
		// The injector counts operations from the end of Create on.
		var fired atomic.Bool
		inj := &faultdev.Toggle{Injector: faultdev.InjectorFunc(func(op faultdev.Op) error {
			err := inner.MaybeError(op)
			if err != nil {
				fired.Store(true)
			}
			return err
		})}
		next := &faultdev.Toggle{Injector: faultdev.InjectorFunc(func(faultdev.Op) error {
			if two && fired.Load() {
				return faultdev.ErrInjected
			}
			return nil
		})}
		r := &rig{t: t, opts: hybridAll()}
		for i := 0; i < 6; i++ {
			m := mem.New(mem.WithName(fmt.Sprintf("mem:dev%d", i)))
			r.mems = append(r.mems, m)
			var d device.Device = m
			switch i {
			case dev:
				d = faultdev.Wrap(m, inj)
			case dev + 1:
				d = faultdev.Wrap(m, next)
			}
			r.devs = append(r.devs, d)
		}
		a, err := Create(context.Background(), r.devs, r.opts...)
		if err != nil {
			t.Fatal(err)
		}
		r.a = a
		t.Cleanup(func() { _ = r.a.Close() })
		inj.On()
		next.On()
		defer inj.Off()
		defer next.Off()
		allowed := outcomes{}
		for _, o := range ops {
			var err error
			if o.del {
				err = r.a.Delete(ctx, []byte(o.key))
				if errors.Is(err, ErrNotFound) {
					err = nil
				}
			} else {
				err = r.a.Store(ctx, []byte(o.key), o.value)
			}
			allowed.record(o.key, o.value, err) // o.value is nil for a delete
		}
		return r, allowed
	}
	// Count the workload's operations on the device.
	counter := faultdev.OnIndex(-1, nil)
	rc, _ := run(counter, false)
	total := counter.Count()
	if total == 0 {
		t.Fatal("the workload never touched the device")
	}
	if segments(rc) == 0 {
		t.Fatal("the workload never logged a packing update (the delta log is untested)")
	}
	for _, two := range []bool{false, true} {
		t.Run(map[bool]string{false: "one", true: "two"}[two], func(t *testing.T) {
			for i := int64(0); i < total; i++ {
				r, allowed := run(faultdev.OnIndex(i, nil), two)
				check := func(when string) {
					t.Helper()
					for key, vals := range allowed {
						got, err := r.a.Retrieve(ctx, []byte(key))
						if !allowed.allows(key, got, err) && !(len(vals) > 1 && err != nil && !errors.Is(err, ErrNotFound)) {
							t.Fatalf("fail op %d of %d, %s: %q: %d bytes, %v; %d allowed values", i, total, when, key, len(got), err, len(vals))
						}
					}
				}
				// The devices answer again: let the array take them back
				// and catch up, in rounds (one may need the other back).
				for d, err := range r.heal() {
					if err != nil {
						t.Fatalf("fail op %d: resync of device %d: %v", i, d, err)
					}
				}
				for _, d := range []int{dev, dev + 1} {
					if st := r.a.DeviceState(d); st != mechanism.Healthy {
						t.Fatalf("fail op %d: device %d %v after the resync", i, d, st)
					}
				}
				check("after the resync")
				// What the failure left must not surface when another
				// device is lost: its rebuild must restore what reads
				// returned.
				lost := []int{0, 1, 2, 5}[i%4]
				r.replace(lost)
				if errs := r.heal(); errs[lost] != nil {
					t.Fatalf("fail op %d: rebuild of device %d: %v", i, lost, errs[lost])
				}
				check(fmt.Sprintf("after device %d was lost and rebuilt", lost))
			}
			t.Logf("failed each of %d operations in turn", total)
		})
	}
}
