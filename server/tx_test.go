package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/config"
	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/faultdev"
	"github.com/kvarray/kvarray/keyspace"
)

func withAfterIntent(f func() error) Option { return func(o *options) { o.afterIntent = f } }

// restart shuts the server down and serves the same array with a new
// server (as a process restart would, minus the devices' reopening).
func (ts *testServer) restart(opts ...Option) {
	ts.t.Helper()
	ts.stop()
	srv := New(ts.a, append([]Option{WithDevices(ts.devs)}, opts...)...)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ts.t.Fatal(err)
	}
	ts.srv, ts.addr, ts.done, ts.ended = srv, l.Addr().String(), make(chan error, 1), false
	go func() { ts.done <- srv.Serve(l) }()
}

// TestTxIsolation: a transaction writes a and b to the same value; a
// reader never sees them differ, and concurrent INCRs in and out of
// transactions lose nothing.
func TestTxIsolation(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	w, r := ts.client(), ts.client()
	const rounds = 60
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range rounds {
			if _, err := w.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, "a", i, 0)
				p.Set(ctx, "b", i, 0)
				p.Incr(ctx, "n")
				return nil
			}); err != nil {
				t.Errorf("transaction %d: %v", i, err)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for range rounds {
			if err := r.Incr(ctx, "n").Err(); err != nil {
				t.Errorf("INCR: %v", err)
				return
			}
			vs, err := r.MGet(ctx, "a", "b").Result()
			if err != nil {
				t.Errorf("MGET: %v", err)
				return
			}
			if vs[0] != vs[1] {
				t.Errorf("a reader saw half a transaction: a=%v b=%v", vs[0], vs[1])
				return
			}
		}
	}()
	wg.Wait()
	if n, err := r.Get(ctx, "n").Int(); err != nil || n != 2*rounds {
		t.Errorf("n = %d, %v; want %d", n, err, 2*rounds)
	}
}

// TestWatch: EXEC aborts (null) when a watched key was written by another
// client, deleted, flushed, or expired; and runs when it was not.
func TestWatch(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	other := ts.client()
	for _, tc := range []struct {
		name  string
		touch func()
		abort bool
	}{
		{"untouched", func() {}, false},
		{"SET by another client", func() { other.Set(ctx, "w", "x", 0) }, true},
		{"DEL", func() { other.Del(ctx, "w") }, true},
		{"INCR", func() { other.Incr(ctx, "w") }, true},
		{"FLUSHDB", func() { other.FlushDB(ctx) }, true},
		{"FLUSHALL", func() { other.FlushAll(ctx) }, true},
		{"EXPIRE in the past", func() { other.ExpireAt(ctx, "w", time.Unix(1, 0)) }, true},
		{"write to another key", func() { other.Set(ctx, "other", "x", 0) }, false},
		{"write to the same key in another db", func() { other.Do(ctx, "copy", "w", "w", "db", "5", "replace") }, false},
	} {
		c := ts.dial()
		c.do("SET", "w", "1")
		c.do("WATCH", "w")
		tc.touch()
		c.do("MULTI")
		c.do("SET", "w", "mine")
		r := c.do("EXEC")
		if aborted := r.null; aborted != tc.abort {
			t.Errorf("%s: EXEC = %v, want aborted=%v", tc.name, r, tc.abort)
		}
		got := c.do("GET", "w")
		if !tc.abort && got.str != "mine" || tc.abort && got.str == "mine" {
			t.Errorf("%s: after EXEC, w = %v", tc.name, got)
		}
	}
	// A key with a TTL that expires between WATCH and EXEC.
	c := ts.dial()
	c.do("SET", "ttl", "1", "PX", "100")
	c.do("WATCH", "ttl")
	time.Sleep(200 * time.Millisecond)
	c.do("MULTI")
	c.do("SET", "ttl", "2")
	if r := c.do("EXEC"); !r.null {
		t.Errorf("EXEC after a watched key expired = %v, want null", r)
	}
}

// TestTxCrash: a transaction interrupted after its intent record is
// stored (as by kill -9) is completed, whole, when the server starts
// again; one interrupted before leaves nothing. Invariant: after the
// restart either every write of the transaction is there or none is.
func TestTxCrash(t *testing.T) {
	crash := errors.New("simulated crash after the intent record")
	ts := startServer(t, "", withAfterIntent(func() error { return crash }))
	ctx := context.Background()
	rdb := ts.client()
	rdb.Set(ctx, "gone", "old", 0)
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i := range 20 {
			p.Set(ctx, fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i), time.Hour)
		}
		p.Incr(ctx, "counter")
		p.Del(ctx, "gone")
		return nil
	})
	if err == nil {
		t.Fatal("EXEC succeeded though its commit was interrupted")
	}
	// The interrupted commit applied nothing yet.
	if n, _ := rdb.Exists(ctx, "k0", "k19", "counter").Result(); n != 0 {
		t.Fatalf("%d keys of the interrupted transaction are visible before the restart", n)
	}
	ts.restart()
	rdb = ts.client()
	for i := range 20 {
		v, err := rdb.Get(ctx, fmt.Sprintf("k%d", i)).Result()
		if err != nil || v != fmt.Sprintf("v%d", i) {
			t.Errorf("after the restart k%d = %q, %v", i, v, err)
		}
		if d, _ := rdb.TTL(ctx, fmt.Sprintf("k%d", i)).Result(); d <= 0 || d > time.Hour {
			t.Errorf("k%d lost its TTL: %v", i, d)
		}
	}
	if n, err := rdb.Get(ctx, "counter").Int(); err != nil || n != 1 {
		t.Errorf("counter = %d, %v", n, err)
	}
	if n, _ := rdb.Exists(ctx, "gone").Result(); n != 0 {
		t.Error("the transaction's DEL was not replayed")
	}
	if left, err := ts.a.Keys(ctx, keyspace.IntentPrefix()); err != nil || len(left) != 0 {
		t.Errorf("intent records left after the replay: %d, %v", len(left), err)
	}
}

// TestIncrConcurrent: concurrent INCRs on one key lose no increment.
func TestIncrConcurrent(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	const clients, each = 4, 100
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		c := ts.client()
		go func() {
			defer wg.Done()
			for range each {
				if err := c.Incr(ctx, "ctr").Err(); err != nil {
					t.Error(err)
					return
				}
				if err := c.IncrByFloat(ctx, "fctr", 0.5).Err(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	rdb := ts.client()
	if n, _ := rdb.Get(ctx, "ctr").Int(); n != clients*each {
		t.Errorf("ctr = %d, want %d", n, clients*each)
	}
	if f, _ := rdb.Get(ctx, "fctr").Result(); f != strconv.Itoa(clients*each/2) {
		t.Errorf("fctr = %s, want %d", f, clients*each/2)
	}
}

// TestTxIntentLeftBehind: a transaction whose writes failed midway, or
// whose intent record could not be deleted after its writes were applied
// (its devices refusing deletes, as full ones may), leaves the record for
// the server to complete. Left to the next start's replay, it would roll
// back a write acknowledged after it to the transaction's value.
// Invariant: every key reads, after a restart, as its last acknowledged
// write. Writes are refused while the transaction cannot be completed (its
// record replayed and deleted), reads go on, and writes resume once it can.
func TestTxIntentLeftBehind(t *testing.T) {
	for _, tc := range []string{"writes failed midway", "record not deleted"} {
		t.Run(tc, func(t *testing.T) {
			var refuse, failWrites atomic.Bool
			cfg, err := config.Parse([]byte(memHybrid), t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			devs := config.OpenDevices(cfg, true)
			for i, d := range devs {
				devs[i] = faultdev.Wrap(d, faultdev.InjectorFunc(func(op faultdev.Op) error {
					if refuse.Load() && op.Kind == device.OpDelete && bytes.Contains(op.Key, keyspace.IntentPrefix()) {
						return fmt.Errorf("refused: %w", device.ErrNoSpace)
					}
					return nil
				}))
			}
			a, err := array.Create(context.Background(), devs, cfg.Options()...)
			if err != nil {
				t.Fatal(err)
			}
			ts := serveArray(t, a, devs, WithErrorLog(log.New(io.Discard, "", 0)), withAfterIntent(func() error {
				if failWrites.Load() {
					return errors.New("a write of the transaction failed")
				}
				return nil
			}))
			ctx := context.Background()
			rdb := ts.client()
			acked := map[string]string{}
			set := func(k, v string) error {
				err := rdb.Set(ctx, k, v, 0).Err()
				if err == nil {
					acked[k] = v
				}
				return err
			}
			if err := set("a", "before"); err != nil {
				t.Fatal(err)
			}

			var watcher *rawConn
			_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				failWrites.Store(tc == "writes failed midway")
				refuse.Store(tc == "record not deleted")
				p.Set(ctx, "a", "tx", 0)
				p.Set(ctx, "b", "tx", 0)
				return nil
			})
			failWrites.Store(false)
			if tc == "writes failed midway" {
				if err == nil {
					t.Fatal("EXEC succeeded though its writes failed")
				}
				// In flight: the transaction may yet complete, whole.
				// A client watching one of its keys meanwhile sees the
				// completion as a write.
				watcher = ts.dial()
				watcher.do("WATCH", "b")
			} else {
				if err != nil {
					t.Fatalf("EXEC: %v (its writes are applied: only the record's delete fails)", err)
				}
				acked["a"], acked["b"] = "tx", "tx"
				if err := set("a", "refused"); err == nil {
					t.Error("a write went on while a transaction's intent record could not be deleted")
				}
				if v, err := rdb.Get(ctx, "a").Result(); err != nil || v != "tx" {
					t.Errorf("read while writes wait: a = %q, %v; want the transaction's", v, err)
				}
				refuse.Store(false)
			}
			if err := set("a", "after"); err != nil {
				t.Fatalf("write once the transaction can be completed: %v", err)
			}
			if watcher != nil {
				watcher.do("MULTI")
				watcher.do("SET", "b", "watcher's")
				if r := watcher.do("EXEC"); !r.null {
					t.Errorf("EXEC of a watcher of b = %v, want null: the completion wrote b", r)
				}
			}
			if v, err := rdb.Get(ctx, "b").Result(); err != nil || v != "tx" {
				t.Errorf("b = %q, %v; want the transaction's write, completed before the next write", v, err)
			}
			if left, err := ts.a.Keys(ctx, keyspace.IntentPrefix()); err != nil || len(left) != 0 {
				t.Errorf("intent records once completed: %d, %v", len(left), err)
			}
			ts.restart()
			rdb = ts.client()
			for k, want := range acked {
				if v, err := rdb.Get(ctx, k).Result(); err != nil || v != want {
					t.Errorf("after the restart %s = %q, %v; want its last acknowledged write %q", k, v, err, want)
				}
			}
		})
	}
}
