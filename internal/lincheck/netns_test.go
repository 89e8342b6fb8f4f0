//go:build linux

package lincheck_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device/redis"
	"github.com/kvarray/kvarray/device/redis/redistest"
	"github.com/kvarray/kvarray/internal/lincheck"
	"github.com/kvarray/kvarray/mechanism"
)

// host is one redis-server device on a host of its own: a network
// namespace this test created, joined to this one by a veth pair, with an
// address of a /30 that only the pair uses.
type host struct {
	ns, veth   string // namespace; host end of the veth pair
	addr       string // the server's address in the namespace
	cmd        *exec.Cmd
	exited     chan struct{}
	dir, logfn string
}

// ipCmd runs `ip args...`, returning its combined output on failure.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newHost makes namespace i with its veth pair and addresses, and starts a
// redis-server inside it. Everything is removed when the test ends.
func newHost(t *testing.T, i int) *host {
	t.Helper()
	tag := fmt.Sprintf("%d%d", os.Getpid()%100000, i)
	h := &host{ns: "kvarray-t" + tag, veth: "kvh" + tag, dir: t.TempDir()}
	inner := "kvn" + tag
	// 10.213.i.0/30: .1 is this side, .2 the host's server.
	near, far := fmt.Sprintf("10.213.%d.1", i), fmt.Sprintf("10.213.%d.2", i)
	h.addr = far + ":6379"
	t.Cleanup(func() {
		// Deleting the namespace kills its end of the pair, and with it
		// the host end.
		_ = ipCmd("netns", "del", h.ns)
		_ = ipCmd("link", "del", h.veth)
	})
	for _, args := range [][]string{
		{"netns", "add", h.ns},
		{"link", "add", h.veth, "type", "veth", "peer", "name", inner},
		{"link", "set", inner, "netns", h.ns},
		{"addr", "add", near + "/30", "dev", h.veth},
		{"link", "set", h.veth, "up"},
		{"netns", "exec", h.ns, "ip", "addr", "add", far + "/30", "dev", inner},
		{"netns", "exec", h.ns, "ip", "link", "set", inner, "up"},
		{"netns", "exec", h.ns, "ip", "link", "set", "lo", "up"},
	} {
		if err := ipCmd(args...); err != nil {
			t.Fatal(err)
		}
	}
	bin := redistest.Need(t, "redis-server")
	h.logfn = filepath.Join(h.dir, "redis.log")
	h.cmd = exec.Command("ip", "netns", "exec", h.ns, bin, "--bind", far, "--port", "6379", "--save", "",
		"--appendonly", "no", "--dir", h.dir, "--logfile", h.logfn, "--daemonize", "no", "--protected-mode", "no")
	// Killed with this process, so that a test killed by a timeout leaves
	// no server behind (the namespaces go when the test cleans up; a
	// killed test leaves them, named kvarray-t*, for `ip netns del`).
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h.exited = make(chan struct{})
	go func() { _ = h.cmd.Wait(); close(h.exited) }()
	t.Cleanup(func() {
		_ = h.cmd.Process.Kill()
		<-h.exited
	})
	deadline := time.Now().Add(10 * time.Second)
	cli := redistest.Need(t, "redis-cli")
	for exec.Command(cli, "-h", far, "-p", "6379", "ping").Run() != nil {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(h.logfn)
			t.Fatalf("redis-server in %s does not answer: %s", h.ns, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return h
}

// cut takes the host's link down (its packets are dropped, as when a
// cable or a switch port goes), restore brings it back.
func (h *host) cut(t *testing.T) {
	t.Helper()
	if err := ipCmd("link", "set", h.veth, "down"); err != nil {
		t.Fatal(err)
	}
}

func (h *host) restore(t *testing.T) {
	t.Helper()
	if err := ipCmd("link", "set", h.veth, "up"); err != nil {
		t.Fatal(err)
	}
}

// netnsPermitted skips the test, saying why, unless this process may
// create network namespaces (root, or CAP_SYS_ADMIN and CAP_NET_ADMIN).
func netnsPermitted(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skipf("skipping: no `ip` command (iproute2) to make network namespaces: %v", err)
	}
	probe := fmt.Sprintf("kvarray-probe%d", os.Getpid())
	if err := ipCmd("netns", "add", probe); err != nil {
		t.Skipf("skipping: network namespaces are not permitted here (the test needs root or CAP_SYS_ADMIN+CAP_NET_ADMIN, as CI has): %v", err)
	}
	_ = ipCmd("netns", "del", probe)
}

// TestDevicesOnOtherHosts (issue 14, item 10): six redis-server devices,
// each on a "host" of its own (a network namespace), serve an array under
// a concurrent load; one host's link is cut, then restored. While it is
// cut the array serves degraded (operations invoked during the cut
// complete during it); once it is back the device is resynced; and the
// whole history, with a final read of every key, is linearizable: nothing
// acknowledged is lost or returned old.
func TestDevicesOnOtherHosts(t *testing.T) {
	netnsPermitted(t)
	var hosts []*host
	var specs []string
	for i := range 6 {
		h := newHost(t, i)
		hosts = append(hosts, h)
		specs = append(specs, "redis://"+h.addr+"/0")
	}
	s := serveDevices(t, specs)
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
			failed.Add(int64(lincheck.Client(ctx, c, rec, id, keys, 2000, seed)))
		}()
	}
	time.Sleep(time.Second)

	const victim = 2
	t.Logf("cut the link of host %d (%s)", victim, hosts[victim].addr)
	cutAt := rec.Now()
	hosts[victim].cut(t)
	time.Sleep(5 * time.Second)
	if st := s.a.DeviceState(victim); st != mechanism.Failed && st != mechanism.Slow {
		t.Errorf("device %d is %v after 5 s without a link, want slow or failed", victim, st)
	}
	restoredAt := rec.Now()
	hosts[victim].restore(t)
	served := completedDuring(rec, cutAt, restoredAt)
	if served == 0 {
		t.Errorf("no operation invoked while host %d was cut off completed before its link came back", victim)
	}
	t.Logf("%d operations invoked and completed while host %d was cut off", served, victim)
	s.healthy(victim)
	time.Sleep(time.Second)
	stop()
	wg.Wait()
	readAll(t, s.client(), rec, clients, keys)

	t.Logf("history: %s, %d failed in all; states %v", rec.Summary(), failed.Load(), s.states())
	for _, e := range rec.Errors() {
		t.Log("  " + e)
	}
	if n := failedSets(rec); n > 0 {
		t.Errorf("%d writes failed with one device cut off", n)
	}
	check(t, rec, seed)
}

// TestCutLinkDropsUnsentWrite: a write that times out on a cut link is
// not delivered when the link comes back. The device's connection holds
// it unsent; were the connection closed gracefully, the kernel would go
// on retransmitting it, and the server would apply it seconds after the
// link returned, over whatever the array had written since (a resync's
// repair, newer writes): a stale write from the past that no record
// names. The invariant: once a call has failed, nothing it sent changes
// the device afterwards.
func TestCutLinkDropsUnsentWrite(t *testing.T) {
	netnsPermitted(t)
	h := newHost(t, 7)
	ctx := context.Background()
	d, err := redis.Open(ctx, "redis://"+h.addr+"/0", redis.WithTimeout(500*time.Millisecond), redis.WithPoolSize(1))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	key := []byte("kkkk")
	if err := d.Store(ctx, key, []byte("acknowledged")); err != nil {
		t.Fatal(err)
	}
	h.cut(t)
	if err := d.Store(ctx, key, []byte("failed")); err == nil {
		t.Fatal("a store over a cut link succeeded")
	}
	// The link returns; the retransmissions of a gracefully closed
	// socket (backing off by doubling from 200 ms) would reach the
	// server within seconds.
	time.Sleep(time.Second)
	h.restore(t)
	cli := redistest.Need(t, "redis-cli")
	far, _, _ := strings.Cut(h.addr, ":")
	for range 12 {
		time.Sleep(500 * time.Millisecond)
		out, err := exec.Command(cli, "-h", far, "-p", "6379", "get", "kkkk").Output()
		if err != nil {
			continue // the link may take a moment
		}
		if got := strings.TrimSpace(string(out)); got != "acknowledged" {
			t.Fatalf("the device holds %q after the link came back: the failed store was delivered late", got)
		}
	}
}
