package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestStreamQueueKill9: a job queue on a stream's consumer group, with
// `kvarray serve` on Pebble devices killed with SIGKILL mid-run, twice
// (the second time after one of its four devices was removed). A
// producer XADDs numbered jobs; two consumers XREADGROUP them, process
// them (record them here) and XACK; a doomed consumer takes jobs and never
// acknowledges them. After each restart a rescuer XAUTOCLAIMs every
// pending job (the doomed consumer's, and those the kill caught between
// delivery and XACK) and the rest of the stream is drained. Invariant:
// every job whose XADD was acknowledged is processed, none is lost, and
// nothing stays pending.
func TestStreamQueueKill9(t *testing.T) {
	dir := fresh(t, 4)
	cfg := filepath.Join(dir, "kvarray.yaml")
	ctx := context.Background()
	var mu sync.Mutex
	processed := map[string]bool{}
	var produced []string // jobs whose XADD was acknowledged
	process := func(ms []redis.XMessage) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range ms {
			processed[m.Values["job"].(string)] = true
		}
	}
	for round := range 2 {
		cmd, addr, _ := startServeProcess(t, cfg)
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		if round == 0 {
			if err := rdb.XGroupCreateMkStream(ctx, "jobs", "workers", "$").Err(); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		wg.Add(4)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				job := fmt.Sprintf("r%d-%d", round, i)
				if rdb.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []string{"job", job}}).Err() != nil {
					return
				}
				mu.Lock()
				produced = append(produced, job)
				mu.Unlock()
			}
		}()
		for _, name := range []string{"a", "b"} {
			go func() {
				defer wg.Done()
				for {
					r, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: name, Streams: []string{"jobs", ">"}, Count: 5, Block: 50 * time.Millisecond}).Result()
					if err == redis.Nil {
						continue
					}
					if err != nil {
						return
					}
					process(r[0].Messages)
					for _, m := range r[0].Messages {
						if rdb.XAck(ctx, "jobs", "workers", m.ID).Err() != nil {
							return
						}
					}
				}
			}()
		}
		go func() {
			defer wg.Done()
			// The doomed consumer: takes jobs now and then, never acks.
			for {
				if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "doomed", Streams: []string{"jobs", ">"}, Count: 3, Block: -1}).Err(); err != nil && err != redis.Nil {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		// Kill at some moment while the jobs flow (any moment must do);
		// in the second round a device is removed first (rm -rf of its
		// directory, retried as Pebble may create a file meanwhile).
		if round == 1 {
			time.Sleep(700 * time.Millisecond)
			for i := 0; ; i++ {
				err := os.RemoveAll(filepath.Join(dir, "data", "dev1"))
				if err == nil {
					break
				}
				if i == 20 {
					t.Fatal(err)
				}
			}
		}
		time.Sleep(time.Duration(1500+700*round) * time.Millisecond)
		cmd.Process.Kill()
		cmd.Wait()
		wg.Wait()
		rdb.Close()

		check, addr, _ := startServeProcess(t, cfg)
		rdb = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		for start := "0-0"; ; {
			ms, next, err := rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: "jobs", Group: "workers", Consumer: "rescuer", Start: start, Count: 50}).Result()
			if err != nil {
				t.Fatalf("round %d: XAUTOCLAIM: %v", round, err)
			}
			process(ms)
			for _, m := range ms {
				if err := rdb.XAck(ctx, "jobs", "workers", m.ID).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if next == "0-0" {
				break
			}
			start = next
		}
		for {
			r, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "rescuer", Streams: []string{"jobs", ">"}, Count: 100, Block: -1}).Result()
			if err == redis.Nil {
				break
			}
			if err != nil {
				t.Fatalf("round %d: draining: %v", round, err)
			}
			process(r[0].Messages)
			for _, m := range r[0].Messages {
				if err := rdb.XAck(ctx, "jobs", "workers", m.ID).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		p, err := rdb.XPending(ctx, "jobs", "workers").Result()
		if err != nil || p.Count != 0 {
			t.Fatalf("round %d: pending after the rescue: %+v, %v", round, p, err)
		}
		n, err := rdb.XLen(ctx, "jobs").Result()
		if err != nil || n < int64(len(produced)) {
			t.Fatalf("round %d: XLEN %d, %d jobs acknowledged (%v)", round, n, len(produced), err)
		}
		for _, job := range produced {
			if !processed[job] {
				t.Fatalf("round %d: acknowledged job %s never processed", round, job)
			}
		}
		t.Logf("round %d: %d jobs acknowledged, %d processed", round, len(produced), len(processed))
		rdb.Close()
		check.Process.Signal(syscall.SIGTERM)
		check.Wait()
	}
}
