package array

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/mechanism/replication"
	"github.com/kvarray/kvarray/mechanism/splitting"
)

// sizedDevices returns mem devices of the given capacities.
func sizedDevices(caps []int64, opts ...mem.Option) ([]*mem.Device, []device.Device) {
	var mems []*mem.Device
	var devs []device.Device
	for i, c := range caps {
		m := mem.New(append([]mem.Option{mem.WithName(fmt.Sprintf("mem:dev%d", i)), mem.WithCapacity(c)}, opts...)...)
		mems = append(mems, m)
		devs = append(devs, m)
	}
	return mems, devs
}

// fills returns each device's used/capacity.
func fills(t *testing.T, mems []*mem.Device) []float64 {
	t.Helper()
	out, err := fillsOf(mems)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func fillsOf(mems []*mem.Device) ([]float64, error) {
	out := make([]float64, len(mems))
	for i, m := range mems {
		info, err := m.Info(context.Background())
		if err != nil {
			return nil, err
		}
		out[i] = float64(info.Used) / float64(info.Capacity)
	}
	return out, nil
}

// TestEvenFill is issue 13's "Done means": an array with one device twice
// the size of the others fills evenly (within 10%) under a uniform
// workload until the small devices are 90% full. The weights come from
// the devices' capacities; every store must succeed on the way.
func TestEvenFill(t *testing.T) {
	const small = 16 << 20
	for _, tc := range []struct {
		name string
		caps []int64
		opts []Option
		min  int // value sizes, uniform in [min, max)
		max  int
	}{
		{"replication", []int64{small, small, 2 * small, small, small, small},
			[]Option{WithMechanisms(replication.New(3))}, 64, 8 << 10},
		{"hybrid-replication-splitting", []int64{small, small, small, small, small, small, small, small, small, small, 2 * small, small},
			[]Option{WithMechanisms(replication.New(3), splitting.New(4, 2)), WithMode(Hybrid),
				WithRules(Rule{Max: 8 << 10, RM: "replication"}, Rule{RM: "splitting"})}, 64, 64 << 10},
		// kvarray init's thresholds: Packing's parities, chosen per set,
		// follow the weights too.
		{"hybrid-all-four", []int64{small, small, small, small, small, small, small, small, small, small, 2 * small, small},
			[]Option{everyMechanism(), WithMode(Hybrid),
				WithRules(Rule{Max: 8 << 10, RM: "replication"}, Rule{Max: 32 << 10, RM: "packing"}, Rule{RM: "splitting"})}, 64, 64 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			mems, devs := sizedDevices(tc.caps)
			a, err := Create(ctx, devs, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if a.Weights() == nil {
				t.Fatal("devices of different capacities: the array should be weighted")
			}
			fillTo(t, a, mems, 0.9, tc.min, tc.max)
			f := fills(t, mems)
			lo, hi := slices.Min(f), slices.Max(f)
			t.Logf("weights %v, used/capacity %.3f", a.Weights(), f)
			if hi > 1.1*lo {
				t.Errorf("fill ratios %.3f: the fullest is %.1f%% above the emptiest, want at most 10%%", f, 100*(hi/lo-1))
			}
		})
	}
}

// fillTo stores random keys with random values of sizes in [lo, hi),
// concurrently, until a device other than the largest is at least target
// full; every store must succeed.
func fillTo(t *testing.T, a *Array, mems []*mem.Device, target float64, lo, hi int) {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	done := false
	var failed error
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 13))
			for n := 0; ; n++ {
				mu.Lock()
				stop := done || failed != nil
				mu.Unlock()
				if stop {
					return
				}
				key := fmt.Appendf(nil, "k%d-%016x", g, rng.Uint64())
				val := make([]byte, lo+rng.IntN(hi-lo))
				for i := range val {
					val[i] = byte(rng.Uint32())
				}
				if err := a.Store(ctx, key, val); err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
					return
				}
				if n%16 == 0 {
					f, err := fillsOf(mems)
					mu.Lock()
					if err != nil {
						failed = err
					}
					for i, x := range f {
						if x >= target && !a.isLargest(i) {
							done = true
						}
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if failed != nil {
		t.Fatalf("store failed at fills %.3f: %v", fills(t, mems), failed)
	}
}

// isLargest reports whether device i has the array's largest weight.
func (a *Array) isLargest(i int) bool {
	w := a.Weights()
	return w != nil && w[i] == slices.Max(w)
}

// TestFullRefusal: a store that would overfill a device fails with
// device.ErrNoSpace, and by then the weighted placement has filled every
// device almost as much (the space the refusal leaves unused elsewhere
// is small).
func TestFullRefusal(t *testing.T) {
	ctx := context.Background()
	const small = 4 << 20
	mems, devs := sizedDevices([]int64{small, 2 * small, small, small, small, small})
	a, err := Create(ctx, devs, WithMechanisms(replication.New(3)))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; ; n++ {
		key := fmt.Appendf(nil, "key-%d", n)
		val := randBytes(rng, 64+rng.IntN(4<<10))
		err := a.Store(ctx, key, val)
		if err == nil {
			continue
		}
		if !errors.Is(err, device.ErrNoSpace) {
			t.Fatalf("store %d: %v, want device.ErrNoSpace", n, err)
		}
		// A failed store's outcome is undetermined, never an error.
		if got, err := a.Retrieve(ctx, key); err != nil && !errors.Is(err, ErrNotFound) || err == nil && !bytes.Equal(got, val) {
			t.Fatalf("after the refused store: %d bytes, %v", len(got), err)
		}
		f := fills(t, mems)
		t.Logf("first refusal after %d stores, used/capacity %.3f", n, f)
		if lo := slices.Min(f); lo < 0.9 {
			t.Errorf("fills %.3f at the first refusal: a device is %.1f%% full, want ≥ 90%%", f, 100*lo)
		}
		return
	}
}

// TestLegacyArrayOpens opens an array written by the code before weights
// (testdata/legacy-array.txt: "device hex(key) hex(value)" for every key
// of 5 mem devices of 2 KiB pieces, dumped by commit 0d7f495 after it
// created the array with the options below and stored the values checked
// here) over devices of different capacities: it keeps the unweighted
// placement its header says, and every value reads back.
func TestLegacyArrayOpens(t *testing.T) {
	ctx := context.Background()
	data, err := os.ReadFile("testdata/legacy-array.txt")
	if err != nil {
		t.Fatal(err)
	}
	// Devices of different sizes: the header, not the sizes, decides.
	mems, devs := sizedDevices([]int64{1 << 20, 2 << 20, 3 << 20, 4 << 20, 5 << 20}, mem.WithLimits(device.Limits{MaxValueLen: 2048}))
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var dev int
		var k, v string
		if _, err := fmt.Sscanf(line, "%d %s %s", &dev, &k, &v); err != nil {
			t.Fatalf("fixture line %q: %v", line, err)
		}
		kb, _ := hex.DecodeString(k)
		vb, _ := hex.DecodeString(v)
		if err := mems[dev].Store(ctx, kb, vb); err != nil {
			t.Fatal(err)
		}
	}
	opts := []Option{WithMechanisms(replication.New(3), splitting.New(2, 1)), WithMode(Hybrid),
		WithRules(Rule{Max: 256, RM: "replication"}, Rule{RM: "splitting"}), WithWeights(5, 1, 1, 1, 1)}
	a, err := Open(ctx, devs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if w := a.Weights(); w != nil {
		t.Fatalf("an array from before weights opened with weights %v", w)
	}
	sizes := []int{1, 10, 50, 100, 200, 256, 300, 1000, 3000, 9000}
	for i, n := range sizes {
		key := []byte(fmt.Sprintf("legacy-%02d", i))
		got, err := a.Retrieve(ctx, key)
		if err != nil {
			t.Fatalf("retrieve %s: %v", key, err)
		}
		if want := bytes.Repeat(key, n/len(key)+1)[:n]; !bytes.Equal(got, want) {
			t.Fatalf("retrieve %s: %d bytes, want %d", key, len(got), len(want))
		}
		if p := a.primary(key, 0); p != int(hash(key)%5) {
			t.Fatalf("%s: primary %d, want (hash mod N) %d", key, p, hash(key)%5)
		}
	}
}

// TestWeightedPlacement: on a weighted array every piece goes where the
// placement says (pieces of one split on distinct devices), the weights
// survive a reopen, and a rebuild of the largest device restores its
// pieces (huge values' splits included), after which the array survives
// the loss of two others.
func TestWeightedPlacement(t *testing.T) {
	ctx := context.Background()
	mems, devs := sizedDevices([]int64{4 << 20, 4 << 20, 8 << 20, 4 << 20, 4 << 20, 4 << 20, 4 << 20, 4 << 20}, mem.WithLimits(device.Limits{MaxValueLen: 4096}))
	opts := []Option{WithMechanisms(replication.New(3), splitting.New(2, 2)), WithMode(Hybrid),
		WithRules(Rule{Max: 1000, RM: "replication"}, Rule{RM: "splitting"})}
	a, err := Create(ctx, devs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, a: a, mems: mems, devs: devs, opts: opts}
	t.Cleanup(func() { _ = r.a.Close() })
	want := a.Weights()
	if !slices.Equal(want, []uint64{4 << 20, 4 << 20, 8 << 20, 4 << 20, 4 << 20, 4 << 20, 4 << 20, 4 << 20}) {
		t.Fatalf("weights %v, want the capacities", want)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	vals := map[string][]byte{}
	apart := 0
	for i := range 300 {
		key := fmt.Sprintf("key-%d", i)
		vals[key] = randBytes(rng, 10+rng.IntN(6000))
		if i%50 == 0 {
			vals[key] = randBytes(rng, 100<<10) // 13 splits
		}
		r.mustStore(key, vals[key])
		w := 3
		if len(vals[key]) > 1000 {
			w = 4
		}
		span := a.env.Span(a.key([]byte(key), 0), 0, w)
		if got := r.holders(key, 0); !slices.Equal(got, slices.Sorted(slices.Values(span))) {
			t.Fatalf("%s: pieces on %v, placement %v", key, got, span)
		}
		if (span[1]-span[0]+8)%8 != 1 {
			apart++
		}
	}
	if apart == 0 {
		t.Fatal("every split on consecutive devices: the weights place nothing")
	}
	r.reopen()
	if got := r.a.Weights(); !slices.Equal(got, want) {
		t.Fatalf("weights after reopen %v, want %v", got, want)
	}
	r.replace(2)
	r.repairAll(nil)
	for key := range vals {
		w := 3
		if len(vals[key]) > 1000 {
			w = 4
		}
		if !slices.Contains(r.holders(key, 0), 2) && slices.Contains(r.a.env.Span(r.a.key([]byte(key), 0), 0, w), 2) {
			t.Fatalf("%s: not rebuilt on device 2", key)
		}
	}
	mems[0].Fail()
	mems[5].Fail()
	for key, v := range vals {
		r.mustRead(key, v)
	}
}

// TestWeightsDisagree: a device whose header records other weights than
// the others' is refused at open (the array cannot tell which place the
// keys), and a weighted header survives encoding.
func TestWeightsDisagree(t *testing.T) {
	ctx := context.Background()
	mems, devs := sizedDevices([]int64{1 << 20, 2 << 20, 1 << 20, 1 << 20, 1 << 20})
	a, err := Create(ctx, devs, WithMechanisms(replication.New(3)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := mems[3].Retrieve(ctx, headerKey)
	if err != nil {
		t.Fatal(err)
	}
	h, err := decodeHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(h.weights, a.Weights()) || h.pos != 3 {
		t.Fatalf("device 3's header: weights %v position %d, the array's weights %v", h.weights, h.pos, a.Weights())
	}
	h.weights[0]++
	if err := mems[3].Store(ctx, headerKey, h.encode()); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, devs, WithMechanisms(replication.New(3))); err == nil || !strings.Contains(err.Error(), "device 3 (mem:dev3) records placement weights") {
		t.Fatalf("open with a device of other weights: %v", err)
	}
}
