package pebble_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/pebble"
	"github.com/kvarray/kvarray/mechanism"
	"github.com/kvarray/kvarray/mechanism/packing"
	"github.com/kvarray/kvarray/mechanism/replication"
	"github.com/kvarray/kvarray/mechanism/splitting"
)

const nDevs = 6

// small device values, so that a value of a few hundred KiB is huge: split
// over several splits.
var limits = device.Limits{MaxValueLen: 64 << 10}

var arrayOpts = []array.Option{
	array.WithMechanisms(replication.New(3), packing.New(4, 2, 0), splitting.New(4, 2)),
	array.WithMode(array.Hybrid),
	array.WithRules(array.Rule{Max: 2 << 10, RM: "replication"}, array.Rule{Max: 8 << 10, RM: "packing"}, array.Rule{RM: "splitting"}),
	array.WithMaxValue(1 << 20),
}

// openDevs opens the devices in dirs; one that cannot be opened stands in
// as unavailable, as the CLI does.
func openDevs(t *testing.T, dirs []string, create bool) []device.Device {
	t.Helper()
	devs := make([]device.Device, len(dirs))
	for i, dir := range dirs {
		d, err := pebble.Open(dir, pebble.WithCreate(create), pebble.WithLimits(limits))
		if err != nil {
			t.Logf("device %d: %v", i, err)
			devs[i] = device.Unavailable("pebble:"+dir, err)
			continue
		}
		devs[i] = d
	}
	return devs
}

// createArray creates an array of nDevs new Pebble devices in a test
// directory.
func createArray(t *testing.T) ([]string, []device.Device, *array.Array) {
	t.Helper()
	root := t.TempDir()
	dirs := make([]string, nDevs)
	for i := range dirs {
		dirs[i] = filepath.Join(root, fmt.Sprintf("dev%d", i))
	}
	devs := openDevs(t, dirs, true)
	a, err := array.Create(t.Context(), devs, arrayOpts...)
	if err != nil {
		t.Fatal(err)
	}
	return dirs, devs, a
}

// harm damages the files of one closed device.
var harms = []struct {
	name string
	fn   func(t *testing.T, dir string)
}{
	{"sstable blocks", func(t *testing.T, dir string) {
		for _, f := range glob(t, dir, "*.sst") {
			b, _ := os.ReadFile(f)
			for _, off := range []int{len(b) / 4, len(b) / 2, len(b) - 400} {
				for i := off; i < off+16 && i >= 0 && i < len(b); i++ {
					b[i] ^= 0xff
				}
			}
			if err := os.WriteFile(f, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}},
	{"wal", func(t *testing.T, dir string) {
		for _, f := range glob(t, dir, "*.log") {
			b, _ := os.ReadFile(f)
			for i := len(b) / 3; i < len(b)/3+16; i++ {
				b[i] ^= 0xff
			}
			if err := os.WriteFile(f, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}},
	{"manifest", func(t *testing.T, dir string) {
		for _, f := range glob(t, dir, "MANIFEST-*") {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
		}
	}},
}

func glob(t *testing.T, dir, pattern string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, pattern))
	if len(m) == 0 {
		t.Fatalf("no %s in %s", pattern, dir)
	}
	return m
}

// TestArrayOverCorruptDevice: an array of 6 Pebble devices holding small,
// medium and huge values (replication, packing, splitting over several
// splits) has one device's files damaged. Invariant: the array opens,
// every value reads back byte-exact, Scrub with repair succeeds, and with
// another device then gone every value still reads back.
func TestArrayOverCorruptDevice(t *testing.T) {
	for _, h := range harms {
		t.Run(strings.ReplaceAll(h.name, " ", "_"), func(t *testing.T) {
			ctx := t.Context()
			rng := rand.New(rand.NewPCG(1, 2))
			dirs, devs, a := createArray(t)
			want := map[string][]byte{}
			sizes := []int{10, 1500, 6000, 100 << 10, 300 << 10}
			put := func(from, to int) {
				for i := from; i < to; i++ {
					k := fmt.Sprintf("key-%03d", i)
					v := make([]byte, sizes[i%len(sizes)])
					for j := range v {
						v[j] = byte(rng.Uint32())
					}
					if err := a.Store(ctx, []byte(k), v); err != nil {
						t.Fatalf("store %q: %v", k, err)
					}
					want[k] = v
				}
			}
			put(0, 40)
			for _, d := range devs {
				if err := d.(*pebble.Device).Flush(); err != nil {
					t.Fatal(err)
				}
			}
			put(40, 60) // these only in the WALs
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			const bad, gone = 2, 4
			h.fn(t, dirs[bad])

			check := func(a *array.Array, when string) {
				t.Helper()
				for k, v := range want {
					got, err := a.Retrieve(ctx, []byte(k))
					if err != nil || !bytes.Equal(got, v) {
						t.Fatalf("%s: retrieve %q: %d bytes, %v; want %d bytes", when, k, len(got), err, len(v))
					}
				}
			}
			devs = openDevs(t, dirs, false)
			a, err := array.Open(ctx, devs, arrayOpts...)
			if err != nil {
				t.Fatalf("open the array with device %d damaged: %v", bad, err)
			}
			check(a, "damaged device")
			// Writes go on: overwrites (some changing mechanism) and
			// deletes, with the damaged device in the array.
			put(0, 10)
			for i := 10; i < 15; i++ {
				k := fmt.Sprintf("key-%03d", i)
				v := make([]byte, sizes[(i+2)%len(sizes)])
				for j := range v {
					v[j] = byte(rng.Uint32())
				}
				if err := a.Store(ctx, []byte(k), v); err != nil {
					t.Fatalf("overwrite %q with %d bytes: %v", k, len(v), err)
				}
				want[k] = v
			}
			for i := 15; i < 20; i++ {
				k := fmt.Sprintf("key-%03d", i)
				if err := a.Delete(ctx, []byte(k)); err != nil {
					t.Fatalf("delete %q: %v", k, err)
				}
				delete(want, k)
			}
			check(a, "after writes")
			rep, err := a.Scrub(ctx, true)
			if err != nil {
				t.Fatalf("scrub --repair: %v", err)
			}
			t.Logf("scrub: %+v", rep)
			check(a, "after scrub")
			_ = a.Close()

			devs = openDevs(t, dirs, false)
			_ = devs[gone].Close()
			devs[gone] = device.Unavailable("pebble:"+dirs[gone], fmt.Errorf("removed by the test"))
			a, err = array.Open(ctx, devs, arrayOpts...)
			if err != nil {
				t.Fatalf("open the array without device %d: %v", gone, err)
			}
			defer a.Close()
			check(a, fmt.Sprintf("device %d gone too", gone))
		})
	}
}

// TestArrayReadsThroughCorruptBlocks: one device of a serving array starts
// returning blocks that fail their checksums (its tables and blob files
// rot under it). Invariant: every value still reads back byte-exact,
// overwrites (some changing mechanism) and deletes succeed, and the values
// written then read back too.
func TestArrayReadsThroughCorruptBlocks(t *testing.T) {
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(3, 4))
	root := t.TempDir()
	const bad = 2
	var rot atomic.Bool
	devs := make([]device.Device, nDevs)
	pdevs := make([]*pebble.Device, nDevs)
	for i := range devs {
		opts := []pebble.Option{pebble.WithCreate(true), pebble.WithLimits(limits)}
		if i == bad {
			opts = append(opts, pebble.WithFlippedReads(&rot))
		}
		d, err := pebble.Open(filepath.Join(root, fmt.Sprintf("dev%d", i)), opts...)
		if err != nil {
			t.Fatal(err)
		}
		devs[i], pdevs[i] = d, d
	}
	a, err := array.Create(ctx, devs, arrayOpts...)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	want := map[string][]byte{}
	sizes := []int{10, 1500, 6000, 100 << 10, 300 << 10}
	value := func(i int) []byte {
		v := make([]byte, sizes[i%len(sizes)])
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		return v
	}
	for i := range 40 {
		k := fmt.Sprintf("key-%03d", i)
		v := value(i)
		if err := a.Store(ctx, []byte(k), v); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	// Into tables and blob files, out of any cache: reads go to the files.
	if err := pdevs[bad].Flush(); err != nil {
		t.Fatal(err)
	}
	rot.Store(true)
	check := func(when string) {
		t.Helper()
		for k, v := range want {
			got, err := a.Retrieve(ctx, []byte(k))
			if err != nil || !bytes.Equal(got, v) {
				t.Fatalf("%s: retrieve %q: %d bytes, %v; want %d bytes", when, k, len(got), err, len(v))
			}
		}
	}
	check("blocks rotting")
	if n := pdevs[bad].Corruptions(); n == 0 {
		t.Fatalf("device %d reported no corrupt block: the test read nothing from its files", bad)
	}
	if s := a.DeviceState(bad); s != mechanism.Healthy {
		t.Errorf("device %d is %v after reads of corrupt blocks, want healthy (only those pieces are bad)", bad, s)
	}
	for i := range 30 {
		k := fmt.Sprintf("key-%03d", i)
		v := value(i + 1 + i%3) // some change mechanism
		if err := a.Store(ctx, []byte(k), v); err != nil {
			t.Fatalf("overwrite %q with %d bytes: %v", k, len(v), err)
		}
		want[k] = v
	}
	for i := 30; i < 35; i++ {
		k := fmt.Sprintf("key-%03d", i)
		if err := a.Delete(ctx, []byte(k)); err != nil {
			t.Fatalf("delete %q: %v", k, err)
		}
		delete(want, k)
	}
	check("after writes")
	t.Logf("device %d: %d corrupt blocks reported, %v at the end", bad, pdevs[bad].Corruptions(), a.DeviceState(bad))
}

// TestArrayListingKeepsIterators: on Pebble devices, a paged listing
// keeps its devices' iterators open between pages (array/cursors.go)
// while keys are stored and deleted, flushed and compacted under them:
// every key present for the whole listing is listed exactly once, and
// closing the array with a listing still kept closes its iterators first
// (Pebble refuses to close under an open one).
func TestArrayListingKeepsIterators(t *testing.T) {
	ctx := t.Context()
	_, devs, a := createArray(t)
	rng := rand.New(rand.NewPCG(3, 4))
	sizes := []int{10, 1500, 6000, 100 << 10}
	store := func(k string) {
		t.Helper()
		v := make([]byte, sizes[rng.IntN(len(sizes))])
		if err := a.Store(ctx, []byte(k), v); err != nil {
			t.Fatalf("store %q: %v", k, err)
		}
	}
	for i := range 300 {
		store(fmt.Sprintf("key-%04d", 2*i))
	}
	seen := map[string]int{}
	var after []byte
	for page := 0; ; page++ {
		keys, next, err := a.KeysFrom(ctx, nil, after, 10)
		if err != nil {
			t.Fatalf("page %d: %v", page, err)
		}
		for _, k := range keys {
			seen[string(k)]++
		}
		// Odd keys come and go on both sides of the cursor; the tables
		// under the open iterators are flushed and compacted away.
		for j := range 4 {
			k := fmt.Sprintf("key-%04d", 2*rng.IntN(300)+1)
			if j%2 == 0 {
				store(k)
			} else if err := a.Delete(ctx, []byte(k)); err != nil && !errors.Is(err, array.ErrNotFound) {
				t.Fatal(err)
			}
		}
		if page%10 == 0 {
			for _, d := range devs {
				if err := d.(*pebble.Device).Flush(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if next == nil {
			break
		}
		after = next
	}
	for i := range 300 {
		if k := fmt.Sprintf("key-%04d", 2*i); seen[k] != 1 {
			t.Fatalf("%s, present for the whole listing, listed %d times", k, seen[k])
		}
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("%s listed %d times", k, n)
		}
	}
	// A listing left after its first page, its iterators still open.
	if _, next, err := a.KeysFrom(ctx, nil, nil, 10); err != nil || next == nil {
		t.Fatalf("first page: next %q, %v", next, err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("close with a listing kept: %v", err)
	}
}
