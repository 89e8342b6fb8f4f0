package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/device/pebble"
)

// TestMalformed checks that every malformed config is refused with an error
// that says what is wrong (and where, when the YAML itself is wrong), and
// that opening it creates nothing on disk.
func TestMalformed(t *testing.T) {
	const devs = "devices: [pebble:data/dev0, pebble:data/dev1, pebble:data/dev2, pebble:data/dev3]\n"
	cases := []struct {
		name, yaml string
		want       []string // substrings of the error
	}{
		{"empty", "", []string{"empty", "devices"}},
		{"no devices", "devices: []\n", []string{"devices: none listed"}},
		{"devices missing", "mode: standalone\n", []string{"devices: none listed"}},
		{"unknown top-level field", devs + "colour: blue\n", []string{`line 2: unknown field "colour"`}},
		{"unknown nested field", devs + "thresholds:\n  - {max: 8KiB, rm: replication}\n  - {rm: replication, min: 1}\n",
			[]string{`line 4: unknown field "min"`}},
		{"unknown device field", devs + "device: {max_keys: 10}\n", []string{`line 2: unknown field "max_keys"`}},
		{"devices not a list", "devices: pebble:data/dev0\n", []string{"line 1", "cannot unmarshal"}},
		{"bad size", devs + "max_value: 8XB\n", []string{"line 2", `size "8XB"`}},
		{"negative size", devs + "max_value: -1\n", []string{"line 2", `size "-1"`}},
		{"bad value cache", devs + "value_cache: lots\n", []string{"line 2", `size "lots"`}},
		{"bad duration", devs + "packing: {k: 2, r: 1, wait: soon}\n", []string{"line 2", `duration "soon"`}},
		{"slow ratio under 1", devs + "slow: {ratio: 0.5}\n", []string{"slow: ratio must be at least 1"}},
		{"slow negative floor", devs + "slow: {floor: -1s}\n", []string{"slow: ratio must be at least 1, floor, ceiling and grace not negative"}},
		{"slow negative grace", devs + "slow: {grace: -5s}\n", []string{"slow: ratio must be at least 1, floor, ceiling and grace not negative"}},
		{"slow unknown field", devs + "slow: {threshold: 2}\n", []string{`line 2: unknown field "threshold"`}},
		{"syntax", devs + "mode: [hybrid\n", []string{"line"}},
		{"two documents", devs + "---\n" + devs, []string{"more than one YAML document"}},
		{"unknown mode", devs + "mode: raid\n", []string{`mode "raid": want standalone or hybrid`}},
		{"unknown default", devs + "default: raid5\n", []string{`default: unknown mechanism "raid5"`, "hashing, replication"}},
		{"unknown rm", devs + "thresholds: [{max: 1KiB, rm: raid5}, {rm: replication}]\n",
			[]string{`thresholds[0].rm: unknown mechanism "raid5"`}},
		{"rm missing", devs + "thresholds: [{max: 1KiB}]\n", []string{"thresholds[0]: rm missing"}},
		{"rm without section", devs + "thresholds: [{max: 1KiB, rm: replication}, {rm: splitting}]\n",
			[]string{"thresholds[1].rm: mechanism splitting needs a splitting section"}},
		{"default without section", devs + "default: splitting\n", []string{"default: mechanism splitting needs a splitting section"}},
		{"not ascending", devs + "thresholds: [{max: 8KiB, rm: replication}, {max: 4KiB, rm: hashing}, {rm: replication}]\n",
			[]string{"thresholds[1].max 4KiB is not larger than thresholds[0].max 8KiB", "ascending"}},
		{"equal maxes", devs + "thresholds: [{max: 8KiB, rm: replication}, {max: 8192, rm: hashing}]\n",
			[]string{"thresholds[1].max 8KiB is not larger than thresholds[0].max 8KiB"}},
		{"catch-all not last", devs + "thresholds: [{rm: hashing}, {max: 8KiB, rm: replication}]\n",
			[]string{"thresholds[0] has no max", "not the last rule"}},
		{"zero max", devs + "thresholds: [{max: 0, rm: hashing}, {rm: replication}]\n",
			[]string{"thresholds[0].max must be positive"}},
		{"copies > devices", devs + "replication: {copies: 5}\n", []string{"replication.copies 5 is more than the 4 devices"}},
		{"zero copies", devs + "replication: {copies: 0}\n", []string{"replication.copies 0: want at least 1"}},
		{"tiny without packing", devs + "tiny: {max: 64B, buckets: 16}\n", []string{"tiny: buckets are stored with packing"}},
		{"tiny without buckets", devs + "packing: {k: 2, r: 1}\ntiny: {max: 64B}\n", []string{"tiny.buckets 0"}},
		{"default copies > devices", "devices: [pebble:a, pebble:b]\nreplication: {copies: 3}\n", []string{"replication.copies 3 is more than the 2 devices"}},
		{"k+r > devices", devs + "splitting: {k: 4, r: 2}\n", []string{"splitting: k+r = 6 shards need 6 devices, the config lists 4"}},
		{"zero k", devs + "splitting: {k: 0, r: 2}\n", []string{"splitting.k 0"}},
		{"zero r", devs + "splitting: {k: 2, r: 0}\n", []string{"splitting.r 0", "use hashing"}},
		{"weights for fewer devices", devs + "weights: [2, 1, 1]\n", []string{"weights: 3 listed for 4 devices"}},
		{"zero weight", devs + "weights: [2TB, 0, 1TB, 1TB]\n", []string{"weights[1]: 0; want a positive size"}},
		{"packing r leaves no member device", "devices: [pebble:a, pebble:b]\npacking: {k: 2, r: 2}\n", []string{"packing.r 2 leaves no device for members"}},
		{"duplicate device", "devices: [pebble:data/dev0, pebble:./data/../data/dev0]\n",
			[]string{`devices[1] "pebble:./data/../data/dev0" is the same device as devices[0] "pebble:data/dev0"`}},
		{"duplicate mem device", "devices: [mem:a, mem:a]\n", []string{`devices[1] "mem:a" is the same device as devices[0]`}},
		{"unknown device kind", "devices: [ssd:/dev/nvme0]\n", []string{`devices[0]: "ssd:/dev/nvme0": unknown device kind "ssd"`}},
		{"device without kind", "devices: [/data/dev0]\n", []string{`devices[0]: "/data/dev0": want pebble:DIR, mem:NAME or redis://HOST:PORT/DB`}},
		{"pebble without dir", "devices: [pebble:]\n", []string{"pebble needs a directory"}},
		{"mem without name", "devices: [mem:]\n", []string{"mem needs a name"}},
		{"redis bad port", "devices: [redis://localhost:99999/0]\n", []string{`devices[0]: "redis://localhost:99999/0": bad port`}},
		{"redis bad database", "devices: [redis://localhost:6379/db0]\n", []string{`database "db0" is not a number`}},
		{"redis other scheme", "devices: [rediss://localhost:6379/0]\n", []string{`unknown device kind "rediss"`}},
		{"duplicate redis device", "devices: [redis://localhost, redis://:pw@localhost:6379/0]\n",
			[]string{`devices[1] "redis://:pw@localhost:6379/0" is the same device as devices[0] "redis://localhost"`}},
		{"max_key too small", devs + "device: {max_key: 3, min_key: 1}\n", []string{"device.max_key 3 leaves no room for user keys"}},
		{"max_key < min_key", devs + "device: {max_key: 8, min_key: 16}\n", []string{"device.max_key 8 is smaller than device.min_key 16"}},
		{"device max_value too small", devs + "device: {max_value: 16}\n", []string{"device.max_value 16 cannot hold"}},
		{"several problems", "devices: []\nmode: raid\n", []string{"devices: none listed", `; mode "raid"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			if err := os.WriteFile(path, []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			a, err := Open(context.Background(), path)
			if err == nil {
				a.Close()
				t.Fatalf("config accepted:\n%s", tc.yaml)
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q\nlacks %q", msg, w)
				}
			}
			if !strings.HasPrefix(msg, "config "+path+": ") {
				t.Errorf("error %q does not name the file", msg)
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error spans lines: %q", msg)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			assertOnly(t, dir, FileName)
		})
	}
}

// assertOnly fails unless dir holds exactly the named entries.
func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if !slices.Equal(got, names) {
		t.Errorf("%s holds %v, want only %v", dir, got, names)
	}
}

// TestCreateInvalidCreatesNothing checks the programmatic path: a Config
// built in code goes through the same validation before any device.
func TestCreateInvalidCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	c := Default(filepath.Join(dir, "data"), 6)
	c.Splitting.K = 5 // k+r = 7 > 6
	_, err := Create(context.Background(), c)
	if err == nil || !strings.Contains(err.Error(), "splitting: k+r = 7 shards need 7 devices") {
		t.Fatalf("Create: %v", err)
	}
	assertOnly(t, dir)
}

func TestMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load of a missing file: %v", err)
	}
}

func TestDefault(t *testing.T) {
	for n := 1; n <= 8; n++ {
		c := Default("data", n)
		if err := c.Validate(); err != nil {
			t.Fatalf("Default(%d) invalid: %v", n, err)
		}
		if len(c.Devices) != n || c.Devices[n-1] != "pebble:"+filepath.Join("data", "dev"+string(rune('0'+n-1))) {
			t.Errorf("Default(%d) devices %v", n, c.Devices)
		}
		if c.Mode != "hybrid" || c.Default != "replication" || c.Replication.Copies != min(3, n) {
			t.Errorf("Default(%d): mode %s default %s copies %d", n, c.Mode, c.Default, c.Replication.Copies)
		}
		last := c.Thresholds[len(c.Thresholds)-1]
		if n >= 3 {
			if c.Splitting == nil || c.Splitting.K != min(4, n-2) || c.Splitting.R != 2 {
				t.Errorf("Default(%d) splitting %+v", n, c.Splitting)
			}
			if *c.Thresholds[0].Max != 8<<10 || c.Thresholds[0].RM != "replication" || last.RM != "splitting" || last.Max != nil {
				t.Errorf("Default(%d) thresholds %+v", n, c.Thresholds)
			}
		} else if c.Splitting != nil || len(c.Thresholds) != 1 || last.RM != "replication" {
			t.Errorf("Default(%d) has splitting %+v, thresholds %+v", n, c.Splitting, c.Thresholds)
		}
		// What init writes reads back to the same config.
		b, err := c.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		c2, err := Parse(b, "")
		if err != nil {
			t.Fatalf("Default(%d) does not parse back: %v\n%s", n, err, b)
		}
		b2, _ := c2.Marshal()
		if !bytes.Equal(b, b2) {
			t.Errorf("Default(%d) round trip differs:\n%s\n---\n%s", n, b, b2)
		}
	}
}

func TestDefaultYAML(t *testing.T) {
	b, err := Default("./data", 6).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"  - pebble:data/dev0\n",
		"mode: hybrid\n",
		"default: replication\n",
		"  - {max: 8KiB, rm: replication}\n",
		"  - {rm: splitting}\n",
		"replication: {copies: 3}\n",
		"splitting: {k: 4, r: 2}\n",
		"device: {min_key: 4, max_key: 255, max_value: 2MiB, capacity: 0, cache: 8MiB}\n",
		"max_value: 1GiB\n",
		"value_cache: " + DefaultValueCache().String() + "\n",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("Default YAML lacks %q:\n%s", want, b)
		}
	}
}

// TestDesignExample parses the config from DESIGN.md and checks every
// field.
func TestDesignExample(t *testing.T) {
	const y = `
devices: [pebble:./data/dev0, pebble:./data/dev1, pebble:./data/dev2, pebble:./data/dev3, pebble:./data/dev4, pebble:/abs/dev5]
mode: hybrid
default: replication
thresholds:
  - {max: 8KiB,  rm: replication}
  - {max: 32KiB, rm: packing}
  - {rm: splitting}
replication: {copies: 3}
splitting:   {k: 4, r: 2}
packing:     {k: 4, r: 2, wait: 2ms}
device:      {max_key: 128, max_value: 1MiB, capacity: 10GiB, perf: {latency: 10us, ops_per_sec: 94000, bytes_per_sec: 2GiB}}
max_value: 100MiB
`
	c, err := Parse([]byte(y), "/etc/kv")
	if err != nil {
		t.Fatal(err)
	}
	if c.Dir() != "/etc/kv" || c.Mode != "hybrid" || c.Default != "replication" || c.Replication.Copies != 3 ||
		c.Splitting.K != 4 || c.Splitting.R != 2 || c.MaxValue != 100<<20 ||
		c.Packing.K != 4 || c.Packing.R != 2 || c.Packing.Wait != Duration(2*time.Millisecond) {
		t.Errorf("parsed %+v", c)
	}
	if len(c.Thresholds) != 3 || *c.Thresholds[0].Max != 8192 || *c.Thresholds[1].Max != 32<<10 || c.Thresholds[2].Max != nil {
		t.Errorf("thresholds %+v", c.Thresholds)
	}
	d := c.Device
	if d.MinKey != 4 || d.MaxKey != 128 || d.MaxValue != 1<<20 || d.Capacity != 10<<30 ||
		d.Perf.Latency != Duration(10e3) || d.Perf.OpsPerSec != 94000 || d.Perf.BytesPerSec != 2<<30 {
		t.Errorf("device %+v perf %+v", d, d.Perf)
	}
	sp, _ := c.parseSpec(c.Devices[0])
	if sp.name() != "pebble:/etc/kv/data/dev0" {
		t.Errorf("relative path resolved to %s", sp.name())
	}
	sp, _ = c.parseSpec(c.Devices[5])
	if sp.name() != "pebble:/abs/dev5" {
		t.Errorf("absolute path resolved to %s", sp.name())
	}
}

func TestModeDefault(t *testing.T) {
	c, err := Parse([]byte("devices: [mem:a]\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Mode != "standalone" || c.Default != "replication" || c.Replication.Copies != 1 || c.MaxValue != DefaultMaxValue {
		t.Errorf("defaults: %+v", c)
	}
	c, err = Parse([]byte("devices: [mem:a, mem:b]\nthresholds: [{max: 1KiB, rm: hashing}]\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Mode != "hybrid" {
		t.Errorf("mode with thresholds: %s", c.Mode)
	}
}

func TestSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Size
		out  string
	}{
		{"0", 0, "0"}, {"4096", 4096, "4KiB"}, {"8KiB", 8192, "8KiB"}, {"8 KiB", 8192, "8KiB"},
		{"8KB", 8000, "8000"}, {"1.5KiB", 1536, "1536"}, {"2MiB", 2 << 20, "2MiB"}, {"1GiB", 1 << 30, "1GiB"},
		{"3TiB", 3 << 40, "3TiB"},
	} {
		got, err := parseSize(tc.in)
		if err != nil || got != tc.want || got.String() != tc.out {
			t.Errorf("parseSize(%q) = %d (%s), %v; want %d (%s)", tc.in, got, got, err, tc.want, tc.out)
		}
	}
	for _, bad := range []string{"", "x", "-1", "8XB", "99999999999EiB"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) accepted", bad)
		}
	}
}

// TestMemArray runs an array from a mem-only config: it is created on
// open, and the thresholds pick the mechanisms.
func TestMemArray(t *testing.T) {
	const y = `
devices: [mem:d0, mem:d1, mem:d2, mem:d3, mem:d4, mem:d5]
thresholds: [{max: 1KiB, rm: replication}, {max: 4KiB, rm: hashing}, {rm: splitting}]
splitting: {k: 4, r: 2}
device: {max_value: 64KiB}
max_value: 1MiB
`
	ctx := context.Background()
	c, err := Parse([]byte(y), "")
	if err != nil {
		t.Fatal(err)
	}
	a, err := OpenConfig(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Mode() != array.Hybrid || a.N() != 6 {
		t.Errorf("mode %v, %d devices", a.Mode(), a.N())
	}
	if got := a.Mechanisms(); !slices.Equal(got, []string{"replication", "hashing", "splitting"}) {
		t.Errorf("mechanisms %v", got)
	}
	for n, want := range map[int]string{0: "replication", 1024: "replication", 1025: "hashing", 4096: "hashing", 4097: "splitting", 1 << 20: "splitting"} {
		if got := a.Mechanism(n); got != want {
			t.Errorf("value of %d bytes goes to %s, want %s", n, got, want)
		}
	}
	if _, maxValue := a.Limits(); maxValue != 1<<20 {
		t.Errorf("max value %d", maxValue)
	}
	v := bytes.Repeat([]byte("kvarray!"), 40000) // 320000 bytes: several splits of 64KiB devices
	if err := a.Store(ctx, []byte("big"), v); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Retrieve(ctx, []byte("big")); err != nil || !bytes.Equal(got, v) {
		t.Fatalf("retrieve: %d bytes, %v", len(got), err)
	}
	if err := a.Store(ctx, []byte("too big"), make([]byte, 1<<20+1)); !errors.Is(err, array.ErrValueTooLarge) {
		t.Errorf("store over max_value: %v", err)
	}
	st, err := a.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Devices[3].Name != "mem:d3" {
		t.Errorf("device 3 named %q", st.Devices[3].Name)
	}
}

// TestWeights: a config's weights are recorded at creation (the array
// places by them, status shows them) and in force at every open, whatever
// the config says by then.
func TestWeights(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c, err := Parse([]byte("devices: [pebble:d0, pebble:d1, pebble:d2, pebble:d3, pebble:d4]\nweights: [4TB, 2TB, 2TB, 2TB, 2TB]\n"), dir)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Create(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	st, err := a.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if w := st.Weights; len(w) != 5 || w[0] != 2*w[1] || w[1] != w[4] {
		t.Fatalf("status weights %v, want 2:1:1:1:1", w)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	c.Weights = nil
	a, err = OpenConfig(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if w := a.Weights(); len(w) != 5 || w[0] != 2*w[1] {
		t.Fatalf("weights after an open without them in the config: %v", w)
	}
}

// TestTiny: a config's tiny section makes an array whose tiny values live
// in buckets (none of their own keys on the devices), recorded at creation
// and in force at every open, with or without the section.
func TestTiny(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c, err := Parse([]byte("devices: [pebble:d0, pebble:d1, pebble:d2, pebble:d3, pebble:d4, pebble:d5]\n"+
		"thresholds: [{max: 4KiB, rm: packing}, {rm: replication}]\npacking: {k: 4, r: 2}\ntiny: {max: 64B, buckets: 8}\n"), dir)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Create(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := a.Store(ctx, fmt.Appendf(nil, "key-%d", i), fmt.Appendf(nil, "v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	c.Tiny = nil
	a, err = OpenConfig(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i := range 50 {
		if v, err := a.Retrieve(ctx, fmt.Appendf(nil, "key-%d", i)); err != nil || string(v) != fmt.Sprintf("v%d", i) {
			t.Fatalf("key-%d: %q, %v", i, v, err)
		}
	}
	if err := a.Settle(ctx); err != nil { // Packing's delta log folded
		t.Fatal(err)
	}
	st, err := a.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var keys int64
	for _, d := range st.Devices {
		keys += d.Keys
	}
	// Fewer device keys than values: each value would take at least one
	// of its own (three with replication), the buckets take 8 and their
	// sets' parities (and each device its header and the owner's lease).
	if keys >= 50+int64(len(st.Devices)) {
		t.Fatalf("%d device keys for 50 tiny values in 8 buckets", keys)
	}
}

// TestPebbleLifecycle creates a pebble array from a config file with
// relative paths, reopens it, and checks how missing and shuffled devices
// are reported.
func TestPebbleLifecycle(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	c := Default("./data", 4)
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err = Load(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Create(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Store(ctx, []byte("hello"), []byte("world")); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	// The paths were relative to the file, not to the working directory.
	if _, err := os.Stat(filepath.Join(dir, "data", "dev3")); err != nil {
		t.Fatal(err)
	}

	// Creating again over the same devices is refused.
	if a, err := Create(ctx, c); err == nil {
		a.Close()
		t.Fatal("created a second array over the first")
	} else if !strings.Contains(err.Error(), "already belongs to array") {
		t.Errorf("second Create: %v", err)
	}

	a, err = Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := a.Retrieve(ctx, []byte("hello")); err != nil || string(v) != "world" {
		t.Fatalf("after reopen: %q, %v", v, err)
	}
	a.Close()

	// A missing device directory is a failed device, named, not a new one.
	dev2 := filepath.Join(dir, "data", "dev2")
	if err := os.Rename(dev2, dev2+".away"); err != nil {
		t.Fatal(err)
	}
	a, err = Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := a.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ds := st.Devices[2]
	if ds.Name != "pebble:"+dev2 || ds.State != "failed" || !strings.Contains(ds.Reason, "does not exist") {
		t.Errorf("missing device reported as %+v", ds)
	}
	if v, err := a.Retrieve(ctx, []byte("hello")); err != nil || string(v) != "world" {
		t.Errorf("degraded read: %q, %v", v, err)
	}
	a.Close()
	if _, err := os.Stat(dev2); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("opening recreated the missing device directory: %v", err)
	}
	if err := os.Rename(dev2+".away", dev2); err != nil {
		t.Fatal(err)
	}

	// A shuffled order is refused, naming a device.
	shuffled := strings.NewReplacer("dev0", "dev1", "dev1", "dev0").Replace(string(b))
	if err := os.WriteFile(path, []byte(shuffled), 0o644); err != nil {
		t.Fatal(err)
	}
	if a, err := Open(ctx, path); err == nil {
		a.Close()
		t.Fatal("shuffled devices accepted")
	} else if !strings.Contains(err.Error(), "device 0 (pebble:"+filepath.Join(dir, "data", "dev1")+")") {
		t.Errorf("shuffle error does not name the device: %v", err)
	}
}

func TestOpenDevicesUnavailable(t *testing.T) {
	dir := t.TempDir()
	c, err := Parse([]byte("devices: [pebble:missing, mem:m]\n"), dir)
	if err != nil {
		t.Fatal(err)
	}
	devs := OpenDevices(c, false)
	defer closeAll(devs)
	info, err := devs[0].Info(context.Background())
	if err == nil || info.Name != "pebble:"+filepath.Join(dir, "missing") {
		t.Errorf("missing pebble device: %+v, %v", info, err)
	}
	if info, err := devs[1].Info(context.Background()); err != nil || info.Name != "mem:m" {
		t.Errorf("mem device: %+v, %v", info, err)
	}
	assertOnly(t, dir)
}

// TestOpenRefusedWhileHeld: opening an array one of whose pebble devices
// another holder has open is refused with pebble.ErrInUse naming the
// device, not opened degraded with that device failed (two writers); a
// holder that lets go within the wait (a restart overlapping the old
// process's shutdown) is waited for.
func TestOpenRefusedWhileHeld(t *testing.T) {
	ctx := context.Background()
	defer func(d time.Duration) { inUseWait = d }(inUseWait)
	inUseWait = 300 * time.Millisecond
	dir := t.TempDir()
	c, err := Parse([]byte("devices: [pebble:d0, pebble:d1, pebble:d2]\n"), dir)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Create(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	held, err := pebble.Open(filepath.Join(dir, "d1"))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := OpenConfig(ctx, c); !errors.Is(err, pebble.ErrInUse) || !strings.Contains(fmt.Sprint(err), "device 1") {
		if err == nil {
			_ = b.Close()
		}
		t.Fatalf("open while device 1 is held: %v, want ErrInUse naming device 1", err)
	}
	go func() {
		time.Sleep(inUseWait / 3)
		_ = held.Close()
	}()
	b, err := OpenConfig(ctx, c)
	if err != nil {
		t.Fatalf("open while the holder lets go within the wait: %v", err)
	}
	defer b.Close()
	st, err := b.Status(ctx)
	if err != nil || slices.ContainsFunc(st.Devices, func(d array.DeviceStatus) bool { return d.State != "healthy" }) {
		t.Fatalf("opened after the holder let go: %+v, %v; want every device healthy", st.Devices, err)
	}
}

// TestDefaultValueCache: the default is a sixteenth of the memory, within
// its bounds (so a small machine keeps a useful cache and a large one does
// not give a cache its RAM).
func TestDefaultValueCache(t *testing.T) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		t.Skip(err)
	}
	total := Size(uint64(si.Totalram) * uint64(si.Unit))
	got := DefaultValueCache()
	if got < minDefaultValueCache || got > maxDefaultValueCache {
		t.Fatalf("DefaultValueCache() = %v, outside [%v, %v]", got, minDefaultValueCache, maxDefaultValueCache)
	}
	if got != maxDefaultValueCache && got != minDefaultValueCache && got != total/16 {
		t.Fatalf("DefaultValueCache() = %v on %v of memory, want a sixteenth", got, total)
	}
	c := &Config{}
	if d := c.withDefaults(); d.ValueCache == nil || *d.ValueCache != got {
		t.Fatalf("a config without value_cache gets %v, want %v", d.ValueCache, got)
	}
}
