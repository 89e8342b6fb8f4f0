package server

import (
	"strings"
	"testing"
)

// TestIdleTimeout: CONFIG SET timeout closes a client that sends nothing
// for that long, not a subscriber, a monitor or a blocked client (they
// wait by design; Redis spares them too); CONFIG GET reports it, and bad
// values are refused. maxmemory-policy takes Redis's policies.
func TestIdleTimeout(t *testing.T) {
	ts := startServer(t, "")
	admin := ts.dial()
	if r := admin.do("CONFIG", "SET", "timeout", "-1"); !r.isError() {
		t.Fatalf("timeout -1: %v", r)
	}
	idle, sub, mon, blocked := ts.dial(), ts.dial(), ts.dial(), ts.dial()
	idle.do("PING")
	sub.do("SUBSCRIBE", "ch")
	mon.do("MONITOR")
	blocked.send(encode("BLPOP", "nokey", "0"))
	if r := admin.do("CONFIG", "SET", "timeout", "1"); r.str != "OK" {
		t.Fatalf("CONFIG SET timeout 1: %v", r)
	}
	if r := admin.do("CONFIG", "GET", "timeout"); r.String() != `[$"timeout" $"1"]` {
		t.Fatalf("CONFIG GET timeout: %v", r)
	}
	idle.expectEOF() // within the read's 10 s
	// The admin idled too while it waited (a late tick closes both): a
	// new connection turns the timeout off.
	admin = ts.dial()
	admin.do("CONFIG", "SET", "timeout", "0")
	// The others are still served.
	if r := admin.do("PUBLISH", "ch", "m"); r.str != "1" {
		t.Errorf("PUBLISH: %v, the subscriber is gone", r)
	}
	if r := sub.read(); len(r.elems) != 3 || r.elems[2].str != "m" {
		t.Errorf("subscriber got %v", r)
	}
	admin.do("RPUSH", "nokey", "x")
	if r := blocked.read(); r.String() != `[$"nokey" $"x"]` {
		t.Errorf("blocked client got %v", r)
	}
	if r := mon.read(); r.kind != '+' {
		t.Errorf("monitor got %v", r)
	}
	for _, c := range []struct {
		v  string
		ok bool
	}{{"allkeys-lru", true}, {"VOLATILE-TTL", true}, {"bogus", false}} {
		if r := admin.do("CONFIG", "SET", "maxmemory-policy", c.v); r.isError() == c.ok {
			t.Errorf("maxmemory-policy %s: %v", c.v, r)
		}
	}
	if r := admin.do("CONFIG", "GET", "maxmemory-policy"); r.String() != `[$"maxmemory-policy" $"volatile-ttl"]` {
		t.Errorf("CONFIG GET maxmemory-policy: %v", r)
	}
	if r := admin.do("INFO", "memory"); !strings.Contains(r.str, "maxmemory_policy:volatile-ttl\r\n") {
		t.Errorf("INFO memory: %q", r.str)
	}
}
