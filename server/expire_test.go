package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvarray/kvarray/keyspace"
)

// waitFor polls cond every 20 ms, at most limit times 20 ms: the expiry
// cycle's work is checked by its result, never by its timing.
func waitFor(limit int, cond func() bool) bool {
	for range limit {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cond()
}

// TestExpiryReclaimed: keys past their expire-at are never returned, and
// the active cycle deletes them (values and index entries) without
// touching keys that have not expired.
func TestExpiryReclaimed(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	rdb := ts.client()
	const n = 100
	for i := range n {
		rdb.Set(ctx, fmt.Sprintf("short%d", i), "v", 150*time.Millisecond)
		rdb.Set(ctx, fmt.Sprintf("long%d", i), "v", time.Hour)
		rdb.Set(ctx, fmt.Sprintf("none%d", i), "v", 0)
	}
	c3 := ts.client(func(o *redis.Options) { o.DB = 3 })
	c3.Set(ctx, "short-db3", "v", 150*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	for i := range n {
		if v, err := rdb.Get(ctx, fmt.Sprintf("short%d", i)).Result(); err == nil {
			t.Fatalf("expired short%d returned: %q", i, v)
		}
	}
	// The values go first, then their index entries.
	reclaimed := waitFor(250, func() bool {
		keys, err := ts.a.Keys(ctx, keyspace.RawKey(0, []byte("short")))
		k3, err3 := ts.a.Keys(ctx, keyspace.RawKey(3, nil))
		idx, erri := ts.a.Keys(ctx, keyspace.ExpiryPrefix())
		return err == nil && err3 == nil && erri == nil && len(keys) == 0 && len(k3) == 0 && len(idx) <= n
	})
	if !reclaimed {
		t.Fatal("the expiry cycle did not delete the expired values")
	}
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 2*100 {
		t.Errorf("DBSIZE = %d, %v; want 200", n, err)
	}
	// The index holds the long keys' entries only.
	idx, err := ts.a.Keys(ctx, keyspace.ExpiryPrefix())
	if err != nil || len(idx) != n {
		t.Errorf("expiry index: %d entries, %v; want %d", len(idx), err, n)
	}
	if info, _ := rdb.Info(ctx, "stats").Result(); !containsLine(info, "expired_keys:101") {
		t.Errorf("INFO stats:\n%s", info)
	}
}

func containsLine(s, line string) bool {
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		l := s[:i]
		if len(l) > 0 && l[len(l)-1] == '\r' {
			l = l[:len(l)-1]
		}
		if l == line {
			return true
		}
		if i == len(s) {
			break
		}
		s = s[i+1:]
	}
	return false
}

// TestExpirySurvives: TTLs survive a restart and a rebuild with the right
// remaining time (they are bytes of the value), and a key that expired
// while the server was down is never returned and is reclaimed at start.
func TestExpirySurvives(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	rdb := ts.client()
	for i := range 30 {
		rdb.Set(ctx, fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i), time.Hour)
	}
	rdb.Set(ctx, "soon", "v", 200*time.Millisecond)
	ts.restart()
	time.Sleep(250 * time.Millisecond)
	rdb = ts.client()
	check := func(when string) {
		for i := range 30 {
			k := fmt.Sprintf("k%d", i)
			if v, err := rdb.Get(ctx, k).Result(); err != nil || v != fmt.Sprintf("v%d", i) {
				t.Errorf("%s: %s = %q, %v", when, k, v, err)
			}
			if d, err := rdb.TTL(ctx, k).Result(); err != nil || d < 50*time.Minute || d > time.Hour {
				t.Errorf("%s: TTL %s = %v, %v", when, k, d, err)
			}
		}
		if v, err := rdb.Get(ctx, "soon").Result(); err == nil {
			t.Errorf("%s: expired key returned: %q", when, v)
		}
	}
	check("after restart")
	for _, dev := range []string{"0", "3"} {
		if err := rdb.Do(ctx, "kvarray.rebuild", dev).Err(); err != nil {
			t.Fatalf("KVARRAY.REBUILD %s: %v", dev, err)
		}
	}
	check("after rebuilding devices 0 and 3")
	if !waitFor(250, func() bool { ks, _ := ts.a.Keys(ctx, keyspace.RawKey(0, []byte("soon"))); return len(ks) == 0 }) {
		t.Error("the key that expired while the server was down was not reclaimed")
	}
}

// TestExpiryDuringTransactions: transactions that list keys (which reads
// the expiry index) run while the cycle reclaims keys, and neither waits
// for the other forever; once the keys have expired, KEYS in a
// transaction lists none of them, reclaimed or not.
func TestExpiryDuringTransactions(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	rdb := ts.client()
	keysInTx := func(pattern string) []string {
		t.Helper()
		cmds, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Keys(ctx, pattern)
			p.Incr(ctx, "n")
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return cmds[0].(*redis.StringSliceCmd).Val()
	}
	for round := range 10 {
		for i := range 50 {
			rdb.Set(ctx, fmt.Sprintf("r%d-%d", round, i), "v", time.Duration(10+i)*time.Millisecond)
		}
		for range 5 {
			keysInTx("*")
			time.Sleep(5 * time.Millisecond)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if keys := keysInTx("r*"); len(keys) != 0 {
		t.Errorf("KEYS in a transaction listed %d expired keys: %q", len(keys), keys[:min(len(keys), 5)])
	}
}

// TestExpiryManyPages: keys due at the same moment over several pages of
// the index listing are all reclaimed, entries included; a stale entry
// (its key set again without a TTL) deletes nothing; entries not yet due
// stay. (bench/expiry.sh measures a million such keys.)
func TestExpiryManyPages(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	rdb := ts.client(func(o *redis.Options) { o.PoolSize = 4 })
	n := 2*expiryPage + 100
	at := time.Now().Add(300 * time.Millisecond).UnixMilli()
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			p.Do(ctx, "set", fmt.Sprintf("due%d", i), "v", "pxat", at)
		}
		for i := range 20 {
			p.Do(ctx, "set", fmt.Sprintf("again%d", i), "v", "pxat", at)
			p.Set(ctx, fmt.Sprintf("again%d", i), "kept", 0)
			p.Set(ctx, fmt.Sprintf("later%d", i), "v", time.Hour)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	reclaimed := waitFor(500, func() bool {
		idx, err := ts.a.Keys(ctx, keyspace.ExpiryPrefix())
		return err == nil && len(idx) == 20
	})
	if !reclaimed {
		t.Fatal("the due entries were not all reclaimed")
	}
	if keys, err := ts.a.Keys(ctx, keyspace.RawKey(0, []byte("due"))); err != nil || len(keys) != 0 {
		t.Errorf("%d expired values left, %v", len(keys), err)
	}
	for i := range 20 {
		if v, err := rdb.Get(ctx, fmt.Sprintf("again%d", i)).Result(); err != nil || v != "kept" {
			t.Errorf("again%d = %q, %v: a stale entry deleted a live key", i, v, err)
		}
		if d, err := rdb.TTL(ctx, fmt.Sprintf("later%d", i)).Result(); err != nil || d < 50*time.Minute {
			t.Errorf("later%d TTL = %v, %v", i, d, err)
		}
	}
}

// TestExpiredNeverListed: with the expiry cycle stopped, keys past their
// expire-at stay stored, yet SCAN, KEYS, RANDOMKEY and EXISTS never
// return them; DBSIZE counts them until reclaimed, as Redis does.
func TestExpiredNeverListed(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	rdb := ts.client()
	if err := ts.srv.start(); err != nil {
		t.Fatal(err)
	}
	ts.srv.stopExpiry()
	for i := range 50 {
		rdb.Set(ctx, fmt.Sprintf("gone%02d", i), "v", 30*time.Millisecond)
	}
	rdb.Set(ctx, "kept", "v", 0)
	time.Sleep(50 * time.Millisecond)
	var scanned []string
	for cur := uint64(0); ; {
		keys, next, err := rdb.Scan(ctx, cur, "", 7).Result()
		if err != nil {
			t.Fatal(err)
		}
		scanned = append(scanned, keys...)
		if cur = next; cur == 0 {
			break
		}
	}
	if len(scanned) != 1 || scanned[0] != "kept" {
		t.Errorf("SCAN returned %q", scanned)
	}
	if keys, err := rdb.Keys(ctx, "*").Result(); err != nil || len(keys) != 1 {
		t.Errorf("KEYS returned %q, %v", keys, err)
	}
	for range 10 {
		if k, err := rdb.RandomKey(ctx).Result(); err != nil || k != "kept" {
			t.Errorf("RANDOMKEY returned %q, %v", k, err)
		}
	}
	if n, err := rdb.Exists(ctx, "gone00", "gone49").Result(); err != nil || n != 0 {
		t.Errorf("EXISTS of expired keys = %d, %v", n, err)
	}
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 51 {
		t.Errorf("DBSIZE = %d, %v: keys not yet reclaimed count", n, err)
	}
}
