package keyspace

import (
	"context"
	"fmt"
	"github.com/kvarray/kvarray/array"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// truth counts db's keys and keys with an expiry by listing the keys and
// reading every value.
func truth(t *testing.T, s *Store, db int) (keys, expires int64) {
	t.Helper()
	ctx := context.Background()
	ks, err := s.Keys(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ks {
		v, err := s.LoadRaw(ctx, db, k)
		if err != nil {
			t.Fatal(err)
		}
		keys++
		if v.At != 0 {
			expires++
		}
	}
	return keys, expires
}

func checkCounts(t *testing.T, s *Store, when string) {
	t.Helper()
	for db := range 3 {
		k, e, exact := s.Count(db)
		tk, te := truth(t, s, db)
		if !exact || k != tk || e != te {
			t.Errorf("%s, db %d: count %d keys %d expires (exact %v), want %d and %d", when, db, k, e, exact, tk, te)
		}
	}
}

// TestCounts: the counts follow every kind of write (new keys,
// overwrites, TTLs set, changed and removed, deletes, reclaims, swaps);
// a clean shutdown's saved counts are loaded (and the record deleted);
// without them, a recount finds the same, stale index entries not
// counted; a program that writes without counting makes the next start
// recount.
func TestCounts(t *testing.T) { eachArray(t, testCounts) }

func testCounts(t *testing.T, a *array.Array) {
	ctx := context.Background()
	s, err := Open(ctx, a, 16)
	if err != nil {
		t.Fatal(err)
	}
	s.StartCounting(ctx)
	waitReady(t, s)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	hour := NowMs() + int64(time.Hour/time.Millisecond)
	for i := range 20 {
		must(s.Set(ctx, i%3, []byte(fmt.Sprintf("k%d", i)), []byte("v"), 0))
		must(s.Set(ctx, i%3, []byte(fmt.Sprintf("t%d", i)), []byte("v"), hour+int64(i)))
	}
	must(s.Set(ctx, 0, []byte("k0"), []byte("again"), 0))       // overwrite
	must(s.Set(ctx, 0, []byte("k3"), []byte("ttl"), hour))      // TTL added
	must(s.Set(ctx, 0, []byte("t0"), []byte("none"), 0))        // TTL removed: its entry is stale
	must(s.Set(ctx, 1, []byte("t1"), []byte("moved"), hour+99)) // TTL changed
	if _, err := s.Delete(ctx, 2, []byte("t2")); err != nil {   // its entry is stale
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx, 2, []byte("nokey")); err != nil {
		t.Fatal(err)
	}
	must(s.Set(ctx, 1, []byte("soon"), []byte("v"), NowMs()+20))
	time.Sleep(30 * time.Millisecond)
	if ok, err := s.DeleteExpired(ctx, 1, []byte("soon"), NowMs()); !ok || err != nil {
		t.Fatalf("DeleteExpired = %v, %v", ok, err)
	}
	if ok, err := s.DeleteExpired(ctx, 1, []byte("t4"), NowMs()); ok || err != nil {
		t.Fatalf("DeleteExpired of a key not due = %v, %v", ok, err)
	}
	checkCounts(t, s, "after writes")
	must(s.Swap(ctx, 0, 2))
	checkCounts(t, s, "after SWAPDB 0 2")

	// Clean shutdown, then a start that loads the counts.
	must(s.SaveCounts(ctx))
	s2, err := Open(ctx, a, 16)
	must(err)
	s2.StartCounting(ctx)
	if _, _, exact := s2.Count(0); !exact {
		t.Error("the saved counts were not loaded")
	}
	if _, err := a.Retrieve(ctx, countsKey()); err == nil {
		t.Error("the saved counts were not deleted at start")
	}
	checkCounts(t, s2, "loaded")

	// A crash (nothing saved): recounted.
	s3, err := Open(ctx, a, 16)
	must(err)
	s3.StartCounting(ctx)
	waitReady(t, s3)
	checkCounts(t, s3, "recounted")

	// Saved, then written by a Store that does not count: recounted.
	must(s3.SaveCounts(ctx))
	cli, err := Open(ctx, a, 16)
	must(err)
	must(cli.Set(ctx, 0, []byte("cli"), []byte("v"), hour))
	s4, err := Open(ctx, a, 16)
	must(err)
	s4.StartCounting(ctx)
	waitReady(t, s4)
	checkCounts(t, s4, "after a write by a program that does not count")
}

// TestRecountWhileWriting: a recount is exact while writers add, change
// and delete keys (with and without TTLs) all over the key order.
func TestRecountWhileWriting(t *testing.T) {
	ctx := context.Background()
	a := openArray(t)
	s, err := Open(ctx, a, 16)
	if err != nil {
		t.Fatal(err)
	}
	hour := NowMs() + int64(time.Hour/time.Millisecond)
	for i := range 3000 {
		if err := s.Set(ctx, i%3, []byte(fmt.Sprintf("k%04d", i)), []byte("v"), int64(i%2)*(hour+int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	s.StartCounting(ctx)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			// Distinct keys per writer: the Store's contract is one
			// writer per key at a time (the server's key locks).
			for j := 0; s.cnt.recounting.Load() || j < 200; j++ {
				db, k := rng.IntN(3), []byte(fmt.Sprintf("k%04d", rng.IntN(750)*4+w))
				var err error
				switch rng.IntN(3) {
				case 0:
					_, err = s.Delete(ctx, db, k)
				case 1:
					err = s.Set(ctx, db, k, []byte("w"), 0)
				default:
					err = s.Set(ctx, db, k, []byte("w"), hour+int64(rng.IntN(1000)))
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	waitReady(t, s)
	checkCounts(t, s, "recounted while writing")
}

func waitReady(t *testing.T, s *Store) {
	t.Helper()
	for range 500 {
		if s.cnt.ready.Load() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the recount did not finish")
}
