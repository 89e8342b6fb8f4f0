package script

import (
	"context"
	"strings"
	"testing"
)

// run evaluates body with Do answering every command with reply, and
// returns the script's reply in protocol proto.
func run(t *testing.T, e *Engine, body string, proto int, reply string) string {
	t.Helper()
	s, err := e.Load([]byte(body))
	if err != nil {
		return err.Error()
	}
	return string(e.Run(context.Background(), s, Call{Proto: proto, Do: func([][]byte, int) []byte { return []byte(reply) }}))
}

// TestConversions: command replies to Lua and Lua to replies, both
// protocols, as Redis 7 converts them (script_lua.c).
func TestConversions(t *testing.T) {
	e := New(Config{})
	for _, tc := range []struct {
		body  string
		proto int
		reply string // what the command answers
		want  string
	}{
		{"return 3.99", 2, "", ":3\r\n"},
		{"return -3.99", 2, "", ":-3\r\n"},
		{"return {1, 'a', nil, 2}", 2, "", "*2\r\n:1\r\n$1\r\na\r\n"},
		{"return redis.call('x')", 2, "*3\r\n:1\r\n$-1\r\n+OK\r\n", "*3\r\n:1\r\n$-1\r\n+OK\r\n"},
		{"return type(redis.call('x'))", 2, "$-1\r\n", "$7\r\nboolean\r\n"},
		{"return redis.call('x') == nil", 2, "_\r\n", ":1\r\n"},
		{"redis.setresp(3); return redis.call('x')", 3, "%1\r\n$1\r\nk\r\n,2.5\r\n", "%1\r\n$1\r\nk\r\n,2.5\r\n"},
		{"redis.setresp(3); return redis.call('x')", 2, "%1\r\n$1\r\nk\r\n,2.5\r\n", "*2\r\n$1\r\nk\r\n$3\r\n2.5\r\n"},
		{"redis.setresp(3); return redis.call('x')", 3, "~1\r\n$1\r\nm\r\n", "~1\r\n$1\r\nm\r\n"},
		{"redis.setresp(3); return redis.call('x')", 3, "#f\r\n", "#f\r\n"},
		{"return redis.call('x')", 3, "#t\r\n", ":1\r\n"}, // the script speaks RESP2: true is 1
		{"redis.setresp(3); return redis.call('x')", 3, "(123\r\n", "(123\r\n"},
		{"redis.setresp(3); return redis.call('x')", 3, "=8\r\ntxt:abcd\r\n", "=8\r\ntxt:abcd\r\n"},
		{"redis.setresp(3); return redis.call('x')", 3, "|1\r\n+a\r\n+b\r\n:7\r\n", ":7\r\n"},
		{"return redis.pcall('x')", 2, "-WRONGTYPE bad\r\n", "-WRONGTYPE bad\r\n"},
		{"return redis.pcall('x')['err']", 2, "-ERR bad\r\n", "$7\r\nERR bad\r\n"},
		{"return {err='x\\r\\ny'}", 2, "", "-x  y\r\n"},
		{"return redis.status_reply('a\\nb')", 2, "", "+a b\r\n"},
		{"return redis.error_reply('')", 2, "", "-ERR \r\n"},
		{"return cjson.encode({a={1,2,3}, b='/'})", 2, "", "$22\r\n{\"a\":[1,2,3],\"b\":\"\\/\"}\r\n"},
		{"return cjson.decode('[1,null,3]')[2] == cjson.null", 2, "", ":1\r\n"},
		{"return {bit.tobit(0xffffffff), bit.lshift(1, 31), bit.rshift(-1, 28), bit.tohex(-1)}", 2, "",
			"*4\r\n:-1\r\n:-2147483648\r\n:15\r\n$8\r\nffffffff\r\n"},
		{"return redis.call(1.5, 100000000000000000)", 2, "", ""},
	} {
		got := run(t, e, tc.body, tc.proto, tc.reply)
		if tc.want != "" && got != tc.want {
			t.Errorf("%s (RESP%d, reply %q) = %q, want %q", tc.body, tc.proto, tc.reply, got, tc.want)
		}
	}
	// Numbers passed to redis.call are %.17g.
	s, _ := e.Load([]byte("return redis.call(1.5, 100000000000000000, 0.1)"))
	var argv []string
	e.Run(context.Background(), s, Call{Proto: 2, Do: func(a [][]byte, _ int) []byte {
		for _, x := range a {
			argv = append(argv, string(x))
		}
		return []byte("+OK\r\n")
	}})
	if strings.Join(argv, " ") != "1.5 1e+17 0.10000000000000001" {
		t.Errorf("redis.call's arguments = %q", argv)
	}
}

// TestStop: a script stops when its context ends, and pcall cannot keep
// it going; the memory limit stops one that allocates without end.
func TestStop(t *testing.T) {
	e := New(Config{MaxMemory: 32 << 20})
	s, err := e.Load([]byte("while true do pcall(function() while true do end end) end"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	go cancel(ErrKilled)
	if got := string(e.Run(ctx, s, Call{Proto: 2})); got != "-ERR Script killed by user with SCRIPT KILL...\r\n" {
		t.Errorf("killed script = %q", got)
	}
	s, _ = e.Load([]byte("local t = {} local i = 0 while true do i = i + 1; t[i] = string.rep('x', 1024) .. i end"))
	if got := string(e.Run(context.Background(), s, Call{Proto: 2})); got != "-ERR Script exceeded the memory limit of scripts\r\n" {
		t.Errorf("script over the memory limit = %q", got)
	}
	s, _ = e.Load([]byte("return string.rep('x', 1e12)"))
	if got := string(e.Run(context.Background(), s, Call{Proto: 2})); !strings.Contains(got, "memory limit") {
		t.Errorf("string.rep past the limit = %q", got)
	}
}

// TestCache: the cache is bounded by its bodies' bytes, least recently
// used first out.
func TestCache(t *testing.T) {
	e := New(Config{MaxCacheBytes: 120})
	a, _ := e.Load([]byte("return 'a' -- " + strings.Repeat("x", 40)))
	b, _ := e.Load([]byte("return 'b' -- " + strings.Repeat("x", 40)))
	e.Get(a.SHA) // a is now the most recently used
	e.Load([]byte("return 'c' -- " + strings.Repeat("x", 40)))
	if e.Get(a.SHA) == nil || e.Get(b.SHA) != nil || e.Cached() != 2 {
		t.Errorf("after a third script: a %v, b %v, %d cached; want a kept, b dropped, 2", e.Get(a.SHA) != nil, e.Get(b.SHA) != nil, e.Cached())
	}
}
