package bench

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device/mem"
)

func TestScratch(t *testing.T) {
	o := Quick()
	if os.Getenv("SCRATCH") == "" {
		t.Skip()
	}
	if os.Getenv("CPU") != "" {
		o.Backend = Mem(mem.Perf{})
	}
	if w := os.Getenv("W"); w != "" {
		o.Workloads = strings.Split(w, ",")
	}
	if m := os.Getenv("M"); m != "" {
		o.Mechanisms = strings.Split(m, ",")
	}
	if d := os.Getenv("D"); d != "" {
		o.Duration, _ = time.ParseDuration(d)
	}
	start := time.Now()
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	rep.WriteTable(os.Stdout)
	b, _ := json.MarshalIndent(rep, "", "  ")
	os.WriteFile("/tmp/bench.json", b, 0o644)
	if err := rep.WriteChart("/tmp/chart.svg"); err != nil {
		t.Fatal(err)
	}
	t.Log(time.Since(start))
}
