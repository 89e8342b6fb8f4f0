// Package redistest starts real redis-server processes for tests: each on a
// free loopback port, with no persistence (--save "" --appendonly no), its
// working directory in t.TempDir(), killed when the test ends.
//
// The binaries come from PATH (Debian's redis-server package, which pulls
// redis-tools with redis-cli and redis-benchmark; .ci/run installs it).
// When one is missing the test is skipped with a message saying how to
// install it, unless CI is set in the environment: then it fails, so that a
// CI machine without Redis cannot pass by skipping.
//
// On Linux the servers get SIGKILL when the test process dies, so that a
// test binary killed by a timeout leaves no server behind.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Need returns the path of the named binary (redis-server, redis-cli,
// redis-benchmark), skipping the test when it is absent and CI is unset,
// and failing it when CI is set.
func Need(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s not found on PATH with CI set (CI must run the Redis tests): %v; .ci/run installs it with apt-get install redis-server", name, err)
	}
	t.Skipf("%s not found on PATH: skipping (install it with `apt-get install redis-server`; with CI set this is a failure)", name)
	return ""
}

// Server is one redis-server process. Its methods are safe for concurrent
// use.
type Server struct {
	t      testing.TB
	bin    string
	port   int
	dir    string
	args   []string
	logger string // log file

	mu  sync.Mutex
	cmd *exec.Cmd // nil while stopped
	// exited is closed when cmd's process has been waited for.
	exited chan struct{}
}

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 10 * time.Second

// Start starts a redis-server on a free loopback port and kills it when the
// test ends. extra arguments are appended to the command line (e.g.
// "--databases", "64").
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	s := &Server{t: t, bin: Need(t, "redis-server"), dir: t.TempDir(), args: extra}
	s.logger = filepath.Join(s.dir, "redis.log")
	t.Cleanup(s.Kill)
	// A port found free may be taken before the server binds it: try a few.
	var err error
	for range 5 {
		if s.port, err = freePort(); err != nil {
			t.Fatalf("redistest: free port: %v", err)
		}
		if err = s.start(); err == nil {
			return s
		}
	}
	t.Fatalf("redistest: %v", err)
	return nil
}

// StartN starts n servers.
func StartN(t testing.TB, n int, extra ...string) []*Server {
	t.Helper()
	out := make([]*Server, n)
	for i := range out {
		out[i] = Start(t, extra...)
	}
	return out
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs the server on s.port and waits until it answers PING.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return fmt.Errorf("redis-server on port %d is already running", s.port)
	}
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--logfile", s.logger,
		"--daemonize", "no",
	}
	args = append(args, s.args...)
	cmd := exec.Command(s.bin, args...)
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	deadline := time.Now().Add(startTimeout)
	for {
		err := ping(s.Addr(), 200*time.Millisecond)
		if err == nil {
			break
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server on port %d exited at start: %v; log:\n%s", s.port, err, s.log())
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server on port %d does not answer PING after %v: %v; log:\n%s", s.port, startTimeout, err, s.log())
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.cmd, s.exited = cmd, exited
	return nil
}

// ping sends an inline PING and expects +PONG.
func ping(addr string, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

func (s *Server) log() string {
	b, err := os.ReadFile(s.logger)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

// Addr returns "127.0.0.1:PORT".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL returns the device spec of database db: "redis://127.0.0.1:PORT/DB".
func (s *Server) URL(db int) string { return fmt.Sprintf("redis://%s/%d", s.Addr(), db) }

// Dir returns the server's working directory.
func (s *Server) Dir() string { return s.dir }

// Running reports whether the server process is running.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Kill kills the server with SIGKILL, as a crash or a lost host would, and
// waits for it to exit. Killing a stopped server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd, s.exited = nil, nil
}

// Restart starts the killed server again on the same port and directory.
// With no persistence it comes back empty. It fails the test when the
// server cannot start.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	var err error
	// The port was just released; retry briefly in case something else
	// (a lingering socket) holds it.
	for range 20 {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restart: %v", err)
}

// Freeze stops the server process (SIGSTOP) without closing its sockets,
// as a hung host would: connections stay open and nothing answers. Thaw
// resumes it; Kill and the test's end resume it too.
func (s *Server) Freeze() {
	s.t.Helper()
	s.signal(stopSignal, "freeze")
}

// Thaw resumes a frozen server (SIGCONT).
func (s *Server) Thaw() {
	s.t.Helper()
	s.signal(contSignal, "thaw")
}

func (s *Server) signal(sig os.Signal, what string) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if sig == nil {
		s.t.Skipf("redistest: %s needs unix signals", what)
	}
	if s.cmd == nil {
		s.t.Fatalf("redistest: %s: server on port %d is not running", what, s.port)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redistest: %s: %v", what, err)
	}
}

// ErrNotRunning is returned by Ping for a stopped server.
var ErrNotRunning = errors.New("redis-server not running")

// Ping checks that the server answers PING within timeout.
func (s *Server) Ping(timeout time.Duration) error {
	if !s.Running() {
		return ErrNotRunning
	}
	return ping(s.Addr(), timeout)
}
