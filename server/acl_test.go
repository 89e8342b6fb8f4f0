package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvarray/kvarray/internal/glob"
)

// The cases of Redis 7.0's tests/unit/acl.tcl, acl-v2.tcl and auth.tcl
// (tagged external:skip, so they cannot run against an outside server),
// checked the same way, as Go tests against kvarray's server. Cases that
// need commands kvarray does not serve use one it does with the same ACL
// properties (APPEND for LPUSH: a key written, not read; @string for
// @set); those that need features kvarray lacks are listed in
// docs/compatibility.md. Key-spec cases of commands kvarray does not
// serve (MIGRATE, SORT, EVAL, GEORADIUS, ...) are in package acl.

// expect runs args on c and checks the reply's first line against a Tcl
// glob, as the Tcl tests' assert_match / catch do.
func expect(t *testing.T, c *rawConn, pattern string, args ...string) reply {
	t.Helper()
	r := c.do(args...)
	got := r.line()
	switch {
	case r.kind == '-':
		got = r.str
	case r.null:
		got = "(nil)"
	}
	if !glob.Match([]byte(pattern), []byte(got)) {
		t.Errorf("%q: %s, want %q", args, r, pattern)
	}
	return r
}

// field is a map reply's value for key (RESP2: a flat array).
func field(t *testing.T, r reply, key string) reply {
	t.Helper()
	for i := 0; i+1 < len(r.elems); i += 2 {
		if r.elems[i].str == key {
			return r.elems[i+1]
		}
	}
	t.Fatalf("no %q in %s", key, r)
	return reply{}
}

func TestACLUsersAndPasswords(t *testing.T) {
	ts := startServer(t, "")
	r := ts.dial()
	expect(t, r, "$default", "ACL", "WHOAMI")
	expect(t, r, "+OK", "ACL", "setuser", "newuser")
	expect(t, r, "*Usernames can't contain spaces or null characters*", "ACL", "setuser", "a a")
	expect(t, r, "+OK", "ACL", "setuser", "newuser", ">passwd1")
	expect(t, r, "WRONGPASS*", "AUTH", "newuser", "passwd1")
	expect(t, r, "+OK", "ACL", "setuser", "newuser", "on", "+acl")
	expect(t, r, "+OK", "AUTH", "newuser", "passwd1")
	expect(t, r, "$newuser", "ACL", "WHOAMI")
	expect(t, r, "+OK", "ACL", "setuser", "newuser", ">passwd2")
	expect(t, r, "+OK", "AUTH", "newuser", "passwd1")
	expect(t, r, "+OK", "AUTH", "newuser", "passwd2")
	expect(t, r, "WRONGPASS*", "AUTH", "newuser", "passwd3")
	expect(t, r, "+OK", "ACL", "setuser", "newuser", "<passwd1")
	expect(t, r, "WRONGPASS*", "AUTH", "newuser", "passwd1")
	const hash = "34344e4d60c2b6d639b7bd22e18f2b0b91bc34bf0ac5f9952744435093cfb4e6"
	expect(t, r, "+OK", "ACL", "setuser", "newuser", "#"+hash)
	expect(t, r, "+OK", "AUTH", "newuser", "passwd4")
	expect(t, r, "*Error in ACL SETUSER modifier*", "ACL", "setuser", "newuser", "#"+hash[:63])
	expect(t, r, "*Error in ACL SETUSER modifier*", "ACL", "setuser", "newuser", "#"+hash[:63]+"q")
	pw := field(t, r.do("ACL", "getuser", "newuser"), "passwords")
	if !strings.Contains(pw.String(), hash) || strings.Contains(pw.String(), "passwd4") {
		t.Errorf("GETUSER passwords: %s", pw)
	}
	expect(t, r, "+OK", "ACL", "setuser", "newuser", "!"+hash)
	if pw := field(t, r.do("ACL", "getuser", "newuser"), "passwords"); strings.Contains(pw.String(), hash) {
		t.Errorf("GETUSER passwords after !hash: %s", pw)
	}
	// The connection is still newuser (+acl only).
	expect(t, r, "*NOPERM*set*", "SET", "foo", "bar")
	expect(t, r, "+OK", "ACL", "setuser", "newuser", "+set")
	expect(t, r, "*NOPERM*key*", "SET", "foo", "bar")
	expect(t, r, "+OK", "ACL", "setuser", "newuser", "allcommands", "~foo:*", "~bar:*")
	expect(t, r, "+OK", "SET", "foo:1", "a")
	expect(t, r, "+OK", "SET", "bar:2", "b")
	expect(t, r, "*NOPERM*key*", "SET", "zap:3", "c")
	expect(t, r, "+OK", "ACL", "setuser", "newuser", "allkeys")
	expect(t, r, "+OK", "ACL", "setuser", "newuser", "nopass")
	expect(t, r, "+OK", "AUTH", "newuser", "zipzapblabla")
	expect(t, r, "+OK", "ACL", "setuser", "newuser", "-ping")
	expect(t, r, ":1", "INCR", "mycounter")
	expect(t, r, "*NOPERM*ping*", "PING")
	// Whole classes (@string stands for acl.tcl's @set: kvarray has no sets).
	expect(t, r, "+OK", "ACL", "setuser", "newuser", "-@all", "+@string", "+acl")
	expect(t, r, "+OK", "SET", "s", "1")
	expect(t, r, "+OK", "ACL", "setuser", "newuser", "+@all", "-@string")
	expect(t, r, ":1", "DEL", "s")
	expect(t, r, "*NOPERM*set*", "SET", "foo", "bar")
	expect(t, r, "+OK", "ACL", "setuser", "newuser", "allcommands")
}

func TestACLSubcommands(t *testing.T) {
	ts := startServer(t, "")
	r := ts.dial()
	expect(t, r, "+OK", "ACL", "setuser", "newuser", "on", "nopass", "~*", "&*", "+acl")
	expect(t, r, "+OK", "AUTH", "newuser", "x")
	commands := func(user string) string {
		t.Helper()
		a := ts.dial()
		defer a.Close()
		return field(t, a.do("ACL", "getuser", user), "commands").str
	}
	expect(t, r, "+OK", "ACL", "setuser", "newuser", "+@all", "-client")
	expect(t, r, "+OK", "ACL", "setuser", "newuser", "+client|id", "+client|setname")
	if s := commands("newuser"); !glob.Match([]byte("+@all*-client*+client|id*"), []byte(s)) || !glob.Match([]byte("+@all*-client*+client|setname*"), []byte(s)) {
		t.Errorf("commands: %q", s)
	}
	expect(t, r, ":*", "CLIENT", "ID")
	expect(t, r, "+OK", "CLIENT", "SETNAME", "foo")
	expect(t, r, "*NOPERM*client|kill*", "CLIENT", "KILL", "type", "master")

	// Redis 7.2's CLIENT SETINFO, which clients send on connect, is a
	// @connection subcommand here too.
	expect(t, r, "+OK", "ACL", "setuser", "newuser", "-@all", "+acl", "+@connection")
	expect(t, r, "+OK", "CLIENT", "SETINFO", "lib-name", "x")
	expect(t, r, "+OK", "ACL", "setuser", "newuser", "+@all", "-client|kill")
	if s := commands("newuser"); s != "+@all -client|kill" {
		t.Errorf("commands: %q", s)
	}
	expect(t, r, ":*", "CLIENT", "ID")
	expect(t, r, "*NOPERM*client|kill*", "CLIENT", "KILL", "type", "master")

	expect(t, r, "+OK", "ACL", "setuser", "newuser", "-@all", "+acl", "+config", "-config|set")
	if s := commands("newuser"); !strings.Contains(s, "+config") || !strings.Contains(s, "-config|set") {
		t.Errorf("commands: %q", s)
	}
	expect(t, r, "*", "CONFIG", "GET", "maxclients")
	expect(t, r, "*NOPERM*config|set*", "CONFIG", "SET", "maxclients", "10")

	expect(t, r, "+OK", "ACL", "setuser", "newuser", "+@all", "-config|get")
	expect(t, r, "*Allowing first-arg of a subcommand is not supported*", "ACL", "setuser", "newuser", "+config|get|appendonly")
	expect(t, r, "+OK", "ACL", "setuser", "newuser", "+@all", "+config|get")
	expect(t, r, "*Unknown command or category name in ACL*", "ACL", "setuser", "newuser", "+@all", "+config|asdf")
	expect(t, r, "*Unknown command or category name in ACL*", "ACL", "setuser", "newuser", "+@all", "-config|asdf")
	expect(t, r, "*Unknown command or category name in ACL*", "ACL", "setuser", "newuser", "+@all", "+get|key1|key2")
	expect(t, r, "*Unknown command or category name in ACL*", "ACL", "setuser", "newuser", "+@all", "-get|key1|key2")

	expect(t, r, "+OK", "ACL", "setuser", "newuser", "-@all", "+acl", "+select|0")
	if s := commands("newuser"); !strings.Contains(s, "+select|0") {
		t.Errorf("commands: %q", s)
	}
	expect(t, r, "+OK", "SELECT", "0")
	expect(t, r, "*NOPERM*select*", "SELECT", "1")

	// Subcommands engulfed by their container and by +@all.
	expect(t, r, "+OK", "ACL", "setuser", "newuser", "+@all")
	expect(t, r, "+OK", "ACL", "setuser", "bob", "+memory|doctor")
	if s := commands("bob"); s != "-@all +memory|doctor" {
		t.Errorf("bob: %q", s)
	}
	expect(t, r, "+OK", "ACL", "setuser", "bob", "+memory")
	if s := commands("bob"); s != "-@all +memory" {
		t.Errorf("bob: %q", s)
	}
	expect(t, r, "+OK", "ACL", "setuser", "bob", "+@all", "+client|id")
	if s := commands("bob"); s != "+@all" {
		t.Errorf("bob: %q", s)
	}
	expect(t, r, "+OK", "ACL", "setuser", "alice", "+@all", "-memory|doctor", ">passwd1", "on")
	if s := commands("alice"); s != "+@all -memory|doctor" {
		t.Errorf("alice: %q", s)
	}
	al := ts.dial()
	expect(t, al, "+OK", "AUTH", "alice", "passwd1")
	expect(t, al, "*NOPERM*memory|doctor*", "MEMORY", "DOCTOR")
	expect(t, r, "+OK", "ACL", "setuser", "alice", "+@all", "-memory")
	if s := commands("alice"); s != "+@all -memory" {
		t.Errorf("alice: %q", s)
	}
	expect(t, al, "*NOPERM*memory|doctor*", "MEMORY", "DOCTOR")
	expect(t, al, "*NOPERM*memory|stats*", "MEMORY", "STATS")
	expect(t, r, "+OK", "ACL", "setuser", "alice", "-@all")
	if s := commands("alice"); s != "-@all" {
		t.Errorf("alice: %q", s)
	}
	expect(t, al, "*NOPERM*get*", "GET", "key")

	// Translating back (the order of single commands is the table's).
	expect(t, r, "+OK", "ACL", "setuser", "newuser", "reset", "+@all", "~*", "-@string", "+incr", "-debug", "+debug|digest")
	s := commands("newuser")
	for _, p := range []string{"*+@all*", "*-@string*", "*+incr*", "*-debug +debug|digest*"} {
		if !glob.Match([]byte(p), []byte(s)) {
			t.Errorf("subtractive: %q does not match %q", s, p)
		}
	}
	expect(t, r, "+OK", "ACL", "setuser", "newuser", "reset", "+@string", "-incr", "+acl", "+debug|digest", "+debug|segfault")
	s = commands("newuser")
	for _, p := range []string{"*-@all*", "*+@string*", "*-incr*", "*+debug|digest*", "*+debug|segfault*", "*+acl*"} {
		if !glob.Match([]byte(p), []byte(s)) {
			t.Errorf("additive: %q does not match %q", s, p)
		}
	}
}

// TestACLCategoriesRoundTrip: "ACL GETUSER provides reasonable results"
// for every category, and ACL CAT.
func TestACLCategoriesRoundTrip(t *testing.T) {
	ts := startServer(t, "")
	r := ts.dial()
	cats := r.do("ACL", "CAT")
	if len(cats.elems) != 21 {
		t.Fatalf("ACL CAT: %s", cats)
	}
	for _, c := range cats.elems {
		expect(t, r, "+OK", "ACL", "setuser", "additive", "reset", "+@all", "-@"+c.str)
		if s := field(t, r.do("ACL", "getuser", "additive"), "commands").str; s != "+@all -@"+c.str {
			t.Errorf("+@all -@%s: %q", c.str, s)
		}
		expect(t, r, "+OK", "ACL", "setuser", "restrictive", "reset", "-@all", "+@"+c.str)
		if s := field(t, r.do("ACL", "getuser", "restrictive"), "commands").str; s != "-@all +@"+c.str {
			t.Errorf("-@all +@%s: %q", c.str, s)
		}
	}
	expect(t, r, "*Unknown category 'NON_EXISTS'", "ACL", "CAT", "NON_EXISTS")
	expect(t, r, "*unknown subcommand or wrong number of arguments for 'CAT'*", "ACL", "CAT", "NON_EXISTS", "NON_EXISTS2")
	has := func(cat, name string) bool {
		for _, e := range r.do("ACL", "CAT", cat).elems {
			if e.str == name {
				return true
			}
		}
		return false
	}
	if !has("transaction", "multi") || !has("scripting", "function|list") || !has("keyspace", "del") {
		t.Errorf("ACL CAT misses multi, function|list or del")
	}
	if has("keyspace", "set") || has("stream", "get") {
		t.Errorf("ACL CAT lists set in keyspace or get in stream")
	}
}

func TestACLLog(t *testing.T) {
	ts := startServer(t, "")
	r := ts.dial()
	last := func() reply {
		t.Helper()
		a := ts.dial()
		defer a.Close()
		l := a.do("ACL", "LOG")
		if len(l.elems) == 0 {
			t.Fatalf("ACL LOG is empty")
		}
		return l.elems[0]
	}
	want := func(e reply, kv ...string) {
		t.Helper()
		for i := 0; i < len(kv); i += 2 {
			if got := field(t, e, kv[i]).line(); got != kv[i+1] {
				t.Errorf("ACL LOG %s: %s, want %s", kv[i], got, kv[i+1])
			}
		}
	}
	expect(t, r, "+OK", "ACL", "LOG", "RESET")
	expect(t, r, "+OK", "ACL", "setuser", "antirez", ">foo", "on", "+set", "~object:1234")
	expect(t, r, "+OK", "ACL", "setuser", "antirez", "+multi", "+exec")
	expect(t, r, "+OK", "AUTH", "antirez", "foo")
	expect(t, r, "*NOPERM*get*", "GET", "foo")
	e := last()
	want(e, "username", "$antirez", "context", "$toplevel", "reason", "$command", "object", "$get", "count", ":1")
	if ci := field(t, e, "client-info").str; !strings.HasPrefix(ci, "id=") {
		t.Errorf("client-info: %q", ci)
	}
	if age := field(t, e, "age-seconds"); age.kind != '$' {
		t.Errorf("age-seconds: %s", age)
	}
	r.do("GET", "foo")
	r.do("GET", "foo")
	want(last(), "count", ":3")
	// A subcommand (acl.tcl uses SCRIPT HELP; kvarray has no SCRIPT).
	d := ts.dial()
	expect(t, d, "+OK", "ACL", "SETUSER", "demo", "on", "nopass")
	expect(t, d, "+OK", "AUTH", "demo", "")
	expect(t, d, "*NOPERM*memory|doctor*", "MEMORY", "DOCTOR")
	want(last(), "username", "$demo", "context", "$toplevel", "reason", "$command", "object", "$memory|doctor")
	r.do("SET", "somekeynotallowed", "1234")
	want(last(), "reason", "$key", "object", "$somekeynotallowed")
	expect(t, r, "+OK", "MULTI")
	expect(t, r, "*NOPERM*", "INCR", "foo")
	expect(t, r, "*EXECABORT*", "EXEC")
	want(last(), "context", "$multi", "object", "$incr")
	// (2): allowed when queued, revoked before EXEC.
	a := ts.dial()
	expect(t, a, "+OK", "ACL", "SETUSER", "antirez", "+incr")
	expect(t, r, "+OK", "MULTI")
	expect(t, r, "+QUEUED", "INCR", "object:1234")
	expect(t, a, "+OK", "ACL", "SETUSER", "antirez", "-incr")
	x := r.do("EXEC")
	if len(x.elems) != 1 || !strings.HasPrefix(x.elems[0].str, "NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: no permission to execute the command or subcommand") {
		t.Errorf("EXEC: %s", x)
	}
	want(last(), "context", "$multi", "object", "$incr")
	for range 4 {
		r.do("INCR", "foo")
	}
	if n := len(a.do("ACL", "LOG").elems); n <= 1 {
		t.Errorf("ACL LOG: %d entries", n)
	}
	if n := len(a.do("ACL", "LOG", "2").elems); n != 2 {
		t.Errorf("ACL LOG 2: %d entries", n)
	}
	expect(t, a, "WRONGPASS*", "AUTH", "antirez", "wrong-password")
	want(last(), "context", "$toplevel", "reason", "$auth", "object", "$AUTH", "username", "$antirez")
	expect(t, a, "+OK", "ACL", "LOG", "RESET")
	if n := len(a.do("ACL", "LOG").elems); n != 0 {
		t.Errorf("ACL LOG after RESET: %d entries", n)
	}
	// The log's bound.
	expect(t, a, "+OK", "CONFIG", "SET", "acllog-max-len", "5")
	for j := range 10 {
		r.do("SET", "obj:"+string(rune('0'+j)), "123")
	}
	if n := len(a.do("ACL", "LOG").elems); n != 5 {
		t.Errorf("ACL LOG with a bound of 5: %d entries", n)
	}
	// RESP3: a map, age-seconds a double.
	expect(t, a, "%", "HELLO", "3")
	l := a.do("ACL", "LOG", "1")
	if len(l.elems) != 1 || l.elems[0].kind != '%' {
		t.Errorf("RESP3 ACL LOG: %s", l)
	}
}

func TestACLUsersLifecycle(t *testing.T) {
	ts := startServer(t, "")
	r := ts.dial()
	expect(t, r, "+OK", "ACL", "setuser", "default", "off")
	n := ts.dial()
	expect(t, n, "NOAUTH*", "PING")
	expect(t, r, "+OK", "ACL", "setuser", "default", "on")
	// HELLO AUTH works for others when the default user may run nothing.
	expect(t, r, "+OK", "ACL", "setuser", "secure-user", ">supass", "on", "+@all")
	expect(t, r, "+OK", "ACL", "setuser", "default", "-@all")
	expect(t, r, "[*]", "HELLO", "2", "AUTH", "secure-user", "supass")
	expect(t, r, "+OK", "ACL", "setuser", "default", "nopass", "+@all")
	expect(t, r, "+OK", "AUTH", "default", "")
	expect(t, r, "*wrong number of arguments for 'acl|help' command", "ACL", "help", "xxx")
	if h := r.do("ACL", "HELP"); len(h.elems) < 10 {
		t.Errorf("ACL HELP: %s", h)
	}
	expect(t, r, "+OK", "ACL", "setuser", "not_used", "on", ">passwd")
	expect(t, r, ":1", "ACL", "deluser", "not_used")
	expect(t, r, "+PONG", "PING")
	u := ts.dial()
	expect(t, r, "+OK", "ACL", "setuser", "using", "on", "+acl", ">passwd")
	expect(t, u, "+OK", "AUTH", "using", "passwd")
	expect(t, u, ":1", "ACL", "deluser", "using")
	u.expectEOF()
	expect(t, r, "*ACL GENPASS argument must be the number*", "ACL", "genpass", "-236")
	expect(t, r, "*ACL GENPASS argument must be the number*", "ACL", "genpass", "5000")
	if p := r.do("ACL", "GENPASS", "555"); len(p.str) != 139 {
		t.Errorf("GENPASS 555: %q", p.str)
	}
	expect(t, r, "ERR The 'default' user cannot be removed", "ACL", "deluser", "default")
	expect(t, r, "ERR This Redis instance is not configured to use an ACL file.*", "ACL", "LOAD")
}

func TestACLFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "users.acl")
	ts := startServer(t, "", WithACLFile(path))
	r := ts.dial()
	expect(t, r, "ERR Error loading ACLs, opening file '"+path+"': no such file or directory", "ACL", "LOAD")
	expect(t, r, "+OK", "ACL", "setuser", "eve", "on", ">pw", "~cache:*", "resetchannels", "&news", "-@all", "+get", "(+set %W~w*)")
	expect(t, r, "+OK", "ACL", "SAVE")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "user default on nopass ~* &* +@all\nuser eve on #" + strings.Repeat("?", 64) + " ~cache:* resetchannels &news -@all +get (%W~w* resetchannels -@all +set)\n"
	if !glob.Match([]byte(strings.ReplaceAll(want, "?", "[0-9a-f]")), b) || strings.Contains(string(b), ">pw") {
		t.Errorf("aclfile:\n%s", b)
	}
	e := ts.dial()
	expect(t, e, "+OK", "AUTH", "eve", "pw")
	expect(t, r, "+OK", "ACL", "setuser", "eve", "+del")
	expect(t, r, "+OK", "ACL", "LOAD")
	// The users were replaced: eve's connection is closed, the rules are
	// the file's.
	e.expectEOF()
	if s := field(t, r.do("ACL", "getuser", "eve"), "commands").str; s != "-@all +get" {
		t.Errorf("eve after LOAD: %q", s)
	}
	// A bad file changes nothing.
	os.WriteFile(path, []byte("user x on +nosuchcommand\nuser x on\nnotuser y\n"), 0o600)
	expect(t, r, "ERR users.acl:1: Error in applying operation '+nosuchcommand': Unknown command or category name in ACL. WARNING: Duplicate user 'x' found on line 2. users.acl:3 should start with user keyword followed by the username. WARNING: ACL errors detected, no change to the previously active ACL rules was performed", "ACL", "LOAD")
	if u := r.do("ACL", "USERS"); len(u.elems) != 2 || u.elems[1].str != "eve" {
		t.Errorf("ACL USERS after a bad LOAD: %s", u)
	}

	// At start: a server with the file has its users.
	os.WriteFile(path, []byte("user alice on #"+strings.Repeat("a", 64)+" ~rw* (-@all +get)\nuser bob on nopass (%W~w* +set) (%R~r* +get)\n"), 0o600)
	ts2 := startServer(t, "", WithACLFile(path))
	if err := ts2.srv.LoadACLFile(); err != nil {
		t.Fatal(err)
	}
	c := ts2.dial()
	sel := field(t, c.do("ACL", "getuser", "alice"), "selectors")
	if len(sel.elems) != 1 || field(t, sel.elems[0], "commands").str != "-@all +get" || field(t, sel.elems[0], "keys").str != "" {
		t.Errorf("alice's selectors: %s", sel)
	}
	sel = field(t, c.do("ACL", "getuser", "bob"), "selectors")
	if len(sel.elems) != 2 || field(t, sel.elems[0], "commands").str != "-@all +set" || field(t, sel.elems[0], "keys").str != "%W~w*" ||
		field(t, sel.elems[1], "commands").str != "-@all +get" || field(t, sel.elems[1], "keys").str != "%R~r*" {
		t.Errorf("bob's selectors: %s", sel)
	}
}

// TestACLSelectors: acl-v2.tcl.
func TestACLSelectors(t *testing.T) {
	ts := startServer(t, "")
	r := ts.dial()
	r2 := ts.dial()
	expect(t, r, "+OK", "ACL", "SETUSER", "selector-1", "on", "-@all", "resetkeys", "nopass")
	expect(t, r2, "+OK", "auth", "selector-1", "password")
	expect(t, r2, "*NOPERM*command*", "ping")
	expect(t, r2, "*NOPERM*command*", "set", "write::foo", "bar")
	expect(t, r2, "*NOPERM*command*", "get", "read::foo")
	expect(t, r, "+OK", "ACL", "SETUSER", "selector-1", "(+@write ~write::*)", "(+@read ~read::*)")
	expect(t, r2, "+OK", "set", "write::foo", "bar")
	expect(t, r2, "(nil)", "get", "read::foo")
	expect(t, r2, "*NOPERM*keys*", "get", "write::foo")
	expect(t, r2, "*NOPERM*keys*", "set", "read::foo", "bar")

	expect(t, r, "+OK", "ACL", "SETUSER", "selector-default", "reset", "()")
	u := r.do("ACL", "GETUSER", "selector-default")
	sel := field(t, u, "selectors")
	if len(sel.elems) != 1 || field(t, sel.elems[0], "keys").str != "" || field(t, sel.elems[0], "channels").str != "" || field(t, sel.elems[0], "commands").str != "-@all" {
		t.Errorf("selector-default: %s", u)
	}
	expect(t, r, "+OK", "ACL", "SETUSER", "selector-del", "on", "(~added-selector)")
	if sel := field(t, r.do("ACL", "GETUSER", "selector-del"), "selectors"); len(sel.elems) != 1 || field(t, sel.elems[0], "keys").str != "~added-selector" {
		t.Errorf("selector-del: %s", sel)
	}
	expect(t, r, "+OK", "ACL", "SETUSER", "selector-del", "clearselectors")
	if sel := field(t, r.do("ACL", "GETUSER", "selector-del"), "selectors"); len(sel.elems) != 0 {
		t.Errorf("selector-del after clearselectors: %s", sel)
	}
	expect(t, r, "*ERR Error in ACL SETUSER modifier '(*)*Syntax*", "ACL", "SETUSER", "selector-syntax", "on", "(this-is-invalid)")
	expect(t, r, "*ERR Error in ACL SETUSER modifier '(*)*Adding a pattern after the*", "ACL", "SETUSER", "selector-syntax", "on", "(&* &fail)")
	expect(t, r, "(nil)", "ACL", "GETUSER", "selector-syntax")

	expect(t, r, "+OK", "ACL", "SETUSER", "selector-2", "(~key1 +get )", "( ~key2 +get )", "( ~key3 +get)", "(~key4 +get)")
	expect(t, r, "+OK", "ACL", "SETUSER", "selector-2", "(~key5", "+get", ")", "(", "~key6", "+get", ")", "(", "~key7", "+get)", "(~key8", "+get)")
	sel = field(t, r.do("ACL", "GETUSER", "selector-2"), "selectors")
	for i := range 8 {
		if i >= len(sel.elems) || field(t, sel.elems[i], "keys").str != "~key"+string(rune('1'+i)) {
			t.Errorf("selector-2 selector %d: %s", i, sel)
		}
	}
	expect(t, r, "*ERR*Syntax error*", "ACL", "SETUSER", "invalid-selector", " () ")
	expect(t, r, "*Unmatched parenthesis*", "ACL", "SETUSER", "invalid-selector", "(")
	expect(t, r, "*ERR*Syntax error", "ACL", "SETUSER", "invalid-selector", ")")

	// Read and write permissions. APPEND stands for LPUSH: a key it
	// writes without reading.
	expect(t, r, "+OK", "ACL", "SETUSER", "key-permission-R", "on", "nopass", "%R~read*", "+@all")
	expect(t, r2, "+OK", "auth", "key-permission-R", "password")
	expect(t, r2, "+PONG", "PING")
	expect(t, r, "+OK", "set", "readstr", "bar")
	expect(t, r2, "$bar", "get", "readstr")
	expect(t, r2, "*NOPERM*keys*", "set", "readstr", "bar")
	expect(t, r2, "*NOPERM*keys*", "get", "notread")

	expect(t, r, "+OK", "ACL", "SETUSER", "key-permission-W", "on", "nopass", "%W~write*", "+@all")
	expect(t, r2, "+OK", "auth", "key-permission-W", "password")
	expect(t, r2, ":2", "APPEND", "writelist", "10")
	expect(t, r2, "*NOPERM*keys*", "GET", "writestr")
	expect(t, r2, "*NOPERM*keys*", "APPEND", "notwrite", "10")

	expect(t, r, "+OK", "ACL", "SETUSER", "key-permission-RW", "on", "nopass", "%R~read*", "%W~write*", "+@all")
	expect(t, r2, "+OK", "auth", "key-permission-RW", "password")
	expect(t, r, "+OK", "set", "read", "bar")
	expect(t, r2, ":1", "copy", "read", "write")
	expect(t, r2, "*NOPERM*keys*", "copy", "write", "read")

	expect(t, r, "+OK", "ACL", "SETUSER", "key-permission-RW-selector", "on", "nopass", "(%R~read* +@all)", "(%W~write* +@all)")
	expect(t, r2, "+OK", "auth", "key-permission-RW-selector", "password")
	expect(t, r2, ":4", "APPEND", "writelist", "10")
	expect(t, r2, "*NOPERM*keys*", "GET", "writestr")
	expect(t, r2, "*NOPERM*keys*", "APPEND", "notwrite", "10")
	expect(t, r, "+OK", "set", "readstr", "bar")
	expect(t, r2, "$bar", "get", "readstr")
	expect(t, r2, "*NOPERM*keys*", "set", "readstr", "bar")
	expect(t, r2, "*NOPERM*keys*", "get", "notread")
	expect(t, r2, "*NOPERM*keys*", "copy", "read", "write")
	expect(t, r2, "*NOPERM*keys*", "copy", "write", "read")

	// SET: read with GET only.
	expect(t, r, ":*", "del", "readstr")
	expect(t, r, "+OK", "ACL", "SETUSER", "set-key-permission-R", "on", "nopass", "%R~read*", "+@all")
	expect(t, r2, "+OK", "auth", "set-key-permission-R", "password")
	expect(t, r2, "(nil)", "get", "readstr")
	for _, cmd := range [][]string{{"set", "readstr", "bar"}, {"set", "readstr", "bar", "get"}, {"set", "readstr", "bar", "ex", "100"}, {"set", "readstr", "bar", "keepttl", "nx"}} {
		expect(t, r2, "*NOPERM*keys*", cmd...)
	}
	expect(t, r, ":*", "del", "writestr")
	expect(t, r, "+OK", "ACL", "SETUSER", "set-key-permission-W", "on", "nopass", "%W~write*", "+@all")
	expect(t, r2, "+OK", "auth", "set-key-permission-W", "password")
	expect(t, r2, "+OK", "set", "writestr", "bar")
	expect(t, r2, "+OK", "set", "writestr", "get")
	for _, cmd := range [][]string{{"set", "get", "writestr"}, {"set", "writestr", "bar", "get"}, {"set", "writestr", "bar", "get", "ex", "100"},
		{"set", "writestr", "bar", "get", "keepttl", "nx"}, {"set", "writestr", "bar", "ex", "get"}} {
		expect(t, r2, "*NOPERM*keys*", cmd...)
	}
	expect(t, r, ":*", "del", "readwrite_str")
	expect(t, r, "+OK", "ACL", "SETUSER", "set-key-permission-RW-selector", "on", "nopass", "%RW~readwrite*", "+@all")
	expect(t, r2, "+OK", "auth", "set-key-permission-RW-selector", "password")
	expect(t, r2, "(nil)", "get", "readwrite_str")
	expect(t, r2, "ERR * not an integer *", "set", "readwrite_str", "bar", "ex", "get")
	expect(t, r2, "+OK", "set", "readwrite_str", "bar")
	expect(t, r2, "$bar", "get", "readwrite_str")
	expect(t, r2, "$bar", "set", "readwrite_str", "bar2", "get")
	expect(t, r2, "$bar2", "set", "readwrite_str", "bar3", "get", "ex", "10")
	expect(t, r2, "$bar3", "get", "readwrite_str")

	// The ACL log names what no selector allowed.
	expect(t, r, "+OK", "ACL", "SETUSER", "acl-log-test-selector", "on", "nopass")
	expect(t, r, "+OK", "ACL", "SETUSER", "acl-log-test-selector", "+mget", "~key", "(+mget ~key ~otherkey)")
	expect(t, r2, "+OK", "auth", "acl-log-test-selector", "password")
	for _, tc := range []struct {
		cmd            []string
		err            string
		reason, object string
	}{
		{[]string{"GET", "key"}, "*NOPERM*command*", "command", "get"},
		{[]string{"MGET", "otherkey", "someotherkey"}, "*NOPERM*keys*", "key", "someotherkey"},
		{[]string{"MGET", "key", "otherkey", "someotherkey"}, "*NOPERM*keys*", "key", "someotherkey"},
	} {
		expect(t, r, "+OK", "ACL", "LOG", "RESET")
		expect(t, r2, tc.err, tc.cmd...)
		e := r.do("ACL", "LOG").elems[0]
		if field(t, e, "username").str != "acl-log-test-selector" || field(t, e, "context").str != "toplevel" || field(t, e, "reason").str != tc.reason || field(t, e, "object").str != tc.object {
			t.Errorf("%v: ACL LOG %s", tc.cmd, e)
		}
	}

	expect(t, r, "+OK", "ACL", "setuser", "selector-info", "-@all", "+get", "resetchannels", "&channel1", "%R~foo1", "%W~bar1", "~baz1")
	expect(t, r, "+OK", "ACL", "setuser", "selector-info", "(-@all +set resetchannels &channel2 %R~foo2 %W~bar2 ~baz2)")
	u = r.do("ACL", "GETUSER", "selector-info")
	if field(t, u, "keys").str != "%R~foo1 %W~bar1 ~baz1" || field(t, u, "channels").str != "&channel1" || field(t, u, "commands").str != "-@all +get" {
		t.Errorf("selector-info root: %s", u)
	}
	s2 := field(t, u, "selectors").elems[0]
	if field(t, s2, "keys").str != "%R~foo2 %W~bar2 ~baz2" || field(t, s2, "channels").str != "&channel2" || field(t, s2, "commands").str != "-@all +set" {
		t.Errorf("selector-info second: %s", s2)
	}
	expect(t, r, "+OK", "ACL", "SETUSER", "user-idempotency", "off", "-@all", "+get", "resetchannels", "&channel1", "%R~foo1", "%W~bar1", "~baz1", "(-@all +set resetchannels &channel2 %R~foo2 %W~bar2 ~baz2)")
	var line string
	for _, l := range r.do("ACL", "LIST").elems {
		if strings.HasPrefix(l.str, "user user-idempotency") {
			line = l.str
		}
	}
	for _, p := range []string{"*-@all*+get*(*)*", "*resetchannels*&channel1*(*)*", "*%R~foo1*%W~bar1*~baz1*(*)*", "*(*-@all*+set*)*", "*(*resetchannels*&channel2*)*", "*(*%R~foo2*%W~bar2*~baz2*)*"} {
		if !glob.Match([]byte(p), []byte(line)) {
			t.Errorf("ACL LIST %q does not match %q", line, p)
		}
	}
	expect(t, r, "+OK", "ACL", "setuser", "selector-rw-info", "%R~foo", "%W~foo", "%RW~bar")
	if k := field(t, r.do("ACL", "GETUSER", "selector-rw-info"), "keys").str; k != "~foo ~bar" {
		t.Errorf("R+W keys: %q", k)
	}
}

// TestACLDryRun: acl-v2.tcl's DRYRUN cases on the commands kvarray
// serves.
func TestACLDryRun(t *testing.T) {
	ts := startServer(t, "")
	r := ts.dial()
	expect(t, r, "+OK", "ACL", "setuser", "command-test", "+@all", "%R~read*", "%W~write*", "%RW~rw*")
	expect(t, r, "+OK", "ACL", "DRYRUN", "command-test", "GET", "read")
	expect(t, r, "ERR User 'not-a-user' not found", "ACL", "DRYRUN", "not-a-user", "GET", "read")
	expect(t, r, "ERR Command 'not-a-command' not found", "ACL", "DRYRUN", "command-test", "not-a-command", "read")
	expect(t, r, "+OK", "ACL", "setuser", "command-test", "-@all")
	expect(t, r, "$This user has no permissions to run the 'set' command", "ACL", "DRYRUN", "command-test", "set", "somekey", "somevalue")
	expect(t, r, "$This user has no permissions to run the 'get' command", "ACL", "DRYRUN", "command-test", "get", "somekey")
	expect(t, r, "+OK", "ACL", "setuser", "command-test", "+@all", "%R~read*", "%W~write*", "%RW~rw*")
	for _, cmd := range [][]string{{"touch"}, {"exists"}, {"MEMORY", "USAGE"}, {"TYPE"}, {"STRLEN"}} {
		for _, k := range []string{"read", "write", "rw"} {
			expect(t, r, "+OK", append(append([]string{"ACL", "DRYRUN", "command-test"}, cmd...), k)...)
		}
		expect(t, r, "$This user has no permissions to access the 'nothing' key", append(append([]string{"ACL", "DRYRUN", "command-test"}, cmd...), "nothing")...)
	}
	expect(t, r, "+OK", "ACL", "setuser", "test-dry-run", "+@all", "~v*")
	expect(t, r, "+OK", "ACL", "DRYRUN", "test-dry-run", "SET", "v", "v")
	expect(t, r, "ERR wrong number of arguments for 'set' command", "ACL", "DRYRUN", "test-dry-run", "SET", "v")
	expect(t, r, "ERR wrong number of arguments for 'set' command", "ACL", "DRYRUN", "test-dry-run", "SET")
}

// TestAuthTcl: auth.tcl.
func TestAuthTcl(t *testing.T) {
	ts := startServer(t, "")
	r := ts.dial()
	expect(t, r, "ERR *any password*", "auth", "foo")
	expect(t, r, "*syntax error*", "auth", "a", "b", "c")

	ts = startServer(t, "", WithAuth("foobar"))
	r = ts.dial()
	expect(t, r, "WRONGPASS*", "auth", "wrong!")
	expect(t, r, "NOAUTH*", "set", "foo", "bar")
	expect(t, r, "+OK", "auth", "foobar")
	expect(t, r, "+OK", "set", "foo", "100")
	expect(t, r, ":101", "incr", "foo")

	ts = startServer(t, "", WithAuth("abc\x00def"))
	r = ts.dial()
	expect(t, r, "WRONGPASS*", "auth", "abc")
	expect(t, r, "+OK", "auth", "abc\x00def")
}
