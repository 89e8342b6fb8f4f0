package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	goredis "github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/bench"
	"github.com/kvarray/kvarray/config"
	"github.com/kvarray/kvarray/mechanism/packing"
	"github.com/kvarray/kvarray/mechanism/replication"
	"github.com/kvarray/kvarray/mechanism/splitting"
	"github.com/kvarray/kvarray/reliability"
	"github.com/kvarray/kvarray/tune"
)

// tuneReport is what tune --json prints.
type tuneReport struct {
	// Source is the bench report file, or "bench run" when tune ran it.
	Source  string       `json:"source"`
	Devices string       `json:"devices"`
	Floors  tune.Options `json:"floors"`
	Plan    *tune.Plan   `json:"plan"`
	// Thresholds are the rules as bench --thresholds takes them.
	Thresholds string `json:"thresholds"`
	// Sample says where the sample of value sizes came from, if any.
	Sample *tuneSample `json:"sample,omitempty"`
	MTTDL  tuneMTTDL   `json:"mttdl"`
	// Compared are the thresholds the result replaces (the config's, or
	// init's defaults) on the same classes.
	Compared tuneCompared `json:"compared"`
	Config   tuneConfig   `json:"config"`
	Notes    []string     `json:"notes,omitempty"`
}

// tuneCompared are other thresholds' figures on the same classes.
type tuneCompared struct {
	What            string   `json:"what"`
	Thresholds      string   `json:"thresholds"`
	StorageOverhead float64  `json:"storage_overhead,omitempty"`
	MTTDLYears      float64  `json:"mttdl_years,omitempty"`
	Missed          []string `json:"below_floors,omitempty"` // size classes
	// Error says why they could not be compared (a mechanism the bench
	// did not measure).
	Error string `json:"error,omitempty"`
}

type tuneSample struct {
	Source string `json:"source"`
	Values int64  `json:"values"`
}

// tuneMTTDL is the predicted MTTDL of the chosen mix: each class's chosen
// mechanism holds the class's share of the device bytes, and the array's
// rate of data loss is the sum of the classes'.
type tuneMTTDL struct {
	Inputs     mttdlInputs     `json:"inputs"`
	Classes    []tuneClassLoss `json:"classes"`
	MTTDLYears float64         `json:"mttdl_years"`
}

type tuneClassLoss struct {
	SizeLabel string `json:"size_label"`
	mttdlRow
	// DeviceShare is the class's share of the bytes on the devices.
	DeviceShare float64 `json:"device_share"`
}

// tuneConfig says what tune did with the config.
type tuneConfig struct {
	Path    string `json:"path,omitempty"`
	Written bool   `json:"written"`
	Merged  bool   `json:"merged"` // into an existing config
}

// tuneFlags are tune's command line.
type tuneFlags struct {
	fromJSON, samplePath, sampleFrom string
	out, benchOut                    string
	sampleKeys                       int
	sizes, workloads, mechs          []string
	o                                tune.Options
	asJSON                           bool
	duration                         time.Duration
	ops, devices, copies, k, r       int
	in                               mttdlInputs
	rate                             float64
	capacity                         string
}

func (c *cli) tuneCmd() *cobra.Command {
	t := &tuneFlags{}
	cmd := &cobra.Command{
		Use:   "tune [--from-json BENCH.json | --sizes S,... | --sample FILE | --sample-from URL] [--min-ops N] [--min-mibs N] [--out FILE] [--json]",
		Short: "Choose hybrid thresholds that minimise storage overhead above a throughput floor",
		Long: `tune chooses the hybrid thresholds (which mechanism stores which value sizes)
from a bench: for every value size measured (a size class), among
replication, packing and splitting (--mechanisms), those whose slowest
workload reaches the floors --min-ops (operations per second) and
--min-mibs (MiB of values per second; deletes are exempt) in hybrid mode,
and of those the one with the least storage overhead (device bytes per user
byte, keys and headers included, as measured). A class stands for the
sizes up to the geometric mean of its size and the next one (4 and 16 KiB
meet at 8 KiB); neighbouring classes with the same choice share a rule.

The bench is read from a report (--from-json FILE, from 'kvarray bench
--json') or run here on mem devices with the KV-SSD speed model over
--sizes, or over the sizes of a sample (--sample FILE: one value size per
line, or SIZE COUNT for a histogram; --sample-from redis://HOST:PORT/DB:
the string values of a running kvarray serve or Redis), one size class
per power-of-4 bucket of the sample, at its median; --bench-json FILE
saves that run. --workloads names the workloads the floors apply to. A
sample also weighs the classes by their bytes for the predictions;
without one every class is taken to hold as many values as the others.

tune prints the table it chose from, the thresholds, the predicted storage
overhead and the predicted MTTDL of the result (the reliability model of
'kvarray mttdl', each class's mechanism holding its share of the devices),
and writes a config: --out FILE writes a new one (pebble devices data/dev0
... like 'kvarray init', or the devices of --config FILE when given), and
--config FILE alone rewrites that file with the new thresholds (comments
are not kept). Without either nothing is written. A floor that no
mechanism reaches in some size class is an error naming the class and the
best throughput there.`,
		Example: `  kvarray bench --json --modes hybrid > bench.json
  kvarray tune --from-json bench.json --min-ops 4000 --out kvarray.yaml
  kvarray tune --sample sizes.txt --min-mibs 100 --config kvarray.yaml
  kvarray tune --sample-from redis://127.0.0.1:6380/0 --from-json bench.json --min-ops 4000`,
		Args: args(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := t.check(cmd.Flags()); err != nil {
				return usageError{cmd, err}
			}
			return c.tune(cmd, t)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&t.fromJSON, "from-json", "", "choose from the bench report in `FILE` (from 'kvarray bench --json') instead of running one")
	fl.StringSliceVar(&t.sizes, "sizes", []string{"1KiB", "4KiB", "16KiB", "64KiB"}, "value sizes to bench (the size classes)")
	fl.StringVar(&t.samplePath, "sample", "", "value sizes to bench and weigh by: `FILE` of SIZE or SIZE COUNT lines")
	fl.StringVar(&t.sampleFrom, "sample-from", "", "value sizes to bench and weigh by: the string values of the running server at `URL`, redis://[:PASSWORD@]HOST:PORT/DB")
	fl.IntVar(&t.sampleKeys, "sample-keys", 100_000, "--sample-from: at most this many keys")
	fl.Float64Var(&t.o.MinOps, "min-ops", 0, "floor: operations per second every workload must reach")
	fl.Float64Var(&t.o.MinMiBs, "min-mibs", 0, "floor: MiB of values per second every workload but delete must reach")
	fl.StringSliceVar(&t.workloads, "workloads", nil, "workloads the floors apply to (and that a run measures); default: store, retrieve, update, delete")
	fl.StringSliceVar(&t.mechs, "mechanisms", nil, "candidate mechanisms; default: replication, packing, splitting")
	fl.StringVar(&t.out, "out", "", "write the tuned config to `FILE`")
	fl.BoolVar(&t.asJSON, "json", false, "print the report as JSON")
	fl.StringVar(&t.benchOut, "bench-json", "", "save the bench report tune ran to `FILE` (for --from-json)")
	fl.DurationVar(&t.duration, "duration", 500*time.Millisecond, "time per bench phase")
	fl.IntVar(&t.ops, "ops", 0, "operations per bench phase (instead of --duration)")
	fl.IntVar(&t.devices, "devices", 6, "bench: number of devices (with --config: the config's)")
	fl.IntVar(&t.copies, "copies", 3, "bench: replication copies (with --config: the config's)")
	fl.IntVar(&t.k, "k", 4, "bench: splitting and packing data shards (with --config: the config's)")
	fl.IntVar(&t.r, "r", 2, "bench: splitting and packing parity shards (with --config: the config's)")
	modelFlags(fl, &t.in, &t.rate, &t.capacity)
	return cmd
}

// check validates the flags and fills in what derives from them.
func (t *tuneFlags) check(f *pflag.FlagSet) error {
	var perr error
	bad := func(err error) { perr = errors.Join(perr, err) }
	if f.Changed("from-json") && f.Changed("sizes") {
		bad(errors.New("--from-json and --sizes: give one (a report's sizes are those it measured)"))
	}
	samples := 0
	for _, name := range []string{"sizes", "sample", "sample-from"} {
		if f.Changed(name) {
			samples++
		}
	}
	if samples > 1 {
		bad(errors.New("--sizes, --sample and --sample-from: give one (a sample's sizes are chosen from it)"))
	}
	if t.sampleKeys < 1 {
		bad(fmt.Errorf("--sample-keys %d: want at least 1", t.sampleKeys))
	}
	if f.Changed("ops") && f.Changed("duration") {
		bad(errors.New("--ops and --duration: give one"))
	}
	if t.o.MinOps < 0 || t.o.MinMiBs < 0 || math.IsNaN(t.o.MinOps) || math.IsNaN(t.o.MinMiBs) {
		bad(errors.New("--min-ops and --min-mibs must not be negative"))
	}
	if !(t.in.MTTFHours > 0) || !(t.in.Fill > 0 && t.in.Fill <= 1) || !(t.rate > 0) {
		bad(errors.New("--mttf and --repair-rate must be positive, --fill in (0, 1]"))
	}
	capBytes, err := humanize.ParseBytes(t.capacity)
	if err != nil || capBytes == 0 {
		bad(fmt.Errorf("--capacity: %q is not a size (e.g. 3.84TB)", t.capacity))
	}
	t.in.CapacityBytes = float64(capBytes)
	t.o.Workloads, t.o.Mechanisms = splitList(t.workloads), splitList(t.mechs)
	for _, w := range t.o.Workloads {
		if !slices.Contains([]string{bench.Store, bench.Retrieve, bench.Update, bench.Delete}, w) {
			bad(fmt.Errorf("--workloads: %q: want store, retrieve, update or delete", w))
		}
	}
	for _, m := range t.o.Mechanisms {
		if !slices.Contains(tune.DefaultMechanisms, m) {
			bad(fmt.Errorf("--mechanisms: %q: want replication, packing or splitting", m))
		}
	}
	return perr
}

// tune runs the command: the sample, the bench (read or run), the choice,
// the predictions, the config, the report.
func (c *cli) tune(cmd *cobra.Command, t *tuneFlags) error {
	f := cmd.Flags()
	o := t.o
	if t.out != "" {
		if _, err := os.Stat(t.out); err == nil {
			return fmt.Errorf("--out %s already exists: tune writes new files only; to set the thresholds of an existing config, give it as --config FILE", t.out)
		}
	}
	var err error
	switch {
	case f.Changed("sample"):
		if o.Sample, err = readSample(t.samplePath); err != nil {
			return err
		}
	case f.Changed("sample-from"):
		if o.Sample, err = sampleServer(c.ctx, t.sampleFrom, t.sampleKeys); err != nil {
			return err
		}
	}
	var base *config.Config
	if f.Changed("config") {
		if base, err = config.Load(c.configPath); err != nil {
			return err
		}
		if err := movable(base, t.out); err != nil {
			return err
		}
	}
	rep, source := (*bench.Report)(nil), "bench run"
	if t.fromJSON != "" {
		if rep, err = readReport(t.fromJSON); err != nil {
			return err
		}
		source = t.fromJSON
	} else if rep, err = c.tuneBench(cmd, t, base, o.Sample); err != nil {
		return err
	}
	if rep.Options.Devices < 1 {
		return fmt.Errorf("tune: %s records no number of devices (options.devices)", source)
	}

	plan, err := tune.Choose(rep, o)
	if err != nil {
		return fmt.Errorf("tune: %w", err)
	}
	tr := tuneReport{Source: source, Devices: rep.Devices, Floors: o, Plan: plan, Thresholds: thresholdList(plan)}
	if o.Sample != nil {
		tr.Sample = &tuneSample{Source: cmp.Or(t.samplePath, redacted(t.sampleFrom))}
		for _, s := range o.Sample {
			tr.Sample.Values += s.Count
		}
	}
	in := t.in
	in.Devices = rep.Options.Devices
	in.Scope = "object"
	in.RepairSource = fmt.Sprintf("%g objects/s", t.rate)
	rates := map[string]float64{}
	if !f.Changed("repair-rate") && len(rep.Rebuild) > 0 {
		rates = reportRates(rep)
		in.RepairSource = "rebuild keys/s measured in " + source
	}
	if tr.MTTDL, err = predictMTTDL(plan, rep.Options, in, rates, t.rate); err != nil {
		return fmt.Errorf("tune: %w", err)
	}

	tr.Compared = compareTune(plan, base, rep.Options, in, rates, t.rate)

	cfg, notes, err := tunedConfig(base, plan, rep.Options)
	if err != nil {
		return fmt.Errorf("tune: %w", err)
	}
	tr.Notes = notes
	if plan.Stalled > 0 {
		tr.Notes = append(tr.Notes, fmt.Sprintf("the host stalled the bench in %d of the phases chosen from (marked !): "+
			"those numbers say more about the host's load than about the array; rerun on a quieter host", plan.Stalled))
	}
	switch {
	case t.out != "":
		tr.Config = tuneConfig{Path: t.out, Written: true, Merged: base != nil}
	case base != nil:
		tr.Config = tuneConfig{Path: c.configPath, Written: true, Merged: true}
	}
	if tr.Config.Written {
		if err := cfg.Save(tr.Config.Path); err != nil {
			return fmt.Errorf("tune: %w", err)
		}
	}
	if t.asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(tr)
	}
	return printTune(c.stdout, tr)
}

// tuneBench runs the bench tune chooses from, over the sample's sizes or
// --sizes, and saves it with --bench-json.
func (c *cli) tuneBench(cmd *cobra.Command, t *tuneFlags, base *config.Config, sample []tune.SizeCount) (*bench.Report, error) {
	f := cmd.Flags()
	bo := tuneBenchOptions(base)
	set := func(name string, fn func()) {
		if f.Changed(name) {
			fn()
		}
	}
	set("devices", func() { bo.Devices = t.devices })
	set("copies", func() { bo.Copies = t.copies })
	set("k", func() { bo.K = t.k })
	set("r", func() { bo.R = t.r })
	bo.Duration = t.duration
	set("ops", func() { bo.Ops, bo.Duration = t.ops, 0 })
	if len(t.o.Workloads) > 0 {
		bo.Workloads = t.o.Workloads
	}
	if len(t.o.Mechanisms) > 0 {
		bo.Mechanisms = t.o.Mechanisms
	}
	if sample != nil {
		bo.Sizes = tune.SampleSizes(sample)
	} else {
		sizes, err := parseSizes("--sizes", t.sizes)
		if err != nil {
			return nil, usageError{cmd, err}
		}
		bo.Sizes = sizes
	}
	if err := bo.Validate(); err != nil {
		return nil, usageError{cmd, err}
	}
	if tty(c.stderr) {
		bo.Progress = progressLine(c.stderr)
	}
	rep, err := bench.Run(c.ctx, bo)
	if bo.Progress != nil {
		fmt.Fprint(c.stderr, "\r\033[K")
	}
	if err != nil {
		return nil, fmt.Errorf("tune: bench: %w", err)
	}
	if t.benchOut != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = os.WriteFile(t.benchOut, append(data, '\n'), 0o644)
		}
		if err != nil {
			return nil, fmt.Errorf("tune: --bench-json: %w", err)
		}
	}
	return rep, nil
}

// tuneBenchOptions are the bench tune runs: hybrid mode only (what the
// thresholds will run in), the candidate mechanisms, the sized workloads,
// with the geometry of base when there is one.
func tuneBenchOptions(base *config.Config) bench.Options {
	o := bench.Defaults()
	o.Workloads = []string{bench.Store, bench.Retrieve, bench.Update, bench.Delete}
	o.Mechanisms = slices.Clone(tune.DefaultMechanisms)
	o.Modes = []string{bench.ModeHybrid}
	if base != nil {
		o.Devices = len(base.Devices)
		o.Copies = base.Replication.Copies
		switch {
		case base.Splitting != nil:
			o.K, o.R = base.Splitting.K, base.Splitting.R
		case base.Packing != nil:
			o.K, o.R = base.Packing.K, base.Packing.R
		default: // what init would add: k = min(4, N−2), r = 2
			o.K = max(1, min(o.K, o.Devices-o.R))
		}
		if base.Packing != nil {
			o.PackingWait = time.Duration(base.Packing.Wait)
		}
	}
	return o
}

// movable refuses to write cfg to out (when given) in another directory
// than cfg's own if cfg has relative pebble paths: they are relative to
// the directory of the file they are in, so they would name other
// devices there.
func movable(cfg *config.Config, out string) error {
	if out == "" {
		return nil
	}
	dir, err := filepath.Abs(filepath.Dir(out))
	if err != nil || dir == cfg.Dir() {
		return err
	}
	for _, spec := range cfg.Devices {
		if p, ok := strings.CutPrefix(spec, "pebble:"); ok && !filepath.IsAbs(p) {
			return fmt.Errorf("--out %s is not in the directory of the config, whose device %s is relative to it: write it next to the config", out, spec)
		}
	}
	return nil
}

// parseSizes parses a list of sizes like 4KiB.
func parseSizes(flag string, list []string) ([]int, error) {
	var sizes []int
	var err error
	for _, s := range splitList(list) {
		n, perr := humanize.ParseBytes(s)
		if perr != nil || n == 0 || n > math.MaxInt32 {
			err = errors.Join(err, fmt.Errorf("%s: %q is not a size (e.g. 4KiB)", flag, s))
			continue
		}
		sizes = append(sizes, int(n))
	}
	return sizes, err
}

// readSample reads a sample of value sizes: a size per line (4096, 4KiB),
// optionally followed by a count; blank lines and # comments are skipped.
func readSample(path string) ([]tune.SizeCount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []tune.SizeCount
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		n, err := humanize.ParseBytes(fields[0])
		count := int64(1)
		if err == nil && len(fields) == 2 {
			count, err = strconv.ParseInt(fields[1], 10, 64)
		}
		if err != nil || len(fields) > 2 || n == 0 || n > math.MaxInt32 || count < 1 {
			return nil, fmt.Errorf("%s:%d: %q: want a value size and an optional count, e.g. 4KiB 120", path, line, sc.Text())
		}
		out = append(out, tune.SizeCount{Size: int64(n), Count: count})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no value sizes", path)
	}
	return out, nil
}

// sampleServer samples the value sizes of a running Redis-protocol server
// (kvarray serve, Redis): the STRLEN of up to limit string keys of the
// database of addr (a redis:// URL, or HOST:PORT), as SCAN lists them (a key SCAN returns twice counts
// twice; empty values are left out). The server keeps no histogram of
// its own, so this is a pass over the keys, pipelined a page at a time.
func sampleServer(ctx context.Context, addr string, limit int) ([]tune.SizeCount, error) {
	if !strings.Contains(addr, "://") {
		addr = "redis://" + addr
	}
	opt, err := goredis.ParseURL(addr)
	if err != nil {
		return nil, fmt.Errorf("--sample-from: %w (want redis://[:PASSWORD@]HOST:PORT/DB)", err)
	}
	opt.DialerRetries = 1 // an unreachable server is an error at once
	// go-redis logs dial failures to stderr; the error says it in one line.
	goredis.SetLogger(silentLogger{})
	rdb := goredis.NewClient(opt)
	defer rdb.Close()
	counts := map[int64]int64{}
	seen := 0
	for cursor := uint64(0); ; {
		keys, next, err := rdb.ScanType(ctx, cursor, "", 1000, "string").Result()
		if err != nil {
			return nil, fmt.Errorf("--sample-from %s: SCAN: %w", opt.Addr, err)
		}
		keys = keys[:min(len(keys), limit-seen)]
		pipe := rdb.Pipeline()
		lens := make([]*goredis.IntCmd, len(keys))
		for i, k := range keys {
			lens[i] = pipe.StrLen(ctx, k)
		}
		_, _ = pipe.Exec(ctx) // each command's error is checked below
		for _, l := range lens {
			var reply goredis.Error
			switch n, err := l.Result(); {
			case errors.As(err, &reply):
				continue // the key changed type since SCAN listed it
			case err != nil:
				return nil, fmt.Errorf("--sample-from %s: STRLEN: %w", opt.Addr, err)
			case n > 0:
				counts[n]++
			}
		}
		seen += len(keys)
		if cursor = next; cursor == 0 || seen >= limit {
			break
		}
	}
	if len(counts) == 0 {
		return nil, fmt.Errorf("--sample-from %s: no non-empty string values in database %d", opt.Addr, opt.DB)
	}
	out := make([]tune.SizeCount, 0, len(counts))
	for size, n := range counts {
		out = append(out, tune.SizeCount{Size: size, Count: n})
	}
	return out, nil
}

type silentLogger struct{}

func (silentLogger) Printf(context.Context, string, ...any) {}

// redacted hides the password of a URL.
func redacted(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return s
}

// thresholdList writes the rules as bench --thresholds takes them.
func thresholdList(p *tune.Plan) string {
	parts := make([]string, len(p.Rules))
	for i, r := range p.Rules {
		parts[i] = r.RM
		if r.Max > 0 {
			parts[i] = config.Size(r.Max).String() + ":" + r.RM
		}
	}
	return strings.Join(parts, ",")
}

// modelMechanism is the reliability model of a mechanism with the bench's
// geometry.
func modelMechanism(name string, o bench.Options) reliability.Mechanism {
	switch name {
	case replication.Name:
		return reliability.NewReplication(o.Copies)
	case splitting.Name:
		return reliability.NewSplitting(o.K, o.R)
	case packing.Name:
		return reliability.NewPacking(o.K, o.R)
	}
	return reliability.NewHashing()
}

// predictMTTDL evaluates the model for each class's mechanism on the
// class's share of the device bytes (its share of user bytes times its
// storage overhead), and adds up the rates of data loss.
func predictMTTDL(p *tune.Plan, o bench.Options, in mttdlInputs, rates map[string]float64, rate float64) (tuneMTTDL, error) {
	res := tuneMTTDL{Inputs: in}
	dev := 0.0
	for _, c := range p.Classes {
		cand, _ := c.ChosenCandidate()
		dev += c.Weight * cand.StorageOverhead
	}
	loss := 0.0
	for _, c := range p.Classes {
		cand, _ := c.ChosenCandidate()
		share := c.Weight * cand.StorageOverhead / dev
		if share == 0 {
			continue
		}
		ci := in
		ci.Fill *= share
		ci.ObjectBytes = float64(c.Size)
		row, err := evaluate(modelMechanism(c.Chosen, o), ci, rates, rate)
		if err != nil {
			return res, fmt.Errorf("size class %s: %w", c.SizeLabel, err)
		}
		res.Classes = append(res.Classes, tuneClassLoss{SizeLabel: c.SizeLabel, mttdlRow: row, DeviceShare: share})
		loss += 1 / row.MTTDLYears
	}
	res.MTTDLYears = 1 / loss
	return res, nil
}

// compareTune evaluates the thresholds the plan replaces: base's, or
// without one those of init's default config for the bench's devices.
func compareTune(p *tune.Plan, base *config.Config, o bench.Options, in mttdlInputs, rates map[string]float64, rate float64) tuneCompared {
	res := tuneCompared{What: "the config's thresholds"}
	cfg := base
	if cfg == nil {
		res.What = "kvarray init's default thresholds"
		cfg = config.Default("data", o.Devices)
	}
	var rules []array.Rule
	if cfg.Mode == "hybrid" {
		for _, t := range cfg.Thresholds {
			r := array.Rule{RM: t.RM}
			if t.Max != nil {
				r.Max = int64(*t.Max)
			}
			rules = append(rules, r)
		}
	} else {
		res.What = "the config's standalone mode"
	}
	under, err := p.Under(rules, cfg.Default)
	if err == nil {
		res.Thresholds = thresholdList(under)
		var m tuneMTTDL
		if m, err = predictMTTDL(under, o, in, rates, rate); err == nil {
			res.StorageOverhead, res.MTTDLYears, res.Missed = under.StorageOverhead, m.MTTDLYears, under.Missed()
		}
	}
	if err != nil {
		res.Error = err.Error()
	}
	return res
}

// tunedConfig is base (or, without one, init's default config on the
// bench's number of devices and with its geometry) in hybrid mode with the
// plan's thresholds. A base whose geometry differs from the bench's for a
// mechanism the thresholds use is an error: the measurements would not be
// of that mechanism.
func tunedConfig(base *config.Config, p *tune.Plan, o bench.Options) (*config.Config, []string, error) {
	var notes []string
	var cfg config.Config
	if base == nil {
		cfg = *config.Default("data", o.Devices)
		cfg.Replication = &config.Replication{Copies: o.Copies}
		cfg.Splitting = &config.Splitting{K: o.K, R: o.R}
		cfg.Packing = &config.Packing{K: o.K, R: o.R, Wait: config.Duration(o.PackingWait)}
	} else {
		cfg = *base
		if n := len(cfg.Devices); n != o.Devices {
			notes = append(notes, fmt.Sprintf("the bench ran on %d devices, the config lists %d: throughput scales with the devices", o.Devices, n))
		}
	}
	cfg.Mode = "hybrid"
	cfg.Thresholds = nil
	var errs []error
	for _, r := range p.Rules {
		t := config.Threshold{RM: r.RM}
		if r.Max > 0 {
			m := config.Size(r.Max)
			t.Max = &m
		}
		cfg.Thresholds = append(cfg.Thresholds, t)
		mismatch := func(have string) {
			errs = append(errs, fmt.Errorf("the config's %s is %s, the bench measured %s: bench with the config's geometry (tune --config FILE without --from-json does)",
				r.RM, have, modelMechanism(r.RM, o)))
		}
		switch r.RM {
		case replication.Name:
			if c := cfg.Replication; c.Copies != o.Copies {
				mismatch(fmt.Sprintf("%d copies", c.Copies))
			}
		case splitting.Name:
			if c := cfg.Splitting; c == nil {
				cfg.Splitting = &config.Splitting{K: o.K, R: o.R}
			} else if c.K != o.K || c.R != o.R {
				mismatch(fmt.Sprintf("%d+%d", c.K, c.R))
			}
		case packing.Name:
			if c := cfg.Packing; c == nil {
				cfg.Packing = &config.Packing{K: o.K, R: o.R, Wait: config.Duration(o.PackingWait)}
			} else if c.K != o.K || c.R != o.R {
				mismatch(fmt.Sprintf("%d+%d", c.K, c.R))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	return &cfg, notes, nil
}

func printTune(out io.Writer, tr tuneReport) error {
	p := tr.Plan
	var b strings.Builder
	fmt.Fprintf(&b, "bench: %s (%s), %s-mode results\n", tr.Devices, tr.Source, p.Mode)
	var floors []string
	if tr.Floors.MinOps > 0 {
		floors = append(floors, fmt.Sprintf("%g ops/s", tr.Floors.MinOps))
	}
	if tr.Floors.MinMiBs > 0 {
		floors = append(floors, fmt.Sprintf("%g MiB/s", tr.Floors.MinMiBs))
	}
	if len(floors) == 0 {
		b.WriteString("floors: none (the least storage overhead in every size class)\n\n")
	} else {
		fmt.Fprintf(&b, "floors: %s, in each of %s (the slowest counts)\n\n", strings.Join(floors, " and "), strings.Join(p.Workloads, ", "))
	}
	w := &cols{out: &b, left: 3}
	w.row("SIZE", "RANGE", "MECHANISM", "OPS/S", "SLOWEST", "MiB/S", "SLOWEST", "SPACE", "FLOORS", "CHOSEN")
	for _, c := range p.Classes {
		for i, cand := range c.Candidates {
			size, rng := c.SizeLabel, c.Range()
			if i > 0 {
				size, rng = "", ""
			}
			meets, chosen := "no", ""
			if cand.Meets {
				meets = "ok"
			}
			if cand.Chosen {
				chosen = "*"
			}
			stalled := ""
			for _, r := range cand.Rates {
				if r.Stalled {
					stalled = "!"
				}
			}
			w.row(size, rng, cand.Mechanism, fmt.Sprintf("%.0f%s", cand.OpsPerSec, stalled), cand.OpsLimit,
				fmt.Sprintf("%.1f", cand.MiBPerSec), cand.MiBLimit, fmt.Sprintf("%.2f", cand.StorageOverhead), meets, chosen)
		}
	}
	w.flush()
	fmt.Fprintf(&b, "\nSPACE: device bytes per user byte (keys and values, headers included), as measured.\n")
	fmt.Fprintf(&b, "\nthresholds: %s\n", tr.Thresholds)
	weights := p.Weighting
	if tr.Sample != nil {
		weights = fmt.Sprintf("%s, %d values from %s", weights, tr.Sample.Values, tr.Sample.Source)
	}
	fmt.Fprintf(&b, "predicted storage overhead: %.2f (weights: %s)\n", p.StorageOverhead, weights)
	m := tr.MTTDL
	fmt.Fprintf(&b, "predicted MTTDL: %.3g years (%d devices of %s, %.0f%% full, device MTTF %.3g h, repair %s)\n\n",
		m.MTTDLYears, m.Inputs.Devices, humanize.Bytes(uint64(m.Inputs.CapacityBytes)), m.Inputs.Fill*100, m.Inputs.MTTFHours, m.Inputs.RepairSource)
	w = &cols{out: &b, left: 2}
	w.row("SIZE", "MECHANISM", "USER BYTES", "DEVICE BYTES", "MTTDL (years)")
	weight := map[string]float64{}
	for _, c := range p.Classes {
		weight[c.SizeLabel] = c.Weight
	}
	for _, c := range m.Classes {
		w.row(c.SizeLabel, c.Mechanism.String(), fmt.Sprintf("%.1f%%", 100*weight[c.SizeLabel]), fmt.Sprintf("%.1f%%", 100*c.DeviceShare), fmt.Sprintf("%.3g", c.MTTDLYears))
	}
	w.flush()
	b.WriteString("\n")
	if cm := tr.Compared; cm.Error != "" {
		fmt.Fprintf(&b, "compared: not with %s: %s\n", cm.What, cm.Error)
	} else {
		below := "meeting the floors"
		if len(cm.Missed) > 0 {
			below = "below the floors at " + strings.Join(cm.Missed, ", ")
		}
		fmt.Fprintf(&b, "compared: %s (%s) give: storage overhead %.2f, MTTDL %.3g years, %s\n",
			cm.What, cm.Thresholds, cm.StorageOverhead, cm.MTTDLYears, below)
	}
	for _, n := range tr.Notes {
		fmt.Fprintf(&b, "\nnote: %s\n", n)
	}
	switch cf := tr.Config; {
	case cf.Merged:
		fmt.Fprintf(&b, "\nconfig %s written with these thresholds\n", cf.Path)
	case cf.Written:
		fmt.Fprintf(&b, "\nconfig %s written for a new array of %d pebble devices under data/ (nothing was created;\n"+
			"to tune an existing array, give its config as --config FILE instead)\n", cf.Path, m.Inputs.Devices)
	default:
		b.WriteString("\nno config written: give --out FILE or --config FILE\n")
	}
	_, err := io.WriteString(out, b.String())
	return err
}
