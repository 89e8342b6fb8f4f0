package server

import (
	"strconv"
	"strings"
	"testing"
)

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// TestLatencyMonitor: with latency-monitor-threshold set, a command that
// runs past it is a "command" event in LATENCY LATEST, HISTORY, GRAPH and
// DOCTOR, which LATENCY RESET clears (counting it); LATENCY HISTOGRAM
// counts each command and subcommand, and CONFIG RESETSTAT zeroes it.
func TestLatencyMonitor(t *testing.T) {
	ts := startServer(t, "")
	c := ts.dial()
	if r := c.do("LATENCY", "LATEST"); len(r.elems) != 0 {
		t.Fatalf("LATENCY LATEST before any event: %v", r)
	}
	c.do("CONFIG", "SET", "latency-monitor-threshold", "5")
	// A Lua loop of half a million steps: past 5 ms. (Other events, an
	// expiry pass slowed by the race detector, may come too.)
	c.do("EVAL", "local i = 0 while i < 500000 do i = i + 1 end return i", "0")
	found := false
	for _, ev := range c.do("LATENCY", "LATEST").elems {
		if ev.elems[0].str == "command" && atoi(ev.elems[2].str) >= 5 {
			found = true
		}
	}
	if !found {
		t.Fatalf("LATENCY LATEST after a slow EVAL: no command event of 5 ms or more")
	}
	if h := c.do("LATENCY", "HISTORY", "command"); len(h.elems) == 0 {
		t.Errorf("LATENCY HISTORY command: %v", h)
	}
	if g := c.do("LATENCY", "GRAPH", "command"); !strings.Contains(g.str, "command - high") {
		t.Errorf("LATENCY GRAPH command: %v", g)
	}
	if d := c.do("LATENCY", "DOCTOR"); !strings.Contains(d.str, ". command: ") {
		t.Errorf("LATENCY DOCTOR: %v", d)
	}
	c.do("CONFIG", "SET", "latency-monitor-threshold", "0")
	if r := c.do("LATENCY", "RESET", "command", "nope"); r.str != "1" {
		t.Errorf("LATENCY RESET command nope: %v, want 1", r)
	}
	for _, ev := range c.do("LATENCY", "LATEST").elems {
		if ev.elems[0].str == "command" {
			t.Errorf("LATENCY LATEST after RESET command: %v", ev)
		}
	}

	c.do("CONFIG", "RESETSTAT")
	c.do("SET", "a", "b")
	c.do("SET", "a", "c")
	c.do("CLIENT", "ID")
	h := c.do("LATENCY", "HISTOGRAM", "set", "client", "nope")
	got := map[string]string{}
	for i := 0; i+1 < len(h.elems); i += 2 {
		got[h.elems[i].str] = h.elems[i+1].String()
	}
	if len(got) != 2 || !strings.HasPrefix(got["set"], `[$"calls" :"2" $"histogram_usec" [`) ||
		!strings.HasPrefix(got["client|id"], `[$"calls" :"1" `) {
		t.Errorf("LATENCY HISTOGRAM set client nope: %v", h)
	}
	c.do("CONFIG", "RESETSTAT")
	if h := c.do("LATENCY", "HISTOGRAM", "set"); len(h.elems) != 0 {
		t.Errorf("LATENCY HISTOGRAM set after CONFIG RESETSTAT: %v", h)
	}
}
