package lincheck_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	goredis "github.com/redis/go-redis/v9"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/config"
	"github.com/kvarray/kvarray/device/pebble"
	"github.com/kvarray/kvarray/device/redis/redistest"
	"github.com/kvarray/kvarray/internal/lincheck"
	"github.com/kvarray/kvarray/mechanism"
	"github.com/kvarray/kvarray/server"
)

// served is a kvarray server on a loopback port over an array of real
// devices, as `kvarray serve` runs it.
type served struct {
	t     *testing.T
	a     *array.Array
	srv   *server.Server
	addr  string
	redis []*redistest.Server // the redis-server devices, first in the array
	dirs  []string            // the pebble devices' directories, after them
}

// serve creates an array over nRedis redis-server devices (append-only
// file synced on every write, so a killed server comes back with what it
// acknowledged: with everysec it may not, see docs/reliability.md) and
// nPebble Pebble devices, and serves it (see serveDevices).
func serve(t *testing.T, nRedis, nPebble int) *served {
	t.Helper()
	srvs := redistest.StartN(t, nRedis, "--appendonly", "yes", "--appendfsync", "always")
	var specs []string
	for _, r := range srvs {
		specs = append(specs, r.URL(0))
	}
	var dirs []string
	base := t.TempDir()
	for i := range nPebble {
		dir := filepath.Join(base, fmt.Sprintf("dev%d", nRedis+i))
		dirs = append(dirs, dir)
		specs = append(specs, "pebble:"+dir)
	}
	s := serveDevices(t, specs)
	s.redis, s.dirs = srvs, dirs
	return s
}

// serveDevices creates an array over the device specs, hybrid over every
// mechanism as `kvarray init` configures it, with the automatic resync
// on, and serves it on a loopback port.
func serveDevices(t *testing.T, specs []string) *served {
	t.Helper()
	s := &served{t: t}
	yaml := fmt.Sprintf(`
devices: [%s]
mode: hybrid
default: replication
thresholds:
  - {max: 8KiB, rm: replication}
  - {max: 32KiB, rm: packing}
  - {rm: splitting}
splitting: {k: 4, r: 2}
packing: {k: 4, r: 2}
auto_resync: 250ms
`, strings.Join(specs, ", "))
	cfg, err := config.Parse([]byte(yaml), t.TempDir())
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	devs := config.OpenDevices(cfg, true)
	s.a, err = array.Create(context.Background(), devs, cfg.ServeOptions()...)
	if err != nil {
		t.Fatalf("create array: %v", err)
	}
	s.srv = server.New(s.a, server.WithDevices(devs))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = l.Addr().String()
	done := make(chan error, 1)
	go func() { done <- s.srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, server.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
		if err := s.a.Close(); err != nil {
			t.Logf("close array: %v", err)
		}
	})
	return s
}

// client is a go-redis client with one connection and no retries: every
// command is sent once and its outcome recorded as it came.
func (s *served) client() *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: s.addr, PoolSize: 1, MaxRetries: -1,
		ReadTimeout: 20 * time.Second, WriteTimeout: 20 * time.Second})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// until polls cond until it holds, failing the test after limit (and
// going on, so that the history is still checked).
func (s *served) until(what string, limit time.Duration, cond func() error) {
	s.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Errorf("%s: not done after %v: %v (states %v)", what, limit, err, s.states())
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *served) states() []string {
	var out []string
	for i := 0; i < s.a.N(); i++ {
		out = append(out, s.a.DeviceState(i).String())
	}
	return out
}

// healthy waits for device i to be healthy again: the automatic resync
// re-admits a failed device that answers again (as under `kvarray serve`),
// and a device being rebuilt is rebuilt here, as an operator would. A
// failed device is also resynced here, concurrently with the automatic
// resync, as an operator may.
func (s *served) healthy(i int) {
	s.t.Helper()
	s.until(fmt.Sprintf("device %d back", i), 30*time.Second, func() error {
		switch s.a.DeviceState(i) {
		case mechanism.Healthy:
			return nil
		case mechanism.Failed:
			_, err := s.a.Resync(context.Background(), i)
			return err
		case mechanism.Rebuilding:
			_, err := s.a.Rebuild(context.Background(), i)
			return err
		}
		return fmt.Errorf("state %v", s.a.DeviceState(i))
	})
}

// TestLinearizableUnderFaults: concurrent go-redis clients run SET, GET and
// DEL against the server while its devices fail and come back; the
// history must be linearizable (porcupine, per-key register model). The
// faults, one at a time, each followed by load:
//
//  1. a redis-server device is killed (SIGKILL) and restarted with its
//     append-only file: it comes back having missed writes, and is resynced;
//  2. a redis-server device hangs (SIGSTOP): it is judged slow (or its
//     commands time out and it is marked failed), and the other clients
//     keep being served (checked: an operation invoked during the hang
//     completes during it); it is resumed (SIGCONT) and resynced;
//  3. a redis-server device is killed and restarted empty (its files
//     removed): it is adopted as a new device and rebuilt;
//  4. a Pebble device's directory is removed while serving, and the
//     device is replaced online by a new one and rebuilt.
//
// After the load a last client reads every key (part of the history).
func TestLinearizableUnderFaults(t *testing.T) {
	s := serve(t, 4, 2)
	keys := make([]string, 24)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%02d", i)
	}
	rec := lincheck.NewRecorder()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	const clients = 6
	var wg sync.WaitGroup
	var failed atomic.Int64
	for id := range clients {
		c := s.client()
		wg.Add(1)
		go func() {
			defer wg.Done()
			failed.Add(int64(lincheck.Client(ctx, c, rec, id, keys, 1500, seed)))
		}()
	}
	load := func(d time.Duration) { time.Sleep(d) }
	events := 0

	load(500 * time.Millisecond)

	// 1. Kill and restart with what it had: stale until resynced.
	t.Log("kill device 0")
	s.redis[0].Kill()
	events++
	load(time.Second)
	s.redis[0].Restart()
	s.healthy(0)
	load(500 * time.Millisecond)

	// 2. Hang: the device must be judged slow (its calls gone unanswered)
	// or failed (their time-out), never stall all clients.
	t.Log("freeze device 1")
	s.redis[1].Freeze()
	events++
	frozenAt := rec.Now()
	load(4 * time.Second)
	if st := s.a.DeviceState(1); st != mechanism.Failed && st != mechanism.Slow {
		t.Errorf("device 1 is %v after hanging 4 s, want slow or failed", st)
	}
	thawedAt := rec.Now()
	s.redis[1].Thaw()
	served := completedDuring(rec, frozenAt, thawedAt)
	if served == 0 {
		t.Errorf("no operation invoked while device 1 hung completed before it resumed: one hung device blocks every client")
	}
	t.Logf("%d operations invoked and completed while device 1 hung", served)
	s.healthy(1)
	load(500 * time.Millisecond)

	// 3. Kill and come back empty: a new device to rebuild.
	t.Log("kill device 2 and wipe it")
	s.redis[2].Kill()
	events++
	load(500 * time.Millisecond)
	wipe(t, s.redis[2].Dir())
	s.redis[2].Restart()
	s.until("adopt device 2", 20*time.Second, func() error {
		if s.a.DeviceState(2) != mechanism.Failed {
			// Not noticed yet: the next command to it finds the
			// restarted server.
			return fmt.Errorf("state %v", s.a.DeviceState(2))
		}
		return s.a.AdoptDevice(context.Background(), 2)
	})
	s.healthy(2)
	load(500 * time.Millisecond)

	// 4. A Pebble directory removed under load.
	t.Log("remove device 4's directory")
	// The device still writes under load: a file it creates while the
	// tree is being removed fails the removal ("directory not empty"),
	// as it would fail an operator's rm -rf; go again, as they would.
	for try := 0; ; try++ {
		err := os.RemoveAll(s.dirs[0])
		if err == nil {
			break
		}
		if try == 9 {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	events++
	load(time.Second)
	d, err := pebble.Open(s.dirs[0]+"-new", pebble.WithCreate(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.a.ReplaceDevice(context.Background(), 4, d); err != nil {
		t.Fatalf("replace device 4: %v", err)
	}
	s.healthy(4)
	load(500 * time.Millisecond)

	stop()
	wg.Wait()
	// Every key read once more by a client of its own.
	readAll(t, s.client(), rec, clients, keys)

	t.Logf("history: %s, %d failed in all, %d fault events; states %v", rec.Summary(), failed.Load(), events, s.states())
	for _, e := range rec.Errors() {
		t.Log("  " + e)
	}
	// One device impaired at a time: every write is within tolerance.
	if n := failedSets(rec); n > 0 {
		t.Errorf("%d writes failed with at most one device impaired", n)
	}
	if events < 3 {
		t.Fatalf("%d fault events, want at least 3", events)
	}
	check(t, rec, seed)
}

// failedSets counts the writes (SET, HSET, SADD, the deletes) that
// returned an error.
func failedSets(rec *lincheck.Recorder) int {
	n := 0
	for _, op := range rec.Operations() {
		if out := op.Output.(lincheck.Output); op.Input.(lincheck.Input).Kind.Writes() && out.Unknown && !out.Cancelled {
			n++
		}
	}
	return n
}

// completedDuring counts the operations invoked after from that completed
// (with a known outcome) before to.
func completedDuring(rec *lincheck.Recorder, from, to int64) int {
	n := 0
	for _, op := range rec.Operations() {
		if out := op.Output.(lincheck.Output); op.Call > from && op.Return < to && !out.Unknown {
			n++
		}
	}
	return n
}

// check checks rec's history with porcupine, failing t with the first key
// that does not linearize and a visualization of the history.
func check(t *testing.T, rec *lincheck.Recorder, seed uint64) {
	t.Helper()
	res, info := rec.Check(2 * time.Minute)
	switch res {
	case porcupine.Ok:
	case porcupine.Illegal:
		path := filepath.Join(t.TempDir(), "history.html")
		if out := os.Getenv("KVARRAY_LIN_HTML"); out != "" {
			path = out
		}
		_ = porcupine.VisualizePath(lincheck.Model, info, path)
		t.Fatalf("the history is not linearizable (seed %d; visualization in %s):\n%s", seed, path, rec.Explain(info))
	default:
		t.Fatalf("porcupine could not decide within its time limit: %v", res)
	}
}

// readAll has client id read every key, hash field and set member once
// (part of the history).
func readAll(t *testing.T, c *goredis.Client, rec *lincheck.Recorder, id int, keys []string) {
	t.Helper()
	if err := lincheck.ReadAll(context.Background(), c, rec, id, keys); err != nil {
		t.Error(err)
	}
}

// wipe removes a stopped redis-server's data files, keeping its log.
func wipe(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "redis.log" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}
