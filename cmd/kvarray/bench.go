package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/bench"
	"github.com/kvarray/kvarray/config"
	"github.com/kvarray/kvarray/device/mem"
)

func (c *cli) benchCmd() *cobra.Command {
	var (
		quick, asJSON, rebuild      bool
		workloads, mechs, modes     []string
		sizes                       []string
		devices, copies, k, r       int
		threads, qd, ops, keys      int
		duration, wait              time.Duration
		dist                        string
		theta                       float64
		seed                        uint64
		backend, dir, chart, replot string
		latency                     time.Duration
		opsPerSec                   float64
		bytesPerSec                 string
		rebuildKeys                 int
		rebuildSize                 string
		rangeValue, rangeIO         string
		rangeKeys                   int
		tinyMax                     string
		mix, thresholds             []string
	)
	cmd := &cobra.Command{
		Use:   "bench [--quick] [--workloads W,...] [--sizes S,...] [--json] [--chart FILE.svg]",
		Short: "Measure every mechanism against raw device operations (the KVMD evaluation)",
		Long: `bench measures the workloads store, retrieve, update, delete and mixed with
every mechanism in standalone and hybrid mode, and the None baseline (raw
device operations on the same kind of devices, each value once, no header,
on the device its key hashes to), each on fresh devices, and reports
ops/s, MiB/s, latency percentiles, device operations and bytes per user
operation (write and read amplification), storage overhead, and every
result as a percentage of None.

A store phase inserts new keys; retrieve and update then pick among them
(--dist uniform or zipfian), and delete removes each once. mixed stores and
retrieves the paper's mix of 4, 16 and 64 KiB values at 30:40:30 (--mix),
with each mechanism alone and in hybrid mode with the thresholds
replication up to 8 KiB, packing up to 32 KiB, splitting above
(--thresholds): try thresholds chosen from a run over your sizes here.
range reads (GETRANGE) and writes (SETRANGE) --range-io bytes at random
aligned offsets of --range-keys values of --range-value bytes: RAMP is the
device bytes read per user byte (docs/partial-io.md).

Backends: --backend mem (the default: in-memory devices with a KV-SSD-like
speed model, see --ops-per-sec), --backend pebble --dir DIR (fresh
databases under DIR), or --config FILE (the devices a config lists, which
must be empty: bench erases what it writes).

--quick runs 4 and 64 KiB for 300ms per phase, in well under a minute.
--rebuild adds the rebuild benchmark (store --rebuild-keys values, replace
one device, rebuild it). --json prints the report as JSON; --chart FILE
draws the paper's bar-and-lollipop figure (.svg, .png or .pdf).
--from-json FILE prints (or charts) a saved report instead of running.`,
		Args: args(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if replot != "" {
				return c.replot(replot, asJSON, chart)
			}
			o := bench.Defaults()
			if quick {
				o = bench.Quick()
			}
			f := cmd.Flags()
			set := func(name string, fn func()) {
				if f.Changed(name) {
					fn()
				}
			}
			var perr error
			set("workloads", func() { o.Workloads = splitList(workloads) })
			set("mechanisms", func() { o.Mechanisms = splitList(mechs) })
			set("modes", func() { o.Modes = splitList(modes) })
			set("sizes", func() {
				o.Sizes = nil
				for _, s := range splitList(sizes) {
					n, err := humanize.ParseBytes(s)
					if err != nil || n == 0 {
						perr = errors.Join(perr, fmt.Errorf("--sizes: %q is not a size (e.g. 4KiB)", s))
						continue
					}
					o.Sizes = append(o.Sizes, int(n))
				}
			})
			set("devices", func() { o.Devices = devices })
			set("copies", func() { o.Copies = copies })
			set("k", func() { o.K = k })
			set("r", func() { o.R = r })
			set("packing-wait", func() { o.PackingWait = wait })
			set("tiny-max", func() {
				n, err := humanize.ParseBytes(tinyMax)
				if err != nil || n > 1<<20 {
					perr = errors.Join(perr, fmt.Errorf("--tiny-max: %q is not a size up to 1MiB (e.g. 64B)", tinyMax))
					return
				}
				o.TinyMax = int(n)
			})
			set("threads", func() { o.Threads = threads })
			set("qd", func() { o.QueueDepth = qd })
			if f.Changed("ops") && f.Changed("duration") {
				return usageError{cmd, errors.New("--ops and --duration: give one")}
			}
			set("ops", func() { o.Ops, o.Duration = ops, 0 })
			set("duration", func() { o.Duration = duration })
			set("keys", func() { o.Keys = keys })
			set("dist", func() { o.Dist = dist })
			set("zipf-theta", func() { o.ZipfTheta = theta })
			set("seed", func() { o.Seed = seed })
			set("mix", func() {
				o.Mix = nil
				for _, part := range splitList(mix) {
					sz, w, found := strings.Cut(part, ":")
					n, err := humanize.ParseBytes(sz)
					weight, werr := strconv.Atoi(w)
					if !found || err != nil || n == 0 || werr != nil || weight < 1 {
						perr = errors.Join(perr, fmt.Errorf("--mix: %q: want SIZE:WEIGHT, e.g. 4KiB:30", part))
						continue
					}
					o.Mix = append(o.Mix, bench.MixPart{Size: int(n), Weight: weight})
				}
			})
			set("thresholds", func() {
				o.Rules = nil
				parts := splitList(thresholds)
				for i, part := range parts {
					sz, rm, found := strings.Cut(part, ":")
					if !found {
						sz, rm = "", part
					}
					rule := array.Rule{RM: rm}
					if sz != "" {
						n, err := humanize.ParseBytes(sz)
						if err != nil || n == 0 {
							perr = errors.Join(perr, fmt.Errorf("--thresholds: %q: want MAX:MECHANISM, e.g. 8KiB:replication", part))
							continue
						}
						rule.Max = int64(n)
					} else if i != len(parts)-1 {
						perr = errors.Join(perr, fmt.Errorf("--thresholds: %q has no maximum size and is not the last rule", part))
					}
					o.Rules = append(o.Rules, rule)
				}
				if len(o.Rules) > 0 && o.Rules[len(o.Rules)-1].Max != 0 {
					perr = errors.Join(perr, errors.New("--thresholds: the last rule must take every larger size (MECHANISM without MAX:)"))
				}
			})
			sizeFlag := func(name, v string, dst *int) {
				set(name, func() {
					n, err := humanize.ParseBytes(v)
					if err != nil || n == 0 {
						perr = errors.Join(perr, fmt.Errorf("--%s: %q is not a size", name, v))
					}
					*dst = int(n)
				})
			}
			sizeFlag("range-value", rangeValue, &o.RangeValue)
			sizeFlag("range-io", rangeIO, &o.RangeIO)
			set("range-keys", func() { o.RangeKeys = rangeKeys })
			o.Rebuild = rebuild
			set("rebuild-keys", func() { o.RebuildKeys = rebuildKeys })
			set("rebuild-size", func() {
				n, err := humanize.ParseBytes(rebuildSize)
				if err != nil || n == 0 {
					perr = errors.Join(perr, fmt.Errorf("--rebuild-size: %q is not a size", rebuildSize))
				}
				o.RebuildSize = int(n)
			})
			perf := bench.KVSSD
			set("latency", func() { perf.Latency = latency })
			set("ops-per-sec", func() { perf.OpsPerSec = opsPerSec })
			set("bytes-per-sec", func() {
				n, err := humanize.ParseBytes(bytesPerSec)
				if err != nil {
					perr = errors.Join(perr, fmt.Errorf("--bytes-per-sec: %q is not a size", bytesPerSec))
				}
				perf.BytesPerSec = float64(n)
			})
			if perr != nil {
				return usageError{cmd, perr}
			}
			be, err := c.benchBackend(cmd, backend, dir, perf)
			if err != nil {
				return err
			}
			o.Backend = be
			if err := o.Validate(); err != nil {
				return usageError{cmd, err}
			}
			if tty(c.stderr) {
				o.Progress = progressLine(c.stderr)
			}
			rep, err := bench.Run(c.ctx, o)
			if o.Progress != nil {
				fmt.Fprint(c.stderr, "\r\033[K")
			}
			if err != nil {
				return fmt.Errorf("bench: %w", err)
			}
			return c.benchOutput(rep, asJSON, chart)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&quick, "quick", false, "a short run: 4 and 64 KiB, 300ms per phase, no range workload (under a minute)")
	fl.StringSliceVar(&workloads, "workloads", bench.Workloads, "workloads: store, retrieve, update, delete, mixed, range")
	fl.StringSliceVar(&sizes, "sizes", []string{"1KiB", "4KiB", "16KiB", "64KiB"}, "value sizes of store, retrieve, update and delete")
	fl.StringSliceVar(&mechs, "mechanisms", bench.Mechanisms, "mechanisms to measure (None is always measured; also "+bench.Tiny+": tiny values in buckets, see --tiny-max)")
	fl.StringSliceVar(&modes, "modes", []string{"standalone", "hybrid"}, "modes to measure each mechanism in")
	fl.IntVar(&devices, "devices", 6, "number of devices")
	fl.IntVar(&copies, "copies", 3, "replication copies")
	fl.IntVar(&k, "k", 4, "splitting and packing data shards")
	fl.IntVar(&r, "r", 2, "splitting and packing parity shards")
	fl.DurationVar(&wait, "packing-wait", 2*time.Millisecond, "how long packing waits to fill a set")
	fl.StringVar(&tinyMax, "tiny-max", "64B", "the "+bench.Tiny+" target's threshold: values up to this size go to buckets")
	fl.IntVar(&threads, "threads", 6, "client threads")
	fl.IntVar(&qd, "qd", 8, "requests each thread keeps in flight")
	fl.IntVar(&ops, "ops", 0, "operations per phase (instead of --duration)")
	fl.DurationVar(&duration, "duration", 2*time.Second, "time per phase")
	fl.IntVar(&keys, "keys", 0, "keys the store phase inserts (default: --ops, or at most 100000 with --duration)")
	fl.StringVar(&dist, "dist", bench.Uniform, "key distribution of retrieves and updates: uniform or zipfian")
	fl.Float64Var(&theta, "zipf-theta", 0.99, "zipfian skew θ, 0 < θ < 1 (YCSB's 0.99)")
	fl.Uint64Var(&seed, "seed", 1, "random seed (values, key choices)")
	fl.StringVar(&backend, "backend", "mem", "device backend: mem or pebble (or give --config FILE)")
	fl.StringVar(&dir, "dir", "", "directory for --backend pebble (default: a temporary directory)")
	fl.DurationVar(&latency, "latency", bench.KVSSD.Latency, "mem devices: latency of every operation")
	fl.Float64Var(&opsPerSec, "ops-per-sec", bench.KVSSD.OpsPerSec, "mem devices: operations per second per device (0: unlimited)")
	fl.StringVar(&bytesPerSec, "bytes-per-sec", "80MB", "mem devices: value bytes per second per device (0: unlimited)")
	fl.StringSliceVar(&mix, "mix", []string{"4KiB:30", "16KiB:40", "64KiB:30"}, "mixed workload: value sizes and weights, SIZE:WEIGHT,...")
	fl.StringSliceVar(&thresholds, "thresholds", []string{"8KiB:replication", "32KiB:packing", "splitting"}, "mixed workload's hybrid rules, MAX:MECHANISM,...,MECHANISM")
	fl.StringVar(&rangeValue, "range-value", "64MiB", "range workload: size of its values")
	fl.StringVar(&rangeIO, "range-io", "4KiB", "range workload: bytes read or written at a time")
	fl.IntVar(&rangeKeys, "range-keys", 2, "range workload: how many values")
	fl.BoolVar(&rebuild, "rebuild", false, "also run the rebuild benchmark")
	fl.IntVar(&rebuildKeys, "rebuild-keys", 1_000_000, "values stored before the rebuild (--quick: 2000)")
	fl.StringVar(&rebuildSize, "rebuild-size", "4KiB", "size of the rebuild benchmark's values")
	fl.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fl.StringVar(&chart, "chart", "", "draw the bar-and-lollipop chart to `FILE` (.svg, .png, .pdf)")
	fl.StringVar(&replot, "from-json", "", "print or chart the report in `FILE` (from --json) instead of running")
	return cmd
}

// benchBackend picks the backend: --config FILE when given explicitly,
// else --backend.
func (c *cli) benchBackend(cmd *cobra.Command, backend, dir string, perf mem.Perf) (bench.Backend, error) {
	if cmd.Flags().Changed("config") {
		if cmd.Flags().Changed("backend") {
			return nil, usageError{cmd, errors.New("--config and --backend: give one")}
		}
		cfg, err := config.Load(c.configPath)
		if err != nil {
			return nil, err
		}
		return bench.Config(cfg), nil
	}
	switch backend {
	case "mem":
		return bench.Mem(perf), nil
	case "pebble":
		if dir == "" {
			d, err := os.MkdirTemp("", "kvarray-bench-")
			if err != nil {
				return nil, err
			}
			dir = d
		}
		return bench.Pebble(dir), nil
	}
	return nil, usageError{cmd, fmt.Errorf("--backend %q: want mem or pebble (or --config FILE for other devices)", backend)}
}

func (c *cli) benchOutput(rep *bench.Report, asJSON bool, chart string) error {
	if chart != "" {
		if err := rep.WriteChart(chart); err != nil {
			return err
		}
	}
	if asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	if err := rep.WriteTable(c.stdout); err != nil {
		return err
	}
	if chart != "" {
		fmt.Fprintf(c.stdout, "\nchart: %s\n", chart)
	}
	return nil
}

// replot prints or charts a saved report.
func (c *cli) replot(path string, asJSON bool, chart string) error {
	rep, err := readReport(path)
	if err != nil {
		return err
	}
	return c.benchOutput(rep, asJSON, chart)
}

// readReport reads a bench report saved with --json.
func readReport(path string) (*bench.Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rep bench.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		return nil, fmt.Errorf("%s: not a bench report: %w", path, err)
	}
	if rep.Version != bench.ReportVersion {
		return nil, fmt.Errorf("%s: report version %d, this kvarray reads version %d", path, rep.Version, bench.ReportVersion)
	}
	return &rep, nil
}

func splitList(s []string) []string {
	var out []string
	for _, v := range s {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// tty reports whether w is a terminal.
func tty(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressLine rewrites one status line on w.
func progressLine(w io.Writer) func(bench.Progress) {
	return func(p bench.Progress) {
		fmt.Fprintf(w, "\r\033[K[%d/%d] %s %s %s/%s: %d ops, %.1fs", p.Step, p.Steps, p.Workload, p.Size, p.Mechanism, p.Mode, p.Ops, p.Elapsed.Seconds())
	}
}
