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
	want := func(k []byte, _ device.Tag) device.Want {
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
		switch w := want(k, 0); {
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

// TestScanFilteredTags: with a tagger, want sees each value's tag
// without its value being read. Invariants: a separated value's tag (kept
// by Pebble beside the key when it flushed) and an inline or unflushed
// value's (computed from it) are the tagger's, across a reopen; a tag past
// device.MaxTag is 0, unknown; without a tagger every tag is 0.
func TestScanFilteredTags(t *testing.T) {
	dir := t.TempDir()
	tagger := func(v []byte) device.Tag { return device.Tag(v[0] - '0') }
	d, err := Open(dir, WithCreate(true), WithTagger(tagger))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	value := func(i int) []byte {
		v := []byte{byte('0' + i%9)} // tags 0 to 8: 8 is past MaxTag
		if i%3 != 0 {
			v = append(v, bytes.Repeat([]byte("v"), 4096)...) // separated when flushed
		}
		return v
	}
	store := func(from, to int) {
		for i := from; i < to; i++ {
			if err := d.Store(ctx, fmt.Appendf(nil, "key-%02d", i), value(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(d *Device, tagged bool) {
		t.Helper()
		got := map[string]device.Tag{}
		err := d.ScanFiltered(ctx, nil, nil, func(k []byte, tag device.Tag) device.Want {
			got[string(k)] = tag
			return device.KeyOnly
		}, func(k, v []byte) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 36 {
			t.Fatalf("%d keys seen, want 36", len(got))
		}
		for i := range 36 {
			want := device.Tag(i % 9)
			if want > device.MaxTag || !tagged {
				want = 0
			}
			if k := fmt.Sprintf("key-%02d", i); got[k] != want {
				t.Errorf("%s: tag %d, want %d", k, got[k], want)
			}
		}
	}
	store(0, 18)
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	store(18, 36) // in the memtable
	check(d, true)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if d, err = Open(dir, WithTagger(tagger)); err != nil {
		t.Fatal(err)
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	check(d, true)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if d, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Close() }()
	check(d, false)
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
