package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/redis/go-redis/v9"
)

var metricsAt = regexp.MustCompile(`metrics on (http://\S+/metrics)\n`)

// scrape fetches and parses /metrics.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	var p expfmt.TextParser
	mf, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return mf
}

// value returns the value of the series of family name whose labels
// include want, and whether there is one.
func value(mf map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := mf[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			if got[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// TestMetrics: /metrics of `kvarray serve --metrics-listen`, scraped and
// parsed during a rebuild, shows the rebuild's progress moving; a failed
// device shows in the state gauge; device, mechanism and command metrics
// count what the clients did.
func TestMetrics(t *testing.T) {
	t.Chdir(t.TempDir())
	// mem devices that take 2ms per operation: the rebuild lasts seconds.
	if err := os.WriteFile("kvarray.yaml", []byte(`devices: [mem:d0, mem:d1, mem:d2, mem:d3, mem:d4, mem:d5]
replication: {copies: 3}
device: {perf: {latency: 2ms}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	s := serve(t, "--metrics-listen", "127.0.0.1:0", "--log-format", "json")
	var url string
	for deadline := time.Now().Add(time.Minute); url == ""; time.Sleep(10 * time.Millisecond) {
		if m := metricsAt.FindStringSubmatch(s.out.String()); m != nil {
			url = m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve printed no metrics address:\n%s", s.out)
		}
	}
	ctx := context.Background()
	rdb := s.client(t)
	const keys = 400
	for i := 0; i < keys; i += 50 {
		var kvs []any
		for j := i; j < i+50; j++ {
			kvs = append(kvs, fmt.Sprintf("k%04d", j), fmt.Sprintf("value %d", j))
		}
		if err := rdb.MSet(ctx, kvs...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := rdb.Get(ctx, "k0001").Result(); err != nil || v != "value 1" {
		t.Fatalf("GET k0001 = %q, %v", v, err)
	}
	mf := scrape(t, url)
	for name, labels := range map[string]map[string]string{
		"kvarray_device_operations_total":           {"device": "0", "name": "mem:d0", "op": "store"},
		"kvarray_device_bytes_total":                {"device": "1", "direction": "written"},
		"kvarray_device_operation_duration_seconds": {"device": "2", "op": "store"},
		"kvarray_mechanism_stores_total":            {"mechanism": "replication"},
		"kvarray_server_command_duration_seconds":   {"command": "mset"},
		"kvarray_server_connections":                nil,
		"kvarray_device_state":                      {"device": "4", "state": "healthy"},
	} {
		if v, ok := value(mf, name, labels); !ok || v < 1 {
			t.Errorf("%s%v = %v, %v; want at least 1", name, labels, v, ok)
		}
	}
	if v, _ := value(mf, "kvarray_mechanism_stores_total", map[string]string{"mechanism": "replication"}); v != keys {
		t.Errorf("kvarray_mechanism_stores_total{replication} = %v, want %d", v, keys)
	}
	for name := range mf {
		if !regexp.MustCompile(`^(kvarray_|go_|process_|promhttp_)`).MatchString(name) {
			t.Errorf("metric %s is not named kvarray_...", name)
		}
	}

	// A rebuild of device 1 (a mem device: KVARRAY.REBUILD swaps in an
	// empty one), one key at a time: its progress moves between scrapes.
	done := make(chan error, 1)
	slow := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, ReadTimeout: -1})
	defer slow.Close()
	go func() { done <- slow.Do(ctx, "kvarray.rebuild", 1, "WORKERS", 1).Err() }()
	var seen []float64
	for rebuilding := true; rebuilding; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("KVARRAY.REBUILD: %v", err)
			}
			rebuilding = false
		case <-time.After(100 * time.Millisecond):
		}
		mf := scrape(t, url)
		if v, ok := value(mf, "kvarray_heal_keys_done", map[string]string{"task": "rebuild", "device": "1"}); ok && (len(seen) == 0 || v != seen[len(seen)-1]) {
			seen = append(seen, v)
			if total, _ := value(mf, "kvarray_heal_keys_total", map[string]string{"task": "rebuild", "device": "1"}); total > 0 && total < v {
				t.Errorf("rebuild progress %v of %v", v, total)
			}
		}
	}
	t.Logf("rebuild progress seen in /metrics: %v", seen)
	if len(seen) < 2 {
		t.Errorf("rebuild progress seen in /metrics: %v; want it moving", seen)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] < seen[i-1] {
			t.Errorf("rebuild progress went back: %v", seen)
		}
	}
	mf = scrape(t, url)
	if _, ok := value(mf, "kvarray_heal_running", nil); ok {
		t.Error("kvarray_heal_running still reported after the rebuild")
	}

	// A failed device shows in the state gauge.
	if out := ok(t, nil, "fail", "3"); out != "device 3 failed\n" {
		t.Errorf("kvarray fail 3 printed %q", out)
	}
	mf = scrape(t, url)
	if v, _ := value(mf, "kvarray_device_state", map[string]string{"device": "3", "state": "failed"}); v != 1 {
		t.Errorf("kvarray_device_state{device=3,state=failed} = %v after KVARRAY.FAIL 3", v)
	}
	if v, _ := value(mf, "kvarray_device_state", map[string]string{"device": "3", "state": "healthy"}); v != 0 {
		t.Errorf("kvarray_device_state{device=3,state=healthy} = %v after KVARRAY.FAIL 3", v)
	}
	if v, _ := value(mf, "kvarray_devices_failed", nil); v != 1 {
		t.Errorf("kvarray_devices_failed = %v", v)
	}
	for i := 0; i < keys; i += 37 {
		if v, err := rdb.Get(ctx, fmt.Sprintf("k%04d", i)).Result(); err != nil || v != fmt.Sprintf("value %d", i) {
			t.Errorf("GET k%04d after rebuild, device 3 failed: %q, %v", i, v, err)
		}
	}
	// serve logs the failure (its watcher looks every second), as JSON.
	for deadline := time.Now().Add(time.Minute); !strings.Contains(s.errOut.String(), `"msg":"device failed","device":3`); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("serve logged no device failure:\n%s", s.errOut)
		}
	}
	s.stop(t)
	for _, line := range strings.Split(strings.TrimSpace(s.errOut.String()), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev["msg"] == nil || ev["level"] == nil {
			t.Errorf("--log-format json: a log line is not a JSON event: %q (%v)", line, err)
		}
	}
	for _, msg := range []string{`"msg":"serving"`, `"msg":"rebuild started"`, `"msg":"rebuild finished"`, `"msg":"stopped"`} {
		if !strings.Contains(s.errOut.String(), msg) {
			t.Errorf("serve logged no %s:\n%s", msg, s.errOut)
		}
	}
	fails(t, nil, []string{"fail", "3"}, "no kvarray serve holds the array of kvarray.yaml")
}
