package config

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kvarray/kvarray/device/redis/redistest"
)

// TestDefaultDevicesAndUnused: DefaultDevices is init's config over any
// specs, and Create refuses a device holding data that is not an array's,
// with ErrNotEmpty, writing nothing.
func TestDefaultDevicesAndUnused(t *testing.T) {
	srv := redistest.Start(t)
	specs := []string{srv.URL(0), srv.URL(1), srv.URL(2), srv.URL(3), "pebble:p4", "pebble:p5"}
	c := DefaultDevices(specs)
	if got := strings.Join(c.Devices, ","); got != strings.Join(specs, ",") {
		t.Fatalf("devices %s", got)
	}
	if c.Mode != "hybrid" || c.Splitting == nil || c.Packing == nil || c.Replication.Copies != 3 {
		t.Fatalf("not the hybrid default: %+v", c)
	}
	c.SetDir(t.TempDir())
	devs, errs := openDevices(c, true)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("device %d: %v", i, err)
		}
	}
	if err := devs[2].Store(context.Background(), []byte("someone-else's"), []byte("data")); err != nil {
		t.Fatal(err)
	}
	closeAll(devs)
	_, err := Create(context.Background(), c)
	if !errors.Is(err, ErrNotEmpty) || !strings.Contains(err.Error(), "device 2") {
		t.Fatalf("create over a used database: %v", err)
	}
	devs, _ = openDevices(c, false)
	defer closeAll(devs)
	for i, d := range devs {
		info, err := d.Info(context.Background())
		if want := int64(map[bool]int{true: 1}[i == 2]); err != nil || info.Keys != want {
			t.Errorf("device %d after the refused create: %d keys (%v), want %d", i, info.Keys, err, want)
		}
	}
}
