package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestStreamsSameAsRedis: the stream commands' replies and errors, in
// RESP2 and RESP3, against a real redis-server: fixed cases with
// explicit IDs (no clock, no idle times in the replies), then a random
// workload of adds, deletes, trims and group reads on two streams with
// small nodes.
func TestStreamsSameAsRedis(t *testing.T) {
	ts := startServer(t, "")
	redisAddr := startRedis(t)
	script := [][]string{
		{"FLUSHALL"}, {"CONFIG", "SET", "stream-node-max-entries", "4"},
		{"XADD", "s", "1-1", "a", "1"}, {"XADD", "s", "1-1", "a", "1"}, {"XADD", "s", "1-*", "b", "2"}, {"XADD", "s", "0-0", "a", "1"},
		{"XADD", "s", "5", "c", "3", "d", "4"}, {"XADD", "s", "x", "a", "1"}, {"XADD", "s", "7-1", "a"}, {"XADD", "s"},
		{"XADD", "s", "NOMKSTREAM", "8-1", "e", "5"}, {"XADD", "nokey", "NOMKSTREAM", "*", "a", "1"}, {"EXISTS", "nokey"},
		{"XLEN", "s"}, {"XLEN", "nokey"}, {"TYPE", "s"}, {"OBJECT", "ENCODING", "s"},
		{"XRANGE", "s", "-", "+"}, {"XRANGE", "s", "(1-1", "+", "COUNT", "2"}, {"XRANGE", "s", "1", "5"}, {"XRANGE", "s", "-", "+", "COUNT", "0"},
		{"XRANGE", "s", "(-", "+"}, {"XRANGE", "s", "5", "1"}, {"XRANGE", "s", "-", "+", "COUNT"}, {"XRANGE", "nokey", "-", "+"},
		{"XREVRANGE", "s", "+", "-"}, {"XREVRANGE", "s", "+", "-", "COUNT", "1"}, {"XREVRANGE", "s", "(8-1", "(1-1"},
		{"XDEL", "s", "1-2", "99-1"}, {"XDEL", "s", "x"}, {"XRANGE", "s", "-", "+"},
		{"XADD", "s", "MAXLEN", "2", "9-1", "f", "6"}, {"XRANGE", "s", "-", "+"}, {"XADD", "s", "MINID", "x", "10-1", "a", "1"},
		{"XADD", "s", "MAXLEN", "1", "MINID", "1", "10-1", "a", "1"}, {"XADD", "s", "LIMIT", "10", "10-1", "a", "1"},
		{"XADD", "s", "MAXLEN", "2", "LIMIT", "10", "10-1", "a", "1"}, {"XADD", "s", "MAXLEN", "-1", "10-1", "a", "1"},
		{"XTRIM", "s"}, {"XTRIM", "s", "MAXLEN", "0", "LIMIT", "1"}, {"XTRIM", "s", "FOO", "1"}, {"XTRIM", "s", "MINID", "=", "9"},
		{"XRANGE", "s", "-", "+"}, {"XTRIM", "nokey", "MAXLEN", "0"},
		{"XSETID", "s", "1-1"}, {"XSETID", "s", "100-1"}, {"XSETID", "nokey", "1-1"}, {"XSETID", "s", "200-1", "ENTRIESADDED", "1"},
		{"XSETID", "s", "200-1", "ENTRIESADDED", "100", "MAXDELETEDID", "300-1"}, {"XSETID", "s", "200-1", "ENTRIESADDED", "100", "MAXDELETEDID", "150-1"},
		{"XINFO", "STREAM", "s"},
		{"DEL", "s"},
		{"XADD", "v", "1-1", "a", "1"}, {"XADD", "v", "2-1", "a", "1"}, {"XDEL", "v", "2-1"}, {"XSETID", "v", "1-5"}, {"XSETID", "v", "0-5"},
		{"XADD", "v", "1-*", "a", "1"}, {"DEL", "v"},
	}
	for i := 1; i <= 12; i++ {
		script = append(script, []string{"XADD", "q", fmt.Sprintf("%d-0", i), "job", fmt.Sprint(i)})
	}
	script = append(script, [][]string{
		{"XGROUP", "CREATE", "q", "g", "0"}, {"XGROUP", "CREATE", "q", "g", "0"}, {"XGROUP", "CREATE", "nokey", "g", "$"},
		{"XGROUP", "CREATE", "m", "g", "$", "MKSTREAM"}, {"XLEN", "m"}, {"XGROUP", "CREATE", "q", "h", "$", "ENTRIESREAD", "12"},
		{"XREADGROUP", "GROUP", "g", "alice", "COUNT", "3", "STREAMS", "q", ">"},
		{"XREADGROUP", "GROUP", "g", "bob", "COUNT", "2", "STREAMS", "q", ">"},
		{"XREADGROUP", "GROUP", "g", "carol", "NOACK", "COUNT", "1", "STREAMS", "q", ">"},
		{"XREADGROUP", "GROUP", "g", "alice", "STREAMS", "q", "0"}, {"XREADGROUP", "GROUP", "g", "alice", "COUNT", "1", "STREAMS", "q", "2"},
		{"XREADGROUP", "GROUP", "nog", "alice", "STREAMS", "q", ">"}, {"XREADGROUP", "GROUP", "g", "alice", "STREAMS", "q", "$"},
		{"XREAD", "STREAMS", "q", ">"}, {"XREAD", "COUNT", "2", "STREAMS", "q", "m", "10", "0"}, {"XREAD", "STREAMS", "q", "$"},
		{"XREAD", "STREAMS", "q"}, {"XREAD", "STREAMS", "q", "m", "0"}, {"XREADGROUP", "GROUP", "g", "c", "STREAMS", "q", "m", ">"}, {"XREAD", "COUNT", "1", "STREAMS", "nokey", "q", "0", "0"},
		{"XPENDING", "q", "g"}, {"XPENDING", "q", "nog"}, {"XPENDING", "q", "h"},
		{"XACK", "q", "g", "1-0", "2-0", "99-0"}, {"XACK", "q", "nog", "1-0"}, {"XACK", "q", "g", "x"},
		{"XCLAIM", "q", "g", "dave", "0", "3-0", "4-0", "12-0", "JUSTID"}, {"XCLAIM", "q", "g", "dave", "0", "12-0", "FORCE", "JUSTID"},
		{"XCLAIM", "q", "g", "erin", "0", "5-0", "RETRYCOUNT", "7", "JUSTID"}, {"XCLAIM", "q", "g", "erin", "0", "5-0", "FOO"},
		{"XPENDING", "q", "g"}, {"XDEL", "q", "3-0"},
		{"XAUTOCLAIM", "q", "g", "frank", "0", "0", "COUNT", "2", "JUSTID"}, {"XAUTOCLAIM", "q", "g", "frank", "0", "0"},
		{"XAUTOCLAIM", "q", "g", "frank", "0", "0", "COUNT", "0"}, {"XPENDING", "q", "g"},
		{"XGROUP", "CREATECONSUMER", "q", "g", "zed"}, {"XGROUP", "CREATECONSUMER", "q", "g", "zed"},
		{"XGROUP", "DELCONSUMER", "q", "g", "frank"}, {"XGROUP", "DELCONSUMER", "q", "g", "nobody"}, {"XPENDING", "q", "g"},
		{"XGROUP", "SETID", "q", "g", "0"}, {"XGROUP", "SETID", "q", "nog", "0"}, {"XGROUP", "SETID", "q", "g", "$", "ENTRIESREAD", "-2"},
		{"XREADGROUP", "GROUP", "g", "yan", "COUNT", "2", "STREAMS", "q", ">"}, {"XPENDING", "q", "g"},
		{"XGROUP", "DESTROY", "q", "h"}, {"XGROUP", "DESTROY", "q", "h"}, {"XGROUP", "FOO", "q"}, {"XGROUP", "CREATE", "q"},
		{"XINFO", "GROUPS", "q"}, {"XINFO", "GROUPS", "nokey"}, {"XINFO", "FOO", "q"}, {"XINFO", "CONSUMERS", "q", "nog"},
		{"SET", "str", "v"}, {"XADD", "str", "*", "a", "1"}, {"XRANGE", "str", "-", "+"}, {"XREAD", "STREAMS", "str", "0"},
		{"MULTI"}, {"XADD", "t", "1-1", "a", "1"}, {"XREAD", "BLOCK", "0", "STREAMS", "t", "$"}, {"XREAD", "BLOCK", "0", "STREAMS", "t", "0"}, {"EXEC"},
		{"COPY", "q", "q2"}, {"XRANGE", "q2", "-", "+", "COUNT", "3"}, {"XPENDING", "q2", "g"}, {"RENAME", "q2", "q3"}, {"XLEN", "q3"},
		{"EXPIRE", "q3", "100"}, {"TTL", "q3"}, {"DEL", "q3"}, {"EXISTS", "q3"},
	}...)
	// A random workload on two streams.
	rng := rand.New(rand.NewPCG(5, 8))
	keys := []string{"x", "y"}
	ms := map[string]int{}
	for _, k := range keys {
		script = append(script, []string{"XGROUP", "CREATE", k, "g", "0", "MKSTREAM"})
	}
	for range 400 {
		k := keys[rng.IntN(2)]
		var cmd []string
		switch rng.IntN(10) {
		case 0, 1, 2:
			ms[k] += rng.IntN(3)
			cmd = []string{"XADD", k, fmt.Sprintf("%d-*", ms[k]), "f", fmt.Sprint(rng.IntN(100))}
		case 3:
			ms[k]++
			cmd = []string{"XADD", k, "MAXLEN", []string{"=", "~"}[rng.IntN(2)], fmt.Sprint(rng.IntN(12)), fmt.Sprintf("%d", ms[k]), "f", "v"}
		case 4:
			cmd = []string{"XDEL", k, fmt.Sprintf("%d-%d", rng.IntN(ms[k]+1), rng.IntN(2))}
		case 5:
			cmd = []string{"XTRIM", k, "MINID", []string{"=", "~"}[rng.IntN(2)], fmt.Sprint(rng.IntN(ms[k] + 1))}
		case 6:
			cmd = []string{"XREADGROUP", "GROUP", "g", []string{"a", "b"}[rng.IntN(2)], "COUNT", fmt.Sprint(1 + rng.IntN(3)), "STREAMS", k, ">"}
		case 7:
			cmd = []string{"XACK", k, "g", fmt.Sprintf("%d-%d", rng.IntN(ms[k]+1), rng.IntN(2))}
		case 8:
			cmd = []string{"XREVRANGE", k, "+", "-", "COUNT", fmt.Sprint(1 + rng.IntN(4))}
		default:
			cmd = []string{"XCLAIM", k, "g", "c", "0", fmt.Sprintf("%d-%d", rng.IntN(ms[k]+1), rng.IntN(2)), "JUSTID"}
		}
		script = append(script, cmd, []string{"XRANGE", k, "-", "+"}, []string{"XPENDING", k, "g"}, []string{"XINFO", "GROUPS", k})
	}
	script = append(script, []string{"FLUSHALL"}, []string{"CONFIG", "SET", "stream-node-max-entries", "100"})
	compareWithRedis(t, ts, redisAddr, script)
}

// TestStreamQueue: a job queue through go-redis on defaults: producers
// XADD numbered jobs, consumers XREADGROUP and XACK them, one consumer
// dies holding jobs and XAUTOCLAIM hands them to another; a blocked
// XREADGROUP is woken by an XADD. Every job is acknowledged exactly once
// and nothing stays pending.
func TestStreamQueue(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	rdb := ts.client()
	defer rdb.Close()
	if err := rdb.XGroupCreateMkStream(ctx, "jobs", "workers", "$").Err(); err != nil {
		t.Fatal(err)
	}
	// A consumer blocked before any job: the first XADD wakes it.
	woke := make(chan []redis.XStream, 1)
	go func() {
		c := ts.client()
		defer c.Close()
		r, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "early", Streams: []string{"jobs", ">"}, Count: 1, Block: 0}).Result()
		if err != nil {
			t.Error(err)
		}
		woke <- r
	}()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if info := rdb.Info(ctx, "clients").Val(); strings.Contains(info, "blocked_clients:1\r") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the XREADGROUP never blocked")
		}
		time.Sleep(10 * time.Millisecond)
	}
	const jobs = 300
	for i := range jobs {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []string{"n", fmt.Sprint(i)}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	done := map[string]int{}
	ack := func(consumer string, ms []redis.XMessage) {
		for _, m := range ms {
			n, err := rdb.XAck(ctx, "jobs", "workers", m.ID).Result()
			if err != nil || n != 1 {
				t.Fatalf("XACK %s by %s: %d, %v", m.ID, consumer, n, err)
			}
			done[m.Values["n"].(string)]++
		}
	}
	r := <-woke
	if len(r) != 1 || len(r[0].Messages) != 1 || r[0].Messages[0].Values["n"] != "0" {
		t.Fatalf("the woken consumer got %v", r)
	}
	ack("early", r[0].Messages)
	// The doomed consumer takes jobs and never acknowledges them.
	lost, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "doomed", Streams: []string{"jobs", ">"}, Count: 25}).Result()
	if err != nil || len(lost[0].Messages) != 25 {
		t.Fatalf("doomed: %v, %v", lost, err)
	}
	for i := 0; ; i++ {
		r, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: []string{"a", "b"}[i%2],
			Streams: []string{"jobs", ">"}, Count: 10, Block: -1}).Result()
		if err == redis.Nil {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ack("worker", r[0].Messages)
	}
	// The rescuer claims what the doomed consumer held, in pages.
	start := "0-0"
	for {
		ms, next, err := rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: "jobs", Group: "workers", Consumer: "rescuer", Start: start, Count: 10}).Result()
		if err != nil {
			t.Fatal(err)
		}
		ack("rescuer", ms)
		if next == "0-0" {
			break
		}
		start = next
	}
	if len(done) != jobs {
		t.Fatalf("%d jobs done, want %d", len(done), jobs)
	}
	for n, k := range done {
		if k != 1 {
			t.Fatalf("job %s done %d times", n, k)
		}
	}
	p, err := rdb.XPending(ctx, "jobs", "workers").Result()
	if err != nil || p.Count != 0 {
		t.Fatalf("pending after the run: %+v, %v", p, err)
	}
	cons, err := rdb.XInfoConsumers(ctx, "jobs", "workers").Result()
	names := []string{}
	for _, c := range cons {
		names = append(names, c.Name)
	}
	slices.Sort(names)
	if err != nil || !slices.Equal(names, []string{"a", "b", "doomed", "early", "rescuer"}) {
		t.Fatalf("consumers %v, %v", names, err)
	}
}

// TestStreamBlockedGroupFails: a blocked XREADGROUP fails once its key
// is deleted, changes type or is flushed (UNBLOCKED), or its group is
// destroyed (NOGROUP), as Redis 7.0; a blocked XREAD waits on through a
// DEL and is served by the next XADD.
func TestStreamBlockedGroupFails(t *testing.T) {
	ts := startServer(t, "")
	c := ts.dial()
	waitBlocked := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; {
			if strings.Contains(c.do("INFO", "clients").String(), fmt.Sprintf(`blocked_clients:%d\r`, n)) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("never %d blocked clients", n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, tc := range []struct {
		name  string
		write [][]string
		want  string
	}{
		{"DEL", [][]string{{"DEL", "s"}}, "UNBLOCKED the stream key no longer exists"},
		{"SET", [][]string{{"SET", "s", "v"}}, "UNBLOCKED the stream key no longer exists"},
		{"MULTI", [][]string{{"MULTI"}, {"DEL", "s"}, {"SADD", "s", "m"}, {"EXEC"}}, "UNBLOCKED the stream key no longer exists"},
		{"FLUSHALL", [][]string{{"FLUSHALL"}}, "UNBLOCKED the stream key no longer exists"},
		{"XGROUP DESTROY", [][]string{{"XGROUP", "DESTROY", "s", "g"}}, "NOGROUP the consumer group this client was blocked on no longer exists"},
	} {
		c.do("DEL", "s")
		c.do("XADD", "s", "1-1", "f", "v")
		c.do("XGROUP", "CREATE", "s", "g", "$")
		b := ts.dial()
		b.send(encode("XREADGROUP", "GROUP", "g", "alice", "BLOCK", "0", "STREAMS", "s", ">"))
		waitBlocked(1)
		for _, w := range tc.write {
			c.do(w...)
		}
		if got := b.read(); !got.isError() || !strings.Contains(got.String(), tc.want) {
			t.Errorf("%s: the blocked XREADGROUP got %v, want %q", tc.name, got, tc.want)
		}
		waitBlocked(0)
	}
	c.do("DEL", "s")
	c.do("XADD", "s", "1-1", "f", "v")
	b := ts.dial()
	b.send(encode("XREAD", "BLOCK", "0", "STREAMS", "s", "$"))
	waitBlocked(1)
	c.do("DEL", "s")
	c.do("SET", "s", "v")
	c.do("DEL", "s")
	c.do("XADD", "s", "2-1", "f", "w")
	if got := b.read().String(); !strings.Contains(got, "2-1") || strings.Contains(got, "1-1") {
		t.Errorf("the blocked XREAD got %s, want entry 2-1", got)
	}
}
