// Package config reads and writes kvarray.yaml, the file that says which
// devices make up an array (in creation order, which is part of the array's
// identity) and how values are protected, and turns it into devices and
// array options. It is the one place where the mechanism names a user
// writes map to mechanism packages (see the mechanisms table).
//
// A config is validated as a whole before anything touches a device, so a
// malformed file never creates or opens anything.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/device"
)

// FileName is the config file kvarray looks for by default.
const FileName = "kvarray.yaml"

// ErrInvalid is wrapped by every error about the content of a config.
var ErrInvalid = errors.New("invalid config")

// Config is the content of a config file. Zero fields take the defaults
// listed on each field; Parse fills them in, so a parsed Config (and what
// Marshal writes from it) states every value in effect.
type Config struct {
	// Devices are device specs in creation order: "pebble:DIR" (a
	// directory; relative to the config file's directory) or "mem:NAME"
	// (an in-process emulator, empty at every open).
	Devices []string `yaml:"devices"`
	// Weights are the devices' placement weights, one per device in the
	// same order (their sizes, say: [4TB, 2TB, 2TB, ...]; only ratios
	// count), read when the array is created and recorded in its header:
	// a device of twice the weight gets twice the data, so that devices
	// of different sizes fill evenly. Changing them later has no effect.
	// Default: the devices' capacities (equal: no weighting).
	Weights []Size `yaml:"weights,omitempty,flow"`
	// Mode is "standalone" (every value with Default) or "hybrid" (by
	// size, per Thresholds). Default: hybrid when Thresholds are given,
	// else standalone.
	Mode string `yaml:"mode,omitempty"`
	// Default is the mechanism for standalone mode and for sizes no
	// threshold covers. Default: replication.
	Default string `yaml:"default,omitempty"`
	// Thresholds are hybrid mode's rules, in ascending order of Max; the
	// first rule whose Max is at least the value's size picks the
	// mechanism. A last rule without Max takes every larger value.
	Thresholds []Threshold `yaml:"thresholds,omitempty"`
	// Replication configures the replication mechanism, which is always
	// available. Default: min(3, number of devices) copies.
	Replication *Replication `yaml:"replication,omitempty"`
	// Splitting configures erasure-coded splitting; without this section
	// the mechanism is not available.
	Splitting *Splitting `yaml:"splitting,omitempty"`
	// Packing configures packing of small values into erasure-coded
	// stripes; without this section the mechanism is not available.
	Packing *Packing `yaml:"packing,omitempty"`
	// Tiny stores values up to a size as entries of buckets, each bucket
	// one Packing value (docs/tiny-values.md). Takes effect when the
	// array is created and is fixed from then on; absent: off.
	Tiny *Tiny `yaml:"tiny,omitempty"`
	// Device sets the limits of pebble and mem devices.
	Device DeviceConfig `yaml:"device"`
	// MaxValue is the largest user value. Default: 1GiB.
	MaxValue Size `yaml:"max_value,omitempty"`
	// ValueCache bounds the bytes of recent values, of up to
	// ValueCacheMax bytes each, that the array keeps in memory (outside
	// the Go heap) to answer reads without a device
	// (array.WithValueCache); 0 keeps none, and a cache is at least
	// array.MinValueCache. Default (absent): DefaultValueCache(), which
	// depends on the machine's memory.
	ValueCache *Size `yaml:"value_cache,omitempty"`
	// AutoResync is how often a long-running process (kvarray serve)
	// probes failed devices and resyncs those that answer again, and
	// compacts the Packing sets deletes thinned. 0 disables both;
	// one-shot CLI commands never run them.
	AutoResync Duration `yaml:"auto_resync,omitempty"`
	// Slow tunes how a long-running process (kvarray serve) finds a
	// device much slower than its peers and skips it until it is fast
	// again (array.WithSlowDevices, docs/healing.md). Absent: the
	// defaults; one-shot CLI commands never judge devices slow.
	Slow *Slow `yaml:"slow,omitempty"`
	// Lease is how long the process that opens the array owns it without
	// renewing (array.WithOwner): another host's process is refused
	// until it expires, unless started with --takeover. Default (0):
	// array.DefaultLease.
	Lease Duration `yaml:"lease,omitempty"`
	// Serve holds what only `kvarray serve` reads: authentication, TLS,
	// metrics and logs (serve.go). Its keys are top-level, as Redis's.
	Serve Serve `yaml:",inline"`
	// Databases is how many Redis databases kvarray serve offers (SELECT
	// 0 to Databases-1), 1 to 255. Default (0): 16, as Redis.
	Databases int `yaml:"databases,omitempty"`

	// dir is the directory relative pebble paths are relative to; empty
	// means the process's working directory.
	dir string
	// takeover: open the array even if another owner's lease is live
	// (SetTakeover).
	takeover bool
}

// Slow is the fail-slow policy (array.SlowPolicy); zero fields take its
// defaults.
type Slow struct {
	// Off: no device is ever judged slow.
	Off bool `yaml:"off,omitempty"`
	// Ratio: slow when its latency passes this many times its peers'.
	Ratio float64 `yaml:"ratio,omitempty"`
	// Floor: never slow under this latency.
	Floor Duration `yaml:"floor,omitempty"`
	// Ceiling: slow past this latency whatever the ratio (while twice
	// its peers').
	Ceiling Duration `yaml:"ceiling,omitempty"`
	// Grace: how long a device back to healthy goes unjudged.
	Grace Duration `yaml:"grace,omitempty"`
}

// SetTakeover makes the array's open take it over from another owner
// whose lease is live (serve --takeover).
func (c *Config) SetTakeover(on bool) { c.takeover = on }

// Owner is who opens the array with this config: this host and the
// config's directory, so that a process started again from the same
// place after a crash need not wait for its own lease, and a process
// from anywhere else must.
func (c *Config) Owner() array.Owner {
	host, _ := os.Hostname()
	dir := c.dir
	if dir == "" {
		dir, _ = os.Getwd()
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return array.Owner{ID: host + ":" + dir, Process: fmt.Sprintf("pid %d", os.Getpid()),
		Lease: time.Duration(c.Lease), Takeover: c.takeover}
}

// Threshold is one hybrid-mode rule.
type Threshold struct {
	// Max is the largest value size the rule takes; nil takes any size
	// and is allowed only on the last rule.
	Max *Size  `yaml:"max,omitempty"`
	RM  string `yaml:"rm"`
}

// Replication configures the replication mechanism.
type Replication struct {
	Copies int `yaml:"copies"`
}

// Splitting configures the splitting mechanism: k data and r parity shards
// per split, on k+r consecutive devices.
type Splitting struct {
	K int `yaml:"k"`
	R int `yaml:"r"`
}

// Packing configures the packing mechanism: small values packed into
// stripes of k data and r parity members; a stripe waits at most Wait
// (default 2ms) for values to fill it.
type Packing struct {
	K    int      `yaml:"k"`
	R    int      `yaml:"r"`
	Wait Duration `yaml:"wait,omitempty"`
}

// Tiny configures tiny values: values of at most Max bytes live in one of
// Buckets buckets (hash of the key mod Buckets), each stored with Packing.
type Tiny struct {
	Max     Size `yaml:"max"`
	Buckets int  `yaml:"buckets"`
}

// DeviceConfig sets the limits every pebble and mem device enforces. The
// defaults are a Samsung KV SSD's. Set them before creating the array:
// placement and split sizes depend on them.
type DeviceConfig struct {
	// MinKey and MaxKey bound internal keys (user key + 3 bytes).
	// Defaults: 4 and 255.
	MinKey int `yaml:"min_key,omitempty"`
	MaxKey int `yaml:"max_key,omitempty"`
	// MaxValue bounds one stored piece; larger user values are split.
	// Default: 2MiB.
	MaxValue Size `yaml:"max_value,omitempty"`
	// Capacity bounds each device's bytes of keys and values; 0 is
	// unlimited.
	Capacity Size `yaml:"capacity"`
	// Cache is the size of each pebble device's cache (Pebble's): its
	// memtables and the blocks of its files it keeps, outside the Go
	// heap (it counts in the process's RSS: six devices take six
	// caches). Pebble counts each 16 MiB memtable against it and keeps
	// blocks in the rest, so the default, 8MiB, keeps none once a
	// memtable has filled; 64MiB took serve's GETs of 4 KiB values from
	// 34 to 28 µs of CPU each (docs/config.md).
	Cache Size `yaml:"cache,omitempty"`
	// Perf is the speed model of mem devices (ignored by pebble).
	Perf *Perf `yaml:"perf,omitempty"`
}

// Perf is the speed model of mem devices; zero fields mean no limit.
type Perf struct {
	Latency     Duration `yaml:"latency,omitempty"`
	OpsPerSec   float64  `yaml:"ops_per_sec,omitempty"`
	BytesPerSec Size     `yaml:"bytes_per_sec,omitempty"`
}

// Defaults of fields left out.
const (
	DefaultMaxValue       = Size(array.DefaultMaxValue)
	DefaultDeviceMaxValue = Size(device.DefaultMaxValueLen)
	DefaultCache          = Size(8 << 20)
	// ValueCacheMax is the largest value the value cache keeps: small
	// values are the ones a device read costs the most per byte.
	ValueCacheMax      = Size(array.MaxValueCached)
	DefaultPackingWait = Duration(2 * time.Millisecond)
	// hybridSmall is where Default's thresholds switch from replication:
	// KVMD's measurements favour replication for small values, whose
	// erasure-coded shards would be dominated by headers.
	hybridSmall = Size(8 << 10)
	// packingMax is where Default's thresholds switch from packing to
	// splitting when packing is available.
	packingMax = Size(32 << 10)
)

// Dir returns the directory relative device paths are resolved against
// ("" for the working directory).
func (c *Config) Dir() string { return c.dir }

// SetDir sets the directory relative device paths are resolved against.
func (c *Config) SetDir(dir string) { c.dir = dir }

// Load reads and validates the config file at path. Relative device paths
// in it are relative to the file's directory.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	c, err := Parse(data, dir)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes and validates a config. Unknown fields are errors. dir is
// the directory relative device paths are relative to.
func Parse(data []byte, dir string) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c Config
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, problems{errors.New("the file is empty: it must list devices")}
		}
		return nil, problems{yamlError(err)}
	}
	if err := dec.Decode(new(yaml.Node)); !errors.Is(err, io.EOF) {
		return nil, problems{errors.New("more than one YAML document (a line of ---?)")}
	}
	c.dir = dir
	c = c.withDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

var unknownField = regexp.MustCompile(`field (\S+) not found in type \S+`)

// yamlError turns yaml.v3's messages into one line each, naming unknown
// fields as such rather than by Go type.
func yamlError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		msgs[i] = unknownField.ReplaceAllString(m, `unknown field "$1"`)
	}
	return errors.New(strings.Join(msgs, "; "))
}

// Default returns the config `kvarray init` writes: n pebble devices
// dataDir/dev0..dev{n-1} in hybrid mode, replication (min(3, n) copies) for
// values up to 8KiB and for everything when there are fewer than 3
// devices, and otherwise the other available mechanisms for larger values.
func Default(dataDir string, n int) *Config {
	specs := make([]string, n)
	for i := range n {
		specs[i] = "pebble:" + filepath.Join(dataDir, fmt.Sprintf("dev%d", i))
	}
	return DefaultDevices(specs)
}

// DefaultDevices is Default over the given device specs, of any kinds
// (`kvarray init --device SPEC ...`).
func DefaultDevices(specs []string) *Config {
	n := len(specs)
	c := &Config{Mode: "hybrid", Default: "replication", Replication: &Replication{Copies: min(3, n)},
		AutoResync: Duration(10 * time.Second), Devices: slices.Clone(specs)}
	small := hybridSmall
	if n < 3 || !available("splitting") {
		c.Thresholds = []Threshold{{RM: "replication"}}
	} else {
		c.Thresholds = []Threshold{{Max: &small, RM: "replication"}}
		if available("packing") {
			mid := packingMax
			c.Packing = &Packing{K: min(4, n-2), R: 2, Wait: DefaultPackingWait}
			c.Thresholds = append(c.Thresholds, Threshold{Max: &mid, RM: "packing"})
		}
		c.Splitting = &Splitting{K: min(4, n-2), R: 2}
		c.Thresholds = append(c.Thresholds, Threshold{RM: "splitting"})
	}
	d := c.withDefaults()
	return &d
}

// withDefaults returns a copy of c with the defaults filled in.
func (c *Config) withDefaults() Config {
	d := *c
	if d.Mode == "" {
		d.Mode = "standalone"
		if len(d.Thresholds) > 0 {
			d.Mode = "hybrid"
		}
	}
	if d.Default == "" {
		d.Default = "replication"
	}
	if d.Replication == nil {
		d.Replication = &Replication{Copies: min(3, len(d.Devices))}
	}
	if d.Packing != nil && d.Packing.Wait == 0 {
		p := *d.Packing
		p.Wait = DefaultPackingWait
		d.Packing = &p
	}
	if d.Device.MinKey == 0 {
		d.Device.MinKey = device.DefaultMinKeyLen
	}
	if d.Device.MaxKey == 0 {
		d.Device.MaxKey = device.DefaultMaxKeyLen
	}
	if d.Device.MaxValue == 0 {
		d.Device.MaxValue = DefaultDeviceMaxValue
	}
	if d.Device.Cache == 0 {
		d.Device.Cache = DefaultCache
	}
	if d.MaxValue == 0 {
		d.MaxValue = DefaultMaxValue
	}
	if d.ValueCache == nil {
		vc := DefaultValueCache()
		d.ValueCache = &vc
	}
	return d
}

// Options returns the array options the config describes: mode, default
// mechanism, thresholds, the available mechanisms and the largest value.
// The config should be valid.
func (c *Config) Options() []array.Option {
	d := c.withDefaults()
	mode, _ := array.ParseMode(d.Mode)
	rules := make([]array.Rule, len(d.Thresholds))
	for i, t := range d.Thresholds {
		rules[i] = array.Rule{RM: t.RM}
		if t.Max != nil {
			rules[i].Max = int64(*t.Max)
		}
	}
	opts := []array.Option{
		array.WithMode(mode),
		array.WithDefault(d.Default),
		array.WithRules(rules...),
		array.WithMechanisms(d.factories()...),
		array.WithMaxValue(int64(d.MaxValue)),
		array.WithValueCache(int64(*d.ValueCache), int(ValueCacheMax)),
		array.WithOwner(c.Owner()),
	}
	if t := d.Tiny; t != nil {
		opts = append(opts, array.WithTiny(array.Tiny{Max: int(t.Max), Buckets: t.Buckets, RM: "packing"}))
	}
	if len(d.Weights) > 0 {
		w := make([]uint64, len(d.Weights))
		for i, s := range d.Weights {
			w[i] = uint64(s)
		}
		opts = append(opts, array.WithWeights(w...))
	}
	return opts
}

// ServeOptions are Options plus what only a long-running process wants
// (the automatic resync, fail-slow detection).
func (c *Config) ServeOptions() []array.Option {
	opts := append(c.Options(), array.WithAutoResync(time.Duration(c.AutoResync)))
	switch s := c.Slow; {
	case s == nil:
		opts = append(opts, array.WithSlowDevices(array.SlowPolicy{}))
	case !s.Off:
		opts = append(opts, array.WithSlowDevices(array.SlowPolicy{Ratio: s.Ratio, Floor: time.Duration(s.Floor), Ceiling: time.Duration(s.Ceiling), Grace: time.Duration(s.Grace)}))
	}
	return opts
}

// Marshal encodes the config as YAML, one device per line and one
// threshold per line, the way Default's output is meant to be read.
func (c *Config) Marshal() ([]byte, error) {
	var root yaml.Node
	if err := root.Encode(c); err != nil {
		return nil, err
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "devices":
			k.HeadComment = "Devices in creation order: the order is part of the array's identity.\n" +
				"pebble:DIR (relative to this file's directory) or mem:NAME (in-memory)."
		case "thresholds":
			k.HeadComment = "Hybrid mode: the first rule whose max fits the value picks its mechanism."
			for _, t := range v.Content {
				t.Style = yaml.FlowStyle
			}
		case "replication", "splitting", "packing", "device":
			v.Style = yaml.FlowStyle
		}
		if k.Value == "device" {
			k.HeadComment = "Limits of every pebble and mem device (defaults: a KV SSD's). Read when the array is created (init --from-config creates it from an edited file).\n" +
				"cache: each pebble device's cache of memtables and blocks (more: faster GETs, more memory; docs/config.md)."
		}
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// problems is a config's list of problems, reported together on one line
// so that a user fixes them in one pass.
type problems []error

func (p problems) Error() string {
	msgs := make([]string, len(p))
	for i, e := range p {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

func (p problems) Unwrap() []error { return p }

func (p problems) Is(target error) bool { return target == ErrInvalid }

func (p *problems) add(format string, args ...any) {
	*p = append(*p, fmt.Errorf(format, args...))
}
