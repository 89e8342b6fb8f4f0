package array

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/kvarray/kvarray/mechanism/packing"
	"github.com/kvarray/kvarray/mechanism/replication"
)

// TestMeasureTinyOverhead is issue 13's tiny-value experiment: N values
// of 8–32 bytes (uniform) under 24-byte keys, stored in an array of 6 mem
// devices (KVARRAY_TINY_DEVICES) three ways: tiny values in buckets
// (Packing k=4, r=2, or k=devices-2, r=2, about
// KVARRAY_TINY_BUCKET bytes per bucket, default 8192), Replication (3
// copies, tolerance 2 as well) and Packing alone; it prints the storage
// overhead of each, device bytes / user bytes. Device bytes are what the
// mem devices account after Settle: len(key)+len(value) of every device
// key, so piece headers, internal keys, parities, Packing's delta log
// (empty once settled), the array headers and any resync records all
// count; user bytes are Σ len(key)+len(value). A measurement, so it runs
// only with KVARRAY_TINY_N set:
//
//	KVARRAY_TINY_N=1000000 go test -run MeasureTinyOverhead -v ./array/
func TestMeasureTinyOverhead(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("KVARRAY_TINY_N"))
	if n == 0 {
		t.Skip("set KVARRAY_TINY_N to measure")
	}
	bucketBytes := 8192
	if s := os.Getenv("KVARRAY_TINY_BUCKET"); s != "" {
		bucketBytes, _ = strconv.Atoi(s)
	}
	devs, k := 6, 4
	if s := os.Getenv("KVARRAY_TINY_DEVICES"); s != "" {
		devs, _ = strconv.Atoi(s)
		k = devs - 2
	}
	// Entries average 2 + 24 + 20 bytes.
	buckets := max(1, n*46/bucketBytes)
	mechs := WithMechanisms(packing.New(k, 2, 0), replication.New(3))
	for _, tc := range []struct {
		name  string
		opts  []Option
		scrub int // rounds of scrub --repair to measure after
	}{
		{fmt.Sprintf("tiny (%d buckets, packing %d+2)", buckets, k), []Option{mechs, WithDefault("replication"), WithTiny(Tiny{Max: 64, Buckets: buckets})}, 1},
		{"replication 3", []Option{mechs, WithDefault("replication")}, 0},
		{fmt.Sprintf("packing %d+2", k), []Option{mechs, WithDefault("packing")}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, devs, tc.opts...)
			rng := rand.New(rand.NewPCG(1, 2))
			start := time.Now()
			var user int64
			const window = 512
			fs := make([]*Future, 0, window)
			drain := func() {
				for _, f := range fs {
					if err := f.Err(); err != nil {
						t.Fatal(err)
					}
				}
				fs = fs[:0]
			}
			for i := range n {
				k := fmt.Appendf(nil, "tiny-key-%015d", i)
				v := randBytes(rng, 8+rng.IntN(25))
				user += int64(len(k) + len(v))
				fs = append(fs, r.a.StoreAsync(context.Background(), k, v))
				if len(fs) == window {
					drain()
				}
			}
			drain()
			load := time.Since(start)
			space := func() (used, keys int64) {
				if err := r.a.Settle(context.Background()); err != nil {
					t.Fatal(err)
				}
				for _, m := range r.mems {
					info, err := m.Info(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					used, keys = used+info.Used, keys+info.Keys
				}
				return used, keys
			}
			used, keys := space()
			t.Logf("%s: %d values, %d user bytes, %d device bytes in %d device keys: overhead %.3f (loaded in %v, %.0f/s)",
				tc.name, n, user, used, keys, float64(used)/float64(user), load.Round(time.Millisecond), float64(n)/load.Seconds())
			// The background compaction regroups the sets that moves
			// and deletes left sparse.
			start = time.Now()
			if err := r.a.Compact(context.Background()); err != nil {
				t.Fatal(err)
			}
			compact := time.Since(start)
			used, keys = space()
			t.Logf("%s: after Compact (%v): %d device bytes in %d device keys: overhead %.3f",
				tc.name, compact.Round(time.Millisecond), used, keys, float64(used)/float64(user))
			// Scrub regroups Packing's sparse sets (those that lost
			// half their members: buckets that grew moved out of them).
			for round := 1; round <= tc.scrub; round++ {
				start = time.Now()
				if _, err := r.a.Scrub(context.Background(), true, WithWorkers(64)); err != nil {
					t.Fatal(err)
				}
				scrub := time.Since(start)
				used, keys = space()
				t.Logf("%s: after scrub --repair %d (%v): %d device bytes in %d device keys: overhead %.3f",
					tc.name, round, scrub.Round(time.Millisecond), used, keys, float64(used)/float64(user))
			}
			// Spot check: the values read back.
			rng = rand.New(rand.NewPCG(1, 2))
			for i := range min(n, 1000) {
				k := fmt.Appendf(nil, "tiny-key-%015d", i)
				r.mustRead(string(k), randBytes(rng, 8+rng.IntN(25)))
			}
		})
	}
}
