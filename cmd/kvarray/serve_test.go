package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// syncBuffer is an output stream written by a serving goroutine and read
// by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// listening finds the address in serve's banner, once its last line
// (connect with) is printed.
var listening = regexp.MustCompile(`(?s)listening on (\S+)\n.*connect with: [^\n]*\n`)

// serving is `kvarray serve` running in-process.
type serving struct {
	addr        string
	out, errOut *syncBuffer
	cancel      context.CancelFunc
	code        chan int
}

// serve runs `kvarray serve --listen 127.0.0.1:0 [args]` in-process and
// waits until it listens and has printed its banner.
func serve(t testing.TB, args ...string) *serving {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &serving{out: &syncBuffer{}, errOut: &syncBuffer{}, cancel: cancel, code: make(chan int, 1)}
	args = append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)
	go func() { s.code <- run(ctx, args, bytes.NewReader(nil), s.out, s.errOut) }()
	for deadline := time.Now().Add(2 * time.Minute); ; {
		if m := listening.FindStringSubmatch(s.out.String()); m != nil {
			s.addr = m[1]
			return s
		}
		select {
		case code := <-s.code:
			t.Fatalf("kvarray serve exited with %d before listening: %s%s", code, s.out, s.errOut)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("kvarray serve did not listen: %s%s", s.out, s.errOut)
		}
	}
}

// stop cancels serve (as SIGINT does) and checks that it exits cleanly.
func (s *serving) stop(t testing.TB) {
	t.Helper()
	s.cancel()
	select {
	case code := <-s.code:
		if code != 0 || strings.Contains(s.errOut.String(), "level=ERROR") || !strings.HasSuffix(s.out.String(), "kvarray serve: stopped\n") {
			t.Errorf("kvarray serve exited with %d, stdout %q, stderr %q", code, s.out, s.errOut)
		}
	case <-time.After(time.Minute):
		t.Fatal("kvarray serve did not stop")
	}
}

func (s *serving) client(t testing.TB) *redis.Client {
	// Generous timeouts: CI machines are small and busy, and KVARRAY.STATUS
	// reads every value's header.
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestServeDefault: `kvarray serve` in an empty directory creates the
// default array and its config, serves it, and serves the same data after
// a restart; the other commands see the array too.
func TestServeDefault(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	ctx := context.Background()
	s := serve(t)
	out := s.out.String()
	for _, want := range []string{"created array ", "6 pebble devices in " + filepath.Join(dir, "data"), "(hybrid, 6 devices)", "connect with: redis-cli -p "} {
		if !strings.Contains(out, want) {
			t.Errorf("serve printed no %q:\n%s", want, out)
		}
	}
	_, port, _ := net.SplitHostPort(s.addr)
	if !strings.Contains(out, "connect with: redis-cli -p "+port+"\n") {
		t.Errorf("serve does not say how to connect to port %s:\n%s", port, out)
	}
	big := randomBytes(7, 3<<20)
	rdb := s.client(t)
	if err := rdb.Set(ctx, "hello", "world", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, "big", big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := rdb.Get(ctx, "hello").Result(); err != nil || v != "world" {
		t.Errorf("GET hello = %q, %v", v, err)
	}
	s.stop(t)
	for _, p := range []string{"kvarray.yaml", "data/dev0", "data/dev5"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("after serve: %v", err)
		}
	}
	// The CLI sees the same array.
	if got := ok(t, nil, "get", "hello"); got != "world" {
		t.Errorf("kvarray get hello = %q", got)
	}
	ok(t, nil, "put", "from-cli", "yes")

	// Restart: the data is there, and no new array is created.
	s = serve(t)
	if strings.Contains(s.out.String(), "created array") {
		t.Errorf("the second serve created an array:\n%s", s.out)
	}
	rdb = s.client(t)
	for k, want := range map[string][]byte{"hello": []byte("world"), "big": big, "from-cli": []byte("yes")} {
		if v, err := rdb.Get(ctx, k).Bytes(); err != nil || !bytes.Equal(v, want) {
			t.Errorf("after restart, GET %s: %d bytes, %v", k, len(v), err)
		}
	}
	s.stop(t)
}

func TestServeErrors(t *testing.T) {
	t.Chdir(t.TempDir())
	fails(t, nil, []string{"--config", "nope.yaml", "serve"}, "config file nope.yaml does not exist")
	if _, err := os.Stat("data"); !os.IsNotExist(err) {
		t.Error("serve with a missing --config created devices")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.WriteFile("mem.yaml", []byte("devices: [mem:a, mem:b, mem:c]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fails(t, nil, []string{"--config", "mem.yaml", "serve", "--listen", l.Addr().String()}, "address already in use")
	fails(t, nil, []string{"serve", "extra"}, "serve: want no arguments, got 1 arguments")
}

// TestServeHelperProcess is not a test: TestServeSignals runs the test
// binary with it to run `kvarray serve` as a process of its own.
func TestServeHelperProcess(t *testing.T) {
	args := os.Getenv("KVARRAY_SERVE_HELPER")
	if args == "" {
		t.Skip("helper process for TestServeSignals")
	}
	os.Exit(run(context.Background(), strings.Fields(args), os.Stdin, os.Stdout, os.Stderr))
}

// TestServeSignals: SIGTERM and SIGINT stop `kvarray serve` gracefully:
// the commands it has read complete and are answered, then it exits 0.
func TestServeSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "kvarray.yaml")
			if err := os.WriteFile(cfg, []byte("devices: [mem:a, mem:b, mem:c]\ndevice: {perf: {latency: 5ms}}\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestServeHelperProcess$")
			cmd.Env = append(os.Environ(), "KVARRAY_SERVE_HELPER=--config "+cfg+" serve --listen 127.0.0.1:0")
			out, errOut := &syncBuffer{}, &syncBuffer{}
			cmd.Stdout, cmd.Stderr = out, errOut
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			var addr string
			for deadline := time.Now().Add(time.Minute); addr == ""; time.Sleep(10 * time.Millisecond) {
				if m := listening.FindStringSubmatch(out.String()); m != nil {
					addr = m[1]
				}
				if time.Now().After(deadline) {
					t.Fatalf("no listening line: %s%s", out, errOut)
				}
			}
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			const n = 20
			var pipe bytes.Buffer
			for i := range n {
				fmt.Fprintf(&pipe, "SET k%d v%d\r\n", i, i)
			}
			nc.Write(pipe.Bytes())
			rd := bufio.NewReader(nc)
			nc.SetReadDeadline(time.Now().Add(time.Minute))
			// The first reply: the server has read the pipeline.
			if line, err := rd.ReadString('\n'); err != nil || line != "+OK\r\n" {
				t.Fatalf("first reply %q, %v", line, err)
			}
			cmd.Process.Signal(sig)
			for i := 1; i < n; i++ {
				if line, err := rd.ReadString('\n'); err != nil || line != "+OK\r\n" {
					t.Fatalf("reply %d after %v: %q, %v", i, sig, line, err)
				}
			}
			if rest, err := rd.ReadString('\n'); err == nil {
				t.Errorf("after the replies, %q; want the connection closed", rest)
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("kvarray serve after %v: %v; stderr %q", sig, err, errOut)
			}
			if !strings.Contains(out.String(), "shutting down\nkvarray serve: stopped\n") {
				t.Errorf("stdout:\n%s", out)
			}
		})
	}
}

// tool finds a Redis command-line tool (Debian's redis-server package).
// Under CI a missing tool fails the test; elsewhere it skips it.
func tool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := fmt.Sprintf("%s not found on PATH; install Debian's redis-server package (apt-get install -y redis-server)", name)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: .ci/run must install it)")
	}
	t.Skip(msg)
	return ""
}

// TestServeRedisCLI: redis-cli against `kvarray serve`, as the README
// shows it.
func TestServeRedisCLI(t *testing.T) {
	cli := tool(t, "redis-cli")
	t.Chdir(t.TempDir())
	if err := os.WriteFile("kvarray.yaml", []byte("devices: [mem:a, mem:b, mem:c, mem:d]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := serve(t)
	_, port, _ := net.SplitHostPort(s.addr)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"set", "hello", "world"}, "OK\n"},
		{[]string{"get", "hello"}, "world\n"},
		{[]string{"kvarray.fail", "1"}, "OK\n"},
		{[]string{"get", "hello"}, "world\n"},
		{[]string{"kvarray.recover", "1"}, `{"device":1,`},
	} {
		out, err := exec.Command(cli, append([]string{"-p", port}, tc.args...)...).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), tc.want) {
			t.Errorf("redis-cli %v: %q, %v; want %q", tc.args, out, err, tc.want)
		}
	}
	s.stop(t)
}

// TestServeRESPBenchmark measures redis-benchmark against `kvarray serve`
// on mem devices, one mechanism at a time, and against a plain
// redis-server in the same run. It runs only with KVARRAY_RESP_BENCH=1
// (and is meant for a build without -race):
//
//	KVARRAY_RESP_BENCH=1 go test -run TestServeRESPBenchmark -v ./cmd/kvarray/
//
// KVARRAY_RESP_BENCH_N (requests per test, default 50000) and
// KVARRAY_RESP_BENCH_ROUNDS (default 3; the median is reported) tune it.
func TestServeRESPBenchmark(t *testing.T) {
	if os.Getenv("KVARRAY_RESP_BENCH") != "1" {
		t.Skip("set KVARRAY_RESP_BENCH=1 to run the RESP benchmark")
	}
	bench := tool(t, "redis-benchmark")
	redisServer := tool(t, "redis-server")
	n := envInt("KVARRAY_RESP_BENCH_N", 50000)
	rounds := envInt("KVARRAY_RESP_BENCH_ROUNDS", 3)
	dir := t.TempDir()
	t.Chdir(dir)
	devs := "devices: [mem:d0, mem:d1, mem:d2, mem:d3, mem:d4, mem:d5]\n"
	ec := "splitting: {k: 4, r: 2}\npacking: {k: 4, r: 2}\n"
	targets := []struct{ name, yaml string }{
		{"hashing", devs + "mode: standalone\ndefault: hashing\n"},
		{"replication", devs + "mode: standalone\ndefault: replication\n"},
		{"splitting", devs + ec + "mode: standalone\ndefault: splitting\n"},
		{"packing", devs + ec + "mode: standalone\ndefault: packing\n"},
		{"hybrid", devs + ec + "mode: hybrid\nthresholds:\n  - {max: 8KiB, rm: replication}\n  - {max: 32KiB, rm: packing}\n  - {rm: splitting}\n"},
		{"redis-server", ""},
	}
	type key struct{ target, keys, op string }
	results := map[key][]float64{}
	keyModes := []struct {
		name string
		args []string
	}{{"one key", nil}, {"random keys", []string{"-r", "100000"}}}
	for round := range rounds {
		for _, tg := range targets {
			var addr string
			var stop func()
			if tg.yaml == "" {
				addr, stop = startRedisServer(t, redisServer)
			} else {
				cfg := filepath.Join(dir, tg.name+".yaml")
				if err := os.WriteFile(cfg, []byte(tg.yaml), 0o644); err != nil {
					t.Fatal(err)
				}
				s := serve(t, "--config", cfg)
				addr, stop = s.addr, func() { s.stop(t) }
			}
			host, port, _ := net.SplitHostPort(addr)
			for _, km := range keyModes {
				args := append([]string{"-h", host, "-p", port, "-t", "set,get", "-n", strconv.Itoa(n), "-P", "16", "-d", "4096", "-q"}, km.args...)
				out, err := exec.Command(bench, args...).CombinedOutput()
				if err != nil || bytes.Contains(bytes.ToLower(out), []byte("error")) {
					t.Fatalf("%s: redis-benchmark %v: %v\n%s", tg.name, args, err, out)
				}
				for _, m := range regexp.MustCompile(`(SET|GET): ([0-9.]+) requests per second`).FindAllSubmatch(out, -1) {
					v, _ := strconv.ParseFloat(string(m[2]), 64)
					results[key{tg.name, km.name, string(m[1])}] = append(results[key{tg.name, km.name, string(m[1])}], v)
				}
			}
			stop()
			t.Logf("round %d: %s done", round+1, tg.name)
		}
	}
	median := func(v []float64) float64 {
		v = slices.Clone(v)
		sort.Float64s(v)
		if len(v) == 0 {
			return 0
		}
		return v[len(v)/2]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "redis-benchmark -t set,get -n %d -P 16 -d 4096 (50 clients), mem devices, median of %d rounds, ops/s (ratio to redis-server)\n", n, rounds)
	for _, km := range keyModes {
		fmt.Fprintf(&b, "\n%s%s:\n| target | SET | GET |\n|---|---|---|\n", km.name, map[bool]string{true: " (-r 100000)", false: " (key:__rand_int__)"}[km.args != nil])
		baseSet, baseGet := median(results[key{"redis-server", km.name, "SET"}]), median(results[key{"redis-server", km.name, "GET"}])
		for _, tg := range targets {
			set, get := median(results[key{tg.name, km.name, "SET"}]), median(results[key{tg.name, km.name, "GET"}])
			fmt.Fprintf(&b, "| %s | %.0f (%.2f) | %.0f (%.2f) |\n", tg.name, set, set/baseSet, get, get/baseGet)
		}
	}
	t.Log("\n" + b.String())
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// startRedisServer starts a plain redis-server without persistence.
func startRedisServer(t testing.TB, bin string) (string, func()) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", port)
	for i := 0; ; i++ {
		if nc, err := net.Dial("tcp", addr); err == nil {
			nc.Close()
			break
		}
		if i == 200 {
			cmd.Process.Kill()
			t.Fatal("redis-server did not start")
		}
		time.Sleep(25 * time.Millisecond)
	}
	return addr, func() {
		cmd.Process.Kill()
		cmd.Wait()
	}
}
