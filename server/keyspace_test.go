package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvarray/kvarray/keyspace"
)

// TestScan: a full scan returns every key exactly once for any COUNT, and
// a key present for the whole scan is returned exactly once while other
// keys are stored and deleted meanwhile.
func TestScan(t *testing.T) {
	ts := startServer(t, "")
	rdb := ts.client()
	ctx := context.Background()
	var all []string
	for i := range 300 {
		k := fmt.Sprintf("key:%03d", i)
		all = append(all, k)
		if err := rdb.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, count := range []int64{1, 7, 100, 1000} {
		var got []string
		var cursor uint64
		for {
			keys, next, err := rdb.Scan(ctx, cursor, "", count).Result()
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(keys)) > count+2 {
				t.Errorf("COUNT %d: a page of %d keys", count, len(keys))
			}
			got = append(got, keys...)
			if next == 0 {
				break
			}
			cursor = next
		}
		sort.Strings(got)
		if !slices.Equal(got, all) {
			t.Errorf("COUNT %d: scan returned %d keys, want the %d keys once each", count, len(got), len(all))
		}
	}
	// A cursor whose slot was reused (or from before a restart) resumes at
	// its key's first bytes: keys may come again, none is skipped.
	first, cur, err := rdb.Scan(ctx, 0, "", 150).Result()
	if err != nil || cur == 0 {
		t.Fatal(cur, err)
	}
	for range 2 {
		got := slices.Clone(first)
		rest := cur ^ 0x8000 // another slot
		for rest != 0 {
			var page []string
			if page, rest, err = rdb.Scan(ctx, rest, "", 40).Result(); err != nil {
				t.Fatal(err)
			}
			got = append(got, page...)
		}
		sort.Strings(got)
		if got = slices.Compact(got); !slices.Equal(got, all) {
			t.Errorf("resumed from a stale cursor: %d distinct keys, want %d", len(got), len(all))
		}
		ts.restart() // the table is empty: the same again
		rdb = ts.client()
	}

	// Inside a transaction SCAN sees the transaction's own writes.
	cmds, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "key:0505", "v", 0)
		p.Del(ctx, "key:050")
		p.Scan(ctx, 0, "key:05*", 1000)
		p.Del(ctx, "key:0505")
		p.Set(ctx, "key:050", "v", 0)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if keys, _ := cmds[2].(*redis.ScanCmd).Val(); !slices.Contains(keys, "key:0505") || slices.Contains(keys, "key:050") || len(keys) != 10 {
		t.Errorf("SCAN in a transaction: %q", keys)
	}

	// MATCH and TYPE filter; redis-style iteration with go-redis's iterator.
	it := rdb.Scan(ctx, 0, "key:1?0", 5).Iterator()
	var matched []string
	for it.Next(ctx) {
		matched = append(matched, it.Val())
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(matched)
	if want := []string{"key:100", "key:110", "key:120", "key:130", "key:140", "key:150", "key:160", "key:170", "key:180", "key:190"}; !slices.Equal(matched, want) {
		t.Errorf("MATCH key:1?0 = %v", matched)
	}
	if keys, _, err := rdb.ScanType(ctx, 0, "", 1000, "hash").Result(); err != nil || len(keys) != 0 {
		t.Errorf("TYPE hash: %v, %v", keys, err)
	}
	if keys, _, err := rdb.ScanType(ctx, 0, "", 1000, "string").Result(); err != nil || len(keys) == 0 {
		t.Errorf("TYPE string: %d keys, %v", len(keys), err)
	}

	// Concurrent churn: keys key:* stay, churn:* come and go.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c := ts.client()
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-stop:
				return
			default:
			}
			k := fmt.Sprintf("churn:%d", rng.IntN(200))
			if rng.IntN(2) == 0 {
				c.Set(ctx, k, "x", 0)
			} else {
				c.Del(ctx, k)
			}
		}
	}()
	seen := map[string]int{}
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, "", 13).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			seen[k]++
		}
		if next == 0 {
			break
		}
		cursor = next
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	for _, k := range all {
		if seen[k] != 1 {
			t.Errorf("during churn %s was returned %d times", k, seen[k])
		}
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("during churn %s was returned %d times", k, n)
		}
	}

	// Errors as Redis words them.
	c := ts.dial()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"SCAN", "x"}, "ERR invalid cursor"},
		{[]string{"SCAN", "-1"}, "ERR invalid cursor"},
		{[]string{"SCAN", "0", "COUNT", "0"}, "ERR syntax error"},
		{[]string{"SCAN", "0", "COUNT", "x"}, "ERR value is not an integer or out of range"},
		{[]string{"SCAN", "0", "MATCH"}, "ERR syntax error"},
		{[]string{"SCAN", "0", "BOGUS", "1"}, "ERR syntax error"},
	} {
		if r := c.do(tc.args...); !r.isError() || r.str != tc.want {
			t.Errorf("%v: %v, want -%s", tc.args, r, tc.want)
		}
	}
	if r := c.do("KEYS", "key:29*"); len(r.elems) != 10 || r.elems[0].str != "key:290" || r.elems[9].str != "key:299" {
		t.Errorf("KEYS key:29* = %v", r)
	}
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n < 300 {
		t.Errorf("DBSIZE = %d, %v", n, err)
	}
}

// TestKeyCounts: DBSIZE and INFO keyspace follow every kind of write
// (plain and transactional, TTLs set and removed, deletes, FLUSHDB, the
// expiry cycle's reclaims) without listing keys, and stay right across a
// clean restart (saved counts) and after a write by a program that does
// not count (recounted).
func TestKeyCounts(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	rdb := ts.client()
	db3 := ts.client(func(o *redis.Options) { o.DB = 3 })
	for i := range 30 {
		rdb.Set(ctx, fmt.Sprintf("k%d", i), "v", 0)
		rdb.Set(ctx, fmt.Sprintf("t%d", i), "v", time.Hour)
		db3.Set(ctx, fmt.Sprintf("x%d", i), "v", time.Hour)
	}
	rdb.Set(ctx, "soon", "v", 50*time.Millisecond)
	rdb.Expire(ctx, "k0", time.Hour)
	rdb.Persist(ctx, "t0")
	rdb.Del(ctx, "k1", "t1", "nokey")
	rdb.Incr(ctx, "n")
	rdb.Append(ctx, "t2", "x")
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "m1", "v", time.Hour)
		p.Del(ctx, "k2")
		p.Rename(ctx, "k3", "k3b")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	db3.Do(ctx, "flushdb")
	db3.Set(ctx, "y", "v", 0)
	// 28 k (k3b; k0 with a TTL), 29 t (t0 without), n, m1; soon reclaimed.
	want := map[string]string{"db0": "keys=59,expires=30", "db3": "keys=1,expires=0"}
	check := func(when string) {
		t.Helper()
		info, err := rdb.Info(ctx, "keyspace").Result()
		if err != nil {
			t.Fatal(err)
		}
		for db, w := range want {
			if !strings.Contains(info, db+":"+w+",") {
				t.Errorf("%s: INFO keyspace %q, want %s:%s", when, info, db, w)
			}
		}
		if n, err := db3.DBSize(ctx).Result(); err != nil || n != 1 {
			t.Errorf("%s: DBSIZE of db 3 = %d, %v", when, n, err)
		}
	}
	if !waitFor(250, func() bool { n, _ := rdb.DBSize(ctx).Result(); return n == 59 }) {
		n, _ := rdb.DBSize(ctx).Result()
		keys, _ := rdb.Keys(ctx, "*").Result()
		info, _ := rdb.Info(ctx, "keyspace").Result()
		t.Fatalf("the reclaim of soon was not counted: DBSIZE %d, %d keys %q, %s", n, len(keys), keys, info)
	}
	exact := func() bool {
		if err := ts.srv.start(); err != nil { // and orders the read of ks
			t.Fatal(err)
		}
		_, _, exact := ts.srv.ks.Count(0)
		return exact
	}
	if !exact() {
		t.Fatal("the counts are not exact")
	}
	check("running")
	ts.restart()
	rdb, db3 = ts.client(), ts.client(func(o *redis.Options) { o.DB = 3 })
	if !exact() {
		t.Error("the counts saved at shutdown were not loaded")
	}
	check("after a clean restart")
	ts.stop()
	cli, err := keyspace.Open(ctx, ts.a, 16)
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.Set(ctx, 3, []byte("z"), []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	want["db3"] = "keys=2,expires=0"
	ts.restart()
	rdb, db3 = ts.client(), ts.client(func(o *redis.Options) { o.DB = 3 })
	if !waitFor(250, exact) {
		t.Fatal("no recount")
	}
	if n, err := db3.DBSize(ctx).Result(); err != nil || n != 2 {
		t.Errorf("after a recount: DBSIZE of db 3 = %d, %v", n, err)
	}
	info, _ := rdb.Info(ctx, "keyspace").Result()
	if !strings.Contains(info, "db0:keys=59,expires=30,") || !strings.Contains(info, "db3:keys=2,expires=0,") {
		t.Errorf("after a recount: INFO keyspace %q", info)
	}
}

func TestLiteralPrefix(t *testing.T) {
	if got := literalPrefix([]byte(`user:1*`)); string(got) != "user:1" {
		t.Errorf("literalPrefix = %q", got)
	}
}
