package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestCollectionsKill9: `kvarray serve` on Pebble devices is killed with
// SIGKILL while clients add hash fields, set members and sorted set
// members (past the conversion, where each new element is two array
// values written through an intent record), move members between two
// sets and elements between two lists, and push numbered jobs to a list
// that another client pops. After each restart:
//   - every acknowledged field and member reads back (a sorted set
//     member with its score), and HLEN, SCARD and ZCARD equal what
//     HGETALL, SMEMBERS and ZRANGE return;
//   - no SMOVE or LMOVE is half applied: the two sets hold the 300
//     members between them, each once, and so do the two lists;
//   - the job list is exactly jobs a..b-1 in order, a the pops
//     acknowledged (or one more: a pop in flight may have committed),
//     b the pushes acknowledged (or one more), and the pops returned
//     jobs 0, 1, ... in order, each once: nothing acknowledged lost,
//     nothing popped twice, LLEN exact.
func TestCollectionsKill9(t *testing.T) {
	dir := fresh(t, 4)
	cfg := filepath.Join(dir, "kvarray.yaml")
	ctx := context.Background()
	const moved = 300
	var jobs jobQueue
	for round := range 2 {
		cmd, addr, _ := startServeProcess(t, cfg)
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		if round == 0 {
			for i := range moved {
				if err := rdb.SAdd(ctx, "x", fmt.Sprintf("m%d", i)).Err(); err != nil {
					t.Fatal(err)
				}
				if err := rdb.RPush(ctx, "la", fmt.Sprintf("e%d", i)).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		h0, _ := rdb.HLen(ctx, "h").Result()
		s0, _ := rdb.SCard(ctx, "s").Result()
		z0, _ := rdb.ZCard(ctx, "z").Result()
		var wg sync.WaitGroup
		var hAcked, sAcked, zAcked int64
		wg.Add(7)
		go func() {
			defer wg.Done()
			for i := h0; ; i++ {
				if rdb.HSet(ctx, "h", fmt.Sprintf("f%d", i), i).Err() != nil {
					return
				}
				hAcked = i + 1
			}
		}()
		go func() {
			defer wg.Done()
			for i := s0; ; i++ {
				if rdb.SAdd(ctx, "s", fmt.Sprintf("m%d", i)).Err() != nil {
					return
				}
				sAcked = i + 1
			}
		}()
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				m := fmt.Sprintf("m%d", i%moved)
				src, dst := "x", "y"
				if ok, _ := rdb.SIsMember(ctx, "y", m).Result(); ok {
					src, dst = "y", "x"
				}
				if rdb.SMove(ctx, src, dst, m).Err() != nil {
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := z0; ; i++ {
				if rdb.ZAdd(ctx, "z", redis.Z{Score: float64(i), Member: fmt.Sprintf("m%d", i)}).Err() != nil {
					return
				}
				zAcked = i + 1
			}
		}()
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				// All of them one way, then back.
				src, dst := "la", "lb"
				if i%(2*moved) >= moved {
					src, dst = "lb", "la"
				}
				if err := rdb.LMove(ctx, src, dst, "LEFT", "RIGHT").Err(); err != nil && !errors.Is(err, redis.Nil) {
					return
				}
			}
		}()
		q := jobs.start(ctx, rdb)
		go func() { defer wg.Done(); q.push() }()
		go func() { defer wg.Done(); q.pop() }()
		// Kill at some moment while the writes stream (not a timing
		// assertion: any moment must do).
		time.Sleep(time.Duration(1500+700*round) * time.Millisecond)
		cmd.Process.Kill()
		cmd.Wait()
		wg.Wait()
		rdb.Close()

		check, addr, _ := startServeProcess(t, cfg)
		rdb = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		hl, err := rdb.HLen(ctx, "h").Result()
		all, err2 := rdb.HGetAll(ctx, "h").Result()
		if err != nil || err2 != nil {
			t.Fatalf("round %d: reading the hash: %v %v", round, err, err2)
		}
		if int64(len(all)) != hl || hl < hAcked {
			t.Fatalf("round %d: HLEN %d, HGETALL %d fields, %d acknowledged", round, hl, len(all), hAcked)
		}
		for i := range hAcked {
			if all[fmt.Sprintf("f%d", i)] != fmt.Sprint(i) {
				t.Fatalf("round %d: acknowledged field f%d = %q", round, i, all[fmt.Sprintf("f%d", i)])
			}
		}
		sc, _ := rdb.SCard(ctx, "s").Result()
		ms, _ := rdb.SMembers(ctx, "s").Result()
		if int64(len(ms)) != sc || sc < sAcked {
			t.Fatalf("round %d: SCARD %d, SMEMBERS %d, %d acknowledged", round, sc, len(ms), sAcked)
		}
		xs, _ := rdb.SMembers(ctx, "x").Result()
		ys, _ := rdb.SMembers(ctx, "y").Result()
		xc, _ := rdb.SCard(ctx, "x").Result()
		yc, _ := rdb.SCard(ctx, "y").Result()
		seen := map[string]bool{}
		for _, m := range append(xs, ys...) {
			if seen[m] {
				t.Fatalf("round %d: %s in both sets: an SMOVE half applied", round, m)
			}
			seen[m] = true
		}
		if len(seen) != moved || xc+yc != moved || int64(len(xs)) != xc || int64(len(ys)) != yc {
			t.Fatalf("round %d: x %d (SCARD %d), y %d (SCARD %d): members lost or counts off", round, len(xs), xc, len(ys), yc)
		}
		zc, _ := rdb.ZCard(ctx, "z").Result()
		zs, err := rdb.ZRangeWithScores(ctx, "z", 0, -1).Result()
		if err != nil || int64(len(zs)) != zc || zc < zAcked || zc > zAcked+1 {
			t.Fatalf("round %d: ZCARD %d, ZRANGE %d (%v), %d acknowledged", round, zc, len(zs), err, zAcked)
		}
		for i, z := range zs {
			if z.Member != fmt.Sprintf("m%d", i) || z.Score != float64(i) {
				t.Fatalf("round %d: rank %d of the sorted set is %v", round, i, z)
			}
		}
		las, _ := rdb.LRange(ctx, "la", 0, -1).Result()
		lbs, _ := rdb.LRange(ctx, "lb", 0, -1).Result()
		lac, _ := rdb.LLen(ctx, "la").Result()
		lbc, _ := rdb.LLen(ctx, "lb").Result()
		clear(seen)
		for _, e := range append(las, lbs...) {
			if seen[e] {
				t.Fatalf("round %d: %s in both lists: an LMOVE half applied", round, e)
			}
			seen[e] = true
		}
		if len(seen) != moved || lac+lbc != moved || int64(len(las)) != lac || int64(len(lbs)) != lbc {
			t.Fatalf("round %d: la %d (LLEN %d), lb %d (LLEN %d): elements lost or counts off", round, len(las), lac, len(lbs), lbc)
		}
		jobs.check(t, ctx, rdb, round)
		t.Logf("round %d: %d fields, %d members, %d sorted set members acknowledged; x %d, y %d; la %d, lb %d; %d jobs pushed, %d popped",
			round, hAcked, sAcked, zAcked, xc, yc, lac, lbc, jobs.pushed, jobs.popped)
		rdb.Close()
		check.Process.Signal(syscall.SIGTERM)
		check.Wait()
	}
}

// jobQueue is TestCollectionsKill9's job list: a producer RPUSHes
// job-0, job-1, ... and a consumer LPOPs them, across rounds. After a
// restart, check settles what the kill left in flight, so that each
// round starts from a list of exactly jobs popped..pushed-1.
type jobQueue struct {
	ctx            context.Context
	rdb            *redis.Client
	pushed, popped int64 // the next job to push, to pop
	// bad is the first pop that returned a job out of order.
	bad string
}

func (q *jobQueue) start(ctx context.Context, rdb *redis.Client) *jobQueue {
	q.ctx, q.rdb = ctx, rdb
	return q
}

func (q *jobQueue) push() {
	for q.rdb.RPush(q.ctx, "jobs", fmt.Sprintf("job-%d", q.pushed)).Err() == nil {
		q.pushed++
	}
}

// pop pops until an error; an empty list is polled again.
func (q *jobQueue) pop() {
	for {
		v, err := q.rdb.LPop(q.ctx, "jobs").Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			return
		}
		if want := fmt.Sprintf("job-%d", q.popped); v != want && q.bad == "" {
			q.bad = fmt.Sprintf("popped %s, want %s", v, want)
		}
		q.popped++
	}
}

// check reads the job list after a restart (see TestCollectionsKill9):
// jobs f..l-1, f the pops acknowledged or one more, l the pushes
// acknowledged or one more (a command in flight at the kill may have
// committed, its reply lost).
func (q *jobQueue) check(t *testing.T, ctx context.Context, rdb *redis.Client, round int) {
	t.Helper()
	if q.bad != "" {
		t.Fatalf("round %d: %s", round, q.bad)
	}
	js, err := rdb.LRange(ctx, "jobs", 0, -1).Result()
	n, err2 := rdb.LLen(ctx, "jobs").Result()
	if err != nil || err2 != nil || n != int64(len(js)) {
		t.Fatalf("round %d: LRANGE jobs: %d, %v; LLEN %d, %v", round, len(js), err, n, err2)
	}
	if len(js) == 0 {
		// Every job pushed was popped: the pushes and pops in flight
		// agree whichever committed.
		q.popped = max(q.popped, q.pushed)
		q.pushed = q.popped
		return
	}
	var f int64
	if _, err := fmt.Sscanf(js[0], "job-%d", &f); err != nil || f < q.popped || f > q.popped+1 {
		t.Fatalf("round %d: the list starts with %s; %d popped", round, js[0], q.popped)
	}
	for i, j := range js {
		if j != fmt.Sprintf("job-%d", f+int64(i)) {
			t.Fatalf("round %d: jobs[%d] is %s, want job-%d", round, i, j, f+int64(i))
		}
	}
	l := f + int64(len(js))
	if l < q.pushed || l > q.pushed+1 {
		t.Fatalf("round %d: the list holds jobs %d to %d; %d pushed", round, f, l-1, q.pushed)
	}
	q.popped, q.pushed = f, l
}
