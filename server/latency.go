package server

import (
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The latency monitor, as Redis 7.0's:
//   - Per-command latency histograms (LATENCY HISTOGRAM; latency-tracking,
//     on by default): every command and subcommand run, a script's
//     commands too, counted in power-of-two buckets of microseconds.
//     CONFIG RESETSTAT zeroes them.
//   - Latency events (LATENCY LATEST, HISTORY, RESET, GRAPH, DOCTOR),
//     when latency-monitor-threshold is above 0 ms (0, the default, is
//     off): a command that ran at least that long is a "command" event
//     ("fast-command" for a command flagged fast), an expiry pass that
//     long an "expire-cycle" one. Each event keeps its last 160 samples,
//     at most one a second (the largest), and its maximum.
//
// The histograms are fixed at New (one per command served and per
// subcommand Redis's table gives it) and updated with atomics, so the
// hot path takes no lock.

// latHist is one command's histogram: buckets[i] counts the calls of at
// most 2^i microseconds (and more than 2^(i-1)).
type latHist struct {
	calls   atomic.Int64
	buckets [40]atomic.Int64
}

func (h *latHist) add(d time.Duration) {
	us := uint64(max(d.Microseconds(), 0))
	i := 0
	if us > 1 {
		i = min(bits.Len64(us-1), len(h.buckets)-1)
	}
	h.buckets[i].Add(1)
	h.calls.Add(1)
}

func (h *latHist) reset() {
	h.calls.Store(0)
	for i := range h.buckets {
		h.buckets[i].Store(0)
	}
}

// latSample is one second's largest latency of an event.
type latSample struct {
	time int64 // Unix seconds
	ms   int64
}

const latSamples = 160

// latSeries is one event's samples, oldest first, and its maximum.
type latSeries struct {
	samples []latSample
	max     int64
}

// latencyMonitor is the server's histograms and events.
type latencyMonitor struct {
	tracking atomic.Bool
	hists    map[string]*latHist // by full name: "get", "client|list"
	mu       sync.Mutex          // guards events
	events   map[string]*latSeries
}

// initLatency makes a histogram for every command served and each of its
// subcommands, and marks the containers (entry.container).
func (s *Server) initLatency() {
	m := &s.lat
	m.tracking.Store(true)
	m.hists = map[string]*latHist{}
	t := s.acl.Table()
	for n, e := range s.cmds {
		m.hists[n] = &latHist{}
		if ac := t.Lookup(n); ac != nil {
			e.container = len(ac.Subcommands) > 0
			for _, sc := range ac.Subcommands {
				m.hists[sc.Name] = &latHist{}
			}
		}
	}
}

// recordLatency counts a command that ran for d: in its histogram (name
// is its full name) and, past the threshold, as an event.
func (s *Server) recordLatency(e *entry, name string, d time.Duration) {
	if s.lat.tracking.Load() {
		if h := s.lat.hists[name]; h != nil {
			h.add(d)
		}
	}
	if thr := s.cfg.latencyThreshold.Load(); thr <= 0 || d.Milliseconds() < thr {
		return // the common case, without looking at the flags
	}
	event := "command"
	if slices.Contains(e.flags, "fast") {
		event = "fast-command"
	}
	s.latencyEvent(event, d)
}

// latencyEvent records an event that lasted d if the monitor is on and d
// reaches its threshold.
func (s *Server) latencyEvent(event string, d time.Duration) {
	thr := s.cfg.latencyThreshold.Load()
	ms := d.Milliseconds()
	if thr <= 0 || ms < thr {
		return
	}
	now := time.Now().Unix()
	m := &s.lat
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.events == nil {
		m.events = map[string]*latSeries{}
	}
	ev := m.events[event]
	if ev == nil {
		ev = &latSeries{}
		m.events[event] = ev
	}
	ev.max = max(ev.max, ms)
	if n := len(ev.samples); n > 0 && ev.samples[n-1].time == now {
		ev.samples[n-1].ms = max(ev.samples[n-1].ms, ms)
		return
	}
	if len(ev.samples) == latSamples {
		ev.samples = append(ev.samples[:0], ev.samples[1:]...)
	}
	ev.samples = append(ev.samples, latSample{now, ms})
}

// resetLatencyHistograms is CONFIG RESETSTAT's part.
func (s *Server) resetLatencyHistograms() {
	for _, h := range s.lat.hists {
		h.reset()
	}
}

// latencyTrackingParam is latency-tracking (yes/no).
var latencyTrackingParam = param{name: "latency-tracking",
	get: func(s *Server) string { return yesNo(s.lat.tracking.Load()) },
	set: func(s *Server, v string) error {
		switch strings.ToLower(v) {
		case "yes":
			s.lat.tracking.Store(true)
		case "no":
			s.lat.tracking.Store(false)
		default:
			return fmt.Errorf("argument must be 'yes' or 'no'")
		}
		return nil
	}}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// cmdLatency: LATENCY LATEST, HISTORY, RESET, GRAPH, DOCTOR, HISTOGRAM,
// HELP.
func cmdLatency(c *call) {
	m := &c.s.lat
	switch strings.ToLower(string(truncate(c.args[1], 16))) {
	case "latest":
		m.mu.Lock()
		names := sortedEvents(m.events)
		c.w.WriteArray(len(names))
		for _, n := range names {
			ev := m.events[n]
			last := ev.samples[len(ev.samples)-1]
			c.w.WriteArray(4)
			c.w.WriteBulkString(n)
			c.w.WriteInt64(last.time)
			c.w.WriteInt64(last.ms)
			c.w.WriteInt64(ev.max)
		}
		m.mu.Unlock()
	case "history":
		if len(c.args) != 3 {
			c.arityError("latency|history")
			return
		}
		m.mu.Lock()
		var samples []latSample
		if ev := m.events[string(c.args[2])]; ev != nil {
			samples = slices.Clone(ev.samples)
		}
		m.mu.Unlock()
		c.w.WriteArray(len(samples))
		for _, smp := range samples {
			c.w.WriteArray(2)
			c.w.WriteInt64(smp.time)
			c.w.WriteInt64(smp.ms)
		}
	case "reset":
		m.mu.Lock()
		n := 0
		if len(c.args) == 2 {
			n = len(m.events)
			m.events = nil
		}
		for _, a := range c.args[2:] {
			if _, ok := m.events[string(a)]; ok {
				delete(m.events, string(a))
				n++
			}
		}
		m.mu.Unlock()
		c.w.WriteInt(n)
	case "graph":
		if len(c.args) != 3 {
			c.arityError("latency|graph")
			return
		}
		event := string(c.args[2])
		m.mu.Lock()
		var g string
		if ev := m.events[event]; ev != nil {
			g = latencyGraph(event, ev)
		}
		m.mu.Unlock()
		if g == "" {
			c.error(fmt.Sprintf("ERR No samples available for event '%s'", truncate(c.args[2], 128)))
			return
		}
		c.w.WriteVerbatim(g)
	case "doctor":
		c.w.WriteVerbatim(c.s.latencyDoctor())
	case "histogram":
		c.latencyHistogram()
	case "help":
		if len(c.args) != 2 {
			c.arityError("latency|help")
			return
		}
		c.lines([]string{"LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"DOCTOR", "    Return a human readable latency analysis report.",
			"GRAPH <event>", "    Return an ASCII latency graph for the <event> class.",
			"HISTORY <event>", "    Return time-latency samples for the <event> class.",
			"LATEST", "    Return the latest latency samples for all events.",
			"RESET [<event> ...]", "    Reset latency data of one or more <event> classes.",
			"    (default: reset all data for all event classes)",
			"HISTOGRAM [COMMAND ...]", "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
			"    If no commands are specified then all histograms are replied.",
			"HELP", "    Print this help."})
	default:
		c.unknownSubcommand("latency")
	}
}

func sortedEvents(events map[string]*latSeries) []string {
	names := make([]string, 0, len(events))
	for n := range events {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// latencyHistogram: LATENCY HISTOGRAM [command ...], a map of each
// command called since the last CONFIG RESETSTAT (a container given by
// name: its subcommands; unknown names skipped) to its calls and its
// cumulative counts per bucket, as Redis 7.0 replies. The calls and the
// buckets are read one by one while commands run: a count may be a call
// ahead of another.
func (c *call) latencyHistogram() {
	m := &c.s.lat
	var names []string
	if len(c.args) == 2 {
		for n := range m.hists {
			names = append(names, n)
		}
		slices.Sort(names)
	} else {
		t := c.s.acl.Table()
		for _, a := range c.args[2:] {
			n := strings.ToLower(string(a))
			if ac := t.Lookup(n); ac != nil && len(ac.Subcommands) > 0 && !strings.Contains(n, "|") {
				for _, sc := range ac.Subcommands {
					names = append(names, sc.Name)
				}
				continue
			}
			names = append(names, n)
		}
	}
	type row struct {
		name string
		h    *latHist
	}
	var rows []row
	seen := map[string]bool{}
	for _, n := range names {
		if h := m.hists[n]; h != nil && h.calls.Load() > 0 && !seen[n] {
			seen[n] = true
			rows = append(rows, row{n, h})
		}
	}
	c.w.WriteMap(len(rows))
	for _, r := range rows {
		c.w.WriteBulkString(r.name)
		calls := r.h.calls.Load()
		var buckets [][2]int64
		cum := int64(0)
		// Only the buckets where the count grows, as Redis lists them.
		for i := range r.h.buckets {
			if n := r.h.buckets[i].Load(); n > 0 {
				cum += n
				buckets = append(buckets, [2]int64{1 << i, cum})
			}
		}
		c.w.WriteMap(2)
		c.w.WriteBulkString("calls")
		c.w.WriteInt64(calls)
		c.w.WriteBulkString("histogram_usec")
		c.w.WriteMap(len(buckets))
		for _, b := range buckets {
			c.w.WriteInt64(b[0])
			c.w.WriteInt64(b[1])
		}
	}
}

// latencyGraph draws an event's samples as Redis's LATENCY GRAPH does, in
// a plainer form: a header, then one line per sample (how long ago, the
// latency and a bar scaled to the maximum).
func latencyGraph(event string, ev *latSeries) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s - high %d ms, low %d ms (all time high %d ms)\n", event, slices.MaxFunc(ev.samples, cmpMs).ms,
		slices.MinFunc(ev.samples, cmpMs).ms, ev.max)
	b.WriteString(strings.Repeat("-", 80) + "\n")
	now := time.Now().Unix()
	for _, smp := range ev.samples {
		bar := int(smp.ms * 60 / max(ev.max, 1))
		fmt.Fprintf(&b, "%6ss ago %6d ms %s\n", strconv.FormatInt(now-smp.time, 10), smp.ms, strings.Repeat("#", max(bar, 1)))
	}
	return b.String()
}

func cmpMs(a, b latSample) int { return int(a.ms - b.ms) }

// latencyDoctor is LATENCY DOCTOR's report: each event's samples, latest
// and maximum, or that there was none.
func (s *Server) latencyDoctor() string {
	m := &s.lat
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.events) == 0 {
		if s.cfg.latencyThreshold.Load() == 0 {
			return "Dave, no latency spike was observed during the lifetime of this Redis instance, not in the slightest bit. I honestly think you ought to sleep better tonight.\n" +
				"(The latency monitor is off: CONFIG SET latency-monitor-threshold <milliseconds> turns it on.)\n"
		}
		return "Dave, no latency spike was observed during the lifetime of this Redis instance, not in the slightest bit. I honestly think you ought to sleep better tonight.\n"
	}
	var b strings.Builder
	b.WriteString("Dave, I have observed latency spikes in this Redis instance. You don't mind talking about it, do you Dave?\n\n")
	for i, n := range sortedEvents(m.events) {
		ev := m.events[n]
		var sum int64
		for _, smp := range ev.samples {
			sum += smp.ms
		}
		fmt.Fprintf(&b, "%d. %s: %d latency spikes (average %dms, mean deviation n/a, period n/a). Worst all time event %dms.\n",
			i+1, n, len(ev.samples), sum/int64(len(ev.samples)), ev.max)
	}
	b.WriteString("\nI have a few advices for you:\n\n- kvarray's commands wait for the devices' syncs: see INFO commandstats, SLOWLOG and the array's /metrics for which device is slow.\n")
	return b.String()
}
