package array

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/pebble"
	"github.com/kvarray/kvarray/device/redis"
	"github.com/kvarray/kvarray/device/redis/redistest"
	"github.com/kvarray/kvarray/format"
)

// checkSwappedPieces (issue 40, item 2): on every device of a, split 0
// pieces of two keys are swapped (a misdirected write: each key's piece
// holds the other key's bytes, valid but for its key). A piece's checksum
// covers the key it is stored under (format.KeyPiece), so neither is
// believed: a read returns each key's own value (from its other pieces)
// or, for a Hashing value (one piece, nothing to read instead), an error,
// never the other key's bytes; after scrub --repair, every redundant
// value reads right and a second scrub finds nothing wrong with them.
func checkSwappedPieces(t *testing.T, a *Array) {
	rms := []string{"hashing", "replication", "splitting", "packing"}
	rng := newRand(t)
	want, rmOf := map[string][]byte{}, map[string]string{}
	var keys []string
	for i := range 48 {
		key := fmt.Sprintf("swap-%02d", i)
		v := randBytes(rng, 200+rng.IntN(3000))
		if err := a.Store(ctx, []byte(key), v, Using(rms[i%len(rms)])); err != nil {
			t.Fatalf("store %s: %v", key, err)
		}
		want[key], rmOf[key] = v, rms[i%len(rms)]
		keys = append(keys, key)
	}
	swapped := map[string]bool{}
	for d := range a.N() {
		dev := a.env.Device(d)
		var held []string
		for _, key := range keys {
			if ok, _ := dev.Exist(ctx, format.Key([]byte(key), 0, format.KindData)); ok && !swapped[key] {
				held = append(held, key)
			}
		}
		if len(held) < 2 {
			continue
		}
		x, y := held[0], held[1]
		kx, ky := format.Key([]byte(x), 0, format.KindData), format.Key([]byte(y), 0, format.KindData)
		bx, err := dev.Retrieve(ctx, kx)
		if err != nil {
			t.Fatal(err)
		}
		by, err := dev.Retrieve(ctx, ky)
		if err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(dev.Store(ctx, kx, by), dev.Store(ctx, ky, bx)); err != nil {
			t.Fatal(err)
		}
		swapped[x], swapped[y] = true, true
		t.Logf("device %d: swapped the pieces of %s (%s) and %s (%s)", d, x, rmOf[x], y, rmOf[y])
	}
	if len(swapped) == 0 {
		t.Fatal("no two keys share a device")
	}
	check := func(what string) {
		t.Helper()
		for _, key := range keys {
			got, err := a.Retrieve(ctx, []byte(key))
			switch {
			case err == nil && !bytes.Equal(got, want[key]):
				t.Fatalf("%s: %s (%s, swapped %v) reads %d wrong bytes", what, key, rmOf[key], swapped[key], len(got))
			case err != nil && (rmOf[key] != "hashing" || !swapped[key]):
				t.Fatalf("%s: %s (%s, swapped %v): %v", what, key, rmOf[key], swapped[key], err)
			}
		}
	}
	check("swapped")
	if _, err := a.Scrub(ctx, true); err != nil {
		t.Logf("scrub --repair: %v (the Hashing values swapped are lost)", err)
	}
	check("repaired")
	// What is left is the Hashing values swapped: lost, their one piece
	// not theirs (a key with no readable header counts as unlocated).
	lost := int64(0)
	for key := range swapped {
		if rmOf[key] == "hashing" {
			lost++
		}
	}
	rep, _ := a.Scrub(ctx, false)
	for _, m := range rep.Mechanisms {
		if m.BadPieces > 0 || m.Unrecoverable > 0 && (m.Mechanism != "unlocated" || m.Unrecoverable > lost) {
			t.Fatalf("scrub after the repair (%d Hashing values lost): %+v", lost, rep.Mechanisms)
		}
	}
}

// TestSwappedPieces runs checkSwappedPieces on mem, Pebble and redis://
// devices.
func TestSwappedPieces(t *testing.T) {
	t.Run("mem", func(t *testing.T) {
		r := newRigLimits(t, 6, device.Limits{MaxValueLen: 16 << 10}, everyMechanism())
		checkSwappedPieces(t, r.a)
	})
	t.Run("pebble", func(t *testing.T) {
		dir := t.TempDir()
		devs := make([]device.Device, 6)
		for i := range devs {
			d, err := pebble.Open(filepath.Join(dir, fmt.Sprint(i)), pebble.WithCreate(true))
			if err != nil {
				t.Fatal(err)
			}
			devs[i] = d
		}
		checkSwappedPieces(t, createOn(t, devs))
	})
	t.Run("redis", func(t *testing.T) {
		redistest.Need(t, "redis-server")
		devs := make([]device.Device, 6)
		for i, srv := range redistest.StartN(t, 6) {
			d, err := redis.Open(ctx, srv.URL(0), redis.WithTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			devs[i] = d
		}
		checkSwappedPieces(t, createOn(t, devs))
	})
}

// createOn creates an array of every mechanism on devs, closed at the
// test's end.
func createOn(t *testing.T, devs []device.Device) *Array {
	t.Helper()
	a, err := Create(ctx, devs, everyMechanism())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}
