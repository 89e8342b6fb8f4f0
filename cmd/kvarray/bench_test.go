package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvarray/kvarray/bench"
)

// TestBenchQuick runs `kvarray bench --quick --json` in-process, as a user
// would, and checks that it finishes in under a minute and that the
// report is complete and consistent: every number positive where it must
// be, and the device operations per user operation those of each
// mechanism's layout.
func TestBenchQuick(t *testing.T) {
	start := time.Now()
	out := ok(t, nil, "bench", "--quick", "--json")
	if d := time.Since(start); d > time.Minute {
		t.Errorf("--quick took %v, want under a minute", d)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	if err := rep.Check(); err != nil {
		t.Fatal(err)
	}
	// 2 sizes × 4 workloads × (None + 4 mechanisms × 2 modes), and the
	// mixed store and retrieve × (None + 4 mechanisms + thresholds).
	if len(rep.Results) != 2*4*9+2*6 {
		t.Errorf("%d results, want %d", len(rep.Results), 2*4*9+2*6)
	}
	// The brief's examples, spelled out (Check covers them all):
	// device writes per user store.
	for _, c := range []struct {
		mech, mode    string
		writes, reads float64
	}{
		// The bench stores new keys on an array created empty: the
		// metadata cache knows they have no value (it is complete), so
		// neither the hybrid read before write nor Splitting's read that
		// picks the other bank goes to a device.
		{"replication", "standalone", 3, 0},
		{"replication", "hybrid", 3, 0},
		{"hashing", "standalone", 1, 0},
		{"splitting", "standalone", 6, 0}, // k+r
		{"splitting", "hybrid", 6, 0},
		{"none", "raw", 1, 0},
	} {
		for _, size := range []string{"4.0 KiB", "64 KiB"} {
			r, found := rep.Lookup(bench.Store, size, c.mech, c.mode)
			if !found {
				t.Errorf("no store %s %s/%s", size, c.mech, c.mode)
				continue
			}
			if d := r.PerOp.Writes - c.writes; d < -0.01 || d > 0.01 || r.PerOp.Reads-c.reads > 0.01 || c.reads-r.PerOp.Reads > 0.01 {
				t.Errorf("store %s %s/%s: %.3f device writes and %.3f reads per store, want %v and %v",
					size, c.mech, c.mode, r.PerOp.Writes, r.PerOp.Reads, c.writes, c.reads)
			}
		}
	}
}

func TestBenchErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"bench", "--sizes", "4XB"}, []string{`--sizes: "4XB" is not a size`, "kvarray bench --help"}},
		{[]string{"bench", "--workloads", "scan"}, []string{`workload "scan"`}},
		{[]string{"bench", "--ops", "10", "--duration", "1s"}, []string{"--ops and --duration: give one"}},
		{[]string{"bench", "--backend", "tape"}, []string{`--backend "tape"`}},
		{[]string{"bench", "--dist", "pareto"}, []string{`key distribution "pareto"`}},
		{[]string{"bench", "--config", "x.yaml", "--backend", "mem"}, []string{"--config and --backend: give one"}},
		{[]string{"bench", "--from-json", "/nonexistent/report.json"}, []string{"no such file"}},
		{[]string{"bench", "extra"}, []string{"no arguments"}},
		{[]string{"bench", "--mix", "4KiB"}, []string{`--mix: "4KiB": want SIZE:WEIGHT`}},
		{[]string{"bench", "--thresholds", "8KiB:replication"}, []string{"the last rule must take every larger size"}},
		{[]string{"bench", "--thresholds", "8KiB:raid5,splitting"}, []string{`names mechanism "raid5"`}},
	} {
		fails(t, nil, tc.args, tc.want...)
	}
}

// TestBenchReplot saves a small run's report and draws it again from the
// file, as a table and as a chart.
func TestBenchReplot(t *testing.T) {
	dir := t.TempDir()
	out := ok(t, nil, "bench", "--ops", "100", "--sizes", "1KiB,4KiB", "--workloads", "store,retrieve",
		"--mechanisms", "replication", "--modes", "standalone", "--latency", "0", "--ops-per-sec", "0", "--bytes-per-sec", "0", "--json")
	path := filepath.Join(dir, "report.json")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join(dir, "chart.svg")
	table := ok(t, nil, "bench", "--from-json", path, "--chart", chart)
	for _, want := range []string{"WORKLOAD", "replication", "standalone", "%NONE", "chart: " + chart} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	svg, err := os.ReadFile(chart)
	if err != nil || !strings.Contains(string(svg), "<svg") {
		t.Errorf("chart: %v, %d bytes", err, len(svg))
	}
	os.WriteFile(path, []byte(`{"version": 99}`), 0o644)
	fails(t, nil, []string{"bench", "--from-json", path}, "report version 99")
}
