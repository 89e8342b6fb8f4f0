package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// The client tests drive the server with the Redis clients people use, on
// their default settings (all but redis-cli speak RESP3 by default):
// connect, binary GET/SET, pipeline, transaction with WATCH, expiry,
// INCR, a stream consumer group (XADD, XREADGROUP, XACK, XAUTOCLAIM). The
// Python and Node clients run scripts in clienttest/; .ci/run
// installs them. Under CI a missing client fails the test, elsewhere it
// skips it.

func needClient(t *testing.T, what, install string, ok bool) {
	t.Helper()
	if ok {
		return
	}
	msg := what + " is not installed (" + install + ")"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + "; CI=true: .ci/run must install it")
	}
	t.Skip(msg)
}

// runScript runs a client script with the server's port and expects it
// to print "ok".
func (ts *testServer) runScript(env []string, name string, args ...string) {
	ts.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, append(args, ts.port())...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		ts.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func TestClientRedisPy(t *testing.T) {
	py, err := exec.LookPath("python3")
	needClient(t, "python3 with redis-py", "pip install redis", err == nil && exec.Command(py, "-c", "import redis").Run() == nil)
	ts := startServer(t, "")
	ts.runScript(nil, py, filepath.Join("clienttest", "redispy.py"))
}

func TestClientNodeRedis(t *testing.T) {
	node, err := exec.LookPath("node")
	modules, _ := filepath.Abs(filepath.Join("clienttest", "node_modules"))
	if p := os.Getenv("KVARRAY_NODE_MODULES"); p != "" {
		modules = p
	}
	_, merr := os.Stat(filepath.Join(modules, "redis", "package.json"))
	needClient(t, "node with the redis package", "npm install --prefix server/clienttest", err == nil && merr == nil)
	ts := startServer(t, "")
	ts.runScript([]string{"NODE_PATH=" + modules}, node, filepath.Join("clienttest", "noderedis.js"))
}

// TestClientJedis: Jedis (Java; clienttest/jedis, built by .ci/run with
// Maven) on strings, a pipeline, a transaction and the collections.
func TestClientJedis(t *testing.T) {
	java, err := exec.LookPath("java")
	dir, _ := filepath.Abs(filepath.Join("clienttest", "jedis", "target"))
	_, jerr := os.Stat(filepath.Join(dir, "jedischeck-1.jar"))
	needClient(t, "java with Jedis built", "mvn -q -f server/clienttest/jedis/pom.xml package dependency:copy-dependencies",
		err == nil && jerr == nil)
	ts := startServer(t, "")
	cp := filepath.Join(dir, "jedischeck-1.jar") + string(os.PathListSeparator) + filepath.Join(dir, "dependency", "*")
	ts.runScript(nil, java, "-cp", cp, "JedisCheck")
}

func TestClientRedisCli3(t *testing.T) {
	ts := startServer(t, "")
	if out := ts.redisCLI(nil, "-3", "--no-raw", "hello", "3"); !bytes.Contains(out, []byte(`"proto" => (integer) 3`)) {
		t.Errorf("redis-cli -3 HELLO 3:\n%s", out)
	}
	out := ts.redisCLI([]byte("set k \"a\\x00b\"\nget k\nincr n\nincr n\nset e v px 100000\npttl e\nget nope\nmulti\nset t 1\nexec\nconfig get maxclients\n"), "-3", "--no-raw")
	want := "OK\n\"a\\x00b\"\n(integer) 1\n(integer) 2\nOK\n(integer) "
	if !strings.HasPrefix(string(out), want) || !strings.Contains(string(out), "(nil)") || !strings.Contains(string(out), "1) OK") ||
		!strings.Contains(string(out), "1# \"maxclients\" => ") {
		t.Errorf("redis-cli -3 session:\n%s", out)
	}
}

// TestClientGoRedis: go-redis v9 on its defaults (HELLO 3).
func TestClientGoRedis(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: ts.addr})
	defer rdb.Close()
	if v, err := rdb.Do(ctx, "hello").Slice(); err == nil && len(v) > 0 {
		t.Logf("HELLO: %v", v)
	}
	bin := string(randomBytes(7, 1000))
	if err := rdb.Set(ctx, "bin", bin, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := rdb.Get(ctx, "bin").Result(); err != nil || v != bin {
		t.Fatalf("binary GET: %v", err)
	}
	cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for range 20 {
			p.Incr(ctx, "pipe")
		}
		return nil
	})
	if err != nil || cmds[19].(*redis.IntCmd).Val() != 20 {
		t.Fatalf("pipeline: %v", err)
	}
	err = rdb.Watch(ctx, func(tx *redis.Tx) error {
		n, err := tx.Get(ctx, "pipe").Int()
		if err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, "pipe", n*2, time.Hour)
			return nil
		})
		return err
	}, "pipe")
	if err != nil {
		t.Fatalf("WATCH transaction: %v", err)
	}
	if n, _ := rdb.Get(ctx, "pipe").Int(); n != 40 {
		t.Errorf("after the transaction pipe = %d", n)
	}
	if d, _ := rdb.TTL(ctx, "pipe").Result(); d <= 0 {
		t.Errorf("TTL = %v", d)
	}
	err = rdb.Watch(ctx, func(tx *redis.Tx) error {
		ts.client().Set(ctx, "pipe", "other", 0)
		_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, "pipe", "lost", 0)
			return nil
		})
		return err
	}, "pipe")
	if !errors.Is(err, redis.TxFailedErr) {
		t.Errorf("WATCH of a key written meanwhile: %v, want TxFailedErr", err)
	}
}

// TestClientGoRedisCollections: go-redis on lists, blocking pops, sorted
// sets, pub/sub and a stream consumer group, in RESP3 (its default) and
// RESP2.
func TestClientGoRedisCollections(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	for _, proto := range []int{3, 2} {
		rdb := redis.NewClient(&redis.Options{Addr: ts.addr, Protocol: proto})
		k := fmt.Sprintf("go%d:", proto)
		if n, err := rdb.RPush(ctx, k+"l", "a", "b", "c").Result(); err != nil || n != 3 {
			t.Fatalf("RESP%d RPUSH: %d, %v", proto, n, err)
		}
		if v, err := rdb.LRange(ctx, k+"l", 0, -1).Result(); err != nil || !slices.Equal(v, []string{"a", "b", "c"}) {
			t.Errorf("RESP%d LRANGE: %v, %v", proto, v, err)
		}
		if v, err := rdb.LMove(ctx, k+"l", k+"l2", "LEFT", "RIGHT").Result(); err != nil || v != "a" {
			t.Errorf("RESP%d LMOVE: %q, %v", proto, v, err)
		}
		// Blocking pops, woken by a push from another client.
		ic := ts.dial()
		done := make(chan []string, 1)
		go func() {
			v, _ := rdb.BLPop(ctx, 30*time.Second, k+"other", k+"q").Result()
			done <- v
		}()
		waitBlockedClients(t, ic, 1)
		ts.client().RPush(ctx, k+"q", "job")
		if v := <-done; !slices.Equal(v, []string{k + "q", "job"}) {
			t.Errorf("RESP%d BLPOP woken by RPUSH: %v", proto, v)
		}
		if _, err := rdb.BLPop(ctx, 50*time.Millisecond, k+"empty").Result(); !errors.Is(err, redis.Nil) {
			t.Errorf("RESP%d BLPOP timeout: %v", proto, err)
		}
		// Sorted sets.
		if n, err := rdb.ZAdd(ctx, k+"z", redis.Z{Score: 1, Member: "a"}, redis.Z{Score: 2.5, Member: "b"}).Result(); err != nil || n != 2 {
			t.Errorf("RESP%d ZADD: %d, %v", proto, n, err)
		}
		if v, err := rdb.ZRangeWithScores(ctx, k+"z", 0, -1).Result(); err != nil || !slices.Equal(v, []redis.Z{{Score: 1, Member: "a"}, {Score: 2.5, Member: "b"}}) {
			t.Errorf("RESP%d ZRANGE WITHSCORES: %v, %v", proto, v, err)
		}
		if f, err := rdb.ZIncrBy(ctx, k+"z", 2, "a").Result(); err != nil || f != 3 {
			t.Errorf("RESP%d ZINCRBY: %v, %v", proto, f, err)
		}
		if v, err := rdb.BZPopMin(ctx, time.Second, k+"z").Result(); err != nil || v.Key != k+"z" || v.Member != "b" || v.Score != 2.5 {
			t.Errorf("RESP%d BZPOPMIN: %+v, %v", proto, v, err)
		}
		zdone := make(chan *redis.ZWithKey, 1)
		go func() {
			v, _ := rdb.BZPopMax(ctx, 30*time.Second, k+"bz").Result()
			zdone <- v
		}()
		waitBlockedClients(t, ic, 1)
		ts.client().ZAdd(ctx, k+"bz", redis.Z{Score: 7, Member: "m"})
		if v := <-zdone; v == nil || v.Member != "m" || v.Score != 7 {
			t.Errorf("RESP%d BZPOPMAX woken by ZADD: %+v", proto, v)
		}
		// Pub/sub.
		sub := rdb.Subscribe(ctx, k+"ch")
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatalf("RESP%d SUBSCRIBE: %v", proto, err)
		}
		if n, err := rdb.Publish(ctx, k+"ch", "hi").Result(); err != nil || n != 1 {
			t.Errorf("RESP%d PUBLISH: %d, %v", proto, n, err)
		}
		if m, err := sub.ReceiveMessage(ctx); err != nil || m.Channel != k+"ch" || m.Payload != "hi" {
			t.Errorf("RESP%d message: %+v, %v", proto, m, err)
		}
		sub.Close()
		// A stream consumer group: a blocked XREADGROUP woken by XADD,
		// XACK, XAUTOCLAIM of what another consumer left pending.
		if err := rdb.XGroupCreateMkStream(ctx, k+"s", "g", "$").Err(); err != nil {
			t.Fatalf("RESP%d XGROUP CREATE MKSTREAM: %v", proto, err)
		}
		sdone := make(chan []redis.XStream, 1)
		go func() {
			v, _ := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "a", Streams: []string{k + "s", ">"}, Count: 1, Block: 30 * time.Second}).Result()
			sdone <- v
		}()
		waitBlockedClients(t, ic, 1)
		id, err := ts.client().XAdd(ctx, &redis.XAddArgs{Stream: k + "s", Values: []string{"job", "1"}}).Result()
		if err != nil {
			t.Fatalf("RESP%d XADD: %v", proto, err)
		}
		if v := <-sdone; len(v) != 1 || v[0].Stream != k+"s" || len(v[0].Messages) != 1 || v[0].Messages[0].ID != id || v[0].Messages[0].Values["job"] != "1" {
			t.Errorf("RESP%d XREADGROUP woken by XADD %s: %+v", proto, id, v)
		}
		id2 := rdb.XAdd(ctx, &redis.XAddArgs{Stream: k + "s", Values: []string{"job", "2"}}).Val()
		if v, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "b", Streams: []string{k + "s", ">"}, Block: -1}).Result(); err != nil || len(v) != 1 || len(v[0].Messages) != 1 || v[0].Messages[0].ID != id2 {
			t.Errorf("RESP%d XREADGROUP of %s: %+v, %v", proto, id2, v, err)
		}
		if n, err := rdb.XAck(ctx, k+"s", "g", id).Result(); err != nil || n != 1 {
			t.Errorf("RESP%d XACK: %d, %v", proto, n, err)
		}
		if ms, next, err := rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: k + "s", Group: "g", Consumer: "c", Start: "0-0"}).Result(); err != nil || next != "0-0" || len(ms) != 1 || ms[0].ID != id2 || ms[0].Values["job"] != "2" {
			t.Errorf("RESP%d XAUTOCLAIM: %+v, %q, %v", proto, ms, next, err)
		}
		if p, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: k + "s", Group: "g", Start: "-", End: "+", Count: 10}).Result(); err != nil || len(p) != 1 || p[0].Consumer != "c" || p[0].RetryCount != 2 {
			t.Errorf("RESP%d XPENDING after XAUTOCLAIM: %+v, %v", proto, p, err)
		}
		ic.Close()
		rdb.Close()
	}
}

// TestClientRueidis: rueidis on its defaults (RESP3 only, client-side
// caching off since the server has no CLIENT TRACKING).
func TestClientRueidis(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{ts.addr}, DisableCache: true})
	if err != nil {
		t.Fatalf("rueidis connect: %v", err)
	}
	defer c.Close()
	bin := string(randomBytes(9, 1000))
	if err := c.Do(ctx, c.B().Set().Key("bin").Value(bin).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Do(ctx, c.B().Get().Key("bin").Build()).ToString(); err != nil || v != bin {
		t.Fatalf("binary GET: %v", err)
	}
	if _, err := c.Do(ctx, c.B().Get().Key("nope").Build()).ToString(); !rueidis.IsRedisNil(err) {
		t.Errorf("GET missing: %v", err)
	}
	resps := c.DoMulti(ctx, c.B().Incr().Key("n").Build(), c.B().Incr().Key("n").Build(), c.B().Pexpire().Key("n").Milliseconds(100000).Build())
	if n, err := resps[1].AsInt64(); err != nil || n != 2 {
		t.Errorf("pipelined INCR: %d, %v", n, err)
	}
	err = c.Dedicated(func(d rueidis.DedicatedClient) error {
		if err := d.Do(ctx, d.B().Watch().Key("n").Build()).Error(); err != nil {
			return err
		}
		rs := d.DoMulti(ctx, d.B().Multi().Build(), d.B().Incr().Key("n").Build(), d.B().Exec().Build())
		vs, err := rs[2].ToArray()
		if err != nil {
			return err
		}
		if n, _ := vs[0].AsInt64(); n != 3 {
			t.Errorf("INCR in EXEC = %d", n)
		}
		return nil
	})
	if err != nil {
		t.Errorf("WATCH/MULTI/EXEC: %v", err)
	}
	if ms, err := c.Do(ctx, c.B().Pttl().Key("n").Build()).AsInt64(); err != nil || ms <= 0 {
		t.Errorf("PTTL = %d, %v", ms, err)
	}
	if err := c.Do(ctx, c.B().Hset().Key("h").FieldValue().FieldValue("a", "1").FieldValue("b", "2").Build()).Error(); err != nil {
		t.Fatalf("HSET: %v", err)
	}
	if m, err := c.Do(ctx, c.B().Hgetall().Key("h").Build()).AsStrMap(); err != nil || len(m) != 2 || m["b"] != "2" {
		t.Errorf("HGETALL: %v %v", m, err)
	}
	if n, err := c.Do(ctx, c.B().Sadd().Key("s").Member("x", "y", "x").Build()).AsInt64(); err != nil || n != 2 {
		t.Errorf("SADD: %d %v", n, err)
	}
	if ms, err := c.Do(ctx, c.B().Smembers().Key("s").Build()).AsStrSlice(); err != nil || len(ms) != 2 {
		t.Errorf("SMEMBERS: %v %v", ms, err)
	}
	if n, err := c.Do(ctx, c.B().Rpush().Key("l").Element("a", "b").Build()).AsInt64(); err != nil || n != 2 {
		t.Errorf("RPUSH: %d %v", n, err)
	}
	if v, err := c.Do(ctx, c.B().Lrange().Key("l").Start(0).Stop(-1).Build()).AsStrSlice(); err != nil || !slices.Equal(v, []string{"a", "b"}) {
		t.Errorf("LRANGE: %v %v", v, err)
	}
	// A blocking pop, woken by a push from another client.
	ic := ts.dial()
	defer ic.Close()
	done := make(chan []string, 1)
	go func() {
		v, _ := c.Do(ctx, c.B().Blpop().Key("q").Timeout(30).Build()).AsStrSlice()
		done <- v
	}()
	waitBlockedClients(t, ic, 1)
	ts.client().RPush(ctx, "q", "job")
	if v := <-done; !slices.Equal(v, []string{"q", "job"}) {
		t.Errorf("BLPOP woken by RPUSH: %v", v)
	}
	if err := c.Do(ctx, c.B().Zadd().Key("z").ScoreMember().ScoreMember(1, "a").ScoreMember(2.5, "b").Build()).Error(); err != nil {
		t.Fatalf("ZADD: %v", err)
	}
	if zs, err := c.Do(ctx, c.B().Zrange().Key("z").Min("0").Max("-1").Withscores().Build()).AsZScores(); err != nil || len(zs) != 2 || zs[1].Member != "b" || zs[1].Score != 2.5 {
		t.Errorf("ZRANGE WITHSCORES: %v %v", zs, err)
	}
	if f, err := c.Do(ctx, c.B().Zscore().Key("z").Member("a").Build()).AsFloat64(); err != nil || f != 1 {
		t.Errorf("ZSCORE: %v %v", f, err)
	}
	if v, err := c.Do(ctx, c.B().Bzpopmin().Key("z").Timeout(1).Build()).ToArray(); err != nil || len(v) != 3 {
		t.Errorf("BZPOPMIN: %v %v", v, err)
	} else if m, _ := v[1].ToString(); m != "a" {
		t.Errorf("BZPOPMIN popped %q", m)
	}
}

// TestClientRedisPyACL runs redis-py's own ACL tests (test_commands.py's
// test_acl_*) against the server. Its test suite is not in the wheel:
// .ci/run fetches the installed version's sdist (pip download) into
// clienttest/redis-py, or KVARRAY_REDISPY_SRC names an unpacked one.
// Those that need Redis 7.9's modules skip themselves (the server says
// 7.0); two are deselected, each for a feature kvarray does not have
// (redisPyACLDeselected).
func TestClientRedisPyACL(t *testing.T) {
	args := []string{"tests/test_commands.py", "-k", "test_acl_"}
	for _, d := range redisPyACLDeselected {
		args = append(args, "--deselect", "tests/test_commands.py::TestRedisCommands::"+d)
	}
	runRedisPy(t, "ACL", args...)
}

// TestClientRedisPyCommands runs redis-py's tests of the geo commands,
// SORT, MEMORY and MONITOR (test_commands.py's and test_monitor.py).
func TestClientRedisPyCommands(t *testing.T) {
	runRedisPy(t, "geo, SORT, MEMORY and MONITOR", "tests/test_commands.py", "tests/test_monitor.py", "-k", "geo or sort or memory or monitor")
}

// runRedisPy runs pytest with args on redis-py's test suite against a
// fresh server; it fails unless some test passed and none failed.
func runRedisPy(t *testing.T, what string, args ...string) {
	py, err := exec.LookPath("python3")
	src := os.Getenv("KVARRAY_REDISPY_SRC")
	if src == "" {
		src, _ = filepath.Abs(filepath.Join("clienttest", "redis-py"))
	}
	_, serr := os.Stat(filepath.Join(src, "tests", "test_commands.py"))
	needClient(t, "redis-py's test suite with pytest", ".ci/run fetches it: pip download --no-deps --no-binary :all: redis==VERSION, unpacked in server/clienttest/redis-py",
		err == nil && serr == nil && exec.Command(py, "-c", "import pytest, redis").Run() == nil)
	ts := startServer(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args = append([]string{"-m", "pytest"}, append(args, "-p", "no:cacheprovider", "-q", "--redis-url=redis://"+ts.addr)...)
	cmd := exec.CommandContext(ctx, py, args...)
	cmd.Dir = src
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("redis-py's %s tests: %v\n%s", what, err, out)
	}
	if !bytes.Contains(out, []byte(" passed")) {
		t.Fatalf("redis-py's %s tests ran none:\n%s", what, out)
	}
	t.Logf("%s", bytes.TrimSpace(out[bytes.LastIndexByte(bytes.TrimSpace(out), '\n')+1:]))
}

// redisPyACLDeselected are redis-py's ACL tests that need what kvarray
// does not have:
//   - test_acl_getuser_setuser expects ACL GETUSER to give back the rules
//     as they were set (-@geo after +@hash), which Redis 7.2 does; Redis
//     7.0, whose reduction of rules kvarray reproduces, answers without
//     the -@geo that changes nothing.
//   - test_acl_log counts 3 ACL LOG entries; kvarray logs 4: the denied
//     key and HSET, and also the CLIENT SETINFO redis-py sends on connect,
//     refused to a user with only +get +set +select (Redis 7.0 has no
//     SETINFO; which Redis logs it is not settled here).
var redisPyACLDeselected = []string{"test_acl_getuser_setuser", "test_acl_log"}
