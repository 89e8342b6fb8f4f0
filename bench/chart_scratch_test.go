package bench

import (
	"encoding/json"
	"os"
	"testing"
)

func TestScratchChart(t *testing.T) {
	if os.Getenv("SCRATCH") == "" {
		t.Skip()
	}
	b, _ := os.ReadFile("/tmp/bench.json")
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteChart("/tmp/chart.svg"); err != nil {
		t.Fatal(err)
	}
}
