package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/kvarray/kvarray/device/redis/redistest"
)

// helperServe is `kvarray --config CFG serve --listen 127.0.0.1:0 [args]`
// in a process of its own (SIGSTOP, SIGCONT, exit codes).
type helperServe struct {
	cmd         *exec.Cmd
	out, errOut *syncBuffer
	exited      chan error
}

func startHelper(t *testing.T, cfg string, args ...string) *helperServe {
	t.Helper()
	h := &helperServe{out: &syncBuffer{}, errOut: &syncBuffer{}, exited: make(chan error, 1)}
	h.cmd = exec.Command(os.Args[0], "-test.run=^TestServeHelperProcess$")
	h.cmd.Env = append(os.Environ(), "KVARRAY_SERVE_HELPER=--config "+cfg+" serve --listen 127.0.0.1:0 "+strings.Join(args, " "))
	h.cmd.Stdout, h.cmd.Stderr = h.out, h.errOut
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { h.exited <- h.cmd.Wait() }()
	t.Cleanup(func() {
		_ = h.cmd.Process.Signal(syscall.SIGCONT)
		_ = h.cmd.Process.Kill()
	})
	return h
}

// addr waits for the banner and returns the address served, or "" with
// the exit error when the process ended first.
func (h *helperServe) addr(t *testing.T) (string, error) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		if m := listening.FindStringSubmatch(h.out.String()); m != nil {
			return m[1], nil
		}
		select {
		case err := <-h.exited:
			h.exited <- err
			return "", fmt.Errorf("exited (%v): %s", err, h.errOut)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("kvarray serve did not listen: %s%s", h.out, h.errOut)
	return "", nil
}

// TestServeOneOwner (issue 40): two `kvarray serve` processes from two
// working directories on one set of redis:// devices. One started while
// the other runs is refused, naming it; two started at once, one serves;
// a standby started after the first stopped answering (SIGSTOP past its
// lease) takes over, and the first, woken up, has its writes refused and
// stops. Every acknowledged value reads back through a fresh server.
func TestServeOneOwner(t *testing.T) {
	srvs := redistest.StartN(t, 6)
	var urls []string
	for _, s := range srvs {
		urls = append(urls, s.URL(0))
	}
	root := t.TempDir()
	dirs := map[string]string{}
	for _, n := range []string{"a", "b", "c"} {
		dirs[n] = filepath.Join(root, n)
		if err := os.MkdirAll(dirs[n], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dirs["a"])
	ok(t, nil, "init", "--devices", strings.Join(urls, ","))
	cfg, err := os.ReadFile("kvarray.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg = append(cfg, "lease: 2s\n"...)
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "kvarray.yaml"), cfg, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	conf := func(n string) string { return filepath.Join(dirs[n], "kvarray.yaml") }
	ctx := context.Background()
	client := func(addr string) *goredis.Client {
		c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 10 * time.Second})
		t.Cleanup(func() { c.Close() })
		return c
	}
	acked := map[string]string{}
	write := func(c *goredis.Client, who string, n int) {
		for i := range n {
			k, v := fmt.Sprintf("k%03d", i), fmt.Sprintf("%s-%d", who, i)
			if err := c.Set(ctx, k, v, 0).Err(); err != nil {
				t.Fatalf("SET %s through %s: %v", k, who, err)
			}
			acked[k] = v
		}
	}

	// Two at once: one serves, the other is refused.
	x, y := startHelper(t, conf("a")), startHelper(t, conf("b"))
	xa, xerr := x.addr(t)
	ya, yerr := y.addr(t)
	if (xerr == nil) == (yerr == nil) {
		t.Fatalf("two servers started at once: %q %v, %q %v", xa, xerr, ya, yerr)
	}
	first, firstAddr := x, xa
	if xerr != nil {
		first, firstAddr = y, ya
	}
	write(client(firstAddr), "first", 100)
	_ = first.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-first.exited; err != nil {
		t.Fatalf("first server: %v: %s", err, first.errOut)
	}

	// One started while the other runs: refused, naming it.
	a := startHelper(t, conf("a"))
	aAddr, err := a.addr(t)
	if err != nil {
		t.Fatal(err)
	}
	ca := client(aAddr)
	write(ca, "a", 150)
	b := startHelper(t, conf("b"))
	if _, err := b.addr(t); err == nil || !strings.Contains(err.Error(), dirs["a"]) || !strings.Contains(err.Error(), "--takeover") {
		t.Fatalf("a second server while the first runs: %v", err)
	}

	// The owner stops answering past its lease; a standby takes over.
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	b = startHelper(t, conf("b"))
	bAddr, err := b.addr(t)
	if err != nil {
		t.Fatalf("standby after the lease expired: %v", err)
	}
	write(client(bAddr), "b", 80)
	// The deposed owner wakes up and tries to write.
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		k := fmt.Sprintf("k%03d", i)
		if err := ca.Set(ctx, k, "late write of the deposed owner", 0).Err(); err == nil {
			t.Fatalf("the deposed owner acknowledged SET %s", k)
		}
	}
	select {
	case err := <-a.exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !strings.Contains(a.errOut.String(), "deposed") {
			t.Fatalf("the deposed owner exited with %v: %s", err, a.errOut)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the deposed owner is still serving")
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-b.exited; err != nil {
		t.Fatalf("standby: %v: %s", err, b.errOut)
	}

	// A fresh server reads every acknowledged value.
	c := startHelper(t, conf("c"))
	cAddr, err := c.addr(t)
	if err != nil {
		t.Fatal(err)
	}
	cc := client(cAddr)
	for k, v := range acked {
		if got, err := cc.Get(ctx, k).Result(); err != nil || got != v {
			t.Fatalf("GET %s: %q, %v; want %q", k, got, err, v)
		}
	}
	if n, err := cc.DBSize(ctx).Result(); err != nil || n != int64(len(acked)) {
		t.Fatalf("DBSIZE %d, %v; want %d", n, err, len(acked))
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	<-c.exited
}
