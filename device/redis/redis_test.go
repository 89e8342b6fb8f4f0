package redis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/devicetest"
	"github.com/kvarray/kvarray/device/redis/redistest"
)

// TestConformance runs the device suite against one real server, each
// device on a database of its own (so each starts empty).
func TestConformance(t *testing.T) {
	srv := redistest.Start(t, "--databases", "256")
	var next atomic.Int32
	devicetest.Run(t, func(t *testing.T, l device.Limits) device.Device {
		db := int(next.Add(1))
		if db >= 256 {
			t.Fatal("out of databases")
		}
		d, err := Open(t.Context(), srv.URL(db), WithLimits(l))
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}

func mustOpen(t *testing.T, spec string, opts ...Option) *Device {
	t.Helper()
	d, err := Open(t.Context(), spec, opts...)
	if err != nil {
		t.Fatalf("open %s: %v", spec, err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func TestParse(t *testing.T) {
	good := []struct{ spec, name string }{
		{"redis://127.0.0.1:6380/3", "redis://127.0.0.1:6380/3"},
		{"redis://localhost:6380", "redis://localhost:6380/0"},
		{"redis://localhost:6380/", "redis://localhost:6380/0"},
		{"redis://localhost", "redis://localhost:6379/0"},
		{"redis://:secret@db.example:7000/1", "redis://db.example:7000/1"},
		{"redis://[::1]:7000/2", "redis://[::1]:7000/2"},
	}
	for _, g := range good {
		name, err := Name(g.spec)
		if err != nil || name != g.name {
			t.Errorf("Name(%q) = %q, %v; want %q", g.spec, name, err, g.name)
		}
	}
	bad := []struct{ spec, want string }{
		{"rediss://localhost:6379/0", "want redis://"},
		{"redis:///0", "no host"},
		{"redis://localhost:99999/0", "bad port"},
		{"redis://localhost:6379/x", "not a number"},
		{"redis://localhost:6379/-1", "not a number"},
		{"redis://localhost:6379/0/1", "DB a number"},
		{"redis://localhost:6379/0?timeout=1s", "query parameters"},
		{"pebble:/data", "want redis://"},
	}
	for _, b := range bad {
		if _, err := Name(b.spec); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("Name(%q): %v, want an error containing %q", b.spec, err, b.want)
		}
	}
}

func TestMatchPattern(t *testing.T) {
	cases := map[string]string{
		"":         "*",
		"abc":      "abc*",
		"a*b?c[d]": `a\*b\?c\[d\]*`,
		`x\y`:      `x\\y*`,
		"\x00\xff": "\x00\xff*",
	}
	for in, want := range cases {
		if got := matchPattern([]byte(in)); got != want {
			t.Errorf("matchPattern(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestGlobKeys stores keys made of glob characters and checks that
// iteration by prefix takes them literally.
func TestGlobKeys(t *testing.T) {
	srv := redistest.Start(t)
	d := mustOpen(t, srv.URL(0))
	ctx := t.Context()
	keys := []string{"a*bc", "a*bd", "axbc", "a?bc", "a[b]c", `a\bc`, `a\\c`, "abbc"}
	for _, k := range keys {
		if err := d.Store(ctx, []byte(k), []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"a*", "a?", "a[", "a[b]", `a\`, `a\\`, "a", "ab"} {
		var got []string
		err := d.Iterate(ctx, []byte(p), func(k []byte) error { got = append(got, string(k)); return nil })
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, k := range keys {
			if strings.HasPrefix(k, p) {
				want = append(want, k)
			}
		}
		if fmt.Sprint(sorted(got)) != fmt.Sprint(sorted(want)) {
			t.Errorf("Iterate(%q) = %q, want %q", p, got, want)
		}
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestInfo(t *testing.T) {
	srv := redistest.Start(t)
	d := mustOpen(t, srv.URL(2), WithCapacity(1<<30))
	ctx := t.Context()
	info, err := d.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("redis://127.0.0.1:%d/2", srv.Port())
	if info.Name != want || info.Capacity != 1<<30 || info.Ordered {
		t.Fatalf("Info = %+v, want Name %s, Capacity 1GiB, not ordered", info, want)
	}
	// Many keys: the accounting spans several SCAN pages.
	const n = 2500
	ops := make([]device.Op, n)
	var used int64
	for i := range ops {
		k := fmt.Appendf(nil, "info-%05d", i)
		ops[i] = device.Op{Kind: device.OpStore, Key: k, Value: bytes.Repeat([]byte{1}, i%50)}
		used += int64(len(k) + i%50)
	}
	if err := d.Batch(ctx, ops); err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if op.Err != nil {
			t.Fatal(op.Err)
		}
	}
	info, err = d.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Keys != n || info.Used != used {
		t.Fatalf("Info: Keys=%d Used=%d, want %d, %d", info.Keys, info.Used, n, used)
	}
	mem, err := d.MemoryUsed(ctx)
	if err != nil || mem <= 0 {
		t.Fatalf("MemoryUsed = %d, %v", mem, err)
	}
	// Another database of the same server is another device.
	other := mustOpen(t, srv.URL(3))
	if info, err := other.Info(ctx); err != nil || info.Keys != 0 {
		t.Fatalf("database 3: Info = %+v, %v; want empty", info, err)
	}
}

func TestOpenUnreachable(t *testing.T) {
	srv := redistest.Start(t)
	spec := srv.URL(0)
	srv.Kill()
	start := time.Now()
	_, err := Open(t.Context(), spec, WithTimeout(500*time.Millisecond))
	if !errors.Is(err, device.ErrDeviceFailed) || !strings.Contains(err.Error(), spec) {
		t.Fatalf("Open of a stopped server: %v, want ErrDeviceFailed naming %s", err, spec)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("Open of a stopped server took %v", el)
	}
	if _, err := Open(t.Context(), "redis://127.0.0.1:1/x"); err == nil || errors.Is(err, device.ErrDeviceFailed) {
		t.Fatalf("Open of a malformed spec: %v, want a plain error", err)
	}
}

func TestOpenRefusesEviction(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
	_, err := Open(t.Context(), srv.URL(0))
	if !errors.Is(err, device.ErrDeviceFailed) || !strings.Contains(err.Error(), "noeviction") {
		t.Fatalf("Open of an evicting server: %v, want an error about noeviction", err)
	}
	// With maxmemory and noeviction, a full server refuses writes: that
	// is ErrNoSpace.
	srv2 := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	d := mustOpen(t, srv2.URL(0))
	v := bytes.Repeat([]byte{7}, 256<<10)
	var serr error
	for i := 0; i < 100 && serr == nil; i++ {
		serr = d.Store(t.Context(), fmt.Appendf(nil, "fill-%03d", i), v)
	}
	if !errors.Is(serr, device.ErrNoSpace) || errors.Is(serr, device.ErrDeviceFailed) {
		t.Fatalf("Store on a full server: %v, want ErrNoSpace", serr)
	}
}

// TestWrongType checks that a key of another type (not written by a
// device) reads as corrupt, not as a failed device.
func TestWrongType(t *testing.T) {
	srv := redistest.Start(t)
	d := mustOpen(t, srv.URL(0))
	ctx := t.Context()
	// Make a list with the device's own client, then read it as a value.
	if err := d.client.RPush(ctx, "alist", "x").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := d.Retrieve(ctx, []byte("alist"))
	if !errors.Is(err, device.ErrCorrupt) || errors.Is(err, device.ErrDeviceFailed) {
		t.Fatalf("Retrieve of a list: %v, want ErrCorrupt", err)
	}
	ops := []device.Op{{Kind: device.OpRetrieve, Key: []byte("alist")}, {Kind: device.OpExist, Key: []byte("alist")}}
	if err := d.Batch(ctx, ops); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(ops[0].Err, device.ErrCorrupt) || ops[1].Err != nil || !ops[1].Found {
		t.Fatalf("Batch over a list: %v / %v %v", ops[0].Err, ops[1].Err, ops[1].Found)
	}
}

// allOps runs one of each call and returns their errors by name.
func allOps(ctx context.Context, d *Device) map[string]error {
	k := []byte("probe-key")
	errs := map[string]error{}
	errs["store"] = d.Store(ctx, k, []byte("v"))
	_, errs["retrieve"] = d.Retrieve(ctx, k)
	if errors.Is(errs["retrieve"], device.ErrNotFound) {
		errs["retrieve"] = nil
	}
	_, errs["exist"] = d.Exist(ctx, k)
	errs["delete"] = d.Delete(ctx, k)
	errs["iterate"] = d.Iterate(ctx, nil, func([]byte) error { return nil })
	_, errs["info"] = d.Info(ctx)
	ops := []device.Op{{Kind: device.OpStore, Key: k, Value: []byte("w")}, {Kind: device.OpRetrieve, Key: k}}
	errs["batch"] = d.Batch(ctx, ops)
	errs["batch op 0"], errs["batch op 1"] = ops[0].Err, ops[1].Err
	return errs
}

// TestKillRestart: a killed server makes every call fail with
// ErrDeviceFailed, quickly; restarted on the same port, the first call
// reports the restart and the device serves again.
func TestKillRestart(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 500 * time.Millisecond
	d := mustOpen(t, srv.URL(0), WithTimeout(timeout))
	ctx := t.Context()
	for name, err := range allOps(ctx, d) {
		if err != nil {
			t.Fatalf("%s on a live server: %v", name, err)
		}
	}
	srv.Kill()
	for range 3 { // the pool's stale connections, then refused dials
		start := time.Now()
		for name, err := range allOps(ctx, d) {
			if !errors.Is(err, device.ErrDeviceFailed) {
				t.Errorf("%s on a killed server: %v, want ErrDeviceFailed", name, err)
			}
		}
		if el := time.Since(start); el > 8*timeout {
			t.Errorf("8 calls on a killed server took %v, timeout %v", el, timeout)
		}
	}
	srv.Restart()
	// The first call that reaches the new server fails, naming the
	// restart; then the device serves again. (go-redis's dial circuit
	// breaker may refuse for up to a second after the outage.)
	var sawRestart bool
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := d.Store(ctx, []byte("after"), []byte("restart"))
		if err == nil {
			break
		}
		if !errors.Is(err, device.ErrDeviceFailed) {
			t.Fatalf("Store after restart: %v, want ErrDeviceFailed or success", err)
		}
		if strings.Contains(err.Error(), "restarted") {
			sawRestart = true
		}
		if time.Now().After(deadline) {
			t.Fatalf("device still failing 5s after the restart: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !sawRestart {
		t.Error("no call reported the server restart")
	}
	for name, err := range allOps(ctx, d) {
		if err != nil {
			t.Errorf("%s after restart: %v", name, err)
		}
	}
	if v, err := d.Retrieve(ctx, []byte("after")); err != nil || string(v) != "restart" {
		t.Fatalf("Retrieve after restart = %q, %v", v, err)
	}
}

// TestHang: a server that stops answering (frozen with SIGSTOP, its
// sockets still open) fails every call with ErrDeviceFailed within the
// timeout, and serves again when it resumes.
func TestHang(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 300 * time.Millisecond
	d := mustOpen(t, srv.URL(0), WithTimeout(timeout))
	ctx := t.Context()
	if err := d.Store(ctx, []byte("some-key"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	srv.Freeze()
	start := time.Now()
	errs := allOps(ctx, d)
	el := time.Since(start)
	for name, err := range errs {
		if !errors.Is(err, device.ErrDeviceFailed) {
			t.Errorf("%s on a hung server: %v, want ErrDeviceFailed", name, err)
		}
	}
	// 7 round trips, each bounded by the timeout.
	if el > 7*timeout+time.Second {
		t.Errorf("calls on a hung server took %v, timeout %v", el, timeout)
	}
	if err := errs["retrieve"]; err != nil && !strings.Contains(err.Error(), "no answer within") {
		t.Errorf("error does not say it timed out: %v", err)
	}
	// A caller's own deadline is the caller's error, not a device failure.
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := d.Retrieve(cctx, []byte("some-key")); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, device.ErrDeviceFailed) {
		t.Errorf("Retrieve with a caller's deadline shorter than the timeout: %v", err)
	}
	srv.Thaw()
	if v, err := d.Retrieve(ctx, []byte("some-key")); err != nil || string(v) != "v" {
		t.Fatalf("Retrieve after the server resumed = %q, %v", v, err)
	}
}

// TestServerErrorReply: a server that answers LOADING (or any error reply
// but OOM and WRONGTYPE) is a failed device.
func TestServerErrorReply(t *testing.T) {
	err := (&Device{name: "x", timeout: time.Second}).classify(context.Background(), loadingErr{})
	if !errors.Is(err, device.ErrDeviceFailed) {
		t.Fatalf("LOADING: %v, want ErrDeviceFailed", err)
	}
}

type loadingErr struct{}

func (loadingErr) Error() string { return "LOADING Redis is loading the dataset in memory" }
func (loadingErr) RedisError()   {}

// TestPipelineKilled kills the server while pipelines are in flight: every
// op ends with a result or an error wrapping ErrDeviceFailed, no panic, and
// no wrong bytes.
func TestPipelineKilled(t *testing.T) {
	srv := redistest.Start(t)
	d := mustOpen(t, srv.URL(0), WithTimeout(time.Second))
	ctx := t.Context()
	val := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 16<<10) }
	// Preload what the pipelines read.
	for i := range 64 {
		if err := d.Store(ctx, fmt.Appendf(nil, "pre-%02d", i), val(i)); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var failedOps, okOps atomic.Int64
	stop := make(chan struct{})
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; ; round++ {
				select {
				case <-stop:
					return
				default:
				}
				ops := make([]device.Op, 0, 128)
				for i := range 64 {
					ops = append(ops,
						device.Op{Kind: device.OpStore, Key: fmt.Appendf(nil, "w-%d-%02d", g, i), Value: val(i)},
						device.Op{Kind: device.OpRetrieve, Key: fmt.Appendf(nil, "pre-%02d", i)})
				}
				err := d.Batch(ctx, ops)
				if err != nil && !errors.Is(err, device.ErrDeviceFailed) {
					t.Errorf("Batch: %v, want nil or ErrDeviceFailed", err)
				}
				for j, op := range ops {
					switch {
					case op.Err != nil:
						if !errors.Is(op.Err, device.ErrDeviceFailed) {
							t.Errorf("op %d: %v, want ErrDeviceFailed", j, op.Err)
						}
						if op.Result != nil || op.Found {
							t.Errorf("op %d failed but has a result", j)
						}
						failedOps.Add(1)
					case op.Kind == device.OpRetrieve:
						if !bytes.Equal(op.Result, val(j/2)) {
							t.Errorf("op %d: wrong bytes", j)
						}
						okOps.Add(1)
					default:
						okOps.Add(1)
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	srv.Kill()
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("ops ok %d, failed %d", okOps.Load(), failedOps.Load())
	if failedOps.Load() == 0 {
		t.Error("no op failed after the kill")
	}
}

func TestClosedInFlight(t *testing.T) {
	srv := redistest.Start(t)
	d, err := Open(t.Context(), srv.URL(0))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				err := d.Store(t.Context(), fmt.Appendf(nil, "k-%d-%d", g, i), make([]byte, 1024))
				if err != nil {
					if !errors.Is(err, device.ErrDeviceFailed) {
						t.Errorf("Store during Close: %v, want ErrDeviceFailed", err)
					}
					return
				}
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := d.Close(); !errors.Is(err, device.ErrDeviceFailed) {
		t.Fatalf("second Close: %v", err)
	}
}
