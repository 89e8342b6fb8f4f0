package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func mttdlJSON(t *testing.T, args ...string) mttdlReport {
	t.Helper()
	out := ok(t, nil, append([]string{"mttdl", "--json"}, args...)...)
	var rep mttdlReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return rep
}

func approx(t *testing.T, what string, got, want, rel float64) {
	t.Helper()
	if math.Abs(got-want) > rel*math.Abs(want) {
		t.Errorf("%s = %.6g, want %.6g", what, got, want)
	}
}

// TestMTTDLByHand: 6 devices of 1 TB (C = 6e12 bytes), objects of 1 MB,
// MTTF 1e6 h (λ = 1e-6/h), a repair rate of 1/36000 objects/s
// (μ = 0.1/h, MTTR 10 h), packing metadata 100 kB:
//
//	replication 3: N_RS = 6e12/(3·1e6) = 2e6;
//	               MTTDL ≈ μ²/(3·2·1·λ³)/N_RS = 1.6667e15/2e6 h = 8.3333e8 h
//	               = 8.3333e8/8766 years = 95064 years
//	splitting 4+2: N_RS = 6e12/(6·1e6/4) = 4e6;
//	               MTTDL ≈ μ²/(6·5·4·λ³)/N_RS = 8.3333e13/4e6 h = 2.0833e7 h = 2376.6 years
//	packing 4+2:   N_RS = 6e12/(6·1.1e6) = 9.0909e5;
//	               MTTDL ≈ 8.3333e13/9.0909e5 h = 9.1667e7 h = 10457 years
//	hashing:       MTTDL = (1/λ)/N_RS = 1e6/6e6 h = 1.9013e-5 years
//
// and the exact chain is within 4e-4 of each.
func TestMTTDLByHand(t *testing.T) {
	rep := mttdlJSON(t, "--mttf", "1e6", "--repair-rate", "2.7777777777777777e-05", "--capacity", "1TB",
		"--object", "1MB", "--metadata", "100kB", "--devices", "6")
	want := map[string]float64{"hashing": 1e6 / 6e6 / 8766, "replication": 8.3333333e8 / 8766, "splitting": 2.0833333e7 / 8766, "packing": 9.1666667e7 / 8766}
	space := map[string]float64{"hashing": 1, "replication": 3, "splitting": 1.5, "packing": 1.65}
	if len(rep.Results) != 4 || len(rep.Costs) != 4 {
		t.Fatalf("%d results, %d costs", len(rep.Results), len(rep.Costs))
	}
	for _, r := range rep.Results {
		name := r.Mechanism.Name
		approx(t, name+" MTTDL (eq. 2)", r.MTTDLApproxYrs, want[name], 1e-6)
		approx(t, name+" MTTDL (exact)", r.MTTDLYears, want[name], 4e-4)
		approx(t, name+" space", r.SpaceOverhead, space[name], 1e-9)
		if name != "hashing" {
			approx(t, name+" MTTR", r.MTTRHours, 10, 1e-9)
		}
	}
	// Table 4 for 6 devices: replication writes 3 and leaves 6/3 = 2
	// devices' worth of write throughput.
	c := rep.Costs[1]
	if c.Mechanism.Name != "replication" || c.StoreWrites.Min != 3 || c.WriteThroughput.Max != 2 || c.ReadThroughput.Min != 6 {
		t.Errorf("replication costs %+v", c)
	}

	// Device scope: 1 TB of 1 MB objects is 1e6 objects per device; at
	// 100 objects/s a device takes 1e4 s = 2.7778 h to rebuild (μ = 0.36/h).
	// Splitting's shards are O/4, so 4e6 of them: 11.111 h.
	rep = mttdlJSON(t, "--scope", "device", "--repair-rate", "100", "--capacity", "1TB", "--object", "1MB")
	approx(t, "replication device-scope MTTR", rep.Results[1].MTTRHours, 1e4/3600, 1e-9)
	approx(t, "splitting device-scope MTTR", rep.Results[2].MTTRHours, 4e4/3600, 1e-9)

	// A rebuild speed of 1 MB/s over 1 MB objects is 1 object/s.
	a := mttdlJSON(t, "--rebuild-speed", "1MB", "--object", "1MB")
	b := mttdlJSON(t, "--repair-rate", "1", "--object", "1MB")
	approx(t, "rebuild-speed μ", a.Results[1].MuPerHour, b.Results[1].MuPerHour, 1e-12)
	approx(t, "μ of 1 object/s", b.Results[1].MuPerHour, 3600, 1e-12)
}

func TestMTTDLTable(t *testing.T) {
	out := ok(t, nil, "mttdl")
	for _, want := range []string{"replication(3)", "splitting(4+2)", "packing(4+2)", "MTTDL (years)", "EQ. 2", "Table 4", "1.5–3", "SPACE UTIL", "33%"} {
		if !strings.Contains(out, want) {
			t.Errorf("mttdl output lacks %q:\n%s", want, out)
		}
	}
}

// TestMTTDLFromBench takes each mechanism's repair rate from a bench
// report's rebuild results.
func TestMTTDLFromBench(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bench.json")
	os.WriteFile(path, []byte(`{"version": 1, "rebuild": [
		{"mechanism": "replication", "keys_per_sec": 1000},
		{"mechanism": "splitting", "keys_per_sec": 250},
		{"mechanism": "packing", "keys_per_sec": 500}]}`), 0o644)
	rep := mttdlJSON(t, "--from-bench", path)
	for i, want := range []float64{0, 1000, 250, 500} {
		if got := rep.Results[i].RepairPerSec; got != want {
			t.Errorf("%s: repair rate %v, want %v", rep.Results[i].Mechanism.Name, got, want)
		}
	}
	os.WriteFile(path, []byte(`{"version": 1, "rebuild": [{"mechanism": "replication", "keys_per_sec": 1000}]}`), 0o644)
	fails(t, nil, []string{"mttdl", "--from-bench", path}, "no rebuild result for splitting")
	os.WriteFile(path, []byte(`{"version": 1, "results": []}`), 0o644)
	fails(t, nil, []string{"mttdl", "--from-bench", path}, "holds no rebuild results")
}

func TestMTTDLErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mttdl", "--scope", "rack"}, `--scope "rack"`},
		{[]string{"mttdl", "--repair-rate", "5", "--rebuild-speed", "1MB"}, "give one of"},
		{[]string{"mttdl", "--mttf", "-1"}, "--mttf -1"},
		{[]string{"mttdl", "--fill", "2"}, "--fill 2"},
		{[]string{"mttdl", "--capacity", "lots"}, `--capacity: "lots" is not a size`},
		{[]string{"mttdl", "--repair-rate", "0"}, "--repair-rate 0"},
		{[]string{"mttdl", "--k", "5"}, "splitting(5+2) needs 7 devices"},
	} {
		fails(t, nil, tc.args, tc.want)
	}
}
