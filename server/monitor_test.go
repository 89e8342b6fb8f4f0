package server

import (
	"regexp"
	"testing"
)

// TestMonitor: MONITOR replies OK, then streams the commands other
// clients run as Redis's lines (database, client address, the arguments
// quoted and escaped; AUTH's and HELLO's credentials redacted; admin commands and
// refused ones not shown), in order.
func TestMonitor(t *testing.T) {
	ts := startServer(t, "")
	m, c := ts.dial(), ts.dial()
	if r := m.do("MONITOR"); r.str != "OK" {
		t.Fatalf("MONITOR: %v", r)
	}
	c.do("SET", "k", "a \"b\"\n\x01")
	c.do("GET", "k")
	c.do("GEOADD", "g", "1", "2", "m")    // run as ZADD, shown as sent
	c.do("CONFIG", "SET", "timeout", "0") // admin: not shown
	c.do("NOSUCHCMD")
	c.do("AUTH", "secret")
	c.do("SELECT", "3")
	c.do("PING")
	c.do("HELLO", "2", "AUTH", "default", "pw")
	want := []string{
		`"SET" "k" "a \\"b\\"\\n\\x01"`, `"GET" "k"`, `"GEOADD" "g" "1" "2" "m"`, `"AUTH" "\(redacted\)"`,
	}
	for i, w := range want {
		r := m.read()
		re := regexp.MustCompile(`^\d+\.\d{6} \[0 127\.0\.0\.1:\d+\] ` + w + `$`)
		if r.kind != '+' || !re.MatchString(r.str) {
			t.Fatalf("line %d: %q, want %s", i, r.str, re)
		}
	}
	// The database after the command, as Redis: SELECT shows its new one.
	for _, w := range []string{`"SELECT" "3"`, `"PING"`, `"HELLO" "2" "AUTH" "\(redacted\)" "\(redacted\)"`} {
		if r := m.read(); r.kind != '+' || !regexp.MustCompile(`\[3 127\.0\.0\.1:\d+\] `+w+`$`).MatchString(r.str) {
			t.Fatalf("after SELECT 3: %q, want %s", r.str, w)
		}
	}
	// A transaction's commands, each, then EXEC; a script's EVAL, then
	// its commands (Redis 7.0's order: EVAL is shown before it runs).
	c.do("MULTI")
	c.do("INCR", "n")
	c.do("EXEC")
	c.do("EVAL", "return redis.call('GET', 'k')", "0")
	for _, w := range []string{`\[3 127\.0\.0\.1:\d+\] "MULTI"`, `\[3 127\.0\.0\.1:\d+\] "INCR" "n"`, `\[3 127\.0\.0\.1:\d+\] "EXEC"`,
		`\[3 127\.0\.0\.1:\d+\] "EVAL" "return redis.call\('GET', 'k'\)" "0"`, `\[3 lua\] "GET" "k"`} {
		if r := m.read(); r.kind != '+' || !regexp.MustCompile(w+`$`).MatchString(r.str) {
			t.Fatalf("transaction and script: %q, want %s", r.str, w)
		}
	}
	// The monitor's own commands get their replies, not split by lines.
	if r := m.do("ECHO", "x"); r.str != "x" {
		t.Fatalf("ECHO on the monitor: %v", r)
	}
}
