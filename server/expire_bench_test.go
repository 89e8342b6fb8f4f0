package server

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvarray/kvarray/keyspace"
)

// TestExpiryMass is a benchmark, run only with KVARRAY_EXPIRY_KEYS=N: N
// keys expire in the same second, among N keys without a TTL. It prints
// how long the cycle takes to reclaim them and the GET latency another
// client sees meanwhile against before (a ratio; nothing is asserted about
// time). It checks that every expired key is gone (values and index
// entries) and every other key is still there.
func TestExpiryMass(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("KVARRAY_EXPIRY_KEYS"))
	if n <= 0 {
		t.Skip("a benchmark: set KVARRAY_EXPIRY_KEYS=N to run it")
	}
	ts := startServer(t, "devices: [mem:d0, mem:d1, mem:d2, mem:d3, mem:d4, mem:d5]\nmode: hybrid\ndefault: replication\n")
	ctx := context.Background()
	rdb := ts.client(func(o *redis.Options) { o.PoolSize = 8 })
	// Far enough ahead for the writes to finish first (about 5000 pairs/s
	// here; the test fails rather than measure keys expiring as written).
	at := time.Now().Add(time.Duration(n/3000)*time.Second + 5*time.Second).Truncate(time.Second)
	start := time.Now()
	for i := 0; i < n; i += 1000 {
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j := i; j < min(i+1000, n); j++ {
				p.Do(ctx, "set", fmt.Sprintf("exp:%d", j), "v", "pxat", at.UnixMilli()+int64(j%1000))
				p.Set(ctx, fmt.Sprintf("keep:%d", j), "v", 0)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote %d keys with a TTL ending in the same second and %d without, in %v", n, n, time.Since(start))
	if time.Until(at) < 2*time.Second {
		t.Fatalf("writing took too long: the keys expire in %v", time.Until(at))
	}
	reader := ts.client()
	sample := func(d time.Duration) []time.Duration {
		var lat []time.Duration
		for end := time.Now().Add(d); time.Now().Before(end); {
			s := time.Now()
			if err := reader.Get(ctx, "keep:1").Err(); err != nil {
				t.Fatal(err)
			}
			lat = append(lat, time.Since(s))
		}
		slices.Sort(lat)
		return lat
	}
	p := func(lat []time.Duration, q float64) time.Duration { return lat[int(float64(len(lat)-1)*q)] }
	time.Sleep(time.Until(at.Add(-1500 * time.Millisecond)))
	before := sample(time.Second)
	time.Sleep(time.Until(at))
	t0 := time.Now()
	var during []time.Duration
	done := false
	for range 1200 { // at most 10 minutes
		during = append(during, sample(500*time.Millisecond)...)
		left, err := ts.a.Keys(ctx, keyspace.ExpiryPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 {
			done = true
			break
		}
	}
	took := time.Since(t0)
	slices.Sort(during)
	if !done {
		t.Fatal("the expiry cycle did not reclaim the keys")
	}
	left, _ := ts.a.Keys(ctx, keyspace.RawKey(0, []byte("exp:")))
	kept, _ := ts.a.Keys(ctx, keyspace.RawKey(0, []byte("keep:")))
	if len(left) != 0 || len(kept) != n {
		t.Fatalf("after the cycle: %d expired values left, %d of %d others kept", len(left), len(kept), n)
	}
	t.Logf("reclaimed %d keys in %v (%.0f keys/s)", n, took, float64(n)/took.Seconds())
	t.Logf("GET latency before: p50 %v p99 %v (%d GETs); while reclaiming: p50 %v p99 %v max %v (%d GETs); p99 ratio %.1f",
		p(before, 0.5), p(before, 0.99), len(before), p(during, 0.5), p(during, 0.99), during[len(during)-1], len(during),
		float64(p(during, 0.99))/float64(p(before, 0.99)))
}
