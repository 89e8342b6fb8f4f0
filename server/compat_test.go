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
		// INCRBYFLOAT in long double, as Redis computes and prints it.
		{"SET", "lf", "0.1"}, {"INCRBYFLOAT", "lf", "0.2"}, {"SET", "lf", "3.14"}, {"INCRBYFLOAT", "lf", "1"},
		{"SET", "lf", "9223372036854775807"}, {"INCRBYFLOAT", "lf", "0"}, {"INCRBYFLOAT", "lf", "1_0"}, {"INCRBYFLOAT", "lf", "0x10"},
		{"SET", "lf", "10"}, {"INCRBYFLOAT", "lf", "0x10"}, {"INCRBYFLOAT", "lf", "0X1p-2"}, {"INCRBYFLOAT", "lf", "1e400"},
		{"INCRBYFLOAT", "lf", "-1e400"}, {"INCRBYFLOAT", "lf", "1e5000"}, {"INCRBYFLOAT", "lf", "1e-5000"}, {"INCRBYFLOAT", "lf", "+1.5"},
		{"INCRBYFLOAT", "lf", "--1"}, {"INCRBYFLOAT", "lf", " 1"}, {"INCRBYFLOAT", "lf", "1 "}, {"INCRBYFLOAT", "lf", "nan"},
		{"INCRBYFLOAT", "lf", "0b1"}, {"INCRBYFLOAT", "lf", ".5"}, {"INCRBYFLOAT", "lf", "5."}, {"INCRBYFLOAT", "lf", "-INFINITY"},
		{"INCRBYFLOAT", "lf", "1.7976931348623157e308"}, {"INCRBYFLOAT", "lf", "1.7976931348623157e308"}, {"INCRBYFLOAT", "lf", "1e-300"},
		{"SET", "lf", "-0.5"}, {"INCRBYFLOAT", "lf", "0.5"}, {"INCRBYFLOAT", "lf", "-1e-20"}, {"INCRBYFLOAT", "lf", "123456789.123456789"},
		{"SET", "lf", "1e4931"}, {"INCRBYFLOAT", "lf", "1e4931"},
		// Integer arguments as Redis's string2ll reads them.
		{"INCRBY", "n", "+1"}, {"INCRBY", "n", "01"}, {"INCRBY", "n", "-0"}, {"INCRBY", "n", "+0"}, {"INCRBY", "n", "0"},
		{"EXPIRE", "n", "+5"}, {"SETEX", "n", "01", "v"}, {"SET", "n", "v", "EX", "+1"}, {"GETRANGE", "ap", "+0", "1"},
		{"SETRANGE", "nn", "01", "x"}, {"SETBIT", "nn", "+1", "1"}, {"SELECT", "+1"}, {"SELECT", "-0"}, {"SCAN", "0", "COUNT", "+10"},
		{"MOVE", "n", "+1"}, {"COPY", "n", "n2", "DB", "01"}, {"SWAPDB", "+0", "1"},
		{"WAIT", "x", "0"}, {"WAIT", "0", "x"}, {"WAIT", "0", "-1"}, {"WAIT", "+0", "0"}, {"WAIT", "0", "0"},
		// BITCOUNT with negative indexes, start past end: 0 in Redis 7.0.
		{"SET", "bn", "foobar"}, {"BITCOUNT", "bn", "-1", "-2"}, {"BITCOUNT", "bn", "-1", "-2", "BIT"}, {"BITCOUNT", "nokey", "-1", "-2"},
		{"BITCOUNT", "bn", "-2", "-1"}, {"BITCOUNT", "bn", "2", "1"},
		// OBJECT ENCODING after APPEND of nothing (raw), SETRANGE of
		// nothing (unchanged) and INCRBYFLOAT to a fraction.
		{"SET", "oe", "abc"}, {"APPEND", "oe", ""}, {"OBJECT", "ENCODING", "oe"}, {"APPEND", "oe2", ""}, {"OBJECT", "ENCODING", "oe2"},
		{"SET", "oe4", "abc"}, {"SETRANGE", "oe4", "1", ""}, {"OBJECT", "ENCODING", "oe4"},
		{"SET", "oe3", "1"}, {"INCRBYFLOAT", "oe3", "0.5"}, {"OBJECT", "ENCODING", "oe3"},
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
	compareWithRedis(t, ts, redisAddr, script)
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

// TestStatsSameAsRedis: INFO commandstats' calls, rejected_calls and
// failed_calls, and INFO errorstats, count what Redis 7 counts for the same
// commands (a rejected call is refused before it runs: arity, an unknown
// command, a command queued in a transaction that aborts; a failed one ran
// and answered an error, inside EXEC too; a script's error reply counts
// once, as its command's if a command answered it, and fails the script).
func TestStatsSameAsRedis(t *testing.T) {
	ts := startServer(t, "")
	redisAddr := startRedis(t)
	script := [][]string{
		{"SET", "a"}, {"SET", "s", "x"}, {"INCR", "s"}, {"NOSUCH", "x"}, {"GET", "s"}, {"GET", "s", "x"},
		{"MULTI"}, {"SET", "t"}, {"EXEC"},
		{"MULTI"}, {"SET", "q", "x"}, {"INCR", "q"}, {"EXEC"},
		{"EXPIRE", "s", "x"}, {"SELECT", "99"}, {"INCRBYFLOAT", "s", "1"}, {"SETBIT", "s", "-1", "1"},
		{"EVAL", `return redis.error_reply("MY_CODE custom")`, "0"},
		{"EVAL", `return redis.error_reply("")`, "0"},
		{"EVAL", `return redis.call("INCR", "s")`, "0"},
		{"EVAL", `return redis.pcall("LPUSH", "s", "x")`, "0"},
		{"EVAL", `local r = redis.pcall("SELECT", "99") return 1`, "0"},
		{"EVAL", `return {1, redis.error_reply("NESTED in an array")}`, "0"},
		{"EVAL", `error("raised")`, "0"},
		{"EVAL", `return redis.call()`, "0"},
	}
	stats := func(c *rawConn) (map[string]string, string) {
		cmds := map[string]string{}
		for _, line := range strings.Split(c.do("INFO", "commandstats").str, "\r\n") {
			name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
			if !ok {
				continue
			}
			var kept []string
			for _, f := range strings.Split(rest, ",") {
				if !strings.HasPrefix(f, "usec") {
					kept = append(kept, f)
				}
			}
			cmds[name] = strings.Join(kept, ",")
		}
		return cmds, c.do("INFO", "errorstats").str
	}
	k, r := ts.dial(), (&testServer{t: t, addr: redisAddr}).dial()
	for _, c := range []*rawConn{k, r} {
		c.do("CONFIG", "RESETSTAT")
		for _, args := range script {
			c.do(args...)
		}
	}
	kc, ke := stats(k)
	rc, re := stats(r)
	for _, name := range []string{"set", "incr", "get", "multi", "exec", "expire", "select", "incrbyfloat", "setbit", "eval", "lpush"} {
		if kc[name] != rc[name] {
			t.Errorf("cmdstat_%s: kvarray %q, redis %q", name, kc[name], rc[name])
		}
	}
	if ke != re {
		t.Errorf("INFO errorstats:\nkvarray %q\nredis   %q", ke, re)
	}
}

// TestCollectionsSameAsRedis: TestSameAsRedis for hashes and sets (only
// replies whose order Redis fixes: a listpack hash's, an intset's).
func TestCollectionsSameAsRedis(t *testing.T) {
	ts := startServer(t, "")
	redisAddr := startRedis(t)
	script := [][]string{
		{"FLUSHALL"},
		{"HSET", "h", "a", "1", "b", "2"}, {"HSET", "h", "a", "3", "c", "4"}, {"HSET", "h", "x"}, {"HSET", "h"}, {"HMSET", "h", "d", "5"},
		{"HGET", "h", "a"}, {"HGET", "h", "zz"}, {"HGET", "nokey", "a"}, {"HMGET", "h", "a", "zz", "c"}, {"HMGET", "nokey", "a"},
		{"HGETALL", "h"}, {"HKEYS", "h"}, {"HVALS", "h"}, {"HGETALL", "nokey"}, {"HLEN", "h"}, {"HLEN", "nokey"},
		{"HSETNX", "h", "a", "x"}, {"HSETNX", "h", "e", "6"}, {"HEXISTS", "h", "e"}, {"HEXISTS", "h", "zz"}, {"HSTRLEN", "h", "e"},
		{"HSTRLEN", "h", "zz"}, {"HINCRBY", "h", "a", "10"}, {"HINCRBY", "h", "new", "-5"}, {"HINCRBY", "h", "a", "x"},
		{"HINCRBY", "h", "a", "9223372036854775807"}, {"HSET", "h", "f", "1.5"}, {"HINCRBY", "h", "f", "1"},
		{"HINCRBYFLOAT", "h", "f", "2.25"}, {"HINCRBYFLOAT", "h", "f", "x"}, {"HINCRBYFLOAT", "h", "f", "inf"},
		{"HINCRBYFLOAT", "h", "nf", "3"}, {"HSET", "h", "sp", " 1"}, {"HINCRBYFLOAT", "h", "sp", "1"},
		{"HDEL", "h", "a", "zz", "b"}, {"HDEL", "nokey", "a"}, {"HGETALL", "h"}, {"TYPE", "h"}, {"OBJECT", "ENCODING", "h"},
		{"HSCAN", "h", "0"}, {"HSCAN", "h", "0", "MATCH", "c*"}, {"HSCAN", "h", "0", "COUNT", "0"}, {"HSCAN", "h", "x"},
		{"HRANDFIELD", "nokey"}, {"HRANDFIELD", "nokey", "3"}, {"HRANDFIELD", "h", "0"}, {"HRANDFIELD", "h", "1", "BOGUS"},
		{"SET", "str", "v"}, {"HGET", "str", "a"}, {"HSET", "str", "a", "1"}, {"GET", "h"}, {"INCR", "h"}, {"APPEND", "h", "x"},
		{"STRLEN", "h"}, {"MGET", "h", "str"}, {"SET", "h2", "x"}, {"HSET", "h2x", "a", "1"}, {"SET", "h2x", "over"}, {"GET", "h2x"},
		{"EXPIRE", "h", "100"}, {"TTL", "h"}, {"PERSIST", "h"}, {"TTL", "h"}, {"RENAME", "h", "h3"}, {"HGETALL", "h3"},
		{"COPY", "h3", "h4"}, {"HGETALL", "h4"}, {"EXISTS", "h3", "h4", "h"}, {"DEL", "h3", "h4"},
		// Sets.
		{"SADD", "i", "3", "1", "2", "2"}, {"SMEMBERS", "i"}, {"OBJECT", "ENCODING", "i"}, {"SCARD", "i"}, {"SCARD", "nokey"},
		{"SISMEMBER", "i", "2"}, {"SISMEMBER", "i", "9"}, {"SMISMEMBER", "i", "1", "9"}, {"SMISMEMBER", "i"},
		{"SADD", "j", "2", "3", "4"}, {"SINTER", "i", "j"}, {"SUNION", "i", "j"}, {"SDIFF", "i", "j"}, {"SINTER", "i", "nokey"},
		{"SINTERCARD", "2", "i", "j"}, {"SINTERCARD", "2", "i", "j", "LIMIT", "1"}, {"SINTERCARD", "0", "i"}, {"SINTERCARD", "3", "i"},
		{"SINTERCARD", "1", "i", "LIMIT", "-1"}, {"SINTERCARD", "1", "i", "FOO"},
		{"SINTERSTORE", "d", "i", "j"}, {"SMEMBERS", "d"}, {"SUNIONSTORE", "d", "i", "j"}, {"SMEMBERS", "d"},
		{"SDIFFSTORE", "d", "i", "i"}, {"EXISTS", "d"}, {"SET", "d", "str"}, {"SUNIONSTORE", "d", "i"}, {"TYPE", "d"},
		{"SREM", "i", "1", "9"}, {"SMEMBERS", "i"}, {"SMOVE", "i", "j", "2"}, {"SMOVE", "i", "j", "9"}, {"SMOVE", "nokey", "j", "2"},
		{"SMOVE", "j", "str", "3"}, {"SMOVE", "j", "j", "3"}, {"SMEMBERS", "j"}, {"SADD", "j", "x"}, {"OBJECT", "ENCODING", "j"},
		{"SREM", "j", "x"}, {"OBJECT", "ENCODING", "j"}, {"SPOP", "nokey"}, {"SPOP", "nokey", "2"}, {"SPOP", "j", "-1"},
		{"SRANDMEMBER", "nokey"}, {"SRANDMEMBER", "nokey", "3"}, {"SRANDMEMBER", "j", "0"}, {"SRANDMEMBER", "j", "x"},
		{"SADD", "one", "a"}, {"SPOP", "one"}, {"EXISTS", "one"}, {"SADD", "one", "a"}, {"SRANDMEMBER", "one", "-2"},
		{"SPOP", "one", "5"}, {"SSCAN", "i", "0"}, {"SSCAN", "nokey", "0"}, {"SADD", "str", "a"}, {"SMEMBERS", "str"},
		{"SINTER", "i", "str"}, {"SINTERSTORE", "d2", "str"}, {"TYPE", "i"}, {"GET", "i"},
		{"MULTI"}, {"HSET", "tx", "a", "1"}, {"HGET", "tx", "a"}, {"SADD", "txs", "1"}, {"SCARD", "txs"}, {"EXEC"},
		{"FLUSHALL"},
	}
	compareWithRedis(t, ts, redisAddr, script)
}

// compareWithRedis runs script on kvarray and on the redis-server at
// redisAddr, in RESP2 and then RESP3, and reports every reply that differs.
func compareWithRedis(t *testing.T, ts *testServer, redisAddr string, script [][]string) {
	t.Helper()
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

// TestEmptyKeySameAsRedis: the empty key is a key like any other, of
// every type, listed by KEYS and SCAN, with a TTL.
func TestEmptyKeySameAsRedis(t *testing.T) {
	ts := startServer(t, "")
	redisAddr := startRedis(t)
	compareWithRedis(t, ts, redisAddr, [][]string{
		{"FLUSHALL"}, {"GET", ""}, {"EXISTS", ""}, {"SET", "", "v"}, {"GET", ""}, {"EXISTS", ""}, {"STRLEN", ""},
		{"APPEND", "", "w"}, {"GET", ""}, {"KEYS", "*"}, {"SCAN", "0"}, {"DBSIZE"}, {"EXPIRE", "", "100"}, {"TTL", ""},
		{"RENAME", "", "x"}, {"GET", "x"}, {"RENAME", "x", ""}, {"TYPE", ""}, {"DEL", ""}, {"EXISTS", ""},
		{"HSET", "", "", ""}, {"HGET", "", ""}, {"HGETALL", ""}, {"TYPE", ""}, {"DEL", ""},
		{"SADD", "", ""}, {"SISMEMBER", "", ""}, {"SMEMBERS", ""}, {"TYPE", ""}, {"DEL", ""}, {"DBSIZE"},
	})
}
