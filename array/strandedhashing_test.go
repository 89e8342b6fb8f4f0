package array

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/faultdev"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
)

// TestFailedOverwriteKeepsAHashingValue (issue 40, item 6): a store over
// a Hashing value whose device is down fails, and yet leaves the device's
// resync record naming the key: the store acknowledged the primary's miss
// (its record landed) and then failed (another miss could not be
// recorded), and the pieces it wrote elsewhere were dropped as
// uncommitted. No device holds a piece of any later write, so the record
// is of no acknowledged write and the piece it hides is still the value:
// it must read, and the device must resync, rather than be refused as
// stale for good.
func TestFailedOverwriteKeepsAHashingValue(t *testing.T) {
	key := []byte("stranded")
	var down [6]atomic.Bool
	var noRecords [6]atomic.Bool // record writes fail: the device is full
	var shard atomic.Int32       // the device that fails its shard of the store
	shard.Store(-1)
	failed := fmt.Errorf("connection reset: %w", device.ErrDeviceFailed)
	r := newRigWrapped(t, 6, device.Limits{}, func(i int, m *mem.Device) device.Device {
		return faultdev.Wrap(m, faultdev.InjectorFunc(func(op faultdev.Op) error {
			switch {
			case down[i].Load():
				return failed
			case noRecords[i].Load() && op.Kind == device.OpStore && bytes.HasPrefix(op.Key, []byte("\x00kvarray-resync")):
				return fmt.Errorf("record: %w", device.ErrNoSpace)
			case int(shard.Load()) == i && op.Kind == device.OpStore && bytes.HasPrefix(op.Key, key):
				shard.Store(-1)
				return failed
			}
			return nil
		}))
	}, everyMechanism())
	old := []byte("the last acknowledged value")
	r.mustStore(string(key), old, Using("hashing"))
	p := r.a.primary(key, 0)
	// The primary goes down; the store's other shards land but one, on
	// x, whose miss cannot be recorded (x's record holders are full).
	down[p].Store(true)
	if _, err := r.a.Retrieve(ctx, key); err == nil {
		t.Fatal("a read of a Hashing value with its device down succeeded")
	}
	x := (p + 3) % 6
	shard.Store(int32(x))
	noRecords[(x+1)%6].Store(true)
	noRecords[(x+2)%6].Store(true)
	err := r.a.Store(ctx, key, bytes.Repeat([]byte("n"), 10<<10), Using("splitting"))
	if err == nil {
		t.Fatal("the store succeeded: the case is not set up")
	}
	if !r.a.env.Missing(p, format.Key(key, 0, format.KindData)) {
		t.Fatalf("the failed store left no record of the primary's miss: the case is not set up (%v)", err)
	}
	noRecords[(x+1)%6].Store(false)
	noRecords[(x+2)%6].Store(false)
	down[p].Store(false)
	for d, err := range r.heal() {
		if err != nil {
			t.Fatalf("heal device %d: %v", d, err)
		}
	}
	for d := range 6 {
		if st := r.a.DeviceState(d); st != mechanism.Healthy {
			t.Fatalf("device %d is %v after the heal", d, st)
		}
	}
	r.mustRead(string(key), old)
	r.reopen()
	r.mustRead(string(key), old)
}
