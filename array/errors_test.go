package array

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/faultdev"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/mechanism"
)

// TestFailEachOperationInTurn is Pebble's TestErrors for the array: a fixed
// workload over all four mechanisms runs once per device operation, with
// the i-th operation on one device failing (and the device with it). Every
// call must end in success or an error, never in wrong bytes; after the
// device is resynced, every acknowledged value must read back byte-exact,
// and a value whose write failed must read as one of the values it may
// have.
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
	run := func(inner faultdev.Injector) (*rig, outcomes) {
		// The injector counts operations from the end of Create on.
		inj := &faultdev.Toggle{Injector: inner}
		r := &rig{t: t, opts: hybridAll()}
		for i := 0; i < 6; i++ {
			m := mem.New(mem.WithName(fmt.Sprintf("mem:dev%d", i)))
			r.mems = append(r.mems, m)
			var d device.Device = m
			if i == dev {
				d = faultdev.Wrap(m, inj)
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
		defer inj.Off()
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
	rc, _ := run(counter)
	total := counter.Count()
	if total == 0 {
		t.Fatal("the workload never touched the device")
	}
	if segments(rc) == 0 {
		t.Fatal("the workload never logged a packing update (the delta log is untested)")
	}
	for i := int64(0); i < total; i++ {
		r, allowed := run(faultdev.OnIndex(i, nil))
		// The device answers again (only its i-th operation failed): let
		// the array take it back and catch up.
		if r.a.DeviceState(dev) == mechanism.Failed {
			if _, err := r.a.Resync(ctx, dev); err != nil {
				t.Fatalf("fail op %d: resync: %v", i, err)
			}
		}
		for key, vals := range allowed {
			got, err := r.a.Retrieve(ctx, []byte(key))
			if !allowed.allows(key, got, err) && !(len(vals) > 1 && err != nil && !errors.Is(err, ErrNotFound)) {
				t.Fatalf("fail op %d of %d: %q: %d bytes, %v; %d allowed values", i, total, key, len(got), err, len(vals))
			}
		}
	}
	t.Logf("failed each of %d operations in turn", total)
}
