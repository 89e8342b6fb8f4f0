package server

import (
	"slices"
	"strings"
	"testing"
)

// TestIntrospectionSameAsRedis compares ROLE, MODULE LIST, LATENCY (with
// the monitor off), COMMAND GETKEYS/GETKEYSANDFLAGS and SLOWLOG's
// replies that do not depend on timing with a real redis-server.
func TestIntrospectionSameAsRedis(t *testing.T) {
	ts := startServer(t, "")
	redisAddr := startRedis(t)
	script := [][]string{
		{"ROLE"}, {"MODULE", "LIST"}, {"MODULE", "FOO"}, {"LATENCY", "LATEST"}, {"LATENCY", "HISTORY", "command"},
		{"LATENCY", "RESET"}, {"LATENCY", "GRAPH", "command"}, {"LATENCY", "FOO"},
		{"COMMAND", "GETKEYS", "SET", "a", "b"}, {"COMMAND", "GETKEYS", "MSET", "a", "1", "b", "2"}, {"COMMAND", "GETKEYS", "GET"},
		{"COMMAND", "GETKEYS", "PING", "x"}, {"COMMAND", "GETKEYS", "NOPE", "x"}, {"COMMAND", "GETKEYS", "GET", "a", "b"},
		{"COMMAND", "GETKEYS", "BITOP", "AND", "d", "s1", "s2"}, {"COMMAND", "GETKEYS", "PFCOUNT", "a", "b"},
		{"COMMAND", "GETKEYS", "SINTERCARD", "2", "a", "b", "LIMIT", "1"}, {"COMMAND", "GETKEYS", "EVAL", "return 1", "1", "k"},
		{"COMMAND", "GETKEYS", "EVAL", "return 1", "0"}, {"COMMAND", "GETKEYS", "ZUNIONSTORE", "d", "x", "a"},
		{"COMMAND", "GETKEYS", "LCS", "a", "b"},
		{"COMMAND", "GETKEYSANDFLAGS", "GET", "a"}, {"COMMAND", "GETKEYSANDFLAGS", "SET", "a", "b"}, {"COMMAND", "GETKEYSANDFLAGS", "INCR", "a"},
		{"COMMAND", "GETKEYSANDFLAGS", "SET", "a", "b", "GET"}, {"COMMAND", "GETKEYSANDFLAGS", "LMOVE", "a", "b", "LEFT", "RIGHT"},
		{"COMMAND", "GETKEYSANDFLAGS", "SORT", "a", "STORE", "b"}, {"COMMAND", "GETKEYSANDFLAGS", "DEL", "a", "b"},
		{"COMMAND", "GETKEYSANDFLAGS", "EXISTS", "a"}, {"COMMAND", "GETKEYSANDFLAGS", "BITFIELD", "a", "GET", "u8", "0"},
		{"COMMAND", "GETKEYSANDFLAGS", "MIGRATE", "h", "1", "", "0", "5", "KEYS", "a", "b"}, {"COMMAND", "GETKEYSANDFLAGS", "APPEND", "a", "b"},
		{"COMMAND", "GETKEYS"},
		{"CONFIG", "SET", "slowlog-log-slower-than", "-1"}, {"SLOWLOG", "RESET"}, {"SET", "a", "b"}, {"SLOWLOG", "LEN"}, {"SLOWLOG", "GET"},
		{"SLOWLOG", "GET", "-2"}, {"SLOWLOG", "GET", "x"}, {"SLOWLOG", "FOO"}, {"CONFIG", "SET", "slowlog-max-len", "-1"},
		{"CONFIG", "SET", "slowlog-max-len", "10"}, {"CONFIG", "GET", "slowlog-max-len"}, {"CONFIG", "GET", "slowlog-log-slower-than"}, {"CONFIG", "SET", "slowlog-log-slower-than", "10000"},
		{"LOLWUT", "VERSION", "x"},
		{"COMMAND", "LIST", "FILTERBY", "PATTERN", "config|rew*"}, {"COMMAND", "LIST", "FILTERBY", "PATTERN", "get"},
		{"COMMAND", "LIST", "FILTERBY", "ACLCAT", "nope"}, {"COMMAND", "LIST", "FILTERBY", "MODULE", "m"},
		{"COMMAND", "LIST", "FILTERBY", "bad", "x"}, {"COMMAND", "LIST", "bad"},
	}
	compareWithRedis(t, ts, redisAddr, script)
	c := ts.dial()
	if v := c.do("LOLWUT").String(); !strings.Contains(v, "Redis ver. ") {
		t.Errorf("LOLWUT: %s", v)
	}
	// Every command is logged with slowlog-log-slower-than 0, newest first,
	// with the client's address and name; AUTH and HELLO are not.
	c.do("CONFIG", "SET", "slowlog-log-slower-than", "0")
	c.do("SLOWLOG", "RESET")
	c.do("CLIENT", "SETNAME", "logged")
	c.do("HELLO", "2")
	c.do("GET", strings.Repeat("k", 200))
	got := c.do("SLOWLOG", "GET", "2").String()
	for _, want := range []string{"GET", strings.Repeat("k", 128) + "... (72 more bytes)", "logged", "CLIENT"} {
		if !strings.Contains(got, want) {
			t.Errorf("SLOWLOG GET: %s, want %q in it", got, want)
		}
	}
	if strings.Contains(got, "HELLO") {
		t.Errorf("SLOWLOG GET: %s logs HELLO", got)
	}
}

// TestConfigSetRequirepass: CONFIG SET requirepass makes new connections
// authenticate, keeps the one that set it, and "" lifts it.
func TestConfigSetRequirepass(t *testing.T) {
	ts := startServer(t, "")
	c := ts.dial()
	if r := c.do("CONFIG", "SET", "requirepass", "s3cret").String(); r != `+"OK"` {
		t.Fatalf("CONFIG SET requirepass: %s", r)
	}
	if r := c.do("PING").String(); !strings.Contains(r, "PONG") {
		t.Fatalf("the connection that set it: %s", r)
	}
	d := ts.dial()
	if r := d.do("GET", "x").String(); !strings.Contains(r, "NOAUTH") {
		t.Fatalf("a new connection before AUTH: %s", r)
	}
	if r := d.do("AUTH", "s3cret").String(); r != `+"OK"` {
		t.Fatalf("AUTH: %s", r)
	}
	if r := c.do("CONFIG", "GET", "requirepass").String(); !strings.Contains(r, "s3cret") {
		t.Fatalf("CONFIG GET requirepass: %s", r)
	}
	c.do("CONFIG", "SET", "requirepass", "")
	if r := ts.dial().do("GET", "x").String(); strings.Contains(r, "NOAUTH") {
		t.Fatalf("after lifting it: %s", r)
	}
}

// TestConfigSetSameAsRedis compares CONFIG SET and GET of the parameters
// kvarray accepts without acting on them (maxmemory and its kin, the
// replication backlog, the snapshot schedule), the all-or-nothing rule
// (the first value refused undoes the ones before it), duplicates and
// immutable parameters, and CLIENT KILL's argument errors with a real
// redis-server.
func TestConfigSetSameAsRedis(t *testing.T) {
	ts := startServer(t, "")
	redisAddr := startRedis(t)
	script := [][]string{
		{"CONFIG", "SET", "maxmemory", "10mb", "repl-backlog-size", "2k", "save", "3000 5"},
		{"CONFIG", "GET", "maxmemory"}, {"CONFIG", "GET", "repl-backlog-size"}, {"CONFIG", "GET", "save"},
		{"CONFIG", "SET", "maxmemory", "1gb", "maxmemory-clients", "200%", "maxmemory-samples", "x"},
		{"CONFIG", "GET", "maxmemory"}, {"CONFIG", "GET", "maxmemory-clients"},
		{"CONFIG", "SET", "maxmemory-samples", "0"}, {"CONFIG", "SET", "maxmemory", "lots"},
		{"CONFIG", "SET", "maxmemory-clients", "5%"}, {"CONFIG", "GET", "maxmemory-clients"},
		{"CONFIG", "SET", "maxmemory", "1", "maxmemory", "2"}, {"CONFIG", "SET", "daemonize", "yes"},
		{"CONFIG", "SET", "save", "1 2 3"}, {"CONFIG", "SET", "save", ""}, {"CONFIG", "GET", "save"},
		{"CONFIG", "GET", "key-load-delay"}, {"CONFIG", "GET", "key-load-*"},
		{"CONFIG", "SET", "maxmemory", "0", "maxmemory-clients", "0", "repl-backlog-size", "1mb"},
		{"CLIENT", "KILL", "TYPE", "wrong_type"}, {"CLIENT", "KILL", "USER", "wrong_user"},
		{"CLIENT", "KILL", "TYPE", "pubsub"}, {"CLIENT", "LIST", "TYPE", "bogus"},
	}
	compareWithRedis(t, ts, redisAddr, script)
}

// TestClientListFields: CLIENT LIST and CLIENT INFO carry Redis 7.0's
// fields, a container's command as name|subcommand, a subscriber's
// counts and flags, and CLIENT KILL TYPE and CLIENT LIST TYPE pick the
// subscriber alone.
func TestClientListFields(t *testing.T) {
	ts := startServer(t, "")
	c, sub := ts.dial(), ts.dial()
	sub.do("SUBSCRIBE", "a", "b")
	sub.read() // b's confirmation
	sub.do("PSUBSCRIBE", "p*")
	info := c.do("CLIENT", "INFO").str
	for _, f := range []string{" fd=", " flags=N ", " multi=-1 ", " qbuf=26 ", " cmd=client|info ", " user=default ", " redir=-1 ", " resp=2 "} {
		if !strings.Contains(info, f) {
			t.Errorf("CLIENT INFO %q: no %q", info, f)
		}
	}
	list := c.do("CLIENT", "LIST", "TYPE", "pubsub").str
	if n := strings.Count(list, "\n"); n != 1 || !strings.Contains(list, " flags=P ") || !strings.Contains(list, " sub=2 psub=1 ssub=0 ") ||
		!strings.Contains(list, " cmd=psubscribe ") {
		t.Errorf("CLIENT LIST TYPE pubsub: %q, want the subscriber's line alone", list)
	}
	c.do("MULTI")
	c.do("PING")
	c.do("PING")
	if r := c.do("EXEC"); len(r.elems) != 2 {
		t.Fatalf("EXEC: %v", r)
	}
	if r := c.do("CLIENT", "KILL", "TYPE", "pubsub"); r.str != "1" {
		t.Errorf("CLIENT KILL TYPE pubsub: %v, want 1", r)
	}
	sub.expectEOF()
	if r := c.do("PING"); r.str != "PONG" {
		t.Errorf("the normal client after CLIENT KILL TYPE pubsub: %v", r)
	}
}

// TestCommandInfoSameAsRedis: for every command kvarray serves that Redis
// 7.0 has, COMMAND INFO marks movablekeys as redis-server does, and its
// tips, key specs and subcommands (each subcommand's whole entry; in any
// order, as Redis's dictionary gives them) are redis-server's.
func TestCommandInfoSameAsRedis(t *testing.T) {
	ts := startServer(t, "")
	redisAddr := startRedis(t)
	for _, proto := range []string{"2", "3"} {
		k, r := ts.dial(), (&testServer{t: t, addr: redisAddr}).dial()
		k.do("HELLO", proto)
		r.do("HELLO", proto)
		compareCommandInfo(t, k, r)
	}
}

func compareCommandInfo(t *testing.T, k, r *rawConn) {
	movable := func(info reply) bool {
		for _, f := range info.elems[2].elems {
			if f.str == "movablekeys" {
				return true
			}
		}
		return false
	}
	// kvarray's CLIENT has two subcommands of Redis 7.2 (SETINFO and
	// NO-TOUCH, which clients send): they are left out.
	subs := func(info reply) []string {
		var out []string
		for _, e := range info.elems[9].elems {
			if n := e.elems[0].str; n != "client|setinfo" && n != "client|no-touch" {
				out = append(out, e.String())
			}
		}
		slices.Sort(out)
		return out
	}
	checked := 0
	for _, name := range k.do("COMMAND", "LIST").elems {
		if strings.Contains(name.str, "|") {
			continue
		}
		want := r.do("COMMAND", "INFO", name.str)
		if len(want.elems) != 1 || len(want.elems[0].elems) != 10 {
			continue // not a Redis 7.0 command
		}
		w, g := want.elems[0], k.do("COMMAND", "INFO", name.str).elems[0]
		if movable(g) != movable(w) {
			t.Errorf("COMMAND INFO %s: movablekeys %v, redis-server %v", name.str, movable(g), movable(w))
		}
		for i, what := range map[int]string{7: "tips", 8: "key specs"} {
			if g.elems[i].String() != w.elems[i].String() {
				t.Errorf("COMMAND INFO %s, %s:\nkvarray %v\nredis   %v", name.str, what, g.elems[i], w.elems[i])
			}
		}
		if gs, ws := subs(g), subs(w); !slices.Equal(gs, ws) {
			t.Errorf("COMMAND INFO %s, subcommands:\nkvarray %v\nredis   %v", name.str, gs, ws)
		}
		checked++
	}
	if checked < 150 {
		t.Errorf("compared %d commands, want every one kvarray serves", checked)
	}
}
