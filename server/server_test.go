package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/config"
	"github.com/kvarray/kvarray/keyspace"
)

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestGoRedis drives every command through go-redis, which connects with
// HELLO 3 (refused: it falls back to RESP2) and CLIENT SETINFO.
func TestGoRedis(t *testing.T) {
	ts := startServer(t, "")
	rdb := ts.client(func(o *redis.Options) { o.ClientName = "tester" })
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	if got, err := rdb.Ping(ctx).Result(); err != nil || got != "PONG" {
		t.Fatalf("PING = %q, %v", got, err)
	}
	if got, err := rdb.Echo(ctx, "hi\r\nthere").Result(); err != nil || got != "hi\r\nthere" {
		t.Errorf("ECHO = %q, %v", got, err)
	}
	if got, err := rdb.Do(ctx, "ping", "msg").Text(); err != nil || got != "msg" {
		t.Errorf("PING msg = %q, %v", got, err)
	}

	// Values of every size class (replication, packing, splitting, and
	// several splits) and binary content, byte-exact.
	values := map[string][]byte{
		"empty":  {},
		"small":  []byte("world"),
		"binary": append([]byte("\x00\r\n\xff$3\r\n*"), randomBytes(1, 200)...),
		"packed": randomBytes(2, 20<<10),
		"split":  randomBytes(3, 100<<10),
		"huge":   randomBytes(4, 5<<20),
	}
	for k, v := range values {
		must(rdb.Set(ctx, k, v, 0).Err())
	}
	for k, v := range values {
		got, err := rdb.Get(ctx, k).Bytes()
		if err != nil || !bytes.Equal(got, v) {
			t.Errorf("GET %s: %d bytes, %v; want %d bytes", k, len(got), err, len(v))
		}
		if n, err := rdb.StrLen(ctx, k).Result(); err != nil || n != int64(len(v)) {
			t.Errorf("STRLEN %s = %d, %v", k, n, err)
		}
	}
	if _, err := rdb.Get(ctx, "missing").Result(); err != redis.Nil {
		t.Errorf("GET missing: %v, want redis.Nil", err)
	}
	if n, err := rdb.StrLen(ctx, "missing").Result(); err != nil || n != 0 {
		t.Errorf("STRLEN missing = %d, %v", n, err)
	}

	// NX / XX / SETNX.
	if ok, err := rdb.SetNX(ctx, "nx", "1", 0).Result(); err != nil || !ok {
		t.Errorf("SET nx NX on a new key: %v, %v", ok, err)
	}
	if ok, err := rdb.SetNX(ctx, "nx", "2", 0).Result(); err != nil || ok {
		t.Errorf("SET nx NX on an existing key: %v, %v", ok, err)
	}
	if ok, err := rdb.SetXX(ctx, "nx", "3", 0).Result(); err != nil || !ok {
		t.Errorf("SET nx XX on an existing key: %v, %v", ok, err)
	}
	if ok, err := rdb.SetXX(ctx, "xx-missing", "3", 0).Result(); err != nil || ok {
		t.Errorf("SET XX on a missing key: %v, %v", ok, err)
	}
	if got, _ := rdb.Get(ctx, "nx").Result(); got != "3" {
		t.Errorf("after NX, NX, XX: %q", got)
	}
	if n, err := rdb.Do(ctx, "setnx", "nx", "4").Int(); err != nil || n != 0 {
		t.Errorf("SETNX existing = %d, %v", n, err)
	}
	if n, err := rdb.Do(ctx, "setnx", "setnx-new", "4").Int(); err != nil || n != 1 {
		t.Errorf("SETNX new = %d, %v", n, err)
	}
	// Expiry options and GET (more in TestExpiry).
	if err := rdb.Set(ctx, "ttl", "v", time.Minute).Err(); err != nil {
		t.Errorf("go-redis Set with expiration: %v", err)
	}
	if d, err := rdb.TTL(ctx, "ttl").Result(); err != nil || d <= 0 || d > time.Minute {
		t.Errorf("TTL after SET EX 60 = %v, %v", d, err)
	}
	if old, err := rdb.SetArgs(ctx, "ttl", "w", redis.SetArgs{Get: true, KeepTTL: true}).Result(); err != nil || old != "v" {
		t.Errorf("SET GET KEEPTTL = %q, %v", old, err)
	}
	if d, _ := rdb.TTL(ctx, "ttl").Result(); d <= 0 {
		t.Errorf("KEEPTTL lost the TTL: %v", d)
	}
	for _, bad := range [][]any{{"ex", 0}, {"px", -1}, {"ex", "x"}, {"ex", 1, "px", 1}, {"nx", "xx"}} {
		if err := rdb.Do(ctx, append([]any{"set", "ttl-bad", "v"}, bad...)...).Err(); err == nil {
			t.Errorf("SET %v accepted", bad)
		}
	}
	if n, _ := rdb.Exists(ctx, "ttl-bad").Result(); n != 0 {
		t.Error("a refused SET wrote the key")
	}

	// MSET / MGET / DEL / EXISTS / TYPE / TTL.
	must(rdb.MSet(ctx, "m1", "a", "m2", randomBytes(5, 50<<10), "m3", "c", "m1", "last").Err())
	got, err := rdb.MGet(ctx, "m1", "missing", "m3").Result()
	if err != nil || !slices.Equal(got, []any{"last", nil, "c"}) {
		t.Errorf("MGET = %v, %v", got, err)
	}
	if n, err := rdb.Exists(ctx, "m1", "m2", "missing", "m1").Result(); err != nil || n != 3 {
		t.Errorf("EXISTS = %d, %v", n, err)
	}
	if s, err := rdb.Type(ctx, "m1").Result(); err != nil || s != "string" {
		t.Errorf("TYPE m1 = %q, %v", s, err)
	}
	if s, err := rdb.Type(ctx, "missing").Result(); err != nil || s != "none" {
		t.Errorf("TYPE missing = %q, %v", s, err)
	}
	if d, err := rdb.TTL(ctx, "m1").Result(); err != nil || d != -1 {
		t.Errorf("TTL m1 = %v, %v", d, err)
	}
	if d, err := rdb.PTTL(ctx, "missing").Result(); err != nil || d != -2 {
		t.Errorf("PTTL missing = %v, %v", d, err)
	}
	if n, err := rdb.Del(ctx, "m1", "m2", "missing", "m1").Result(); err != nil || n != 2 {
		t.Errorf("DEL = %d, %v", n, err)
	}
	if n, _ := rdb.Exists(ctx, "m1", "m2").Result(); n != 0 {
		t.Errorf("after DEL, %d keys remain", n)
	}

	// KEYS, DBSIZE, SCAN (more in TestScan).
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil || !slices.IsSorted(keys) || !slices.Contains(keys, "huge") || slices.Contains(keys, "m1") {
		t.Errorf("KEYS * = %v, %v", keys, err)
	}
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n != int64(len(keys)) {
		t.Errorf("DBSIZE = %d, %v; KEYS has %d", n, err, len(keys))
	}

	// Connection commands.
	if name, err := rdb.ClientGetName(ctx).Result(); err != nil || name != "tester" {
		t.Errorf("CLIENT GETNAME = %q, %v", name, err)
	}
	id, err := rdb.ClientID(ctx).Result()
	if err != nil || id <= 0 {
		t.Errorf("CLIENT ID = %d, %v", id, err)
	}
	if s, err := rdb.ClientList(ctx).Result(); err != nil || !strings.Contains(s, "name=tester") || !strings.Contains(s, "lib-name=go-redis") {
		t.Errorf("CLIENT LIST = %q, %v", s, err)
	}
	if s, err := rdb.ClientInfo(ctx).Result(); err != nil || s.ID != id || s.Name != "tester" {
		t.Errorf("CLIENT INFO = %+v, %v", s, err)
	}
	db16 := ts.client(func(o *redis.Options) { o.DB = 16 })
	if err := db16.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "DB index is out of range") {
		t.Errorf("a client of db 16: %v", err)
	}
	if err := rdb.Do(ctx, "select", "0").Err(); err != nil {
		t.Errorf("SELECT 0: %v", err)
	}
	// go-redis with a password for the default user (no passwords here).
	if err := ts.client(func(o *redis.Options) { o.Username, o.Password = "default", "x" }).Ping(ctx).Err(); err != nil {
		t.Errorf("AUTH default x: %v", err)
	}

	// COMMAND: go-redis parses it (cluster clients need it).
	infos, err := rdb.Command(ctx).Result()
	if err != nil || infos["get"] == nil || infos["get"].Arity != 2 || !infos["get"].ReadOnly || infos["mset"].StepCount != 2 {
		t.Errorf("COMMAND: %v %+v", err, infos["get"])
	}
	if n, err := rdb.Do(ctx, "command", "count").Int(); err != nil || n != len(infos) {
		t.Errorf("COMMAND COUNT = %d, %v; COMMAND lists %d", n, err, len(infos))
	}
	// A map in RESP3 (go-redis's default), as Redis 7's.
	docs, err := rdb.Do(ctx, "command", "docs", "set").Result()
	if m, _ := docs.(map[any]any); err != nil || len(m) != 1 || m["set"] == nil {
		t.Errorf("COMMAND DOCS set: %v, %v", docs, err)
	}

	// INFO.
	info, err := rdb.Info(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Server", "redis_version:", "# Keyspace", "db0:keys=", "connected_clients:", "blocked_clients:0",
		"used_memory:", "loading:0", "cluster_enabled:0", "role:master", "# Persistence", "# Memory"} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO lacks %q:\n%s", want, info)
		}
	}
	info, err = rdb.Info(ctx, "kvarray").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Kvarray", "array_id:" + ts.a.ID().String(),
		"mode:hybrid", "device5:name=mem:d5,state=healthy", "device_bytes:", "ops_store:"} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO kvarray lacks %q:\n%s", want, info)
		}
	}
	if info, _ := rdb.Info(ctx, "commandstats").Result(); !strings.Contains(info, "cmdstat_get:calls=") || strings.Contains(info, "# Server") {
		t.Errorf("INFO commandstats:\n%s", info)
	}
	if info, _ := rdb.Info(ctx, "nosuchsection").Result(); info != "" {
		t.Errorf("INFO nosuchsection = %q", info)
	}

	// QUIT.
	if err := rdb.Do(ctx, "quit").Err(); err != nil {
		t.Errorf("QUIT: %v", err)
	}
}

// TestKVArrayCommands: the admin commands.
func TestKVArrayCommands(t *testing.T) {
	ts := startServer(t, "")
	rdb := ts.client()
	ctx := context.Background()
	for _, rm := range []string{"hashing", "replication", "splitting", "packing"} {
		if err := rdb.Do(ctx, "kvarray.set", "k-"+rm, "v-"+rm, rm).Err(); err != nil {
			t.Fatalf("KVARRAY.SET %s: %v", rm, err)
		}
	}
	err := rdb.Do(ctx, "kvarray.set", "k", "v", "raid5").Err()
	if err == nil || !strings.HasPrefix(err.Error(), "ERR unknown mechanism: ") || !strings.Contains(err.Error(), "raid5") {
		t.Errorf("KVARRAY.SET with an unknown mechanism: %v", err)
	}
	var st array.Status
	for _, args := range [][]any{{"kvarray.status"}, {"kvarray.status", "deep"}} {
		raw, err := rdb.Do(ctx, args...).Text()
		if err != nil {
			t.Fatal(err)
		}
		st = array.Status{}
		if err := json.Unmarshal([]byte(raw), &st); err != nil {
			t.Fatalf("%v is not JSON of array.Status: %v\n%s", args, err, raw)
		}
		if deep := len(args) == 2; st.Deep != deep || !deep && (st.Objects != 0 || len(st.Mechanisms) != 0) {
			t.Errorf("%v: deep %v, %d objects, mechanisms %v", args, st.Deep, st.Objects, st.Mechanisms)
		}
	}
	if err := rdb.Do(ctx, "kvarray.status", "shallow").Err(); err == nil || !strings.Contains(err.Error(), "syntax error") {
		t.Errorf("KVARRAY.STATUS shallow: %v", err)
	}
	per := map[string]int64{}
	for _, m := range st.Mechanisms {
		per[m.Name] = m.Objects
	}
	if st.ID != ts.a.ID().String() || st.Objects != 4 || per["hashing"] != 1 || per["packing"] != 1 || len(st.Devices) != 6 {
		t.Errorf("status: %+v", st)
	}

	// Fail a device: reads go on (replication), INFO and STATUS say so.
	dev := ts.a.N() - 1
	if err := rdb.Do(ctx, "kvarray.fail", dev).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := rdb.Get(ctx, "k-replication").Result(); err != nil || got != "v-replication" {
		t.Errorf("degraded GET = %q, %v", got, err)
	}
	if info, _ := rdb.Info(ctx, "kvarray").Result(); !strings.Contains(info, "devices_failed:1") || !strings.Contains(info, fmt.Sprintf("device%d:name=mem:d5,state=failed", dev)) {
		t.Errorf("INFO kvarray after KVARRAY.FAIL:\n%s", info)
	}
	if err := rdb.Set(ctx, "during", "failure", 0).Err(); err != nil {
		t.Errorf("SET with a device failed: %v", err)
	}
	raw, err := rdb.Do(ctx, "kvarray.recover", dev).Text()
	if err != nil {
		t.Fatal(err)
	}
	var rep array.RebuildReport
	if err := json.Unmarshal([]byte(raw), &rep); err != nil || rep.Dev != dev || rep.Failed != 0 {
		t.Errorf("KVARRAY.RECOVER: %s, %v", raw, err)
	}
	if s := ts.a.DeviceState(dev).String(); s != "healthy" {
		t.Errorf("after KVARRAY.RECOVER the device is %s, want healthy", s)
	}
	if info, _ := rdb.Info(ctx, "kvarray").Result(); !strings.Contains(info, "devices_healthy:6") {
		t.Errorf("INFO kvarray after KVARRAY.RECOVER:\n%s", info)
	}
	for _, k := range []string{"during", "k-replication", "k-splitting"} {
		if _, err := rdb.Get(ctx, k).Result(); err != nil {
			t.Errorf("GET %s after recover: %v", k, err)
		}
	}
	for _, tc := range []struct {
		args []any
		want string
	}{
		{[]any{"kvarray.fail", "x"}, "ERR value is not an integer or out of range"},
		{[]any{"kvarray.fail", 6}, "ERR KVARRAY.FAIL: no device 6: the array has devices 0 to 5"},
		{[]any{"kvarray.recover", -1}, "ERR KVARRAY.RECOVER: no device -1"},
		{[]any{"kvarray.fail"}, "ERR wrong number of arguments for 'kvarray.fail' command"},
		{[]any{"kvarray.set", "k", "v"}, "ERR wrong number of arguments for 'kvarray.set' command"},
	} {
		if err := rdb.Do(ctx, tc.args...).Err(); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	// A server without its devices cannot fail them.
	bare := New(ts.a)
	c := &call{s: bare, args: [][]byte{[]byte("kvarray.fail"), []byte("0")}, ctx: context.Background()}
	shim := newShim(nil)
	c.rc = shim
	c.w = &respWriter{rc: shim, proto: 2}
	cmdFail(c)
	if r := shim.replies(t); len(r) != 1 || !strings.Contains(r[0].str, "not given the array's devices") {
		t.Errorf("KVARRAY.FAIL without devices: %v", r)
	}
}

// TestNXAtomic: many clients race SET NX on the same keys; exactly one
// wins each key, and its value is the one stored.
func TestNXAtomic(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	const clients, keys = 20, 10
	winners := make([][]string, keys)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rdb := ts.client()
			for k := range keys {
				v := fmt.Sprintf("client%d", c)
				ok, err := rdb.SetNX(ctx, fmt.Sprintf("race%d", k), v, 0).Result()
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					mu.Lock()
					winners[k] = append(winners[k], v)
					mu.Unlock()
				}
				// Plain SETs of other keys interleave with the NX ones.
				rdb.Set(ctx, fmt.Sprintf("other%d", c), v, 0)
			}
		}()
	}
	wg.Wait()
	rdb := ts.client()
	for k, w := range winners {
		got, _ := rdb.Get(ctx, fmt.Sprintf("race%d", k)).Result()
		if len(w) != 1 || got != w[0] {
			t.Errorf("key %d: winners %v, value %q", k, w, got)
		}
	}
}

// TestBadKeys: on devices that take keys too short for long keys' names
// (device.max_key 128), a 300-byte key gets errors from every command,
// and nothing is written.
func TestBadKeys(t *testing.T) {
	ts := startServer(t, memHybrid+"device: {max_key: 128}\n")
	c := ts.dial()
	long := strings.Repeat("k", 300)
	for _, key := range []string{long} {
		want := "ERR key too long: "
		for _, args := range [][]string{
			{"SET", key, "v"}, {"SET", key, "v", "NX"}, {"GET", key}, {"DEL", key}, {"EXISTS", key},
			{"MGET", "ok", key}, {"MSET", "ok", "v", key, "v"}, {"STRLEN", key}, {"SETNX", key, "v"},
			{"KVARRAY.SET", key, "v", "replication"}, {"TYPE", key},
		} {
			r := c.do(args...)
			if !r.isError() || !strings.HasPrefix(r.str, want) {
				t.Errorf("%q: %v, want %s…", args, r, want)
			}
		}
	}
	if r := c.do("EXISTS", "ok"); r.str != "0" {
		t.Errorf("a failed MSET wrote its valid key: EXISTS ok = %v", r)
	}
	if r := c.do("PING"); r.str != "PONG" {
		t.Errorf("PING after bad keys: %v", r)
	}
	// The keyspace's expiry index takes 11 of the array's 125 bytes.
	key := strings.Repeat("k", 114)
	if r := c.do("SET", key, "v", "EX", "100"); r.str != "OK" {
		t.Errorf("SET of a 114-byte key: %v", r)
	}
	if r := c.do("SET", key+"k", "v"); !r.isError() || !strings.Contains(r.str, "maximum 114") {
		t.Errorf("SET of a 115-byte key: %v", r)
	}
}

// TestErrorStrings compares the errors of kvarray and of a real
// redis-server for the same bad commands.
func TestErrorStrings(t *testing.T) {
	ts := startServer(t, "")
	redisAddr := startRedis(t)
	k := ts.dial()
	r := (&testServer{t: t, addr: redisAddr}).dial()
	for _, args := range [][]string{
		{"GET"}, {"GET", "a", "b"}, {"SET", "a"}, {"SET", "a", "b", "NX", "XX"}, {"SET", "a", "b", "BOGUS"},
		{"SET", "a", "b", "EX"}, {"SET", "a", "b", "EX", "1", "PX", "1"}, {"SET", "a", "b", "KEEPTTL", "EX", "1"},
		{"MSET", "a"}, {"MSET", "a", "b", "c"}, {"DEL"}, {"EXISTS"}, {"MGET"}, {"STRLEN"}, {"ECHO"}, {"PING", "a", "b"},
		{"FOO"}, {"foo", "a", "b"}, {"FOO", strings.Repeat("x", 200), "y"}, {"select", "x"}, {"select", "16"},
		{"SCAN", "x"}, {"SCAN", "0", "COUNT", "0"}, {"SCAN", "0", "COUNT", "-1"}, {"SCAN", "0", "COUNT", "x"}, {"SCAN", "0", "MATCH"},
		{"KEYS"}, {"DBSIZE", "x"}, {"HELLO", "4"}, {"HELLO", "x"}, {"HELLO", "2", "FOO"}, {"HELLO", "2", "AUTH", "a"},
		{"HELLO", "2", "AUTH", "bob", "pw"}, {"CLIENT"}, {"CLIENT", "FOO"}, {"CLIENT", "SETNAME", "a b"}, {"CLIENT", "ID", "x"},
		{"COMMAND", "FOO"}, {"CONFIG", "FOO"}, {"AUTH", "pw"}, {"AUTH", "bob", "pw"},
	} {
		want, got := r.do(args...), k.do(args...)
		if got.String() != want.String() {
			t.Errorf("%.60q:\nkvarray %v\nredis   %v", args, got, want)
		}
	}
	// Where kvarray differs on purpose.
	for _, tc := range []struct{ args, want string }{
		{"SWAPDB 1 1 1", "ERR wrong number of arguments for 'swapdb' command"},
	} {
		if got := k.do(strings.Fields(tc.args)...); !got.isError() || got.str != tc.want {
			t.Errorf("%s: %v, want -%s", tc.args, got, tc.want)
		}
	}
	// Replies that are not errors, same shape.
	for _, args := range [][]string{{"PING"}, {"PING", "x"}, {"ECHO", "x"}, {"SELECT", "0"}, {"SET", "a", "1"}, {"GET", "a"},
		{"SET", "a", "2", "NX"}, {"SET", "b", "2", "XX"}, {"SET", "a", "3", "XX"}, {"GET", "a"}, {"MSET", "a", "1", "b", "2"},
		{"MGET", "a", "b", "c"}, {"EXISTS", "a", "b", "c", "a"}, {"STRLEN", "a"}, {"DEL", "a", "c", "a"}, {"TYPE", "b"}, {"TTL", "b"},
		{"CLIENT", "SETNAME", "x"}, {"CLIENT", "GETNAME"}, {"CONFIG", "GET", "save"}, {"KEYS", "b*"}, {"DBSIZE"}, {"SCAN", "0", "MATCH", "zz*"}} {
		want, got := r.do(args...), k.do(args...)
		if got.String() != want.String() {
			t.Errorf("%q:\nkvarray %v\nredis   %v", args, got, want)
		}
	}
}

// TestQuit: QUIT replies OK, closes, and commands pipelined after it are
// not run.
func TestQuit(t *testing.T) {
	ts := startServer(t, "")
	c := ts.dial()
	c.send(slices.Concat(encode("PING"), encode("QUIT"), encode("SET", "after", "quit")))
	if r := c.read(); r.str != "PONG" {
		t.Errorf("PING: %v", r)
	}
	if r := c.read(); r.str != "OK" {
		t.Errorf("QUIT: %v", r)
	}
	c.expectEOF()
	if r := ts.dial().do("EXISTS", "after"); r.str != "0" {
		t.Errorf("a command after QUIT ran: EXISTS after = %v", r)
	}
}

// TestRedisCLI: values written by go-redis read back byte-exact by
// redis-cli and the other way round, binary values included; redis-cli
// starts (COMMAND DOCS) without errors.
func TestRedisCLI(t *testing.T) {
	ts := startServer(t, "")
	rdb := ts.client()
	ctx := context.Background()
	if out := ts.redisCLI(nil, "ping"); string(out) != "PONG\n" {
		t.Errorf("redis-cli ping: %q", out)
	}
	if out := ts.redisCLI(nil, "set", "hello", "world"); string(out) != "OK\n" {
		t.Errorf("redis-cli set: %q", out)
	}
	if got, err := rdb.Get(ctx, "hello").Result(); err != nil || got != "world" {
		t.Errorf("go-redis GET of redis-cli's value: %q, %v", got, err)
	}
	values := [][]byte{
		[]byte("plain"),
		append([]byte("\x00\x01\r\n\xff\""), randomBytes(7, 1000)...),
		randomBytes(8, 20<<10),
		randomBytes(9, 300<<10),
	}
	for i, v := range values {
		// go-redis writes, redis-cli reads.
		k := fmt.Sprintf("from-go-%d", i)
		if err := rdb.Set(ctx, k, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
		out := ts.redisCLI(nil, "--raw", "get", k)
		if got := bytes.TrimSuffix(out, []byte("\n")); !bytes.Equal(got, v) {
			t.Errorf("redis-cli --raw get %s: %d bytes, want %d, different", k, len(got), len(v))
		}
		// redis-cli writes (value from stdin), go-redis reads.
		k = fmt.Sprintf("from-cli-%d", i)
		if out := ts.redisCLI(v, "-x", "set", k); string(out) != "OK\n" {
			t.Errorf("redis-cli -x set: %q", out)
		}
		if got, err := rdb.Get(ctx, k).Bytes(); err != nil || !bytes.Equal(got, v) {
			t.Errorf("go-redis GET %s: %d bytes, %v; want %d, equal", k, len(got), err, len(v))
		}
	}
	// Several commands on redis-cli's stdin: it asks COMMAND DOCS first.
	out := ts.redisCLI([]byte("set a 1\nget a\nexists a nothere\nscan 0\ndbsize\nkvarray.set b 2 hashing\nget b\n"))
	if !regexp.MustCompile(`^OK\n1\n1\n0\n(.+\n)+\d+\nOK\n2\n$`).Match(out) {
		t.Errorf("redis-cli with commands on stdin:\n%s", out)
	}
	if out := ts.redisCLI(nil, "--scan", "--pattern", "from-*"); strings.Count(string(out), "\n") != 2*len(values) {
		t.Errorf("redis-cli --scan --pattern from-*:\n%s", out)
	}
	if out := ts.redisCLI(nil, "info", "kvarray"); !bytes.Contains(out, []byte("device_bytes:")) {
		t.Errorf("redis-cli info kvarray:\n%s", out)
	}
	if out := ts.redisCLI(nil, "foo", "bar"); !bytes.Contains(out, []byte("ERR unknown command 'foo', with args beginning with: 'bar'")) {
		t.Errorf("redis-cli foo bar: %q", out)
	}
}

// TestRedisBenchmark runs redis-benchmark, a client nobody here wrote:
// no errors, and what it wrote reads back.
func TestRedisBenchmark(t *testing.T) {
	bin := tool(t, "redis-benchmark")
	ts := startServer(t, "")
	ctx := context.Background()
	rdb := ts.client()
	for _, extra := range [][]string{nil, {"-r", "2000"}} {
		args := append([]string{"-h", "127.0.0.1", "-p", ts.port(), "-t", "set,get", "-n", "20000", "-P", "16", "-d", "4096", "-q"}, extra...)
		cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		out, err := exec.CommandContext(cctx, bin, args...).CombinedOutput()
		cancel()
		t.Logf("redis-benchmark %s:\n%s", strings.Join(args, " "), summary(out))
		if err != nil || bytes.Contains(bytes.ToLower(out), []byte("error")) || !bytes.Contains(out, []byte("GET: ")) || !bytes.Contains(out, []byte("SET: ")) {
			t.Fatalf("redis-benchmark: %v\n%s", err, out)
		}
	}
	// Its keys: key:__rand_int__ (no -r), and key:000000000123 style.
	keys, err := rdb.Keys(ctx, "key:*").Result()
	if err != nil || len(keys) < 100 || !slices.Contains(keys, "key:__rand_int__") {
		t.Fatalf("after redis-benchmark: %d keys, %v", len(keys), err)
	}
	for _, k := range keys {
		v, err := rdb.Get(ctx, k).Bytes()
		if err != nil || len(v) != 4096 {
			t.Fatalf("GET %s: %d bytes, %v", k, len(v), err)
		}
	}
	// Its string and counter tests, with the counter read back.
	args := []string{"-h", "127.0.0.1", "-p", ts.port(), "-t", "ping,set,get,incr,mset", "-n", "2000", "-P", "16", "-q"}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	out, err := exec.CommandContext(cctx, bin, args...).CombinedOutput()
	cancel()
	for _, want := range []string{"PING_INLINE: ", "SET: ", "GET: ", "INCR: ", "MSET (10 keys): "} {
		if err != nil || bytes.Contains(bytes.ToLower(out), []byte("error")) || !bytes.Contains(out, []byte(want)) {
			t.Fatalf("redis-benchmark %s: %v, no %q\n%s", strings.Join(args, " "), err, want, out)
		}
	}
	if n, err := rdb.Get(ctx, "counter:__rand_int__").Int(); err != nil || n != 2000 {
		t.Errorf("after redis-benchmark -t incr -n 2000: counter = %d, %v", n, err)
	}
}

// TestRedisBenchmarkDefaultList runs redis-benchmark's whole default test
// list (no -t: strings, lists, sets, hashes, sorted sets, LRANGE_*, MSET,
// and XADD where its version has it) to the end: every line it prints is a
// result, none an error, and the list and hash it wrote read back. 600
// requests, so that LRANGE_600 has 600 elements to read.
func TestRedisBenchmarkDefaultList(t *testing.T) {
	bin := tool(t, "redis-benchmark")
	ts := startServer(t, "")
	ctx := context.Background()
	const n = 600
	// RESP2, then RESP3 (-3: HELLO 3 first).
	for _, resp := range [][]string{nil, {"-3"}} {
		ts.client().FlushAll(ctx)
		args := append([]string{"-h", "127.0.0.1", "-p", ts.port(), "-n", fmt.Sprint(n), "-c", "20", "-q"}, resp...)
		cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		out, err := exec.CommandContext(cctx, bin, args...).CombinedOutput()
		cancel()
		lines := summary(out)
		t.Logf("redis-benchmark %s:\n%s", strings.Join(args, " "), lines)
		if err != nil {
			t.Fatalf("redis-benchmark %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		result := regexp.MustCompile(`^(.+): [0-9.]+ requests per second`)
		var names []string
		for _, l := range strings.Split(lines, "\n") {
			m := result.FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("redis-benchmark %s printed %q, not a result", strings.Join(args, " "), l)
			}
			names = append(names, m[1])
		}
		// Redis 7.0's default list, in its order; a later version may
		// add tests (7.2: XADD) after them.
		want := []string{"PING_INLINE", "PING_MBULK", "SET", "GET", "INCR", "LPUSH", "RPUSH", "LPOP", "RPOP", "SADD", "HSET", "SPOP", "ZADD", "ZPOPMIN",
			"LPUSH (needed to benchmark LRANGE)", "LRANGE_100 (first 100 elements)", "LRANGE_300 (first 300 elements)", "LRANGE_500 (first 500 elements)", "LRANGE_600 (first 600 elements)", "MSET (10 keys)"}
		if len(names) < len(want) || !slices.Equal(names[:len(want)], want) {
			t.Fatalf("redis-benchmark %s ran %q, want %q first", strings.Join(args, " "), names, want)
		}
		// Every test writes the same 3-byte value (-d 3). LPUSH and RPUSH
		// push n each, LPOP and RPOP pop them, then LRANGE's LPUSH pushes
		// n: n of them left.
		rdb := ts.client()
		v, err := rdb.HGet(ctx, "myhash", "element:__rand_int__").Result()
		if err != nil || len(v) != 3 {
			t.Errorf("after redis-benchmark %s: HGET myhash = %q, %v", strings.Join(args, " "), v, err)
		}
		if got, err := rdb.LRange(ctx, "mylist", 0, -1).Result(); err != nil || len(got) != n || slices.ContainsFunc(got, func(e string) bool { return e != v }) {
			t.Errorf("after redis-benchmark %s: mylist has %d elements (%.3q), %v", strings.Join(args, " "), len(got), got[:min(3, len(got))], err)
		}
	}
}

// TestMaxValue: a value over the array's largest value gets an error and
// the connection goes on, both when it is read (up to the bulk limit) and
// when it is dropped as it arrives (over it).
func TestMaxValue(t *testing.T) {
	ts := startServer(t, memHybrid+"max_value: 32KiB\n")
	rdb := ts.client()
	ctx := context.Background()
	if err := rdb.Set(ctx, "keep", "safe", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{32<<10 + 1, 60 << 10, 100 << 10, 3 << 20} {
		for _, cmd := range [][]any{{"set", "big", nil}, {"mset", "a", "1", "big", nil}, {"kvarray.set", "big", nil, "splitting"}, {"set", "big", nil, "nx"}} {
			args := slices.Clone(cmd)
			args[slices.Index(args, nil)] = randomBytes(uint64(n), n)
			err := rdb.Do(ctx, args...).Err()
			if err == nil || !strings.HasPrefix(err.Error(), "ERR value too large: ") {
				t.Errorf("%s of %d bytes: %v", cmd[0], n, err)
			}
		}
	}
	if err := rdb.Set(ctx, "fits", randomBytes(1, 32<<10-keyspace.ValueOverhead), 0).Err(); err != nil {
		t.Errorf("a value of the largest size: %v", err)
	}
	if n, _ := rdb.Exists(ctx, "big", "a").Result(); n != 0 {
		t.Errorf("%d of the refused keys exist", n)
	}
	if v, err := rdb.Get(ctx, "keep").Result(); err != nil || v != "safe" {
		t.Errorf("GET keep = %q, %v", v, err)
	}
}

// TestShutdownWaitsForInFlight: commands the server has read when
// Shutdown is called complete and their replies arrive; then the
// connection closes, and new connections are refused.
func TestShutdownWaitsForInFlight(t *testing.T) {
	// A connection's pipelined SETs run concurrently (pipeline.go): each
	// takes a read and a write, at least 100 ms.
	slow := memHybrid + "device: {perf: {latency: 50ms}}\n"
	ts := startServer(t, slow)
	const n = 16
	conns := make([]*rawConn, 4)
	for i := range conns {
		conns[i] = ts.dial()
		if r := conns[i].do("PING"); r.str != "PONG" {
			t.Fatal(r)
		}
	}
	for i, c := range conns {
		var pipe []byte
		for j := range n {
			pipe = append(pipe, encode("SET", fmt.Sprintf("k%d-%d", i, j), fmt.Sprintf("v%d-%d", i, j))...)
		}
		c.send(pipe)
	}
	// Wait until every connection runs its batch: the server has read it.
	running := func() bool {
		ts.srv.mu.Lock()
		defer ts.srv.mu.Unlock()
		for _, c := range ts.srv.connList() {
			if p := c.lastCmd.Load(); p == nil || *p != "set" {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(10 * time.Second); !running() && time.Now().Before(deadline); {
		time.Sleep(100 * time.Microsecond)
	}
	started := time.Now()
	ts.stop()
	took := time.Since(started)
	for i, c := range conns {
		for j := range n {
			if r := c.read(); r.str != "OK" {
				t.Fatalf("conn %d, SET %d: %v", i, j, r)
			}
		}
		c.expectEOF()
	}
	// Every SET is stored: the array is still open.
	for i := range conns {
		for j := range n {
			b, err := ts.a.Retrieve(context.Background(), keyspace.RawKey(0, []byte(fmt.Sprintf("k%d-%d", i, j))))
			v, _ := keyspace.DecodeValue(b)
			if err != nil || string(v.V) != fmt.Sprintf("v%d-%d", i, j) {
				t.Errorf("k%d-%d after shutdown: %q, %v", i, j, v.V, err)
			}
		}
	}
	if took < 50*time.Millisecond {
		t.Errorf("Shutdown returned after %v: it did not wait for the commands in flight", took)
	}
	if nc, err := net.DialTimeout("tcp", ts.addr, time.Second); err == nil {
		nc.Close()
		t.Error("a connection was accepted after Shutdown")
	}
}

// TestShutdownTimeout: when the context ends first, Shutdown closes the
// connections and reports it.
func TestShutdownTimeout(t *testing.T) {
	ts := startServer(t, memHybrid+"device: {perf: {latency: 200ms}}\n")
	c := ts.dial()
	var pipe []byte
	for j := range 50 {
		pipe = append(pipe, encode("SET", fmt.Sprintf("k%d", j), "v")...)
	}
	c.send(pipe)
	for ts.srv.stats.commands.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := ts.srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v, want DeadlineExceeded", err)
	}
	select {
	case err := <-ts.done:
		if !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	ts.ended = true
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var buf [1 << 12]byte
	for {
		if _, err := c.Read(buf[:]); err != nil {
			break
		}
	}
}

func TestMaxClients(t *testing.T) {
	ts := startServer(t, "", WithMaxClients(3))
	for range 3 {
		if r := ts.dial().do("PING"); r.str != "PONG" {
			t.Fatal(r)
		}
	}
	c := ts.dial()
	if r := c.read(); r.str != "ERR max number of clients reached" {
		t.Errorf("the 4th client: %v", r)
	}
	c.expectEOF()
	if got := ts.srv.stats.rejected.Load(); got != 1 {
		t.Errorf("rejected_connections = %d", got)
	}
}

// summary is redis-benchmark's result lines, without its progress lines.
func summary(out []byte) string {
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if i := strings.LastIndex(l, "\r"); i >= 0 {
			l = l[i+1:]
		}
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// TestAdminScrubRebuild drives KVARRAY.SCRUB and KVARRAY.REBUILD over a
// real connection: a rebuilt mem device then serves with its neighbours
// failed.
func TestAdminScrubRebuild(t *testing.T) {
	ts := startServer(t, "")
	rdb := ts.client()
	ctx := context.Background()
	for i := 0; i < 50; i++ {
		if err := rdb.Set(ctx, fmt.Sprint("k", i), fmt.Sprint("value-", i), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	out, err := rdb.Do(ctx, "kvarray.scrub").Text()
	if err != nil || !strings.Contains(out, `"keys":50`) {
		t.Fatalf("scrub: %q %v", out, err)
	}
	if out, err = rdb.Do(ctx, "kvarray.scrub", "repair").Text(); err != nil || !strings.Contains(out, `"repair":true`) {
		t.Fatalf("scrub repair: %q %v", out, err)
	}
	if _, err := rdb.Do(ctx, "kvarray.scrub", "bogus").Text(); err == nil {
		t.Fatal("scrub with a bad argument succeeded")
	}
	if out, err = rdb.Do(ctx, "kvarray.rebuild", "2").Text(); err != nil || !strings.Contains(out, `"device":2`) {
		t.Fatalf("rebuild: %q %v", out, err)
	}
	for _, d := range []string{"1", "3"} {
		if err := rdb.Do(ctx, "kvarray.fail", d).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 50; i++ {
		if v, err := rdb.Get(ctx, fmt.Sprint("k", i)).Result(); err != nil || v != fmt.Sprint("value-", i) {
			t.Fatalf("k%d after rebuild with neighbours failed: %q %v", i, v, err)
		}
	}
}

// TestValueCacheInfo: GETs of a value just SET are answered from the value
// cache (on by default), which INFO kvarray counts; a SET over it is seen
// at once; with value_cache 0 there is none.
func TestValueCacheInfo(t *testing.T) {
	ctx := context.Background()
	field := func(info, name string) int64 {
		t.Helper()
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, name+":"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("INFO %s: %q", name, v)
				}
				return n
			}
		}
		t.Fatalf("INFO kvarray lacks %s:\n%s", name, info)
		return 0
	}
	for _, c := range []struct {
		yaml      string
		limit     int64
		wantHits  bool
		wantCache bool
	}{
		{memHybrid, int64(config.DefaultValueCache()), true, true},
		{memHybrid + "value_cache: 0\n", 0, false, false},
	} {
		ts := startServer(t, c.yaml)
		rdb := ts.client()
		for i, v := range []string{strings.Repeat("a", 3000), strings.Repeat("b", 100)} {
			if err := rdb.Set(ctx, "k", v, 0).Err(); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if got, err := rdb.Get(ctx, "k").Result(); err != nil || got != v {
					t.Fatalf("GET k after SET %d: %d bytes, %v", i, len(got), err)
				}
			}
		}
		info, err := rdb.Info(ctx, "kvarray").Result()
		if err != nil {
			t.Fatal(err)
		}
		hits, misses := field(info, "value_cache_hits"), field(info, "value_cache_misses")
		if lim := field(info, "value_cache_limit_bytes"); lim != c.limit {
			t.Errorf("value_cache_limit_bytes %d, want %d", lim, c.limit)
		}
		if (hits >= 4) != c.wantHits || (field(info, "value_cache_values") > 0) != c.wantCache {
			t.Errorf("%q: 4 GETs of values just SET: %d hits, %d misses, %d values kept", c.yaml[len(memHybrid):], hits, misses, field(info, "value_cache_values"))
		}
	}
}
