package array

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/pebble"
	"github.com/kvarray/kvarray/mechanism"
)

// TestRebuildHealthyMarkDurable (issue 40, item 5): once a rebuild onto a
// Pebble device (which defers the rebuild's writes, device.Deferred)
// reports the device healthy, its header on the device says so: the
// header write went with the rebuild's deferred batches, never synced,
// and a kill -9 seconds later brought the device back "rebuilding".
func TestRebuildHealthyMarkDurable(t *testing.T) {
	dir := t.TempDir()
	open := func(name string) device.Device {
		d, err := pebble.Open(filepath.Join(dir, name), pebble.WithCreate(true))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	devs := make([]device.Device, 6)
	for i := range devs {
		devs[i] = open(fmt.Sprint(i))
	}
	a, err := Create(ctx, devs, allMechanisms(), WithDefault("replication"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close() }()
	for i := range 200 {
		if err := a.Store(ctx, fmt.Appendf(nil, "key-%03d", i), fmt.Appendf(nil, "value %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.ReplaceDevice(ctx, 2, open("2-new")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Rebuild(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if st := a.DeviceState(2); st != mechanism.Healthy {
		t.Fatalf("device 2 is %v after its rebuild", st)
	}
	// What the device itself holds, as a restart would read it: a
	// second open of its directory is what a kill -9 leaves, so close
	// nothing first but read the synced state through a new array.
	b, err := a.env.Device(2).Retrieve(ctx, headerKey)
	if err != nil {
		t.Fatalf("device 2's header after the rebuild: %v", err)
	}
	h, err := decodeHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	if h.flags&flagRebuilding != 0 {
		t.Fatal("device 2's header still says rebuilding after the rebuild reported it healthy")
	}
	if _, err := a.env.Device(2).Retrieve(ctx, checkpointKey); err == nil {
		t.Fatal("device 2 still holds the rebuild's checkpoint")
	}
}
