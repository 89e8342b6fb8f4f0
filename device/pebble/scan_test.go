package pebble

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/devicetest"
)

func TestScan(t *testing.T) {
	d, err := Open(t.TempDir(), WithCreate(true))
	if err != nil {
		t.Fatal(err)
	}
	devicetest.RunScan(t, d)
}

// TestScanFiltered: want decides per key. Invariants: a skipped key is not
// handed out; KeyValue hands out the value; KeyOnly hands out a separated
// value (in a blob file after a flush) as nil, unread, and a small value
// kept inline with its key as it is.
func TestScanFiltered(t *testing.T) {
	d, err := Open(t.TempDir(), WithCreate(true))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Close() }()
	ctx := t.Context()
	big := bytes.Repeat([]byte("v"), 4096)
	for i := range 30 {
		v := big
		if i%2 == 1 {
			v = []byte("small")
		}
		if err := d.Store(ctx, fmt.Appendf(nil, "key-%02d", i), v); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	wants := []device.Want{device.Skip, device.KeyOnly, device.KeyValue}
	want := func(k []byte) device.Want {
		var i int
		_, _ = fmt.Sscanf(string(k), "key-%d", &i)
		return wants[(i/2)%3]
	}
	seen := 0
	err = d.ScanFiltered(ctx, nil, nil, want, func(k, v []byte) error {
		seen++
		var i int
		_, _ = fmt.Sscanf(string(k), "key-%d", &i)
		small := i%2 == 1
		switch w := want(k); {
		case w == device.Skip:
			t.Errorf("%s: skipped, handed out", k)
		case w == device.KeyValue || small:
			if (small && string(v) != "small") || (!small && !bytes.Equal(v, big)) {
				t.Errorf("%s (%v): value of %d bytes", k, w, len(v))
			}
		case v != nil:
			t.Errorf("%s: key only, a separated value of %d bytes read", k, len(v))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != 20 {
		t.Fatalf("%d keys handed out, want 20", seen)
	}
}

// TestCloseClosesCursors: a cursor left open does not keep the device
// from closing (Pebble refuses to close under an open iterator), and
// fails once the device is closed.
func TestCloseClosesCursors(t *testing.T) {
	d, err := Open(t.TempDir(), WithCreate(true))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for i := range 3 {
		if err := d.Store(ctx, fmt.Appendf(nil, "key-%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	c, err := d.Cursor(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := c.Next(ctx); !ok || string(k) != "key-0" {
		t.Fatalf("first key %q, %v (%v)", k, ok, c.Err())
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if k, ok := c.Next(ctx); ok || !errors.Is(c.Err(), device.ErrDeviceFailed) {
		t.Fatalf("after the device closed: key %q, %v, error %v; want none and a failed device", k, ok, c.Err())
	}
	if err := c.Close(); err != nil {
		t.Fatalf("closing a cursor its device closed: %v", err)
	}
}
