// Package bench measures kvarray the way the KVMD paper evaluates it:
// store, retrieve, update and delete per mechanism and value size, the
// hybrid mix, and rebuild, each configuration on fresh devices and next to
// the None baseline (raw device operations on the same kind of devices,
// each value once, no header, on the device its key hashes to), so that
// every result is also a percentage of None.
//
// Run executes Options and returns a Report: rates, latency percentiles,
// device operations and bytes per user operation (from the mem emulator's
// counters, or a counting wrapper around other devices), storage
// overhead, and the host's stalls. Report.WriteTable, JSON encoding and
// Report.WriteChart (the paper's bar-and-lollipop figure) present it;
// Report.Check verifies it against the mechanisms' layouts.
//
// Devices come from a Backend: Mem (the emulator with a speed model, KVSSD
// by default), Pebble, or Config (the devices a config file lists).
package bench

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/mechanism"
	"github.com/kvarray/kvarray/mechanism/hashing"
	"github.com/kvarray/kvarray/mechanism/packing"
	"github.com/kvarray/kvarray/mechanism/replication"
	"github.com/kvarray/kvarray/mechanism/splitting"
)

// Workloads. Store, Retrieve, Update and Delete run in that order on one
// array per value size (a store phase fills the keys the others use);
// Mixed runs a store and a retrieve phase of mixed value sizes, reported
// as MixedStore and MixedRetrieve.
const (
	Store         = "store"
	Retrieve      = "retrieve"
	Update        = "update"
	Delete        = "delete"
	Mixed         = "mixed"
	MixedStore    = "mixed-store"
	MixedRetrieve = "mixed-retrieve"
	// Range is partial I/O (rangeio.go), reported as RangeRead and
	// RangeWrite.
	Range      = "range"
	RangeRead  = "range-read"
	RangeWrite = "range-write"
)

// Workloads lists the workload names Options.Workloads takes.
var Workloads = []string{Store, Retrieve, Update, Delete, Mixed, Range}

// Mechanisms lists the mechanisms a run can measure.
var Mechanisms = []string{hashing.Name, replication.Name, splitting.Name, packing.Name}

// Tiny is the tiny-values layout (array.WithTiny, docs/tiny-values.md)
// as a target: values of at most Options.TinyMax bytes go to buckets
// stored with Packing, larger ones to Replication. It is not one of the
// default Mechanisms (at the default sizes every value is larger than
// TinyMax): ask for it with sizes of a few bytes, e.g. --mechanisms
// tiny,replication,packing --sizes 16B.
const Tiny = "tiny"

// validMechanism reports whether m names a target Options.Mechanisms
// takes.
func validMechanism(m string) bool { return m == Tiny || slices.Contains(Mechanisms, m) }

// Names of the baseline and of the hybrid configuration with thresholds.
const (
	None       = "none"
	Thresholds = "thresholds"
)

// Modes of a result: the baseline's "raw", and the array's modes.
const (
	ModeRaw        = "raw"
	ModeStandalone = "standalone"
	ModeHybrid     = "hybrid"
)

// MixPart is one value size of the mixed workload and its weight.
type MixPart struct {
	Size   int `json:"size"`
	Weight int `json:"weight"`
}

// Options configure a run. Start from Defaults or Quick.
type Options struct {
	// Workloads to measure (Workloads' names). A store phase runs
	// unmeasured when only later phases are asked for.
	Workloads []string `json:"workloads"`
	// Sizes are the value sizes of the store, retrieve, update and delete
	// workloads.
	Sizes []int `json:"sizes"`
	// Mechanisms to measure, each in every mode of Modes. The None
	// baseline is always measured.
	Mechanisms []string `json:"mechanisms"`
	// Modes: "standalone" (the array configured with the one mechanism)
	// and "hybrid" (every mechanism configured, a rule sending every size
	// to the one measured, so every store reads before it writes).
	Modes []string `json:"modes"`

	Devices     int           `json:"devices"`
	Copies      int           `json:"copies"`
	K           int           `json:"k"`
	R           int           `json:"r"`
	PackingWait time.Duration `json:"packing_wait_ns"`
	// TinyMax is the Tiny target's threshold in bytes (array.Tiny.Max);
	// its bucket count comes from Keys and TinyMax (about 8 KiB a
	// bucket, as docs/tiny-values.md advises).
	TinyMax int `json:"tiny_max,omitempty"`

	// Threads × QueueDepth requests are in flight at once: each of the
	// Threads keeps QueueDepth requests outstanding.
	Threads    int `json:"threads"`
	QueueDepth int `json:"queue_depth"`
	// Duration, when set, bounds each phase by time; otherwise each phase
	// runs Ops operations. The store phase inserts new keys: Keys of them
	// (default Ops) when counting operations, or as many as it can in
	// Duration but at most Keys (default DefaultMaxKeys). Retrieves and
	// updates pick among the keys stored; deletes delete each once.
	Ops      int           `json:"ops,omitempty"`
	Duration time.Duration `json:"duration_ns,omitempty"`
	Keys     int           `json:"keys,omitempty"`
	// Dist picks the keys of retrieves and updates: Uniform or Zipfian
	// (with ZipfTheta, YCSB's 0.99 by default).
	Dist      string  `json:"distribution"`
	ZipfTheta float64 `json:"zipf_theta,omitempty"`
	Seed      uint64  `json:"seed"`

	// Mix and Rules are the mixed workload's sizes and the rules of its
	// hybrid configuration (the paper's: 4, 16 and 64 KiB at 30:40:30;
	// replication up to 8 KiB, packing up to 32 KiB, splitting above).
	Mix   []MixPart    `json:"mix"`
	Rules []array.Rule `json:"rules"`

	// The range workload: RangeKeys values of RangeValue bytes, read and
	// written RangeIO bytes at a time.
	RangeValue int `json:"range_value,omitempty"`
	RangeIO    int `json:"range_io,omitempty"`
	RangeKeys  int `json:"range_keys,omitempty"`

	// Rebuild runs the rebuild benchmark: RebuildKeys values of
	// RebuildSize bytes with each of RebuildMechanisms, one device
	// replaced, rebuilt.
	Rebuild           bool     `json:"rebuild,omitempty"`
	RebuildKeys       int      `json:"rebuild_keys,omitempty"`
	RebuildSize       int      `json:"rebuild_size,omitempty"`
	RebuildMechanisms []string `json:"rebuild_mechanisms,omitempty"`

	// Backend makes the devices (default Mem(KVSSD)).
	Backend Backend `json:"-"`
	// Progress, when set, is called as the run goes.
	Progress func(Progress) `json:"-"`
}

// Progress is a report of where a run is.
type Progress struct {
	Step, Steps int // measurement number, from 1, and the total
	Workload    string
	Size        string
	Mechanism   string
	Mode        string
	Ops         int64 // operations done in this phase so far
	Elapsed     time.Duration
}

// DefaultMaxKeys bounds the keys a timed store phase inserts, and so the
// memory of mem devices.
const DefaultMaxKeys = 100_000

// Defaults are the full run: every workload, 1, 4, 16 and 64 KiB, every
// mechanism in both modes, 6 devices, 6 threads × 8 requests, 2 seconds
// per phase, uniform keys, mem devices with the KVSSD model.
func Defaults() Options {
	return Options{
		Workloads:   slices.Clone(Workloads),
		Sizes:       []int{1 << 10, 4 << 10, 16 << 10, 64 << 10},
		Mechanisms:  slices.Clone(Mechanisms),
		Modes:       []string{ModeStandalone, ModeHybrid},
		Devices:     6,
		Copies:      replication.DefaultCopies,
		K:           splitting.DefaultK,
		R:           splitting.DefaultR,
		PackingWait: packing.DefaultWait,
		TinyMax:     64,
		Threads:     6,
		QueueDepth:  8,
		Duration:    2 * time.Second,
		Dist:        Uniform,
		ZipfTheta:   0.99,
		Seed:        1,
		Mix:         []MixPart{{4 << 10, 30}, {16 << 10, 40}, {64 << 10, 30}},
		Rules: []array.Rule{
			{Max: 8 << 10, RM: replication.Name},
			{Max: 32 << 10, RM: packing.Name},
			{RM: splitting.Name},
		},
		RangeValue:        64 << 20,
		RangeIO:           4 << 10,
		RangeKeys:         2,
		RebuildKeys:       1_000_000,
		RebuildSize:       4 << 10,
		RebuildMechanisms: []string{replication.Name, splitting.Name, packing.Name},
		Backend:           Mem(KVSSD),
	}
}

// Quick is Defaults cut to run in well under a minute on two cores: 4 and
// 64 KiB values, 300ms per phase, 2000 keys for the rebuild, and no range
// workload (filling its 64 MiB values takes longer than the rest).
func Quick() Options {
	o := Defaults()
	o.Workloads = slices.DeleteFunc(o.Workloads, func(w string) bool { return w == Range })
	o.Sizes = []int{4 << 10, 64 << 10}
	o.Duration = 300 * time.Millisecond
	o.RebuildKeys = 2000
	return o
}

// Validate checks o and fills in derived defaults (Keys).
func (o *Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for _, w := range o.Workloads {
		if !slices.Contains(Workloads, w) {
			bad("workload %q: want one of %v", w, Workloads)
		}
	}
	for _, m := range o.Mechanisms {
		if !validMechanism(m) {
			bad("mechanism %q: want one of %v or %s", m, Mechanisms, Tiny)
		}
		if m == Tiny && o.TinyMax < 1 {
			bad("tiny values of at most %d bytes: want at least 1", o.TinyMax)
		}
	}
	for _, m := range o.Modes {
		if m != ModeStandalone && m != ModeHybrid {
			bad("mode %q: want %s or %s", m, ModeStandalone, ModeHybrid)
		}
	}
	for _, s := range o.Sizes {
		if s < 1 {
			bad("value size %d: want at least 1 byte", s)
		}
	}
	if len(o.Workloads) == 0 && !o.Rebuild {
		bad("no workload")
	}
	if o.sized() && len(o.Sizes) == 0 {
		bad("no value size")
	}
	if o.Devices < 1 {
		bad("%d devices", o.Devices)
	}
	if o.Threads < 1 || o.QueueDepth < 1 {
		bad("%d threads × queue depth %d: want at least 1 each", o.Threads, o.QueueDepth)
	}
	if o.Duration <= 0 && o.Ops < 1 {
		bad("%d operations per phase and no duration", o.Ops)
	}
	if o.Keys < 0 {
		bad("%d keys", o.Keys)
	}
	if o.Keys == 0 {
		o.Keys = o.Ops
		if o.Duration > 0 {
			o.Keys = DefaultMaxKeys
		}
	}
	if slices.Contains(o.Workloads, Mixed) {
		if len(o.Mix) == 0 {
			bad("mixed workload without sizes")
		}
		for _, p := range o.Mix {
			if p.Size < 1 || p.Weight < 1 {
				bad("mixed workload part %d bytes × %d: want positive size and weight", p.Size, p.Weight)
			}
		}
		if len(o.Rules) == 0 || o.Rules[len(o.Rules)-1].Max != 0 {
			bad("mixed workload's hybrid rules: the last must take every size (Max 0)")
		}
		for _, r := range o.Rules {
			if !slices.Contains(Mechanisms, r.RM) {
				bad("mixed workload's hybrid rule names mechanism %q: want one of %v", r.RM, Mechanisms)
			}
		}
	}
	if o.wants(Range) && (o.RangeIO < 1 || o.RangeValue < o.RangeIO || o.RangeKeys < 1) {
		bad("range workload: %d keys of %d bytes, %d bytes at a time: want at least one key, and values no smaller than the I/O", o.RangeKeys, o.RangeValue, o.RangeIO)
	}
	if o.Rebuild {
		if o.RebuildKeys < 1 || o.RebuildSize < 1 {
			bad("rebuild of %d keys of %d bytes", o.RebuildKeys, o.RebuildSize)
		}
		for _, m := range o.RebuildMechanisms {
			if !slices.Contains(Mechanisms, m) || m == hashing.Name {
				bad("rebuild mechanism %q: want replication, splitting or packing (hashing has nothing to rebuild from)", m)
			}
		}
	}
	if o.Backend == nil {
		o.Backend = Mem(KVSSD)
	}
	if _, err := chooserFactory(o.Dist, o.ZipfTheta, 1, 0); err != nil {
		bad("%v", err)
	}
	return errors.Join(errs...)
}

// sized reports whether a workload of fixed value sizes is asked for.
func (o *Options) sized() bool {
	for _, w := range o.Workloads {
		if w != Mixed && w != Range {
			return true
		}
	}
	return false
}

func (o *Options) wants(w string) bool { return slices.Contains(o.Workloads, w) }

// factory returns the named mechanism's factory with o's parameters.
func (o *Options) factory(name string) mechanism.Factory {
	switch name {
	case hashing.Name:
		return hashing.New()
	case replication.Name:
		return replication.New(o.Copies)
	case splitting.Name:
		return splitting.New(o.K, o.R)
	case packing.Name:
		return packing.New(o.K, o.R, o.PackingWait)
	}
	return nil
}

// all returns every mechanism's factory, name first.
func (o *Options) all(first string) []mechanism.Factory {
	fs := []mechanism.Factory{o.factory(first)}
	for _, m := range Mechanisms {
		if m != first {
			fs = append(fs, o.factory(m))
		}
	}
	return fs
}
