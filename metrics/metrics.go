// Package metrics exports a served array's metrics for Prometheus, every
// one named kvarray_…:
//
//   - per device (labels device = index, name = spec): operations by kind
//     and their errors (kvarray_device_operations_total,
//     kvarray_device_errors_total), latency histograms
//     (kvarray_device_operation_duration_seconds), bytes read and written
//     (kvarray_device_bytes_total), and the array's view of its state
//     (kvarray_device_state, one series per state, 1 for the current one);
//   - per mechanism, the values stored (kvarray_mechanism_stores_total);
//   - heal operations running in the server (rebuild, resync, scrub):
//     kvarray_heal_running, kvarray_heal_keys_done, kvarray_heal_keys_total,
//     and kvarray_scrub_last_success_timestamp_seconds;
//   - the server: open connections (kvarray_server_connections) and
//     command latencies (kvarray_server_command_duration_seconds).
//
// Device figures come from a device.Device decorator (WrapDevice) that
// the array is given instead of the device, so device packages know
// nothing of metrics. Every operation of a batch counts as one operation
// of its kind; a batch's latency is observed once per operation kind it
// held. A wrapped device forwards every call unchanged: errors and
// results are the device's own.
package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/mechanism"
	"github.com/kvarray/kvarray/server"
)

// Metrics is one registry of kvarray metrics. Create it with New.
type Metrics struct {
	reg *prometheus.Registry

	ops, errs, bytes *prometheus.CounterVec
	latency          *prometheus.HistogramVec
	commands         *prometheus.HistogramVec
	stores           *prometheus.CounterVec

	mu    sync.Mutex
	names map[int]string // device index -> name
	a     *array.Array
	srv   *server.Server
}

// latencyBuckets span a memory device's microseconds to a slow disk's
// seconds.
var latencyBuckets = prometheus.ExponentialBuckets(10e-6, 4, 10) // 10µs .. 2.6s

// New returns a registry with kvarray's metrics and the Go runtime's and
// process's collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvarray_device_operations_total", Help: "Operations made on each device, by kind (store, retrieve, delete, exist, iterate, info).",
		}, []string{"device", "name", "op"}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvarray_device_errors_total", Help: "Device operations that failed, by kind (not found is not an error).",
		}, []string{"device", "name", "op"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvarray_device_bytes_total", Help: "Bytes of values read from and written to each device.",
		}, []string{"device", "name", "direction"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kvarray_device_operation_duration_seconds", Help: "Latency of device operations (a batch: once per kind of operation it held).",
			Buckets: latencyBuckets,
		}, []string{"device", "name", "op"}),
		commands: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kvarray_server_command_duration_seconds", Help: "Latency of the commands the server ran, by command.",
			Buckets: latencyBuckets,
		}, []string{"command"}),
		stores: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvarray_mechanism_stores_total", Help: "Values stored through the server, by the mechanism the array picks for them.",
		}, []string{"mechanism"}),
		names: map[int]string{},
	}
	m.reg.MustRegister(m.ops, m.errs, m.bytes, m.latency, m.commands, m.stores,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), (*state)(m))
	return m
}

// Registry returns the registry, to add or gather metrics.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in Prometheus's formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Watch makes the registry report a's device states and srv's
// connections and heal operations (srv may be nil).
func (m *Metrics) Watch(a *array.Array, srv *server.Server) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.a, m.srv = a, srv
}

// ObserveCommand records a command's latency (server.WithCommandObserver).
func (m *Metrics) ObserveCommand(name string, d time.Duration) {
	m.commands.WithLabelValues(name).Observe(d.Seconds())
}

// ObserveStore counts a value stored with mechanism.
func (m *Metrics) ObserveStore(mechanism string) { m.stores.WithLabelValues(mechanism).Inc() }

// WrapDevice returns d, device index i of the array named name, counting
// its operations.
func (m *Metrics) WrapDevice(i int, name string, d device.Device) device.Device {
	m.mu.Lock()
	m.names[i] = name
	m.mu.Unlock()
	idx := strconv.Itoa(i)
	w := &wrapped{d: d}
	for _, op := range []string{"store", "retrieve", "delete", "exist", "iterate", "info"} {
		w.ops[kindOf(op)] = opMetrics{
			ops:     m.ops.WithLabelValues(idx, name, op),
			errs:    m.errs.WithLabelValues(idx, name, op),
			latency: m.latency.WithLabelValues(idx, name, op),
		}
	}
	w.read = m.bytes.WithLabelValues(idx, name, "read")
	w.written = m.bytes.WithLabelValues(idx, name, "written")
	return w
}

// WrapDevices wraps every device of an array, names[i] naming device i.
func (m *Metrics) WrapDevices(devs []device.Device, names []string) []device.Device {
	out := make([]device.Device, len(devs))
	for i, d := range devs {
		out[i] = m.WrapDevice(i, names[i], d)
	}
	return out
}

// state is the collector of what is read at scrape time: device states,
// connections, heal progress.
type state Metrics

var (
	descState = prometheus.NewDesc("kvarray_device_state",
		"The array's view of each device: 1 for its current state (healthy, failed, rebuilding, full, slow), 0 for the others.", []string{"device", "name", "state"}, nil)
	descFailed = prometheus.NewDesc("kvarray_devices_failed",
		"Devices the array holds failed.", nil, nil)
	descDevices = prometheus.NewDesc("kvarray_devices",
		"Devices in the array.", nil, nil)
	descConns = prometheus.NewDesc("kvarray_server_connections",
		"Client connections open.", nil, nil)
	descRunning = prometheus.NewDesc("kvarray_heal_running",
		"Heal operations (rebuild, resync, scrub) running in the server.", []string{"task", "device"}, nil)
	descDone = prometheus.NewDesc("kvarray_heal_keys_done",
		"Keys a running heal operation has done.", []string{"task", "device"}, nil)
	descTotal = prometheus.NewDesc("kvarray_heal_keys_total",
		"Keys a running heal operation has to do (0 while it lists them).", []string{"task", "device"}, nil)
	descLastScrub = prometheus.NewDesc("kvarray_scrub_last_success_timestamp_seconds",
		"When the last scrub run in this server finished (Unix time); absent before the first.", nil, nil)
)

var states = []mechanism.State{mechanism.Healthy, mechanism.Failed, mechanism.Rebuilding, mechanism.Full, mechanism.Slow}

func (s *state) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descState, descFailed, descDevices, descConns, descRunning, descDone, descTotal, descLastScrub} {
		ch <- d
	}
}

func (s *state) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	a, srv := s.a, s.srv
	names := make(map[int]string, len(s.names))
	for k, v := range s.names {
		names[k] = v
	}
	s.mu.Unlock()
	if a != nil {
		failed := 0
		for i := 0; i < a.N(); i++ {
			cur := a.DeviceState(i)
			if cur == mechanism.Failed {
				failed++
			}
			for _, st := range states {
				v := 0.0
				if st == cur {
					v = 1
				}
				ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, v, strconv.Itoa(i), names[i], st.String())
			}
		}
		ch <- prometheus.MustNewConstMetric(descFailed, prometheus.GaugeValue, float64(failed))
		ch <- prometheus.MustNewConstMetric(descDevices, prometheus.GaugeValue, float64(a.N()))
	}
	if srv == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descConns, prometheus.GaugeValue, float64(srv.Clients()))
	for _, t := range srv.Tasks() {
		dev := strconv.Itoa(t.Dev)
		if t.Dev < 0 {
			dev = ""
		}
		ch <- prometheus.MustNewConstMetric(descRunning, prometheus.GaugeValue, 1, t.Kind, dev)
		ch <- prometheus.MustNewConstMetric(descDone, prometheus.GaugeValue, float64(t.Keys), t.Kind, dev)
		ch <- prometheus.MustNewConstMetric(descTotal, prometheus.GaugeValue, float64(t.Total), t.Kind, dev)
	}
	if t := srv.LastScrub(); !t.IsZero() {
		ch <- prometheus.MustNewConstMetric(descLastScrub, prometheus.GaugeValue, float64(t.UnixNano())/1e9)
	}
}
