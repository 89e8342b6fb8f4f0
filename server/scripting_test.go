package server

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestScriptEval: EVAL, EVALSHA and SCRIPT through go-redis, with
// Redis's conversions and errors.
func TestScriptEval(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	rdb := ts.client(func(o *redis.Options) { o.Protocol = 2 })
	c := ts.dial()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"EVAL", "return redis.call('set', KEYS[1], ARGV[1])", "1", "k", "v"}, "OK"},
		{[]string{"EVAL", "return redis.call('get', KEYS[1])", "1", "k"}, "v"},
		{[]string{"EVAL", "return {1, 2.9, 'x', {true, false}, nil, 7}", "0"}, "[1 2 x [1 nil]]"},
		{[]string{"EVAL", "return redis.call('incr', 'k')", "0"}, "-ERR value is not an integer or out of range script: f_*, on @user_script:1."},
		{[]string{"EVAL", "return redis.pcall('incr', 'k')", "0"}, "-ERR value is not an integer or out of range"},
		{[]string{"EVAL", "return redis.call('nosuch')", "0"}, "-ERR Unknown Redis command called from script script: *"},
		{[]string{"EVAL", "return redis.call('get')", "0"}, "-ERR Wrong number of args calling Redis command from script script: *"},
		{[]string{"EVAL", "return redis.call('eval', 'return 1', '0')", "0"}, "-ERR This Redis command is not allowed from script script: *"},
		{[]string{"EVAL", "return redis.call('multi')", "0"}, "-ERR This Redis command is not allowed from script script: *"},
		{[]string{"EVAL", "a = 1", "0"}, "-ERR user_script:1: Attempt to modify a readonly table script: *"},
		{[]string{"EVAL", "return b", "0"}, "-ERR user_script:1: Script attempted to access nonexistent global variable 'b' script: *"},
		{[]string{"EVAL", "return dofile('/etc/passwd')", "0"}, "-ERR user_script:1: Script attempted to access nonexistent global variable 'dofile' script: *"},
		{[]string{"EVAL", "return os.time()", "0"}, "-ERR user_script:1: Script attempted to access nonexistent global variable 'os' script: *"},
		{[]string{"EVAL", "return io", "0"}, "-ERR user_script:1: Script attempted to access nonexistent global variable 'io' script: *"},
		{[]string{"EVAL", "return redis.error_reply('MY_ERR custom msg')", "0"}, "-MY_ERR custom msg"},
		{[]string{"EVAL", "return redis.status_reply('FINE')", "0"}, "FINE"},
		{[]string{"EVAL", "return cjson.encode({1, 'a', {x=1}})", "0"}, `[1,"a",{"x":1}]`},
		{[]string{"EVAL", "return cjson.decode(ARGV[1]).a[2]", "0", `{"a":[1,2]}`}, "2"},
		{[]string{"EVAL", "return bit.bxor(5, 3)", "0"}, "6"},
		{[]string{"EVAL", "return redis.sha1hex('Pizza & Mandolino')", "0"}, "74822d82031af7493c20eefa13bd07ec4fada82f"},
		{[]string{"EVAL", "return 1", "2", "a"}, "-ERR Number of keys can't be greater than number of args"},
		{[]string{"EVAL", "return 1", "-1"}, "-ERR Number of keys can't be negative"},
		{[]string{"EVAL", "return 1", "x"}, "-ERR value is not an integer or out of range"},
		{[]string{"EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", "0"}, "-NOSCRIPT No matching script. Please use EVAL."},
		{[]string{"EVALSHA", "short", "0"}, "-NOSCRIPT No matching script. Please use EVAL."},
		{[]string{"EVAL_RO", "return redis.call('set', 'x', 1)", "0"}, "-ERR Write commands are not allowed from read-only scripts. script: *"},
		{[]string{"EVAL", "#!lua flags=no-writes\nreturn redis.call('del', 'x')", "0"}, "-ERR Write commands are not allowed from read-only scripts. script: *"},
		{[]string{"EVAL_RO", "#!lua\nreturn 1", "0"}, "-ERR Can not execute a script with write flag using *_ro command."},
		{[]string{"EVAL", "#!lua flags=bogus\nreturn 1", "0"}, "-ERR Unexpected flag in script shebang: bogus"},
		{[]string{"EVAL", "#!python\nreturn 1", "0"}, "-ERR Unexpected engine in script shebang: #!python"},
		{[]string{"EVAL", "return +", "0"}, "-ERR Error compiling script (new function): *"},
		{[]string{"EVAL", "redis.call('select', 1); redis.call('set', 'indb1', 'y'); return redis.call('get', 'indb1')", "0"}, "y"},
		{[]string{"GET", "indb1"}, "nil"},
		{[]string{"SCRIPT", "FLUSH", "bad"}, "-ERR SCRIPT FLUSH only support SYNC|ASYNC option"},
		{[]string{"SCRIPT", "KILL"}, "-NOTBUSY No scripts in execution right now."},
		{[]string{"SCRIPT", "LOAD"}, "-ERR wrong number of arguments for 'script|load' command"},
		{[]string{"SCRIPT", "NOPE"}, "-ERR unknown subcommand 'NOPE'. Try SCRIPT HELP."},
	} {
		got := shown(c.do(tc.args...))
		if !match(tc.want, got) {
			t.Errorf("%q = %q, want %q", tc.args, got, tc.want)
		}
	}
	sha, err := rdb.ScriptLoad(ctx, "return ARGV[1] .. KEYS[1]").Result()
	if err != nil || sha != "a0b3c7b4d3b2e6b8d3e1ff3c3e8d6dba1fb2ef79" && len(sha) != 40 {
		t.Fatalf("SCRIPT LOAD = %q, %v", sha, err)
	}
	if v, err := rdb.EvalSha(ctx, strings.ToUpper(sha), []string{"b"}, "a").Result(); err != nil || v != "ab" {
		t.Errorf("EVALSHA = %v, %v", v, err)
	}
	if ex, _ := rdb.ScriptExists(ctx, sha, "0000000000000000000000000000000000000000").Result(); len(ex) != 2 || !ex[0] || ex[1] {
		t.Errorf("SCRIPT EXISTS = %v", ex)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.EvalSha(ctx, sha, nil).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT") {
		t.Errorf("EVALSHA after SCRIPT FLUSH: %v", err)
	}
	// go-redis's Script: EVALSHA, then EVAL on NOSCRIPT.
	incrBy := redis.NewScript("return redis.call('incrby', KEYS[1], ARGV[1])")
	for range 2 {
		if err := incrBy.Run(ctx, rdb, []string{"n"}, 5).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := rdb.Get(ctx, "n").Int(); n != 10 {
		t.Errorf("n = %d after two Script.Run, want 10", n)
	}
}

// shown shows a reply compactly: scalars bare, errors "-msg", RESP3
// types with their mark, nulls "nil".
func shown(r reply) string {
	switch {
	case r.null:
		return "nil"
	case r.kind == '*' || r.kind == '%' || r.kind == '~':
		parts := make([]string, len(r.elems))
		for i, e := range r.elems {
			parts[i] = shown(e)
		}
		mark := ""
		if r.kind != '*' {
			mark = string(r.kind)
		}
		return mark + "[" + strings.Join(parts, " ") + "]"
	case r.kind == '-' || r.kind == ',' || r.kind == '#':
		return string(r.kind) + r.str
	}
	return r.str
}

// match is a glob with * only.
func match(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for i, p := range parts[1:] {
		j := strings.Index(s, p)
		if j < 0 || i == len(parts)-2 && !strings.HasSuffix(s, p) {
			return false
		}
		s = s[j+len(p):]
	}
	return true
}

// TestScriptResp3: the conversions under RESP3: maps, sets, doubles,
// booleans and nulls, both ways.
func TestScriptResp3(t *testing.T) {
	ts := startServer(t, "")
	c := ts.dial()
	c.do("HELLO", "3")
	for _, tc := range []struct{ script, want string }{
		{"return {double=3.5}", ",3.5"},
		{"return {map={a=1}}", "%[a 1]"},
		{"return {set={a=true}}", "~[a]"},
		{"return true", "1"},
		{"return false", "nil"},
		{"redis.setresp(3); return true", "#t"},
		{"redis.setresp(3); return redis.call('get', 'none') == nil", "#t"},
		{"return redis.call('get', 'none') == false", "1"},
		{"redis.setresp(3); return {map={k=false}}", "%[k #f]"},
		{"return nil", "nil"},
	} {
		if got := shown(c.do("EVAL", tc.script, "0")); !match(tc.want, got) {
			t.Errorf("%q = %q, want %q", tc.script, got, tc.want)
		}
	}
}

// TestScriptAtomic: a script's reads see its own writes, no other
// client's command interleaves with it, and scripted read-modify-writes
// from many clients lose nothing.
func TestScriptAtomic(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	rdb := ts.client()
	if v, err := rdb.Eval(ctx, "redis.call('set', 'x', 'a'); redis.call('append', 'x', 'b'); redis.call('del', 'y'); return {redis.call('get', 'x'), redis.call('exists', 'y'), redis.call('dbsize')}", nil).Result(); err != nil || fmt.Sprint(v) != "[ab 0 1]" {
		t.Errorf("own writes: %v, %v", v, err)
	}
	// A script that reads, waits, then writes: a counter over many clients
	// is exact.
	const clients, each = 4, 25
	incr := redis.NewScript("local v = tonumber(redis.call('get', KEYS[1]) or '0'); redis.call('set', KEYS[1], v + 1); return v + 1")
	var wg sync.WaitGroup
	for range clients {
		cl := ts.client()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if err := incr.Run(ctx, cl, []string{"ctr"}).Err(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n, _ := rdb.Get(ctx, "ctr").Int(); n != clients*each {
		t.Errorf("ctr = %d, want %d", n, clients*each)
	}
	// A script's writes are not visible until it ends: a reader running
	// while a slow script has written one key of two sees neither or both.
	done := make(chan struct{})
	go func() {
		defer close(done)
		rdb.Eval(ctx, "redis.call('set', 'p', '1'); local t = redis.call('time'); local s = tonumber(t[1]) * 1e6 + tonumber(t[2]); repeat local n = redis.call('time') until tonumber(n[1]) * 1e6 + tonumber(n[2]) > s + 200000; redis.call('set', 'q', '1'); return 1", nil)
	}()
	for i := 0; ; i++ {
		vals, err := rdb.MGet(ctx, "p", "q").Result()
		if err != nil {
			t.Fatal(err)
		}
		if (vals[0] == nil) != (vals[1] == nil) {
			t.Fatalf("a reader saw half a script's writes: %v", vals)
		}
		select {
		case <-done:
			if vals[0] == nil {
				continue
			}
			return
		default:
		}
	}
}

// TestScriptMulti: EVAL inside MULTI runs in EXEC, its writes part of the
// transaction; WATCH sees a script's writes.
func TestScriptMulti(t *testing.T) {
	ts := startServer(t, "")
	c := ts.dial()
	c.do("MULTI")
	c.do("SET", "m", "1")
	if r := c.do("EVAL", "return redis.call('incr', 'm')", "0"); shown(r) != "QUEUED" {
		t.Fatalf("EVAL in MULTI = %v", r)
	}
	if r := shown(c.do("EXEC")); r != "[OK 2]" {
		t.Errorf("EXEC = %s, want [OK 2]", r)
	}
	other := ts.dial()
	c.do("WATCH", "w")
	other.do("EVAL", "return redis.call('set', 'w', 'x')", "0")
	c.do("MULTI")
	c.do("SET", "w", "y")
	if r := c.do("EXEC"); !r.null {
		t.Errorf("EXEC after a script wrote a watched key = %v, want null", r)
	}
	// A script that only reads the watched key does not abort EXEC.
	c.do("WATCH", "w")
	other.do("EVAL", "return redis.call('get', 'w')", "0")
	c.do("MULTI")
	c.do("SET", "w", "z")
	if r := shown(c.do("EXEC")); r != "[OK]" {
		t.Errorf("EXEC = %s, want [OK]", r)
	}
}

// TestScriptBusy: past busy-reply-threshold other clients get BUSY;
// SCRIPT KILL stops a script that has not written, and refuses one that
// has (UNKILLABLE), which then ends with all its writes.
func TestScriptBusy(t *testing.T) {
	ts := startServer(t, "")
	admin := ts.dial()
	if r := shown(admin.do("CONFIG", "SET", "busy-reply-threshold", "50")); r != "OK" {
		t.Fatalf("CONFIG SET = %s", r)
	}
	runner := ts.dial()
	runner.send(encode("EVAL", "while true do end", "0"))
	other := ts.dial()
	var r reply
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if r = other.do("PING"); r.isError() {
			break
		}
	}
	if shown(r) != "-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE." {
		t.Fatalf("PING during a long script = %s", r)
	}
	if r := shown(other.do("SCRIPT", "KILL")); r != "OK" {
		t.Fatalf("SCRIPT KILL = %s", r)
	}
	if r := shown(runner.read()); !match("-ERR Script killed by user with SCRIPT KILL...*", r) {
		t.Errorf("killed script's reply = %s", r)
	}
	if r := shown(other.do("PING")); r != "PONG" {
		t.Errorf("PING after the kill = %s", r)
	}

	// A script that wrote cannot be killed; it ends by itself with all of
	// its writes.
	// (It runs for one to two seconds of the server's clock.)
	runner.send(encode("EVAL", "redis.call('set', 'w1', '1'); local s = tonumber(redis.call('time')[1]); repeat until tonumber(redis.call('time')[1]) >= s + 2; redis.call('set', 'w2', '2'); return 7", "0"))
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if r = other.do("SCRIPT", "KILL"); strings.HasPrefix(shown(r), "-UNKILLABLE") {
			break
		}
	}
	if !strings.HasPrefix(shown(r), "-UNKILLABLE Sorry the script already executed write commands") {
		t.Errorf("SCRIPT KILL of a script that wrote = %s", r)
	}
	if r := shown(runner.read()); r != "7" {
		t.Errorf("the unkillable script's reply = %s", r)
	}
	if r := shown(other.do("MGET", "w1", "w2")); r != "[1 2]" {
		t.Errorf("its writes = %s, want [1 2]", r)
	}
}

// TestFunctions: FUNCTION LOAD / LIST / DELETE / DUMP / RESTORE / STATS
// and FCALL / FCALL_RO; the libraries survive a restart (stored on the
// array).
func TestFunctions(t *testing.T) {
	ts := startServer(t, "")
	lib := "#!lua name=mylib\n" +
		"redis.register_function('incr2', function(keys, args) return redis.call('incrby', keys[1], 2) end)\n" +
		"redis.register_function{function_name='peek', callback=function(keys) return redis.call('get', keys[1]) end, flags={'no-writes'}, description='reads'}"
	c := ts.dial()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"FUNCTION", "LOAD", lib}, "mylib"},
		{[]string{"FUNCTION", "LOAD", lib}, "-ERR Library 'mylib' already exists"},
		{[]string{"FUNCTION", "LOAD", "REPLACE", lib}, "mylib"},
		{[]string{"FUNCTION", "LOAD", "return 1"}, "-ERR Missing library metadata"},
		{[]string{"FUNCTION", "LOAD", "#!lua name=x\nreturn 1"}, "-ERR No functions registered"},
		{[]string{"FUNCTION", "LOAD", "#!lua name=y\nredis.register_function('incr2', function() end)"}, "-ERR Function incr2 already exists"},
		{[]string{"FUNCTION", "LOAD", "#!lua name=z\nredis.call('set', 'a', 1)"}, "-ERR Error registering functions: *"},
		{[]string{"FCALL", "incr2", "1", "f"}, "2"},
		{[]string{"FCALL", "incr2", "1", "f"}, "4"},
		{[]string{"FCALL_RO", "peek", "1", "f"}, "4"},
		{[]string{"FCALL_RO", "incr2", "1", "f"}, "-ERR Can not execute a script with write flag using *_ro command."},
		{[]string{"FCALL", "nosuch", "0"}, "-ERR Function not found"},
		{[]string{"FCALL", "incr2", "x"}, "-ERR Bad number of keys provided"},
		{[]string{"FUNCTION", "LIST"}, "[[library_name mylib engine LUA functions [[name incr2 description nil flags []] [name peek description reads flags [no-writes]]]]]"},
		{[]string{"FUNCTION", "STATS"}, "[running_script nil engines [LUA [libraries_count 1 functions_count 2]]]"},
		{[]string{"FUNCTION", "DELETE", "nolib"}, "-ERR Library not found"},
	} {
		if got := shown(c.do(tc.args...)); !match(tc.want, got) {
			t.Errorf("%.40q = %q, want %q", tc.args, got, tc.want)
		}
	}
	dump := c.do("FUNCTION", "DUMP").str
	ts.restart()
	c = ts.dial()
	if r := shown(c.do("FCALL", "incr2", "1", "f")); r != "6" {
		t.Fatalf("FCALL after a restart = %s", r)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"FUNCTION", "RESTORE", dump}, "-ERR Library mylib already exists"},
		{[]string{"FUNCTION", "RESTORE", "garbage"}, "-ERR DUMP payload version or checksum are wrong"},
		{[]string{"FUNCTION", "DELETE", "mylib"}, "OK"},
		{[]string{"FCALL", "incr2", "1", "f"}, "-ERR Function not found"},
		{[]string{"FUNCTION", "RESTORE", dump}, "OK"},
		{[]string{"FCALL", "incr2", "1", "f"}, "8"},
		{[]string{"FUNCTION", "FLUSH"}, "OK"},
		{[]string{"FUNCTION", "LIST"}, "[]"},
	} {
		if got := shown(c.do(tc.args...)); !match(tc.want, got) {
			t.Errorf("%.40q = %q, want %q", tc.args, got, tc.want)
		}
	}
	ts.restart()
	if r := shown(ts.dial().do("FUNCTION", "LIST")); r != "[]" {
		t.Errorf("FUNCTION LIST after FLUSH and a restart = %s", r)
	}
}

// TestScriptPermit: a script's commands pass the same permission check
// as the calling user's own: a data user's script cannot FLUSHALL, an
// admin's can; a script needs an authenticated connection.
func TestScriptPermit(t *testing.T) {
	ts := startServer(t, "", WithAuth("s3cret", User{Name: "app", Password: "app-pw"}, User{Name: "ops", Password: "ops-pw", Admin: true}))
	c := ts.dial()
	if r := shown(c.do("EVAL", "return 1", "0")); r != "-NOAUTH Authentication required." {
		t.Errorf("EVAL before AUTH = %s", r)
	}
	c.do("AUTH", "app", "app-pw")
	c.do("SET", "k", "v")
	if r := shown(c.do("EVAL", "return redis.pcall('flushall')", "0")); r != "-ERR The user executing the script can't run this command or subcommand" {
		t.Errorf("a data user's script running FLUSHALL = %s", r)
	}
	if r := shown(c.do("GET", "k")); r != "v" {
		t.Errorf("k = %s after the refused FLUSHALL", r)
	}
	c.do("AUTH", "ops", "ops-pw")
	if r := shown(c.do("EVAL", "return redis.call('flushall')", "0")); r != "OK" {
		t.Errorf("an admin's script running FLUSHALL = %s", r)
	}
	if r := shown(c.do("GET", "k")); r != "nil" {
		t.Errorf("k = %s after the admin's FLUSHALL", r)
	}
}

// TestScriptStructSameAsRedis: the struct library packs and unpacks the
// same bytes and numbers as Redis's (lua_struct.c on x86-64), and
// redis.acl_check_cmd answers as Redis does, compared with a real
// redis-server.
func TestScriptStructSameAsRedis(t *testing.T) {
	ts := startServer(t, "")
	redisAddr := startRedis(t)
	var script [][]string
	for _, body := range []string{
		"return struct.pack('>I2', 258)",
		"return struct.pack('<i', -2)",
		"return struct.pack('bBhHlLTiI', -1, 255, -300, 65000, -5, 7, 9, -70000, 70000)",
		"return struct.pack('!4 b i d', 1, 2, 3.5)",
		"return struct.pack('!b i8 h', 1, -3, 4)",
		"return struct.pack('>i16', -1)",
		"return struct.pack('<i3', 8388608)",
		"return struct.pack('fd', 1.5, -0.1)",
		"return struct.pack('>fd', 1.5, -0.1)",
		"return struct.pack('sc3c0x', 'ab', 'xyzw', 'tail')",
		"return {struct.unpack('>I2', '\\1\\2')}",
		"return {struct.unpack('<i', struct.pack('<i', -2))}",
		"return {struct.unpack('bBhH', struct.pack('bBhH', -1, 255, -300, 65000))}",
		"return {struct.unpack('!4 b i', struct.pack('!4 b i', 1, 2))}",
		"return {struct.unpack('>i3', struct.pack('>i3', -5))}",
		"return {struct.unpack('s s', 'ab\\0cd\\0')}",
		"return {struct.unpack('b c0', '\\3abcdef')}",
		"return {struct.unpack('c2', 'abcdef', 3)}",
		"return tostring(struct.unpack('d', struct.pack('d', 0.1)))",
		"return tostring(struct.unpack('>f', struct.pack('>f', 1.5)))",
		"return {struct.size('bhilTfd'), struct.size('!8 b d'), struct.size('!2 b i'), struct.size('c5 x'), struct.size('i7')}",
		"return type(struct)",
	} {
		script = append(script, []string{"EVAL", body, "0"})
	}
	compareWithRedis(t, ts, redisAddr, script)

	c := ts.dial()
	for _, tc := range []struct{ body, want string }{
		{"return struct.pack('q', 1)", "-ERR *invalid format option 'q'*"},
		{"return struct.unpack('i', 'ab')", "-ERR *data string too short*"},
		{"return struct.unpack('s', 'ab')", "-ERR *unfinished string in data*"},
		{"return struct.size('s')", "-ERR *option 's' has no fixed size*"},
		{"return struct.pack('!3 i', 1)", "-ERR *alignment 3 is not a power of 2*"},
		{"return struct.pack('i33', 1)", "-ERR *integral size 33 is larger than limit of 32*"},
		{"return struct.unpack('c0', 'ab')", "-ERR *format 'c0' needs a previous size*"},
		{"return struct.pack('c3', 'ab')", "-ERR *string too short*"},
		{"return struct.unpack('i', 'abcd', 0)", "-ERR *offset must be 1 or greater*"},
		{"return redis.acl_check_cmd('nosuch', 'a')", "-ERR *Invalid command passed to redis.acl_check_cmd()*"},
		{"return redis.acl_check_cmd()", "-ERR *Please specify at least one argument*"},
		{"return redis.acl_check_cmd('get', 'k')", "1"},
	} {
		if got := shown(c.do("EVAL", tc.body, "0")); !match(tc.want, got) {
			t.Errorf("%s = %q, want %q", tc.body, got, tc.want)
		}
	}
	// A user who may run SET on x* only.
	for _, args := range [][]string{{"ACL", "SETUSER", "bob", "on", ">123", "+@scripting", "+set", "~x*"}} {
		if r := shown(c.do(args...)); r != "OK" {
			t.Fatalf("%q = %s", args, r)
		}
	}
	bob := ts.dial()
	if r := shown(bob.do("AUTH", "bob", "123")); r != "OK" {
		t.Fatalf("AUTH bob = %s", r)
	}
	for _, tc := range []struct{ body, want string }{
		{"return redis.acl_check_cmd('set', 'xx', 1)", "1"},
		{"return redis.acl_check_cmd('hset', 'xx', 'f', 1)", "nil"},
		{"return redis.acl_check_cmd('set', 'yy', 1)", "nil"},
	} {
		if got := shown(bob.do("EVAL", tc.body, "0")); got != tc.want {
			t.Errorf("bob: %s = %q, want %q", tc.body, got, tc.want)
		}
	}
}

// TestScriptsConcurrent: scripts from many clients at once, over a few
// keys, while plain commands run too: a script's commit overlaps the
// next script's Lua (scriptpipe.go), yet every scripted read-modify-write
// sees the one before it on its key (counters exact), a script that moves
// a unit from one key to another never lets a reader see the unit in
// both or neither (their sum stays constant), and scripts' writes notify
// keyspace subscribers.
func TestScriptsConcurrent(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	rdb := ts.client()
	if err := rdb.ConfigSet(ctx, "notify-keyspace-events", "KEA").Err(); err != nil {
		t.Fatal(err)
	}
	sub := rdb.PSubscribe(ctx, "__keyevent@0__:set")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	const keys, clients, each, total = 4, 8, 40, 1000
	if err := rdb.MSet(ctx, "a", total, "b", 0).Err(); err != nil {
		t.Fatal(err)
	}
	incr := redis.NewScript("local v = tonumber(redis.call('get', KEYS[1]) or '0'); redis.call('set', KEYS[1], v + 1); return v + 1")
	move := redis.NewScript("local a = tonumber(redis.call('get', KEYS[1])); local b = tonumber(redis.call('get', KEYS[2])); redis.call('set', KEYS[1], a - 1); redis.call('set', KEYS[2], b + 1); return a - 1")
	var wg sync.WaitGroup
	errs := make(chan error, clients+1)
	for i := range clients {
		cl := ts.client()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				var err error
				if i%2 == 0 {
					err = incr.Run(ctx, cl, []string{fmt.Sprintf("ctr%d", j%keys)}).Err()
				} else {
					from, to := "a", "b"
					if j%2 == 1 {
						from, to = "b", "a"
					}
					err = move.Run(ctx, cl, []string{from, to}).Err()
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	stop := make(chan struct{})
	reader := ts.client()
	var readerDone sync.WaitGroup
	readerDone.Add(1)
	go func() {
		defer readerDone.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			vals, err := reader.MGet(ctx, "a", "b").Result()
			if err != nil {
				errs <- err
				return
			}
			a, _ := strconv.Atoi(vals[0].(string))
			b, _ := strconv.Atoi(vals[1].(string))
			if a+b != total {
				errs <- fmt.Errorf("a reader saw a %d + b %d = %d, want %d: half a script", a, b, a+b, total)
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	readerDone.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for k := range keys {
		if n, _ := rdb.Get(ctx, fmt.Sprintf("ctr%d", k)).Int(); n != clients/2*each/keys {
			t.Errorf("ctr%d = %d, want %d", k, n, clients/2*each/keys)
		}
	}
	if n, err := rdb.Eval(ctx, "return tonumber(redis.call('get', 'a')) + tonumber(redis.call('get', 'b'))", nil).Int(); err != nil || n != total {
		t.Errorf("a + b = %d, %v; want %d", n, err, total)
	}
	select {
	case m := <-sub.Channel():
		if m.Payload == "" {
			t.Errorf("keyspace event without a key: %+v", m)
		}
	case <-time.After(5 * time.Second):
		t.Error("no keyspace event for a script's SET")
	}
}
