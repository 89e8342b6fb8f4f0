package array

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/faultdev"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/device/pebble"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
	"github.com/kvarray/kvarray/mechanism/hashing"
	"github.com/kvarray/kvarray/mechanism/replication"
)

// rig is an array over mem devices, with the devices at hand for fault
// injection.
type rig struct {
	t    testing.TB
	a    *Array
	mems []*mem.Device
	devs []device.Device
	opts []Option
}

// allMechanisms returns every mechanism with default parameters.
func allMechanisms() Option {
	return WithMechanisms(replication.New(3), hashing.New())
}

func newRig(t testing.TB, n int, opts ...Option) *rig {
	t.Helper()
	return newRigLimits(t, n, device.Limits{}, opts...)
}

// newRigLimits is newRig with device limits (zero fields: defaults).
func newRigLimits(t testing.TB, n int, l device.Limits, opts ...Option) *rig {
	t.Helper()
	return newRigWrapped(t, n, l, func(_ int, m *mem.Device) device.Device { return m }, opts...)
}

// newFaultRig is newRig over six mem devices, each wrapped by faultdev
// with the injector inject returns for it.
func newFaultRig(t testing.TB, inject func(i int, m *mem.Device) faultdev.Injector, opts ...Option) *rig {
	t.Helper()
	return newRigWrapped(t, 6, device.Limits{}, func(i int, m *mem.Device) device.Device {
		return faultdev.Wrap(m, inject(i, m))
	}, opts...)
}

// pieceTag tags each piece with its mechanism, as the config has Pebble
// devices do: the rigs' mem devices then keep values apart from keys, and
// a rebuild's scan works from the tags (see scanItems).
func pieceTag(v []byte) device.Tag { return device.Tag(format.Tag(v)) }

// newRigWrapped creates the array over n mem devices, each as wrap
// returns it.
func newRigWrapped(t testing.TB, n int, l device.Limits, wrap func(i int, m *mem.Device) device.Device, opts ...Option) *rig {
	t.Helper()
	return newRigOf(t, n, []mem.Option{mem.WithLimits(l), mem.WithTagger(pieceTag)}, wrap, opts...)
}

// newRigOf creates the array over n mem devices made with memOpts, each
// as wrap returns it.
func newRigOf(t testing.TB, n int, memOpts []mem.Option, wrap func(i int, m *mem.Device) device.Device, opts ...Option) *rig {
	t.Helper()
	r := &rig{t: t, opts: opts}
	for i := range n {
		m := mem.New(append([]mem.Option{mem.WithName(fmt.Sprintf("mem:dev%d", i))}, memOpts...)...)
		r.mems = append(r.mems, m)
		r.devs = append(r.devs, wrap(i, m))
	}
	a, err := Create(context.Background(), r.devs, opts...)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	r.a = a
	t.Cleanup(func() { _ = r.a.Close() })
	return r
}

// reopen opens a new Array over the same devices, as a restart would.
func (r *rig) reopen() {
	r.t.Helper()
	// Not Close: that would close the devices, which outlive the array
	// here. Its background work stops, as a process's would.
	r.a.haltOnce.Do(r.a.halt)
	a, err := Open(context.Background(), r.devs, r.opts...)
	if err != nil {
		r.t.Fatalf("reopen: %v", err)
	}
	r.a = a
}

// replace swaps device i for an empty one, as a new drive in the slot.
func (r *rig) replace(i int) {
	r.t.Helper()
	r.mems[i].Replace()
	if err := r.a.ReplaceDevice(context.Background(), i, nil); err != nil {
		r.t.Fatalf("replace %d: %v", i, err)
	}
}

// heal brings every device that answers back: Rebuild for replaced
// devices, Resync for devices that were failed or are still behind, in
// rounds as automatic resync does (a key of one device may need another
// device back first). It returns the outcome per device it worked on.
func (r *rig) heal() map[int]error {
	out, _ := r.healReports()
	return out
}

// healReports is heal with the report of each device's last heal.
func (r *rig) healReports() (map[int]error, map[int]RebuildReport) {
	var out map[int]error
	var reps map[int]RebuildReport
	for round := 0; round < 3; round++ {
		out, reps = map[int]error{}, map[int]RebuildReport{}
		for i := range r.mems {
			if r.mems[i].Failed() {
				continue
			}
			switch st := r.a.DeviceState(i); {
			case st == mechanism.Rebuilding:
				reps[i], out[i] = r.a.Rebuild(context.Background(), i)
			case st == mechanism.Failed, st == mechanism.Slow, r.a.env.MissedCount(i) > 0:
				reps[i], out[i] = r.a.Resync(context.Background(), i)
				if out[i] == nil && r.a.DeviceState(i) == mechanism.Rebuilding {
					reps[i], out[i] = r.a.Rebuild(context.Background(), i)
				}
			}
		}
		if errors.Join(slices.Collect(maps.Values(out))...) == nil {
			break
		}
	}
	return out, reps
}

// repairAll heals every device that answers, failing the test if one
// cannot be healed, then repairs keys (to fix corruption, which only reads
// and repairs notice).
func (r *rig) repairAll(keys []string) {
	r.t.Helper()
	for d, err := range r.heal() {
		if err != nil {
			r.t.Fatalf("heal device %d: %v", d, err)
		}
	}
	for _, k := range keys {
		if _, err := r.a.Repair(context.Background(), []byte(k)); err != nil {
			r.t.Fatalf("repair %q: %v", k, err)
		}
	}
}

func (r *rig) mustStore(key string, val []byte, opts ...CallOption) {
	r.t.Helper()
	if err := r.a.Store(context.Background(), []byte(key), val, opts...); err != nil {
		r.t.Fatalf("store %q: %v", key, err)
	}
}

func (r *rig) mustRead(key string, want []byte) {
	r.t.Helper()
	got, err := r.a.Retrieve(context.Background(), []byte(key))
	if err != nil {
		r.t.Fatalf("retrieve %q: %v", key, err)
	}
	if !bytes.Equal(got, want) {
		r.t.Fatalf("retrieve %q: %d bytes, want %d (differ at %d)", key, len(got), len(want), firstDiff(got, want))
	}
}

// piece reads and decodes split s of key on device i directly.
func (r *rig) piece(i int, key string, s int) (format.Value, error) {
	b, err := r.raw(i, key, s)
	if err != nil {
		return format.Value{}, err
	}
	return format.Decode(b)
}

// raw returns device i's piece of split s of key, unkeyed: under the data key, or
// under the bank key (mechanism.Banked) when only that, or a newer piece,
// is there.
func (r *rig) raw(i int, key string, s int) ([]byte, error) {
	ctx := context.Background()
	b, err := r.mems[i].Retrieve(ctx, format.Key([]byte(key), s, format.KindData))
	bb, berr := r.mems[i].Retrieve(ctx, format.Key([]byte(key), s, format.KindBank))
	// As the array reads them (format.Unkey).
	format.Unkey(format.Key([]byte(key), s, format.KindData), b, 0)
	format.Unkey(format.Key([]byte(key), s, format.KindBank), bb, 0)
	if berr != nil {
		return b, err
	}
	if err == nil {
		v, derr := format.Decode(b)
		bv, bderr := format.Decode(bb)
		if derr == nil && (bderr != nil || v.Version > bv.Version) {
			return b, nil
		}
	}
	return bb, nil
}

// churnKey is the i-th key of the tests that change keys under a heal.
func churnKey(i int) string { return fmt.Sprintf("key-%04d", i) }

// storeKeys stores n random 64-byte values under churnKey(0..n-1) and
// returns them, indexed as the keys.
func (r *rig) storeKeys(rng *rand.Rand, n int) [][]byte {
	r.t.Helper()
	model := make([][]byte, n)
	for i := range n {
		model[i] = randBytes(rng, 64)
		r.mustStore(churnKey(i), model[i])
	}
	return model
}

// holders returns the devices holding a piece of split s of key.
func (r *rig) holders(key string, s int) []int {
	var out []int
	for i, m := range r.mems {
		ok, _ := m.Exist(context.Background(), format.Key([]byte(key), s, format.KindData))
		bank, _ := m.Exist(context.Background(), format.Key([]byte(key), s, format.KindBank))
		if ok || bank {
			out = append(out, i)
		}
	}
	return out
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := rng.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// newRand returns a seeded source (see testSeed).
func newRand(t testing.TB) *rand.Rand {
	return rand.New(rand.NewPCG(testSeed(t), 0))
}

// testSeed returns a random seed, or SEED=n from the environment to
// replay a run, and logs it.
func testSeed(t testing.TB) uint64 {
	seed := rand.Uint64()
	if s := os.Getenv("SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (replay with SEED=%d)", seed, seed)
	return seed
}

// states lists what the array knows of each device.
func (r *rig) states() []string {
	var out []string
	for i := range r.mems {
		out = append(out, r.a.DeviceState(i).String())
	}
	return out
}

// openPebble opens (create: creates) a replication array over n Pebble
// devices in dir/0, dir/1, ..., each wrapped by faultdev with the
// injector inject returns for it; it returns the wrapped devices too.
func openPebble(t *testing.T, dir string, n int, create bool, inject func(i int) faultdev.Injector) (*Array, []device.Device) {
	t.Helper()
	devs := make([]device.Device, n)
	for i := range devs {
		d, err := pebble.Open(filepath.Join(dir, fmt.Sprint(i)), pebble.WithCreate(true))
		if err != nil {
			t.Fatal(err)
		}
		devs[i] = faultdev.Wrap(d, inject(i))
	}
	op := Open
	if create {
		op = Create
	}
	a, err := op(ctx, devs, allMechanisms(), WithDefault("replication"))
	if err != nil {
		t.Fatal(err)
	}
	return a, devs
}
