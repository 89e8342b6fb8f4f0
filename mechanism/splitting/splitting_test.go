package splitting

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/erasure"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
)

// rig is an array of mem devices with one Splitting mechanism over it.
type rig struct {
	t    testing.TB
	env  *mechanism.Env
	devs []*mem.Device
	m    *splitting
}

func newRig(t testing.TB, n, k, r int, limits device.Limits) *rig {
	t.Helper()
	limits = limits.WithDefaults()
	devs := make([]*mem.Device, n)
	ifaces := make([]device.Device, n)
	names := make([]string, n)
	for i := range devs {
		names[i] = fmt.Sprintf("mem:dev%d", i)
		devs[i] = mem.New(mem.WithName(names[i]), mem.WithLimits(limits))
		ifaces[i] = devs[i]
	}
	env := mechanism.NewEnv(ifaces, names, limits)
	return &rig{t: t, env: env, devs: devs, m: bind(t, New(k, r), env)}
}

func bind(t testing.TB, f mechanism.Factory, env *mechanism.Env) *splitting {
	t.Helper()
	m, err := f(env)
	if err != nil {
		t.Fatal(err)
	}
	return m.(*splitting)
}

func key(primary int) mechanism.Key {
	return mechanism.Key{User: []byte("user-key"), Primary: primary}
}

func object(value []byte, version uint64) mechanism.Object {
	return mechanism.Object{Splits: 1, ObjectLen: uint64(len(value)), Version: version}
}

func (g *rig) store(m *splitting, k mechanism.Key, value []byte, version uint64, prev *mechanism.Prev) error {
	return m.Store(context.Background(), k, object(value, version), value, prev)
}

func (g *rig) mustStore(k mechanism.Key, value []byte, version uint64) {
	g.t.Helper()
	if err := g.store(g.m, k, value, version, nil); err != nil {
		g.t.Fatal(err)
	}
}

// retrieve reads the primary as the array does, then asks the mechanism.
func (g *rig) retrieve(m *splitting, k mechanism.Key) ([]byte, format.Header, error) {
	have := g.env.Read(context.Background(), k.Data(), []int{k.Primary})
	return m.Retrieve(context.Background(), k, have)
}

// recover brings back the device at offset i of k with the data it had,
// and re-admits it as the array's resync would.
func (g *rig) recover(k mechanism.Key, i int) {
	d := g.env.Dev(k.Primary, i)
	g.devs[d].Recover()
	g.env.SetState(d, mechanism.Healthy)
}

// raw returns what device offset i of k holds under the key a write of
// version v puts its piece i under (mechanism.Key.PieceKey).
func (g *rig) raw(k mechanism.Key, i int, v uint64) ([]byte, error) {
	b, err := g.devs[g.env.Dev(k.Primary, i)].Retrieve(context.Background(), k.PieceKey(i, v))
	format.Unkey(k.PieceKey(i, v), b, 0) // as the Env reads it
	return b, err
}

// versionOf returns the version in the header of piece b.
func versionOf(t testing.TB, b []byte) uint64 {
	t.Helper()
	v, err := format.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return v.Version
}

// expect returns the pieces a store of value at version writes.
func (g *rig) expect(m *splitting, value []byte, version uint64) [][]byte {
	g.t.Helper()
	vals, _, err := m.encode(object(value, version), value)
	if err != nil {
		g.t.Fatal(err)
	}
	return vals // its buffer is not given back: vals stay valid
}

// checkPieces checks that offset i of k holds want[i] for every i not in
// skip.
func (g *rig) checkPieces(k mechanism.Key, want [][]byte, skip map[int]bool, what string) {
	g.t.Helper()
	for i := range want {
		if skip[i] {
			continue
		}
		got, err := g.raw(k, i, versionOf(g.t, want[i]))
		if err != nil || !bytes.Equal(got, want[i]) {
			g.t.Fatalf("%s: piece %d not as stored (err %v)", what, i, err)
		}
	}
}

func randomValue(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func newRand(t testing.TB) *rand.Rand {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, 0))
}

// TestLayout checks the on-device format independently of the mechanism's
// own reader: the pieces decode, record their geometry, hold the value in
// order with zero padding, and the parity is the codec's.
func TestLayout(t *testing.T) {
	rng := newRand(t)
	for _, geo := range [][2]int{{4, 2}, {1, 2}, {3, 1}, {2, 5}, {6, 1}} {
		for _, n := range []int{0, 1, 5, 4096, 65536 + 7} {
			t.Run(fmt.Sprintf("%dx%d/%d", geo[0], geo[1], n), func(t *testing.T) {
				g := newRig(t, 7, geo[0], geo[1], device.Limits{})
				k := key(rng.IntN(7))
				value := randomValue(rng, n)
				g.mustStore(k, value, 42)
				codec, _ := erasure.Lookup(erasure.ReedSolomon, geo[0], geo[1])
				size := codec.ShardSize(n)
				var shards [][]byte
				for i := 0; i < geo[0]+geo[1]; i++ {
					b, err := g.raw(k, i, 42)
					if err != nil {
						t.Fatalf("piece %d: %v", i, err)
					}
					v, err := format.Decode(b)
					if err != nil {
						t.Fatalf("piece %d: %v", i, err)
					}
					f := v.Fields
					if v.RM != format.RMSplitting || v.EC != erasure.ReedSolomon || v.SplitLen != uint32(n) ||
						v.Version != 42 || len(f) != fieldsLen(size) || int(f[0]) != geo[0] || int(f[1]) != geo[1] ||
						int(f[2]) != i || int(binary.LittleEndian.Uint32(f[3:])) != size || len(v.Payload) != size {
						t.Fatalf("piece %d: header %+v, payload %d bytes", i, v.Header, len(v.Payload))
					}
					// The block table: each block's CRC, seeded with the
					// version, the shard's index and the block's number.
					for b := 0; b*BlockSize < size; b++ {
						block := v.Payload[b*BlockSize : min((b+1)*BlockSize, size)]
						if got := binary.LittleEndian.Uint32(f[FieldsLen+4*b:]); got != blockCRC(42, i, b, block) {
							t.Fatalf("piece %d block %d: table says %08x", i, b, got)
						}
					}
					shards = append(shards, v.Payload)
				}
				joined := bytes.Join(shards[:geo[0]], nil)
				if !bytes.Equal(joined[:n], value) || bytes.Count(joined[n:], []byte{0}) != len(joined)-n {
					t.Fatal("data shards do not hold the value followed by zeros")
				}
				if ok, err := codec.Verify(shards); !ok || err != nil {
					t.Fatalf("parity does not verify: %v", err)
				}
				if i := g.env.Dev(k.Primary, geo[0]+geo[1]); geo[0]+geo[1] < 7 {
					for _, key := range [][]byte{k.Data(), k.Bank()} {
						if _, err := g.devs[i].Retrieve(context.Background(), key); !errors.Is(err, device.ErrNotFound) {
							t.Fatalf("device past the span holds a piece: %v", err)
						}
					}
				}
			})
		}
	}
}

func TestRoundTrip(t *testing.T) {
	rng := newRand(t)
	g := newRig(t, 6, 0, 0, device.Limits{})
	if g.m.Width() != 6 || g.m.Tolerates() != 2 || g.m.Name() != Name || g.m.RM() != format.RMSplitting {
		t.Fatalf("defaults: width %d, tolerates %d", g.m.Width(), g.m.Tolerates())
	}
	if want := 4 * maxShard(device.DefaultMaxValueLen); g.m.SplitCap() != want {
		t.Fatalf("SplitCap %d, want %d", g.m.SplitCap(), want)
	}
	for _, n := range []int{0, 1, 4 << 10, 64 << 10, g.m.SplitCap()} {
		for primary := 0; primary < 6; primary += 5 {
			k := key(primary)
			value := randomValue(rng, n)
			g.mustStore(k, value, uint64(n+1))
			got, h, err := g.retrieve(g.m, k)
			if err != nil {
				t.Fatalf("%d bytes: %v", n, err)
			}
			if !bytes.Equal(got, value) {
				t.Fatalf("%d bytes: value differs", n)
			}
			if h.Version != uint64(n+1) || h.SplitLen != uint32(n) {
				t.Fatalf("%d bytes: header %+v", n, h)
			}
		}
	}
}

func TestSplitCap(t *testing.T) {
	g := newRig(t, 6, 4, 2, device.Limits{MaxValueLen: 4096})
	c := g.m.SplitCap()
	if want := 4 * maxShard(4096); c != want {
		t.Fatalf("SplitCap %d, want %d", c, want)
	}
	value := bytes.Repeat([]byte{0xa5}, c)
	g.mustStore(key(2), value, 1)
	if got, _, err := g.retrieve(g.m, key(2)); err != nil || !bytes.Equal(got, value) {
		t.Fatalf("at SplitCap: %v", err)
	}
	err := g.store(g.m, key(2), append(value, 0), 2, nil)
	if !errors.Is(err, device.ErrValueTooLarge) {
		t.Fatalf("SplitCap+1: %v", err)
	}
}

// TestReadsOnlyDataShards checks the common case costs k reads: parity is
// not read while the data shards are good.
func TestReadsOnlyDataShards(t *testing.T) {
	g := newRig(t, 6, 4, 2, device.Limits{})
	k := key(3)
	g.mustStore(k, []byte("hello, splitting"), 1)
	for _, d := range g.devs {
		d.ResetStats()
	}
	if _, _, err := g.retrieve(g.m, k); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		want := int64(1)
		if i >= 4 {
			want = 0
		}
		if got := g.devs[g.env.Dev(k.Primary, i)].Stats().Retrieves; got != want {
			t.Errorf("offset %d: %d reads, want %d", i, got, want)
		}
	}
}

// fault is what happens to one piece of a split.
type fault int

const (
	healthy fault = iota
	failed        // device fails
	corrupt       // piece is corrupted in place
	missing       // piece is deleted
)

func (f fault) String() string { return [...]string{"ok", "failed", "corrupt", "missing"}[f] }

// faultCombos calls fn with every assignment of faults to n pieces that has
// at most most faulty pieces.
func faultCombos(n, most int, fn func(faults []fault)) {
	faults := make([]fault, n)
	var rec func(i, bad int)
	rec = func(i, bad int) {
		if i == n {
			fn(faults)
			return
		}
		for f := healthy; f <= missing; f++ {
			if f != healthy && bad == most {
				break
			}
			faults[i] = f
			b := bad
			if f != healthy {
				b++
			}
			rec(i+1, b)
		}
		faults[i] = healthy
	}
	rec(0, 0)
}

func (g *rig) inject(k mechanism.Key, faults []fault) {
	g.t.Helper()
	for i, f := range faults {
		d := g.devs[g.env.Dev(k.Primary, i)]
		var err error
		switch f {
		case failed:
			d.Fail()
		case corrupt:
			// The piece is under whichever key its version chose.
			if err = d.Corrupt(k.Data()); errors.Is(err, device.ErrNotFound) {
				err = d.Corrupt(k.Bank())
			}
		case missing:
			err = errors.Join(d.Delete(context.Background(), k.Data()), d.Delete(context.Background(), k.Bank()))
		}
		if err != nil {
			g.t.Fatal(err)
		}
	}
}

// TestFaults runs every combination of up to two failed devices, two
// corrupt and two missing pieces over a 4+2 split on six devices: with up
// to two faults in all the split reads back byte-exact and is repaired,
// with more it is data loss naming the key.
func TestFaults(t *testing.T) {
	rng := newRand(t)
	for _, n := range []int{1, 1000} {
		value := randomValue(rng, n)
		var combos [7]int
		faultCombos(6, 6, func(faults []fault) {
			var kinds [4]int
			for _, f := range faults {
				kinds[f]++
			}
			if kinds[failed] > 2 || kinds[corrupt] > 2 || kinds[missing] > 2 {
				return
			}
			combos[6-kinds[healthy]]++
			what := fmt.Sprintf("%d bytes, faults %v", n, faults)
			g := newRig(t, 6, 4, 2, device.Limits{})
			k := key(rng.IntN(6))
			g.mustStore(k, value, 7)
			want := g.expect(g.m, value, 7)
			g.inject(k, faults)
			bad, dataBad, down := 0, false, map[int]bool{}
			for i, f := range faults {
				if f != healthy {
					bad++
					dataBad = dataBad || i < 4
				}
				if f == failed {
					down[i] = true
				}
			}
			got, _, err := g.retrieve(g.m, k)
			if bad > 2 {
				if !errors.Is(err, mechanism.ErrDataLoss) || !strings.Contains(err.Error(), "user-key") {
					t.Fatalf("%s: got %v, want data loss naming the key", what, err)
				}
				if _, err := g.m.Repair(context.Background(), k, nil); !errors.Is(err, mechanism.ErrDataLoss) {
					t.Fatalf("%s: repair: %v", what, err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, value) {
				t.Fatalf("%s: retrieve: %v (value equal: %v)", what, err, bytes.Equal(got, value))
			}
			// A read that had to decode repairs every shard it can reach;
			// one that only met good data shards touches nothing.
			remaining := 0
			for i, f := range faults {
				if f == corrupt || f == missing {
					if dataBad {
						if got, err := g.raw(k, i, versionOf(t, want[i])); err != nil || !bytes.Equal(got, want[i]) {
							t.Fatalf("%s: piece %d not repaired by the read: %v", what, i, err)
						}
					} else {
						remaining++
					}
				}
			}
			fixed, err := g.m.Repair(context.Background(), k, nil)
			if err != nil || fixed != remaining {
				t.Fatalf("%s: repair rewrote %d, want %d: %v", what, fixed, remaining, err)
			}
			g.checkPieces(k, want, down, what+" after repair")
			for i := range down {
				g.recover(k, i)
			}
			g.checkPieces(k, want, nil, what+" after recover")
			if fixed, err := g.m.Repair(context.Background(), k, nil); err != nil || fixed != 0 {
				t.Fatalf("%s: repair of a whole split rewrote %d: %v", what, fixed, err)
			}
		})
		// C(6, b) placements of b faults times the ways to give them kinds
		// with at most two of each kind.
		if want := [7]int{1, 6 * 3, 15 * 9, 20 * 24, 15 * 54, 6 * 90, 90}; combos != want {
			t.Fatalf("combinations by number of faults: %v, want %v", combos, want)
		}
	}
}

// staleRig stores a at version 1, then b at version 5 while the devices at
// the offsets in down are failed, and recovers them: they hold shards of
// version 1 next to shards of version 5. Both versions are in the same
// bank, as when a store does not know the value it replaces (in place). With at most r down the store is
// a degraded write, acknowledged, and the stale shards are recorded (reads
// see mechanism.ErrStale); with more it fails and records nothing.
func staleRig(t *testing.T, a, b []byte, down ...int) (*rig, mechanism.Key) {
	g := newRig(t, 6, 4, 2, device.Limits{})
	k := key(4)
	g.mustStore(k, a, 1)
	for _, i := range down {
		g.devs[g.env.Dev(k.Primary, i)].Fail()
	}
	err := g.store(g.m, k, b, 5, nil)
	if len(down) <= 2 && err != nil {
		t.Fatalf("degraded store with %d failed devices: %v", len(down), err)
	}
	if len(down) > 2 && !errors.Is(err, device.ErrDeviceFailed) {
		t.Fatalf("store with %d failed devices: %v", len(down), err)
	}
	for _, i := range down {
		g.recover(k, i)
	}
	return g, k
}

func TestStaleShards(t *testing.T) {
	rng := newRand(t)
	a, b := randomValue(rng, 3000), randomValue(rng, 3000)

	t.Run("one stale data shard", func(t *testing.T) {
		g, k := staleRig(t, a, b, 1)
		got, h, err := g.retrieve(g.m, k)
		if err != nil || !bytes.Equal(got, b) || h.Version != 5 {
			t.Fatalf("got version %d, %v; want b", h.Version, err)
		}
		g.checkPieces(k, g.expect(g.m, b, 5), nil, "after retrieve")
	})
	t.Run("two stale shards", func(t *testing.T) {
		g, k := staleRig(t, a, b, 0, 4)
		if got, _, err := g.retrieve(g.m, k); err != nil || !bytes.Equal(got, b) {
			t.Fatalf("got %v; want b", err)
		}
		g.checkPieces(k, g.expect(g.m, b, 5), nil, "after retrieve")
	})
	t.Run("stale plus corrupt", func(t *testing.T) {
		g, k := staleRig(t, a, b, 1)
		g.inject(k, []fault{healthy, healthy, corrupt})
		if got, _, err := g.retrieve(g.m, k); err != nil || !bytes.Equal(got, b) {
			t.Fatalf("got %v; want b", err)
		}
	})
	t.Run("stale never fills a gap", func(t *testing.T) {
		// Version 5 keeps three shards: mixing in the stale one would
		// "reconstruct" bytes that were never written.
		g, k := staleRig(t, a, b, 1)
		g.inject(k, []fault{healthy, healthy, healthy, healthy, failed, missing})
		_, _, err := g.retrieve(g.m, k)
		if !errors.Is(err, mechanism.ErrDataLoss) || !errors.Is(err, mechanism.ErrStale) {
			t.Fatalf("got %v, want data loss listing the stale shard", err)
		}
	})
	t.Run("wanted version", func(t *testing.T) {
		g, k := staleRig(t, a, b, 1)
		k.Want = 1
		if _, _, err := g.retrieve(g.m, k); !errors.Is(err, mechanism.ErrDataLoss) {
			t.Fatalf("version 1 has one shard left: %v", err)
		}
		k.Want = 5
		if got, _, err := g.retrieve(g.m, k); err != nil || !bytes.Equal(got, b) {
			t.Fatalf("version 5: %v", err)
		}
	})
	t.Run("unfinished write falls back", func(t *testing.T) {
		// Version 5 reached two devices only: its store failed, and
		// version 1, whole on four, is the value.
		g, k := staleRig(t, a, b, 2, 3, 4, 5)
		got, h, err := g.retrieve(g.m, k)
		if err != nil || !bytes.Equal(got, a) || h.Version != 1 {
			t.Fatalf("got version %d, %v; want a", h.Version, err)
		}
		g.checkPieces(k, g.expect(g.m, a, 1), nil, "after retrieve")
	})
}

// TestWiderLeftovers: shards a wider old geometry left beyond the new
// span (their delete failed) are never used, even when they would be
// enough to decode the old value.
func TestWiderLeftovers(t *testing.T) {
	rng := newRand(t)
	a, b := randomValue(rng, 500), randomValue(rng, 500)
	g := newRig(t, 8, 4, 2, device.Limits{})
	wide := bind(t, New(2, 6), g.env)
	k := key(5)
	if err := g.store(wide, k, a, 1, nil); err != nil {
		t.Fatal(err)
	}
	g.mustStore(k, b, 5) // no prev, same bank: offsets 6 and 7 keep version 1
	if got, _, err := g.retrieve(g.m, k); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("got %v, want b", err)
	}
	old := g.env.Read(context.Background(), k.Data(), []int{g.env.Dev(k.Primary, 6)})[0].Value.Header
	g.inject(k, []fault{failed, missing, corrupt})
	// Both readers and a repair with the old geometry's hint read the
	// leftovers, and must not take them for the value.
	for _, m := range []*splitting{g.m, wide} {
		if got, _, err := g.retrieve(m, k); !errors.Is(err, mechanism.ErrDataLoss) {
			t.Fatalf("%d+%d: got %v (a: %v), want data loss", m.k, m.r, err, bytes.Equal(got, a))
		}
	}
	if n, err := g.m.Repair(context.Background(), k, &old); !errors.Is(err, mechanism.ErrDataLoss) {
		t.Fatalf("repair: rewrote %d, %v; want data loss", n, err)
	}
}

// TestGeometryChange: a split written under another geometry is read,
// repaired and cleaned up by its own k and r.
func TestGeometryChange(t *testing.T) {
	rng := newRand(t)
	a, b := randomValue(rng, 777), randomValue(rng, 777)
	g := newRig(t, 8, 4, 2, device.Limits{})
	wide := bind(t, New(3, 5), g.env)
	k := key(6)
	if err := g.store(wide, k, a, 1, nil); err != nil {
		t.Fatal(err)
	}
	// Our 4+2 reads the 3+5 split, past its own width.
	g.inject(k, []fault{corrupt, missing, healthy, failed, healthy, healthy, corrupt})
	if got, _, err := g.retrieve(g.m, k); err != nil || !bytes.Equal(got, a) {
		t.Fatalf("3+5 through 4+2: %v", err)
	}
	g.checkPieces(k, g.expect(wide, a, 1), map[int]bool{3: true}, "after retrieve")
	g.recover(k, 3)

	// Overwriting with a narrower geometry drops the shards beyond it.
	have := g.env.Read(context.Background(), k.Data(), []int{k.Primary})
	prev := &mechanism.Prev{Header: have[0].Value.Header}
	if err := g.store(g.m, k, b, 2, prev); err != nil {
		t.Fatal(err)
	}
	for i := 6; i < 8; i++ {
		if _, err := g.raw(k, i, 1); !errors.Is(err, device.ErrNotFound) {
			t.Fatalf("offset %d after narrowing: %v", i, err)
		}
	}
	if got, _, err := g.retrieve(g.m, k); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("after narrowing: %v", err)
	}
}

func TestRelease(t *testing.T) {
	g := newRig(t, 8, 4, 2, device.Limits{})
	wide := bind(t, New(3, 5), g.env)
	k := key(1)
	if err := g.store(wide, k, []byte("to be released"), 1, nil); err != nil {
		t.Fatal(err)
	}
	have := g.env.Read(context.Background(), k.Data(), []int{k.Primary})
	hint := have[0].Value.Header
	// The hint's geometry, not ours, says how far the pieces go.
	if err := g.m.Release(context.Background(), k, &mechanism.Prev{Header: hint}, 2); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		_, err := g.raw(k, i, 1)
		if kept := i < 2; kept != (err == nil) {
			t.Fatalf("offset %d after release keeping 2: %v", i, err)
		}
	}
	if err := g.m.Release(context.Background(), k, &mechanism.Prev{Header: hint}, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.retrieve(g.m, k); !errors.Is(err, device.ErrNotFound) {
		t.Fatalf("after release: %v", err)
	}
}

func TestNotFound(t *testing.T) {
	g := newRig(t, 6, 4, 2, device.Limits{})
	k := key(0)
	_, _, err := g.retrieve(g.m, k)
	if !errors.Is(err, device.ErrNotFound) || errors.Is(err, mechanism.ErrDataLoss) {
		t.Fatalf("absent key: %v", err)
	}
	if n, err := g.m.Repair(context.Background(), k, nil); !errors.Is(err, device.ErrNotFound) || n != 0 {
		t.Fatalf("repair of an absent key: %d, %v", n, err)
	}
	// A later split of a value whose split 0 was read: its absence is loss.
	k.Want = 9
	if _, _, err := g.retrieve(g.m, k); !errors.Is(err, mechanism.ErrDataLoss) {
		t.Fatalf("absent wanted split: %v", err)
	}
}

// TestForeignPieces: pieces of another mechanism inside the span are bad
// shards, rewritten by a repair.
func TestForeignPieces(t *testing.T) {
	g := newRig(t, 6, 4, 2, device.Limits{})
	k := key(2)
	value := []byte("splitting over a replication leftover")
	g.mustStore(k, value, 5)
	h := format.Header{RM: format.RMReplication, Splits: 1, SplitLen: 3, ObjectLen: 3, Version: 9, Fields: []byte{3}}
	if err := g.devs[g.env.Dev(k.Primary, 1)].Store(context.Background(), k.Data(), format.Encode(&h, []byte("old"))); err != nil {
		t.Fatal(err)
	}
	if got, _, err := g.retrieve(g.m, k); err != nil || !bytes.Equal(got, value) {
		t.Fatalf("got %v", err)
	}
	g.checkPieces(k, g.expect(g.m, value, 5), nil, "after retrieve")
}

func TestNew(t *testing.T) {
	g := newRig(t, 6, 4, 2, device.Limits{})
	for _, geo := range [][2]int{{4, 3}, {6, 1}, {-1, 2}, {2, -1}, {300, 1}} {
		if _, err := New(geo[0], geo[1])(g.env); err == nil {
			t.Errorf("k=%d r=%d accepted on 6 devices", geo[0], geo[1])
		}
	}
	small := mechanism.NewEnv(g.env5(), []string{"a", "b", "c", "d", "e"}, device.DefaultLimits())
	if _, err := New(0, 0)(small); err == nil || !strings.Contains(err.Error(), "needs 6 devices") {
		t.Errorf("4+2 on 5 devices: %v", err)
	}
	tiny := mechanism.NewEnv(g.env5()[:4], []string{"a", "b", "c", "d"}, device.Limits{MaxValueLen: format.HeaderLen + FieldsLen})
	if _, err := New(2, 1)(tiny); err == nil {
		t.Error("values too small for a shard accepted")
	}
}

func (g *rig) env5() []device.Device {
	out := make([]device.Device, 5)
	for i := range out {
		out[i] = g.devs[i]
	}
	return out
}

func TestCanceled(t *testing.T) {
	g := newRig(t, 6, 4, 2, device.Limits{})
	k := key(0)
	g.mustStore(k, []byte("value"), 1)
	g.inject(k, []fault{corrupt})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	have := g.env.Read(context.Background(), k.Data(), []int{k.Primary})
	_, _, err := g.m.Retrieve(ctx, k, have)
	if !errors.Is(err, context.Canceled) || errors.Is(err, mechanism.ErrDataLoss) {
		t.Fatalf("canceled read: %v", err)
	}
}

var benchSizes = []struct {
	name string
	n    int
}{{"1KiB", 1 << 10}, {"4KiB", 4 << 10}, {"16KiB", 16 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}}

// BenchmarkStore stores one split of 4+2 on six mem devices.
func BenchmarkStore(b *testing.B) {
	for _, s := range benchSizes {
		b.Run(s.name, func(b *testing.B) {
			g := newRig(b, 6, 4, 2, device.Limits{})
			value := randomValue(rand.New(rand.NewPCG(1, 2)), s.n)
			k := key(1)
			ctx := context.Background()
			b.SetBytes(int64(s.n))
			b.ReportAllocs()
			v := uint64(0)
			for b.Loop() {
				v++
				if err := g.m.Store(ctx, k, object(value, v), value, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRetrieve reads one healthy split of 4+2 on six mem devices;
// the primary's piece is read as the array does, outside the mechanism.
func BenchmarkRetrieve(b *testing.B) {
	for _, s := range benchSizes {
		b.Run(s.name, func(b *testing.B) { benchRetrieve(b, s.n, nil) })
	}
}

// BenchmarkRetrieveDegraded reads with the second data device failed: the
// split is decoded from parity (not repaired, as the device stays down).
func BenchmarkRetrieveDegraded(b *testing.B) {
	for _, s := range benchSizes {
		b.Run(s.name, func(b *testing.B) {
			benchRetrieve(b, s.n, func(g *rig, k mechanism.Key) { g.devs[g.env.Dev(k.Primary, 1)].Fail() })
		})
	}
}

func benchRetrieve(b *testing.B, n int, setup func(*rig, mechanism.Key)) {
	g := newRig(b, 6, 4, 2, device.Limits{})
	value := randomValue(rand.New(rand.NewPCG(1, 2)), n)
	k := key(1)
	g.mustStore(k, value, 1)
	if setup != nil {
		setup(g, k)
	}
	ctx := context.Background()
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		have := g.env.Read(ctx, k.Data(), []int{k.Primary})
		if _, _, err := g.m.Retrieve(ctx, k, have); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncode is Store without the devices: shard layout, parity,
// headers and checksums. Set against erasure's BenchmarkEncode it is the
// mechanism's own CPU cost around the codec.
func BenchmarkEncode(b *testing.B) {
	for _, s := range benchSizes {
		b.Run(s.name, func(b *testing.B) {
			g := newRig(b, 6, 4, 2, device.Limits{})
			value := randomValue(rand.New(rand.NewPCG(1, 2)), s.n)
			b.SetBytes(int64(s.n))
			b.ReportAllocs()
			for b.Loop() {
				_, buf, err := g.m.encode(object(value, 1), value)
				if err != nil {
					b.Fatal(err)
				}
				putBuf(buf)
			}
		})
	}
}

// BenchmarkFloorWrite writes the k+r pieces a Store writes, already
// encoded: the device and Env cost any 4+2 layout pays. Store minus this is
// the mechanism's own cost.
func BenchmarkFloorWrite(b *testing.B) {
	for _, s := range benchSizes {
		b.Run(s.name, func(b *testing.B) {
			g := newRig(b, 6, 4, 2, device.Limits{})
			value := randomValue(rand.New(rand.NewPCG(1, 2)), s.n)
			k := key(1)
			vals := g.expect(g.m, value, 1)
			devs := g.env.Span(k, 0, 6)
			ctx := context.Background()
			b.SetBytes(int64(s.n))
			b.ReportAllocs()
			for b.Loop() {
				if err := g.env.Write(ctx, k.Data(), devs, vals, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFloorRead reads the primary's piece and then the other k-1
// data pieces, as a healthy Retrieve does, without joining them.
func BenchmarkFloorRead(b *testing.B) {
	for _, s := range benchSizes {
		b.Run(s.name, func(b *testing.B) {
			g := newRig(b, 6, 4, 2, device.Limits{})
			k := key(1)
			g.mustStore(k, randomValue(rand.New(rand.NewPCG(1, 2)), s.n), 1)
			ctx := context.Background()
			b.SetBytes(int64(s.n))
			b.ReportAllocs()
			for b.Loop() {
				have := g.env.Read(ctx, k.Data(), []int{k.Primary})
				if p := g.env.ReadSpan(ctx, k, 0, 4, have); !p[3].OK() {
					b.Fatal(p[3].Err)
				}
			}
		})
	}
}

// TestOutOfPlace: an overwrite with a version of the other bank touches no
// shard of the value it replaces but the primary's, so a store cut short
// at any point leaves the old value or the new one readable, and repair
// then drops the other bank.
func TestOutOfPlace(t *testing.T) {
	rng := newRand(t)
	a, b := randomValue(rng, 3000), randomValue(rng, 3000)
	const va, vb = 1, 2 // bank 0, bank 1
	if mechanism.Banked(1, va) || !mechanism.Banked(1, vb) {
		t.Fatal("test versions are not in different banks")
	}
	ctx := context.Background()
	// cut writes b's pieces at the given offsets only, as a store of b
	// cut short (by a crash) leaves them.
	cut := func(g *rig, k mechanism.Key, offsets ...int) {
		t.Helper()
		want := g.expect(g.m, b, vb)
		for _, i := range offsets {
			if err := g.devs[g.env.Dev(k.Primary, i)].Store(ctx, k.PieceKey(i, vb), want[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name    string
		written []int // b's pieces that landed
		want    []byte
	}{
		{"nothing landed", nil, a},
		{"shard 0 only", []int{0}, a},
		{"half of each", []int{0, 1, 2}, a},
		{"all but shard 0", []int{1, 2, 3, 4, 5}, a},
		{"k with shard 0", []int{0, 2, 4, 5}, b},
		{"everything", []int{0, 1, 2, 3, 4, 5}, b},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newRig(t, 6, 4, 2, device.Limits{})
			k := key(3)
			g.mustStore(k, a, va)
			cut(g, k, tc.written...)
			got, h, err := g.retrieve(g.m, k)
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("got version %d, %v; want the value of %s", h.Version, err, map[bool]string{true: "a", false: "b"}[bytes.Equal(tc.want, a)])
			}
			if _, err := g.m.Repair(ctx, k, nil); err != nil {
				t.Fatal(err)
			}
			v := uint64(va)
			if bytes.Equal(tc.want, b) {
				v = vb
			}
			g.checkPieces(k, g.expect(g.m, tc.want, v), nil, "after repair")
			// Nothing of the other write is left past the primary.
			for i := 1; i < 6; i++ {
				if _, err := g.raw(k, i, v^mechanism.BankBit); !errors.Is(err, device.ErrNotFound) {
					t.Fatalf("offset %d keeps the other bank's piece after repair: %v", i, err)
				}
			}
			// And the value survives losing any two devices.
			for x := 0; x < 6; x++ {
				for y := x + 1; y < 6; y++ {
					g.devs[g.env.Dev(k.Primary, x)].Fail()
					g.devs[g.env.Dev(k.Primary, y)].Fail()
					got, _, err := g.retrieve(g.m, k)
					g.recover(k, x)
					g.recover(k, y)
					if err != nil || !bytes.Equal(got, tc.want) {
						t.Fatalf("offsets %d and %d lost: %v", x, y, err)
					}
				}
			}
		})
	}

	t.Run("the primary lost, both banks whole", func(t *testing.T) {
		// b's store landed everywhere but on the primary, which then
		// failed: the newest whole write wins.
		g := newRig(t, 6, 4, 2, device.Limits{})
		k := key(3)
		g.mustStore(k, a, va)
		cut(g, k, 1, 2, 3, 4, 5)
		g.devs[k.Primary].Fail()
		if got, _, err := g.retrieve(g.m, k); err != nil || !bytes.Equal(got, b) {
			t.Fatalf("got %v, want b", err)
		}
	})

	t.Run("overwrite releases the old bank", func(t *testing.T) {
		g := newRig(t, 6, 4, 2, device.Limits{})
		k := key(3)
		g.mustStore(k, a, va)
		have := g.env.Read(ctx, k.Data(), []int{k.Primary})
		if err := g.store(g.m, k, b, vb, &mechanism.Prev{Header: have[0].Value.Header}); err != nil {
			t.Fatal(err)
		}
		g.checkPieces(k, g.expect(g.m, b, vb), nil, "after the overwrite")
		for i := 1; i < 6; i++ {
			if _, err := g.raw(k, i, va); !errors.Is(err, device.ErrNotFound) {
				t.Fatalf("offset %d keeps a's shard: %v", i, err)
			}
		}
		// Release removes both banks.
		cut(g, k) // nothing
		if err := g.devs[g.env.Dev(k.Primary, 1)].Store(ctx, k.Data(), g.expect(g.m, a, va)[1]); err != nil {
			t.Fatal(err)
		}
		if err := g.m.Release(ctx, k, &mechanism.Prev{Header: have[0].Value.Header}, 0); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 6; i++ {
			for _, key := range [][]byte{k.Data(), k.Bank()} {
				if _, err := g.devs[g.env.Dev(k.Primary, i)].Retrieve(ctx, key); !errors.Is(err, device.ErrNotFound) {
					t.Fatalf("offset %d after release: %v", i, err)
				}
			}
		}
	})

	t.Run("degraded overwrite writes the primary last", func(t *testing.T) {
		// With r devices down the old value keeps k-1 shards past the
		// primary: the primary's shard must be the last to change. A
		// store whose other shards fail (a device fails under it, and
		// comes back) leaves the primary alone.
		g := newRig(t, 6, 4, 2, device.Limits{})
		k := key(3)
		g.mustStore(k, a, va)
		g.devs[g.env.Dev(k.Primary, 4)].Fail()
		g.devs[g.env.Dev(k.Primary, 5)].Fail()
		g.env.SetState(g.env.Dev(k.Primary, 4), mechanism.Failed)
		g.env.SetState(g.env.Dev(k.Primary, 5), mechanism.Failed)
		g.devs[g.env.Dev(k.Primary, 3)].Fail() // fails under the store
		have := g.env.Read(ctx, k.Data(), []int{k.Primary})
		if err := g.store(g.m, k, b, vb, &mechanism.Prev{Header: have[0].Value.Header}); !errors.Is(err, device.ErrDeviceFailed) {
			t.Fatalf("store with three devices down: %v", err)
		}
		if p, err := g.raw(k, 0, va); err != nil || !bytes.Equal(p, g.expect(g.m, a, va)[0]) {
			t.Fatalf("the primary's shard changed: %v", err)
		}
		// The third device comes back with a's shard: a has k again.
		g.recover(k, 3)
		if got, _, err := g.retrieve(g.m, k); err != nil || !bytes.Equal(got, a) {
			t.Fatalf("got %v, want a", err)
		}
	})
}

// maxShard is the largest shard that fits a device value of n bytes with
// its header and block table.
func maxShard(n int) int {
	s := n - format.HeaderLen - FieldsLen
	for s+4*((s+BlockSize-1)/BlockSize) > n-format.HeaderLen-FieldsLen {
		s--
	}
	if s >= alignFrom*BlockSize {
		s -= s % BlockSize
	}
	return s
}
