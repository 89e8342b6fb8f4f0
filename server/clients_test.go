package server

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// The client tests drive the server with the Redis clients people use, on
// their default settings (all but redis-cli speak RESP3 by default):
// connect, binary GET/SET, pipeline, transaction with WATCH, expiry,
// INCR. The Python and Node clients run scripts in clienttest/; .ci/run
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
}
