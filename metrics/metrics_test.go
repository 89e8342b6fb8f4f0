package metrics

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/mem"
)

// TestWrapDevice: the decorator counts every operation by kind, single
// and batched, the bytes moved and the failures (not "not found"), and
// returns the device's own results and errors.
func TestWrapDevice(t *testing.T) {
	m := New()
	raw := mem.New(mem.WithName("m0"))
	d := m.WrapDevice(0, "mem:m0", raw)
	ctx := context.Background()
	if err := d.Store(ctx, []byte("key1"), []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if v, err := d.Retrieve(ctx, []byte("key1")); err != nil || string(v) != "hello" {
		t.Fatalf("Retrieve = %q, %v", v, err)
	}
	if _, err := d.Retrieve(ctx, []byte("nope")); !errors.Is(err, device.ErrNotFound) {
		t.Fatalf("Retrieve of a missing key: %v", err)
	}
	ops := []device.Op{{Kind: device.OpStore, Key: []byte("key2"), Value: []byte("abc")}, {Kind: device.OpRetrieve, Key: []byte("key1")}, {Kind: device.OpExist, Key: []byte("key2")}}
	if err := d.Batch(ctx, ops); err != nil {
		t.Fatal(err)
	}
	if !ops[2].Found || string(ops[1].Result) != "hello" {
		t.Errorf("batch results: %+v", ops)
	}
	raw.Fail()
	if err := d.Store(ctx, []byte("key3"), []byte("x")); !errors.Is(err, device.ErrDeviceFailed) {
		t.Fatalf("Store on a failed device: %v", err)
	}
	for _, c := range []struct {
		op   string
		want float64
	}{{"store", 3}, {"retrieve", 3}, {"exist", 1}, {"delete", 0}} {
		if got := counter(t, m.ops.WithLabelValues("0", "mem:m0", c.op)); got != c.want {
			t.Errorf("operations{op=%s} = %v, want %v", c.op, got, c.want)
		}
	}
	if got := counter(t, m.errs.WithLabelValues("0", "mem:m0", "store")); got != 1 {
		t.Errorf("errors{op=store} = %v, want 1 (the failed device's)", got)
	}
	if got := counter(t, m.errs.WithLabelValues("0", "mem:m0", "retrieve")); got != 0 {
		t.Errorf("errors{op=retrieve} = %v: not found counted as an error", got)
	}
	if got := counter(t, m.bytes.WithLabelValues("0", "mem:m0", "written")); got != 8 {
		t.Errorf("bytes written = %v, want 8", got)
	}
	if got := counter(t, m.bytes.WithLabelValues("0", "mem:m0", "read")); got != 10 {
		t.Errorf("bytes read = %v, want 10", got)
	}
	var h dto.Metric
	if err := m.latency.WithLabelValues("0", "mem:m0", "store").(prometheus.Metric).Write(&h); err != nil || h.Histogram.GetSampleCount() != 3 {
		t.Errorf("store latency samples: %d, %v; want 3", h.Histogram.GetSampleCount(), err)
	}
}

// TestDashboard: every kvarray_ metric the Grafana dashboard in
// packaging/ queries is one this package exports.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile("../packaging/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(b) {
		t.Fatal("the dashboard is not valid JSON")
	}
	m := New()
	d := m.WrapDevice(0, "mem:m0", mem.New())
	_ = d.Store(context.Background(), []byte("key1"), []byte("v"))
	m.ObserveCommand("get", 1)
	m.ObserveStore("replication")
	var exported bytes.Buffer
	for _, desc := range []string{"kvarray_device_state", "kvarray_devices_failed", "kvarray_devices", "kvarray_server_connections",
		"kvarray_heal_running", "kvarray_heal_keys_done", "kvarray_heal_keys_total", "kvarray_scrub_last_success_timestamp_seconds"} {
		exported.WriteString(desc + "\n") // read at scrape time from an array and a server
	}
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		exported.WriteString(mf.GetName() + "\n")
	}
	names := regexp.MustCompile(`kvarray_[a-z_]+`).FindAllString(string(b), -1)
	if len(names) == 0 {
		t.Fatal("the dashboard queries no kvarray_ metric")
	}
	for _, n := range names {
		base := regexp.MustCompile(`_(bucket|count|sum)$`).ReplaceAllString(n, "")
		if !regexp.MustCompile(`(?m)^` + base + `$`).Match(exported.Bytes()) {
			t.Errorf("the dashboard queries %s, which is not exported", n)
		}
	}
}

// counter reads a counter's value.
func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.Counter.GetValue()
}
