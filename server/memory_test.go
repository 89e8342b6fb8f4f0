package server

import (
	"slices"
	"strings"
	"testing"
)

// TestMemoryStats: MEMORY STATS has Redis 7.0's fields (a map in RESP3,
// pairs in RESP2), keys.count the keys stored and a db.N entry for each
// database with keys; DOCTOR, MALLOC-STATS and PURGE answer; HELP lists
// them.
func TestMemoryStats(t *testing.T) {
	ts := startServer(t, "")
	c := ts.dial()
	for _, k := range []string{"a", "b", "c"} {
		c.do("SET", k, "v")
	}
	c.do("SELECT", "2")
	c.do("SET", "x", "v")
	for _, proto := range []string{"2", "3"} {
		c.do("HELLO", proto)
		r := c.do("MEMORY", "STATS")
		if r.isError() || len(r.elems)%2 != 0 {
			t.Fatalf("RESP%s MEMORY STATS: %v", proto, r)
		}
		got := map[string]reply{}
		var names []string
		for i := 0; i < len(r.elems); i += 2 {
			names = append(names, r.elems[i].str)
			got[r.elems[i].str] = r.elems[i+1]
		}
		for _, f := range []string{"peak.allocated", "total.allocated", "startup.allocated", "replication.backlog", "clients.slaves",
			"clients.normal", "cluster.links", "aof.buffer", "lua.caches", "functions.caches", "overhead.total", "keys.count",
			"keys.bytes-per-key", "dataset.bytes", "dataset.percentage", "peak.percentage", "allocator.allocated", "allocator.active",
			"allocator.resident", "allocator-fragmentation.ratio", "allocator-fragmentation.bytes", "allocator.rss-ratio",
			"allocator.rss-bytes", "rss-overhead.ratio", "rss-overhead.bytes", "fragmentation", "fragmentation.bytes", "db.0", "db.2"} {
			if !slices.Contains(names, f) {
				t.Errorf("RESP%s MEMORY STATS has no %s: %v", proto, f, names)
			}
		}
		if got["keys.count"].str != "4" {
			t.Errorf("keys.count %v, want 4", got["keys.count"])
		}
		if slices.Contains(names, "db.1") {
			t.Errorf("db.1 (no keys) listed")
		}
	}
	for sub, want := range map[string]string{"DOCTOR": "Sam", "MALLOC-STATS": "heap_alloc=", "PURGE": "OK"} {
		if r := c.do("MEMORY", sub); r.isError() || !strings.Contains(r.str, want) {
			t.Errorf("MEMORY %s: %v", sub, r)
		}
	}
	help := c.do("MEMORY", "HELP").String()
	for _, sub := range []string{"DOCTOR", "MALLOC-STATS", "PURGE", "STATS", "USAGE", "HELP"} {
		if !strings.Contains(help, sub) {
			t.Errorf("MEMORY HELP has no %s: %s", sub, help)
		}
	}
}
