package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/config"
	"github.com/kvarray/kvarray/device"
)

// memHybrid is the test array: six mem devices in hybrid mode with every
// mechanism (replication up to 8 KiB, packing up to 32 KiB, splitting
// above), as `kvarray init` configures pebble devices.
const memHybrid = `
devices: [mem:d0, mem:d1, mem:d2, mem:d3, mem:d4, mem:d5]
mode: hybrid
default: replication
thresholds:
  - {max: 8KiB, rm: replication}
  - {max: 32KiB, rm: packing}
  - {rm: splitting}
splitting: {k: 4, r: 2}
packing: {k: 4, r: 2}
`

// testServer is a server on a loopback port over a mem array.
type testServer struct {
	t     *testing.T
	a     *array.Array
	devs  []device.Device
	srv   *Server
	addr  string
	done  chan error
	ended bool
}

// openArray creates the array a YAML config of mem devices describes.
func openArray(t testing.TB, yaml string) (*array.Array, []device.Device) {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), t.TempDir())
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	devs := config.OpenDevices(cfg, true)
	a, err := array.Create(context.Background(), devs, cfg.Options()...)
	if err != nil {
		t.Fatalf("create array: %v", err)
	}
	return a, devs
}

// startServer serves a new array of yaml (memHybrid when empty) with
// opts; the cleanup shuts the server down and closes the array.
func startServer(t *testing.T, yaml string, opts ...Option) *testServer {
	t.Helper()
	if yaml == "" {
		yaml = memHybrid
	}
	a, devs := openArray(t, yaml)
	return serveArray(t, a, devs, opts...)
}

// serveArray serves a, whose devices are devs, with opts; the cleanup
// shuts the server down and closes the array.
func serveArray(t *testing.T, a *array.Array, devs []device.Device, opts ...Option) *testServer {
	t.Helper()
	srv := New(a, append([]Option{WithDevices(devs)}, opts...)...)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{t: t, a: a, devs: devs, srv: srv, addr: l.Addr().String(), done: make(chan error, 1)}
	go func() { ts.done <- srv.Serve(l) }()
	t.Cleanup(func() {
		ts.stop()
		if err := a.Close(); err != nil {
			t.Errorf("close array: %v", err)
		}
	})
	return ts
}

// stop shuts the server down and checks that Serve returned
// ErrServerClosed.
func (ts *testServer) stop() {
	if ts.ended {
		return
	}
	ts.ended = true
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ts.srv.Shutdown(ctx); err != nil {
		ts.t.Errorf("shutdown: %v", err)
	}
	select {
	case err := <-ts.done:
		if !errors.Is(err, ErrServerClosed) {
			ts.t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	case <-time.After(20 * time.Second):
		ts.t.Error("Serve did not return after Shutdown")
	}
}

func (ts *testServer) port() string {
	_, p, _ := net.SplitHostPort(ts.addr)
	return p
}

// client is a go-redis client of the server.
func (ts *testServer) client(opts ...func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: ts.addr, MaxRetries: -1}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	ts.t.Cleanup(func() { c.Close() })
	return c
}

// dial opens a raw connection.
func (ts *testServer) dial() *rawConn {
	ts.t.Helper()
	nc, err := net.DialTimeout("tcp", ts.addr, 5*time.Second)
	if err != nil {
		ts.t.Fatal(err)
	}
	ts.t.Cleanup(func() { nc.Close() })
	return &rawConn{t: ts.t, Conn: nc, r: bufio.NewReader(nc)}
}

// rawConn speaks RESP by hand.
type rawConn struct {
	t testing.TB
	net.Conn
	r *bufio.Reader
}

func (c *rawConn) send(b []byte) {
	c.t.Helper()
	c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// do sends one command and reads its reply.
func (c *rawConn) do(args ...string) reply {
	c.t.Helper()
	c.send(encode(args...))
	return c.read()
}

func (c *rawConn) read() reply {
	c.t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	r, err := readReply(c.r)
	if err != nil {
		c.t.Fatalf("reading a reply: %v", err)
	}
	return r
}

// expectEOF checks that the server closed the connection.
func (c *rawConn) expectEOF() {
	c.t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	rest, err := io.ReadAll(c.r)
	if err != nil {
		c.t.Fatalf("want a clean close, got %v after %q", err, rest)
	}
	if len(rest) > 0 {
		c.t.Fatalf("want a clean close, got %q more", rest)
	}
}

// encode is a command in RESP.
func encode(args ...string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.Bytes()
}

// reply is a parsed RESP2 or RESP3 reply (a map's elems are its keys
// and values in turn).
type reply struct {
	kind  byte // + - : $ * and RESP3's % ~ _ , # ( =
	str   string
	null  bool
	elems []reply
}

func (r reply) String() string {
	switch {
	case r.null:
		return "(nil)"
	case r.kind == '*', r.kind == '%', r.kind == '~', r.kind == '>':
		parts := make([]string, len(r.elems))
		for i, e := range r.elems {
			parts[i] = e.String()
		}
		open := "["
		if r.kind != '*' {
			open = string(r.kind) + "["
		}
		return open + strings.Join(parts, " ") + "]"
	}
	return string(r.kind) + strconv.Quote(r.str)
}

func (r reply) isError() bool { return r.kind == '-' }

// readReply reads one reply and checks that it is well formed.
func readReply(r *bufio.Reader) (reply, error) {
	return readReplyDepth(r, 0)
}

func readReplyDepth(r *bufio.Reader, depth int) (reply, error) {
	if depth > 64 {
		return reply{}, errors.New("reply nested too deep")
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return reply{}, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return reply{}, fmt.Errorf("malformed line %q", line)
	}
	kind, body := line[0], line[1:len(line)-2]
	if strings.ContainsAny(body, "\r\n") {
		return reply{}, fmt.Errorf("CR or LF inside line %q", line)
	}
	switch kind {
	case '+', '-', ',', '#', '(':
		return reply{kind: kind, str: body}, nil
	case '_':
		if body != "" {
			return reply{}, fmt.Errorf("bad null %q", line)
		}
		return reply{kind: kind, null: true}, nil
	case ':':
		if _, err := strconv.ParseInt(body, 10, 64); err != nil {
			return reply{}, fmt.Errorf("bad integer %q", line)
		}
		return reply{kind: kind, str: body}, nil
	case '$', '=':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 {
			return reply{}, fmt.Errorf("bad bulk length %q", line)
		}
		if n == -1 {
			return reply{kind: kind, null: true}, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return reply{}, err
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return reply{}, fmt.Errorf("bulk of %d bytes not followed by CRLF", n)
		}
		return reply{kind: kind, str: string(buf[:n])}, nil
	case '*', '%', '~', '>':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 {
			return reply{}, fmt.Errorf("bad array length %q", line)
		}
		if n == -1 {
			return reply{kind: kind, null: true}, nil
		}
		if kind == '%' {
			n *= 2 // a map's elements are its keys and values
		}
		rep := reply{kind: kind, elems: make([]reply, 0, min(n, 1024))}
		for range n {
			e, err := readReplyDepth(r, depth+1)
			if err != nil {
				return reply{}, err
			}
			rep.elems = append(rep.elems, e)
		}
		return rep, nil
	}
	return reply{}, fmt.Errorf("unknown reply type in %q", line)
}

// tool finds a Redis command-line tool (Debian's redis-server package).
// Under CI a missing tool fails the test; elsewhere it skips it.
func tool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := fmt.Sprintf("%s not found on PATH; install Debian's redis-server package (apt-get install -y redis-server), which provides redis-server, redis-cli and redis-benchmark", name)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: .ci/run must install it)")
	}
	t.Skip(msg)
	return ""
}

// redisCLI runs redis-cli against the server with args, stdin as input,
// and returns its stdout; a failure or anything on stderr fails the test.
func (ts *testServer) redisCLI(stdin []byte, args ...string) []byte {
	ts.t.Helper()
	bin := tool(ts.t, "redis-cli")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"-h", "127.0.0.1", "-p", ts.port()}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil || errOut.Len() > 0 {
		ts.t.Fatalf("redis-cli %s: %v; stderr %q; stdout %q", strings.Join(args, " "), err, errOut.String(), out.String())
	}
	return out.Bytes()
}

// freePort returns a loopback port nobody listens on (for redis-server).
func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}

// startRedis starts a plain redis-server (no persistence) on a free port
// and returns its address.
func startRedis(t testing.TB) string {
	t.Helper()
	bin := tool(t, "redis-server")
	port := freePort(t)
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr := net.JoinHostPort("127.0.0.1", port)
	for i := 0; ; i++ {
		nc, err := net.Dial("tcp", addr)
		if err == nil {
			nc.Close()
			return addr
		}
		if i == 100 {
			t.Fatalf("redis-server did not start: %v\n%s", err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
