package bench

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/config"
	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/mechanism"
)

// tiny is a run small enough for unit tests: 4 KiB values, 200
// operations per phase, devices as fast as the host.
func tiny() Options {
	o := Defaults()
	o.Sizes = []int{4 << 10}
	o.Duration = 0
	o.Ops = 200
	o.Threads, o.QueueDepth = 2, 4
	o.Backend = Mem(mem.Perf{})
	// The range workload has its own test (TestRangeWorkload).
	o.Workloads = slices.DeleteFunc(o.Workloads, func(w string) bool { return w == Range })
	return o
}

// TestRangeWorkload runs the range workload on values of a few splits:
// every target's rows are there and consistent (Check: Splitting reads at
// most two bytes per byte wanted), and a range read moves two pieces at
// most from the devices (split 0's primary piece and the covering one,
// each at most a device value), not the value.
func TestRangeWorkload(t *testing.T) {
	o := tiny()
	o.Workloads = []string{Range}
	o.Ops = 30
	o.RangeValue, o.RangeIO, o.RangeKeys = 5<<20, 4<<10, 2
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Check(); err != nil {
		t.Fatal(err)
	}
	for _, res := range rep.Results {
		if most := 2 * float64(device.DefaultMaxValueLen) / float64(o.RangeIO); res.Workload == RangeRead && res.ReadAmp > most {
			t.Errorf("%s %s/%s: read amplification %.0f, want at most two pieces' (%.0f)", res.Workload, res.Mechanism, res.Mode, res.ReadAmp, most)
		}
	}
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil || !strings.Contains(b.String(), "range-read") {
		t.Errorf("table: %v\n%s", err, b.String())
	}
	t.Log(b.String())
}

func TestHistQuantiles(t *testing.T) {
	var h hist
	// 1..10000 µs: the q-quantile is q·10000 µs, within a bucket (1.6%).
	for i := 1; i <= 10000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, q := range []float64{0.5, 0.99, 0.999} {
		got, want := h.quantile(q), time.Duration(q*10000)*time.Microsecond
		if math.Abs(float64(got-want)) > 0.016*float64(want) {
			t.Errorf("quantile %v = %v, want %v ± 1.6%%", q, got, want)
		}
	}
	if h.max != 10*time.Millisecond || h.n != 10000 {
		t.Errorf("max %v n %d", h.max, h.n)
	}
	// Small values are exact; buckets are contiguous and increasing.
	var small hist
	small.record(5)
	if small.quantile(0.5) != 5 {
		t.Errorf("quantile of {5ns} = %v", small.quantile(0.5))
	}
	prev := uint64(0)
	for i := 1; i < (64-subBits)<<subBits; i++ { // the buckets of 64-bit values
		lo, w := lowest(i)
		if lo <= prev || bucket(lo) != i || bucket(lo+w-1) != i {
			t.Fatalf("bucket %d: lowest %d width %d (previous %d)", i, lo, w, prev)
		}
		prev = lo
	}
}

// TestZipf checks the skew: with θ = 0.99 over 1000 keys the most popular
// key takes about 1/ζ(1000, 0.99) ≈ 13% of the draws, and uniform about
// 0.1%.
func TestZipf(t *testing.T) {
	const n, draws = 1000, 200000
	for _, tc := range []struct {
		dist     string
		min, max float64
	}{{Zipfian, 0.11, 0.15}, {Uniform, 0, 0.002}} {
		f, err := chooserFactory(tc.dist, 0.99, n, 7)
		if err != nil {
			t.Fatal(err)
		}
		c := f(0)
		counts := make([]int, n)
		for range draws {
			i := c.next()
			if i < 0 || i >= n {
				t.Fatalf("%s: key %d out of range", tc.dist, i)
			}
			counts[i]++
		}
		top := float64(slices.Max(counts)) / draws
		if top < tc.min || top > tc.max {
			t.Errorf("%s: the most popular key takes %.4f of the draws, want %v..%v", tc.dist, top, tc.min, tc.max)
		}
	}
	if _, err := chooserFactory(Zipfian, 1.5, 10, 1); err == nil {
		t.Error("θ = 1.5 accepted")
	}
	if _, err := chooserFactory("pareto", 0.5, 10, 1); err == nil {
		t.Error("unknown distribution accepted")
	}
}

func TestKey(t *testing.T) {
	if got := string(key(nil, 42)); got != "kvbench0000000042" {
		t.Errorf("key(42) = %q", got)
	}
}

// TestCountingMatchesMem: the counting wrapper counts what mem's own
// Stats count, through single ops and batches.
func TestCountingMatchesMem(t *testing.T) {
	ctx := context.Background()
	m := mem.New()
	c := &counting{Device: mem.New()}
	for _, d := range []device.Device{m, c} {
		_ = d.Store(ctx, []byte("key1"), []byte("hello"))
		_, _ = d.Retrieve(ctx, []byte("key1"))
		_, _ = d.Retrieve(ctx, []byte("nope"))
		_, _ = d.Exist(ctx, []byte("key1"))
		_ = d.Batch(ctx, []device.Op{{Kind: device.OpStore, Key: []byte("key2"), Value: []byte("abc")},
			{Kind: device.OpRetrieve, Key: []byte("key2")}, {Kind: device.OpDelete, Key: []byte("key1")}})
		_ = d.Iterate(ctx, nil, func([]byte) error { return nil })
	}
	if got, want := c.counts(), (memCounter{m}).counts(); got != want {
		t.Errorf("counting %+v, mem %+v", got, want)
	}
	c.reset()
	if c.counts() != (Counts{}) {
		t.Errorf("after reset: %+v", c.counts())
	}
}

// TestRunConsistent runs every workload on fast devices and checks the
// device operations per user operation against each mechanism's
// geometry, exactly (the counts do not depend on timing).
func TestRunConsistent(t *testing.T) {
	o := tiny()
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Check(); err != nil {
		t.Fatal(err)
	}
	// Check catches what it should: a mechanism writing one piece too
	// many, a missing result.
	rep.Results[5].PerOp.Writes++
	rep.Results = rep.Results[1:]
	err = rep.Check()
	if err == nil || !strings.Contains(err.Error(), "device writes per") || !strings.Contains(err.Error(), "0 results, want 1") {
		t.Errorf("Check of a broken report: %v", err)
	}
}

func TestRebuildWithTheArray(t *testing.T) {
	o := tiny()
	o.Rebuild, o.RebuildKeys = true, 300
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rebuild) == 0 {
		t.Fatal("no rebuild results")
	}
	for _, r := range rep.Rebuild {
		if r.Rebuilt == 0 || r.KeysPerSec <= 0 {
			t.Fatalf("rebuild of %s: %+v", r.Mechanism, r)
		}
	}
}

// repairRebuild rebuilds a device with what the array has today: adopt
// the device, then repair every key.
func repairRebuild(ctx context.Context, a *array.Array, dev int) (RebuildCounts, error) {
	var c RebuildCounts
	if err := a.AdoptDevice(ctx, dev); err != nil {
		return c, err
	}
	keys, err := a.Keys(ctx, nil)
	if err != nil {
		return c, err
	}
	for _, k := range keys {
		n, err := a.Repair(ctx, k)
		if err != nil {
			return c, err
		}
		if n > 0 {
			c.Keys++
			c.Pieces += int64(n)
		}
	}
	a.SetDeviceState(dev, mechanism.Healthy)
	return c, nil
}

// TestRebuildHook runs the rebuild benchmark with a stand-in rebuild.
func TestRebuildHook(t *testing.T) {
	rebuilder = repairRebuild
	t.Cleanup(func() { rebuilder = nil })
	o := tiny()
	o.Workloads = nil
	o.Rebuild, o.RebuildKeys = true, 300
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rebuild) != len(o.RebuildMechanisms) {
		t.Fatalf("%d rebuild results, want %d", len(rep.Rebuild), len(o.RebuildMechanisms))
	}
	for _, r := range rep.Rebuild {
		// Device 0 of 6 holds a piece of 3/6 of the keys with 3 copies,
		// of every key with 4+2 shards, of about 1/6 (members) and more
		// (parities) with packing.
		bounds := map[string][2]float64{"replication": {0.3, 0.7}, "splitting": {1, 1}, "packing": {0.1, 1}}[r.Mechanism]
		lo, hi := bounds[0], bounds[1]
		frac := float64(r.Rebuilt) / float64(r.Keys)
		if frac < lo || frac > hi || r.Pieces < r.Rebuilt || r.Seconds <= 0 || r.KeysPerSec <= 0 || r.MiBPerSec <= 0 || r.DeviceOps.Stores == 0 {
			t.Errorf("%s: %+v (rebuilt fraction %.2f, want %v..%v)", r.Mechanism, r, frac, lo, hi)
		}
	}
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil || !strings.Contains(b.String(), "REBUILD") {
		t.Errorf("table: %v\n%s", err, b.String())
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*Options)
		want string
	}{
		{func(o *Options) { o.Workloads = []string{"scan"} }, `workload "scan"`},
		{func(o *Options) { o.Mechanisms = []string{"raid5"} }, `mechanism "raid5"`},
		{func(o *Options) { o.Modes = []string{"custom"} }, `mode "custom"`},
		{func(o *Options) { o.Sizes = nil }, "no value size"},
		{func(o *Options) { o.Threads = 0 }, "threads"},
		{func(o *Options) { o.Ops = 0 }, "operations per phase"},
		{func(o *Options) { o.Dist = "pareto" }, "distribution"},
		{func(o *Options) { o.Rebuild, o.RebuildMechanisms = true, []string{"hashing"} }, "nothing to rebuild from"},
	} {
		o := tiny()
		tc.mod(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one containing %q", err, tc.want)
		}
	}
}

// TestConfigBackend: configured devices are used and erased between
// measurements; devices that hold data are refused.
func TestConfigBackend(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Default(dir, 6)
	cfg.SetDir(dir)
	o := tiny()
	o.Ops = 50
	o.Workloads = []string{Store, Retrieve}
	o.Mechanisms = []string{"replication"}
	o.Modes = []string{ModeStandalone}
	o.Backend = Config(cfg)
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 4 || rep.Backend != "config" {
		t.Fatalf("%d results from backend %q", len(rep.Results), rep.Backend)
	}
	for i, d := range config.OpenDevices(cfg, false) {
		info, err := d.Info(context.Background())
		if err != nil || info.Keys != 0 {
			t.Errorf("device %d after the run: %+v, %v", i, info, err)
		}
		if i == 0 {
			_ = d.Store(context.Background(), []byte("precious"), []byte("data"))
		}
		_ = d.Close()
	}
	o.Backend = Config(cfg)
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "holds 1 keys") {
		t.Errorf("a device with data: %v, want a refusal", err)
	}
}

func TestPebbleBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("pebble devices")
	}
	o := tiny()
	o.Ops = 50
	o.Workloads = []string{Store, Retrieve}
	o.Mechanisms = []string{"splitting"}
	o.Modes = []string{ModeHybrid}
	dir := t.TempDir()
	o.Backend = Pebble(dir)
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := rep.Lookup(Store, "4.0 KiB", "splitting", ModeHybrid)
	// New keys on an array created empty: no read before write (the
	// metadata cache is complete).
	if !ok || r.PerOp.Writes != 6 || r.PerOp.Reads != 0 {
		t.Errorf("splitting hybrid store over pebble: %+v", r.PerOp)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

func TestChart(t *testing.T) {
	o := tiny()
	o.Sizes = []int{1 << 10, 4 << 10}
	rep := syntheticReport(o)
	var b bytes.Buffer
	if err := rep.Chart(&b, "svg"); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	for _, want := range []string{"<svg", "Store", "Retrieve, mixed sizes", "% of None", "replication hybrid", "hybrid thresholds"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	if err := (&Report{}).Chart(&b, "svg"); err == nil {
		t.Error("empty report charted")
	}
}

// syntheticReport is a report with every target of o and made-up numbers.
func syntheticReport(o Options) *Report {
	r := &runner{o: o}
	rep := newReport(o)
	rng := rand.New(rand.NewPCG(1, 2))
	add := func(w string, size int, t target) {
		ops := 1000 + rng.Float64()*30000
		rep.Results = append(rep.Results, Result{Workload: w, Size: size, SizeLabel: sizeLabel(size), Mechanism: t.mech, Mode: t.mode,
			Ops: 100, Seconds: 100 / ops, OpsPerSec: ops})
	}
	for _, w := range []string{Store, Retrieve, Update, Delete} {
		for _, s := range o.Sizes {
			for _, t := range r.sizedTargets() {
				add(w, s, t)
			}
		}
	}
	for _, w := range []string{MixedStore, MixedRetrieve} {
		for _, t := range r.mixedTargets() {
			add(w, 0, t)
		}
	}
	rep.finish()
	return rep
}

// TestTinyRow: the tiny-values target (docs/tiny-values.md) runs every
// sized workload and the mixed one, its rows pass Check, and 16-byte
// values under the bench's 17-byte keys take less space than with
// Replication, which tolerates as many losses (MemEC's point); the
// charts draw the row.
func TestTinyRow(t *testing.T) {
	o := tiny()
	o.Workloads = []string{Store, Retrieve, Update, Delete, Mixed}
	o.Mechanisms = []string{Tiny, "replication"}
	o.Modes = []string{ModeStandalone}
	o.Sizes = []int{16}
	o.Ops = 4000
	o.Threads, o.QueueDepth = 4, 16
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Check(); err != nil {
		t.Fatal(err)
	}
	space := map[string]float64{}
	for _, res := range rep.Results {
		if res.Workload == Store {
			space[res.Mechanism] = res.StorageOverhead
		}
	}
	t.Logf("storage overhead at 16 B: %v", space)
	if space[Tiny] == 0 || space[Tiny] >= space["replication"]/2 {
		t.Errorf("storage overhead at 16 B: tiny %.2f, replication %.2f: want tiny under half of replication's", space[Tiny], space["replication"])
	}
	var svg bytes.Buffer
	if err := rep.Chart(&svg, "svg"); err != nil || !strings.Contains(svg.String(), "tiny") {
		t.Errorf("chart: %v (a tiny label: %v)", err, strings.Contains(svg.String(), "tiny"))
	}
}
