package server

import (
	"strings"
	"testing"
)

// TestSameAsRedis runs the same commands on kvarray and on a real
// redis-server and compares every reply (values, integers, errors, nulls),
// in RESP2 and in RESP3.
func TestSameAsRedis(t *testing.T) {
	ts := startServer(t, "")
	redisAddr := startRedis(t)
	script := [][]string{
		{"FLUSHALL"},
		// SET and its options.
		{"SET", "s", "v1"}, {"SET", "s", "v2", "GET"}, {"SET", "new", "x", "NX", "GET"}, {"SET", "s", "v3", "NX", "GET"},
		{"SET", "s", "v4", "XX", "GET"}, {"SET", "missing", "v", "XX", "GET"}, {"SET", "s", "v", "EX", "0"}, {"SET", "s", "v", "PX", "-5"},
		{"SET", "s", "v", "EX", "x"}, {"SET", "s", "v", "EX", "9999999999999999"}, {"SET", "s", "v", "KEEPTTL", "PX", "5"},
		{"SET", "e", "v", "EX", "100"}, {"TTL", "e"}, {"SET", "e", "w", "KEEPTTL"}, {"TTL", "e"}, {"SET", "e", "w"}, {"TTL", "e"},
		{"SETEX", "e", "100", "v"}, {"TTL", "e"}, {"SETEX", "e", "0", "v"}, {"PSETEX", "e", "-1", "v"}, {"SETEX", "e", "x", "v"},
		{"GETEX", "e", "PERSIST"}, {"TTL", "e"}, {"GETEX", "e", "EX", "50"}, {"TTL", "e"}, {"GETEX", "nokey", "EX", "5"},
		{"GETEX", "e", "EX", "5", "PX", "5"}, {"GETEX", "e", "BOGUS"}, {"GETEX", "e", "EX", "0"},
		{"GETSET", "e", "z"}, {"TTL", "e"}, {"GETSET", "nokey2", "z"}, {"GETDEL", "nokey2"}, {"GETDEL", "nokey2"},
		{"MSETNX", "m1", "a", "m2", "b"}, {"MSETNX", "m2", "c", "m3", "d"}, {"MGET", "m1", "m2", "m3"}, {"MSETNX", "m1"},
		// Counters.
		{"INCR", "n"}, {"INCRBY", "n", "41"}, {"DECR", "n"}, {"DECRBY", "n", "-10"}, {"INCRBY", "n", "x"}, {"INCR", "s"},
		{"SET", "big", "9223372036854775807"}, {"INCR", "big"}, {"DECRBY", "n", "-9223372036854775808"},
		{"SET", "sp", " 1"}, {"INCR", "sp"}, {"SET", "lead", "01"}, {"INCR", "lead"}, {"SET", "plus", "+1"}, {"INCR", "plus"},
		{"INCRBYFLOAT", "f", "1.5"}, {"INCRBYFLOAT", "f", "0.1"}, {"INCRBYFLOAT", "f", "-1.6"}, {"INCRBYFLOAT", "f", "x"},
		{"INCRBYFLOAT", "s", "1"}, {"SET", "fl", "5.0e3"}, {"INCRBYFLOAT", "fl", "2.0e2"}, {"INCRBYFLOAT", "fl", "inf"},
		{"SET", "ex1", "10", "EX", "100"}, {"INCR", "ex1"}, {"TTL", "ex1"},
		// Ranges and appends.
		{"APPEND", "ap", "hello"}, {"APPEND", "ap", " world"}, {"GET", "ap"}, {"STRLEN", "ap"}, {"STRLEN", "nokey"},
		{"GETRANGE", "ap", "0", "4"}, {"GETRANGE", "ap", "-5", "-1"}, {"GETRANGE", "ap", "5", "3"}, {"GETRANGE", "ap", "-100", "100"},
		{"GETRANGE", "ap", "-1", "-5"}, {"GETRANGE", "nokey", "0", "1"}, {"GETRANGE", "ap", "x", "1"}, {"SUBSTR", "ap", "0", "1"},
		{"SETRANGE", "ap", "6", "WORLD"}, {"GET", "ap"}, {"SETRANGE", "sr", "3", "ab"}, {"GET", "sr"}, {"SETRANGE", "sr", "-1", "x"},
		{"SETRANGE", "nokey3", "0", ""}, {"EXISTS", "nokey3"}, {"SETRANGE", "sr", "1", ""},
		// Bits.
		{"SETBIT", "b", "7", "1"}, {"SETBIT", "b", "7", "0"}, {"SETBIT", "b", "100", "1"}, {"GETBIT", "b", "100"}, {"GETBIT", "b", "1000"},
		{"SETBIT", "b", "-1", "1"}, {"SETBIT", "b", "1", "2"}, {"BITCOUNT", "b"}, {"SET", "bc", "foobar"}, {"BITCOUNT", "bc"},
		{"BITCOUNT", "bc", "1", "1"}, {"BITCOUNT", "bc", "-2", "-1"}, {"BITCOUNT", "bc", "5", "30", "BIT"}, {"BITCOUNT", "bc", "1"},
		{"BITCOUNT", "nokey"}, {"GET", "b"},
		// LCS.
		{"SET", "l1", "ohmytext"}, {"SET", "l2", "mynewtext"}, {"LCS", "l1", "l2"}, {"LCS", "l1", "l2", "LEN"}, {"LCS", "l1", "nokey"},
		{"LCS", "l1", "l2", "IDX"}, {"LCS", "l1", "l2", "IDX", "MINMATCHLEN", "4", "WITHMATCHLEN"}, {"LCS", "l1", "l2", "LEN", "IDX"},
		{"SETRANGE", "l1", "9223372036854775807", "A"}, {"SETBIT", "l1", "4294967296", "1"}, {"GETBIT", "l1", "4294967296"},
		// Keyspace.
		{"EXPIRE", "s", "100"}, {"TTL", "s"}, {"EXPIRE", "s", "50", "GT"}, {"EXPIRE", "s", "200", "GT"}, {"TTL", "s"},
		{"EXPIRE", "s", "300", "LT"}, {"EXPIRE", "s", "10", "LT"}, {"TTL", "s"}, {"EXPIRE", "s", "10", "NX"}, {"EXPIRE", "s", "20", "XX"},
		{"EXPIRE", "s", "10", "NX", "XX"}, {"EXPIRE", "s", "10", "GT", "LT"}, {"EXPIRE", "s", "10", "FOO"}, {"EXPIRE", "nokey", "10"},
		{"PERSIST", "s"}, {"PERSIST", "s"}, {"TTL", "s"}, {"EXPIRE", "s", "10", "XX"}, {"EXPIRE", "s", "10", "GT"}, {"EXPIRE", "s", "10", "LT"},
		{"TTL", "s"}, {"PEXPIRE", "s", "100000"}, {"EXPIRETIME", "nokey"}, {"PEXPIRETIME", "ap"}, {"EXPIREAT", "s", "1"}, {"EXISTS", "s"},
		{"EXPIRE", "x", "abc"}, {"PEXPIREAT", "ap", "x"},
		{"RENAME", "ap", "ap2"}, {"GET", "ap2"}, {"RENAME", "nokey", "x"}, {"RENAMENX", "ap2", "sr"}, {"RENAMENX", "ap2", "ap3"},
		{"RENAMENX", "nokey", "x"}, {"RENAME", "ap3", "ap3"}, {"EXISTS", "ap3"}, {"RENAMENX", "ap3", "ap3"},
		{"COPY", "ap3", "cp"}, {"COPY", "ap3", "cp"}, {"COPY", "ap3", "cp", "REPLACE"}, {"COPY", "nokey", "cp"}, {"COPY", "ap3", "cp", "DB", "3"},
		{"COPY", "ap3", "ap3"}, {"COPY", "ap3", "x", "DB", "99"}, {"COPY", "ap3", "x", "FOO"},
		{"MOVE", "cp", "2"}, {"MOVE", "cp", "2"}, {"EXISTS", "cp"}, {"MOVE", "nokey", "2"}, {"MOVE", "ap3", "0"}, {"MOVE", "ap3", "x"},
		{"SELECT", "2"}, {"GET", "cp"}, {"DBSIZE"}, {"SET", "cp", "other"}, {"SELECT", "0"}, {"SET", "cp", "zero"}, {"MOVE", "cp", "2"},
		{"SWAPDB", "0", "2"}, {"GET", "cp"}, {"SWAPDB", "0", "2"}, {"GET", "cp"}, {"SWAPDB", "0", "x"}, {"SWAPDB", "0", "99"},
		{"SELECT", "2"}, {"FLUSHDB"}, {"DBSIZE"}, {"SELECT", "0"}, {"FLUSHDB", "BOGUS"}, {"FLUSHALL", "ASYNC", "X"},
		{"TOUCH", "ap3", "nokey", "ap3"}, {"UNLINK", "ap3", "nokey"}, {"TYPE", "sr"}, {"OBJECT", "ENCODING", "n"},
		{"SET", "emb", "abc"}, {"OBJECT", "ENCODING", "emb"}, {"OBJECT", "ENCODING", "nokey"}, {"OBJECT", "FOO"},
		// The encoding flag: changed in place is raw until replaced.
		{"SET", "en", "1234"}, {"OBJECT", "ENCODING", "en"}, {"SETRANGE", "en", "0", "2"}, {"OBJECT", "ENCODING", "en"},
		{"EXPIRE", "en", "100"}, {"OBJECT", "ENCODING", "en"}, {"PERSIST", "en"}, {"GETEX", "en", "EX", "50"}, {"OBJECT", "ENCODING", "en"},
		{"COPY", "en", "en2"}, {"OBJECT", "ENCODING", "en2"}, {"RENAME", "en2", "en3"}, {"OBJECT", "ENCODING", "en3"},
		{"INCR", "en"}, {"OBJECT", "ENCODING", "en"}, {"APPEND", "en", "5"}, {"OBJECT", "ENCODING", "en"}, {"SET", "en", "7"},
		{"OBJECT", "ENCODING", "en"}, {"SETBIT", "en", "1", "1"}, {"OBJECT", "ENCODING", "en"}, {"APPEND", "ennew", "12"},
		{"OBJECT", "ENCODING", "ennew"}, {"SETRANGE", "ennew2", "0", "12"}, {"OBJECT", "ENCODING", "ennew2"},
		{"SELECT", "16"}, {"SELECT", "-1"}, {"SELECT", "x"},
		// Transactions.
		{"MULTI"}, {"SET", "t", "1"}, {"INCR", "t"}, {"GET", "t"}, {"EXEC"},
		{"MULTI"}, {"SET", "t"}, {"INCR", "t"}, {"EXEC"}, {"GET", "t"},
		{"MULTI"}, {"SET", "t", "x"}, {"INCR", "t"}, {"GET", "t"}, {"EXEC"},
		{"MULTI"}, {"MULTI"}, {"WATCH", "t"}, {"DISCARD"}, {"DISCARD"}, {"EXEC"},
		{"MULTI"}, {"NOSUCHCOMMAND"}, {"EXEC"},
		{"WATCH", "t"}, {"SET", "t", "mine"}, {"MULTI"}, {"GET", "t"}, {"EXEC"}, {"UNWATCH"},
		{"MULTI"}, {"SET", "r", "1"}, {"DEL", "r"}, {"GET", "r"}, {"EXEC"}, {"EXISTS", "r"},
		{"MULTI"}, {"SELECT", "3"}, {"SET", "indb3", "1"}, {"EXEC"}, {"GET", "indb3"}, {"SELECT", "0"}, {"GET", "indb3"},
		{"MULTI"}, {"EXEC"},
		// Misc.
		{"WAIT", "0", "0"}, {"ECHO", "x"}, {"CLIENT", "REPLY", "BOGUS"},
		{"FLUSHALL"}, {"DBSIZE"},
	}
	for _, proto := range []string{"2", "3"} {
		k, r := ts.dial(), (&testServer{t: t, addr: redisAddr}).dial()
		k.do("HELLO", proto)
		r.do("HELLO", proto)
		for _, args := range script {
			want, got := r.do(args...), k.do(args...)
			if got.String() != want.String() {
				t.Errorf("RESP%s %q:\nkvarray %v\nredis   %v", proto, args, got, want)
			}
		}
	}
}

// TestRESP3Replies checks the RESP3 types of replies whose shape the
// script above cannot show (maps, verbatim strings, null).
func TestRESP3Replies(t *testing.T) {
	ts := startServer(t, "")
	c := ts.dial()
	if r := c.do("HELLO", "3"); r.kind != '%' || len(r.elems) != 14 || r.elems[4].str != "proto" || r.elems[5].str != "3" {
		t.Fatalf("HELLO 3 = %v", r)
	}
	if r := c.do("GET", "nope"); r.kind != '_' {
		t.Errorf("GET of a missing key in RESP3 = %v, want _", r)
	}
	if r := c.do("CONFIG", "GET", "maxclients"); r.kind != '%' || len(r.elems) != 2 {
		t.Errorf("CONFIG GET in RESP3 = %v, want a map", r)
	}
	if r := c.do("INFO", "server"); r.kind != '=' || !strings.HasPrefix(r.str, "txt:# Server") {
		t.Errorf("INFO in RESP3 = %v, want a verbatim string", r)
	}
	if r := c.do("HELLO", "2"); r.kind != '*' || len(r.elems) != 14 {
		t.Errorf("HELLO 2 = %v", r)
	}
	if r := c.do("GET", "nope"); r.kind != '$' || !r.null {
		t.Errorf("GET of a missing key after HELLO 2 = %v, want $-1", r)
	}
	if r := c.do("HELLO", "3", "AUTH", "bob", "pw"); !r.isError() || !strings.HasPrefix(r.str, "WRONGPASS") {
		t.Errorf("HELLO 3 AUTH bob = %v", r)
	}
	if r := c.do("GET", "nope"); r.kind != '$' {
		t.Errorf("a failed HELLO 3 switched the protocol: %v", r)
	}
	if r := c.do("HELLO", "3", "AUTH", "default", "x", "SETNAME", "me"); r.kind != '%' {
		t.Errorf("HELLO 3 AUTH default SETNAME = %v", r)
	}
	if r := c.do("CLIENT", "GETNAME"); r.str != "me" {
		t.Errorf("CLIENT GETNAME after HELLO SETNAME = %v", r)
	}
	for _, args := range [][]string{{"CLIENT", "SETINFO", "LIB-NAME", "x"}, {"READONLY"}, {"SELECT", "0"}} {
		if r := c.do(args...); r.isError() {
			t.Errorf("%q: %v", args, r)
		}
	}
	if r := c.do("CLIENT", "MAINT_NOTIFICATIONS", "on"); r.str != "ERR unknown subcommand 'MAINT_NOTIFICATIONS'. Try CLIENT HELP." {
		t.Errorf("CLIENT MAINT_NOTIFICATIONS = %v", r)
	}
	if r := c.do("RESET"); r.str != "RESET" {
		t.Errorf("RESET = %v", r)
	}
	if r := c.do("GET", "nope"); r.kind != '$' {
		t.Errorf("RESET did not return to RESP2: %v", r)
	}
}

// TestDatabases: the number of databases is the server's option.
func TestDatabases(t *testing.T) {
	ts := startServer(t, "", WithDatabases(4))
	c := ts.dial()
	if r := c.do("SELECT", "3"); r.str != "OK" {
		t.Errorf("SELECT 3 of 4: %v", r)
	}
	if r := c.do("SELECT", "4"); r.str != "ERR DB index is out of range" {
		t.Errorf("SELECT 4 of 4: %v", r)
	}
	if r := c.do("CONFIG", "GET", "databases"); len(r.elems) != 2 || r.elems[1].str != "4" {
		t.Errorf("CONFIG GET databases = %v", r)
	}
	if r := c.do("SET", "k", "v"); r.str != "OK" {
		t.Fatal(r)
	}
	if r := c.do("INFO", "keyspace"); !strings.Contains(r.str, "db3:keys=1,expires=0") {
		t.Errorf("INFO keyspace = %q", r.str)
	}
}
