package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvarray/kvarray/device/redis/redistest"
	"github.com/kvarray/kvarray/internal/rdb"
	"github.com/kvarray/kvarray/internal/rdb/rdbtest"
)

// dumpAll DUMPs every key of snap from the server at from and RESTOREs
// it, with its expiry, in the server at to.
func dumpAll(t *testing.T, snap rdbtest.Snapshot, from, to string) {
	t.Helper()
	ctx := context.Background()
	for db, keys := range snap {
		src, dst := rdbtest.Client(t, from, db), rdbtest.Client(t, to, db)
		for k, it := range keys {
			p, err := src.Dump(ctx, k).Result()
			if err != nil {
				t.Fatalf("DUMP %q on %s: %v", k, from, err)
			}
			args := []any{"RESTORE", k, it.ExpireAt, p, "REPLACE"}
			if it.ExpireAt != 0 {
				args = append(args, "ABSTTL")
			}
			if err := dst.Do(ctx, args...).Err(); err != nil {
				t.Fatalf("RESTORE %q on %s: %v", k, to, err)
			}
		}
	}
}

// TestDumpRestoreRedis: every type in every encoding moves from a real
// redis-server 7.0 to kvarray through DUMP and RESTORE and back to
// another redis-server, each step equal to what the first held.
func TestDumpRestoreRedis(t *testing.T) {
	r1, r2 := redistest.Start(t), redistest.Start(t)
	rdbtest.Populate(t, r1.Addr())
	want := rdbtest.Read(t, r1.Addr(), rdbtest.DBs...)
	ts := startServer(t, "")
	dumpAll(t, want, r1.Addr(), ts.addr)
	rdbtest.Equal(t, want, rdbtest.Read(t, ts.addr, rdbtest.DBs...))
	dumpAll(t, want, ts.addr, r2.Addr())
	rdbtest.Equal(t, want, rdbtest.Read(t, r2.Addr(), rdbtest.DBs...))
}

// TestRestoreOptions: RESTORE's options and errors, as Redis answers.
func TestRestoreOptions(t *testing.T) {
	ts := startServer(t, "")
	c := ts.dial()
	ctx := context.Background()
	str := string(rdb.Dump(rdb.Object{Kind: rdb.String, Str: []byte("v1")}))
	hash := string(rdb.Dump(rdb.Object{Kind: rdb.Hash, Fields: []rdb.Field{{Name: []byte("f"), Value: []byte("x")}}}))
	bad := []byte(str)
	bad[2] ^= 0xff
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"RESTORE", "k", "0", str}, `+"OK"`},
		{[]string{"GET", "k"}, `$"v1"`},
		{[]string{"RESTORE", "k", "0", str}, `-"BUSYKEY Target key name already exists."`},
		{[]string{"RESTORE", "k", "0", hash, "REPLACE", "IDLETIME", "10"}, `+"OK"`},
		{[]string{"HGET", "k", "f"}, `$"x"`},
		{[]string{"RESTORE", "k", "0", str, "REPLACE", "FREQ", "5"}, `+"OK"`},
		{[]string{"TYPE", "k"}, `+"string"`},
		{[]string{"RESTORE", "k", "0", str, "REPLACE", "FREQ", "300"}, `-"ERR Invalid FREQ value, must be >= 0 and <= 255"`},
		{[]string{"RESTORE", "k", "0", str, "REPLACE", "IDLETIME", "-1"}, `-"ERR Invalid IDLETIME value, must be >= 0"`},
		{[]string{"RESTORE", "k", "0", str, "REPLACE", "IDLETIME", "1", "FREQ", "1"}, `-"ERR syntax error"`},
		{[]string{"RESTORE", "n", "-5", str}, `-"ERR Invalid TTL value, must be >= 0"`},
		{[]string{"RESTORE", "n", "0", string(bad)}, `-"ERR DUMP payload version or checksum are wrong"`},
		{[]string{"RESTORE", "n", "0", "short"}, `-"ERR DUMP payload version or checksum are wrong"`},
		{[]string{"RESTORE", "t", "100000", str}, `+"OK"`},
		{[]string{"RESTORE", "k", "1", str, "REPLACE", "ABSTTL"}, `+"OK"`}, // expired: deletes
		{[]string{"EXISTS", "k"}, `:"0"`},
		{[]string{"DUMP", "nosuch"}, "(nil)"},
	} {
		if got := c.do(tc.args...).String(); got != tc.want {
			t.Errorf("%.40q: %s, want %s", tc.args, got, tc.want)
		}
	}
	if pttl, err := rdbtest.Client(t, ts.addr, 0).PTTL(ctx, "t").Result(); err != nil || pttl > 100*time.Second || pttl < 90*time.Second {
		t.Errorf("PTTL after RESTORE t 100000: %v, %v", pttl, err)
	}
	// A real Redis's stream is a type kvarray does not hold.
	r := redistest.Start(t)
	rc := rdbtest.Client(t, r.Addr(), 0)
	rc.XAdd(ctx, &redisXAdd)
	p, err := rc.Dump(ctx, "s").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := c.do("RESTORE", "s", "0", p).String(); !strings.HasPrefix(got, `-"ERR Bad data format`) || !strings.Contains(got, "stream") {
		t.Errorf("RESTORE of a stream: %s", got)
	}
}

var redisXAdd = redis.XAddArgs{Stream: "s", ID: "1-1", Values: []string{"f", "v"}}
