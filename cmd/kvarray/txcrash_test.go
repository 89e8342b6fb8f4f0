package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startServeProcess runs `kvarray --config cfg serve` as a process of its
// own (TestServeHelperProcess) and returns it, its address and its
// standard output.
func startServeProcess(t *testing.T, cfg string, flags ...string) (*exec.Cmd, string, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeHelperProcess$")
	cmd.Env = append(os.Environ(), "KVARRAY_SERVE_HELPER=--config "+cfg+" serve --listen 127.0.0.1:0 "+strings.Join(flags, " "))
	out, errOut := &syncBuffer{}, &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if m := listening.FindStringSubmatch(out.String()); m != nil {
			return cmd, m[1], out
		}
		if time.Now().After(deadline) {
			t.Fatalf("no listening line: %s%s", out, errOut)
		}
	}
}

// TestTxKill9: `kvarray serve` on Pebble devices is killed with SIGKILL
// while clients run transactions; see kill9Rounds for the invariant.
func TestTxKill9(t *testing.T) {
	kill9Rounds(t, 10, func(ctx context.Context, rdb *redis.Client, i int) error {
		_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for j := range 10 {
				p.Set(ctx, fmt.Sprintf("a%d", j), i, 0)
			}
			p.Incr(ctx, "n")
			return nil
		})
		return err
	})
}

// TestScriptKill9: as TestTxKill9, with a Lua script (EVALSHA) that
// writes 50 keys and increments n: each script's writes are all there
// after the restart, or none.
func TestScriptKill9(t *testing.T) {
	sc := redis.NewScript(`for j = 0, 49 do redis.call('set', 'a' .. j, ARGV[1]) end
return redis.call('incr', 'n')`)
	kill9Rounds(t, 50, func(ctx context.Context, rdb *redis.Client, i int) error {
		return sc.Run(ctx, rdb, nil, i).Err()
	})
}

// kill9Rounds kills `kvarray serve` on Pebble devices with SIGKILL, three
// times, while one client runs write(i) for i = n+1, n+2, ..., each of
// which sets a0..a{keys-1} to i and increments n as one unit.
// Invariant, after each restart: every unit is all there or not at all
// (all the keys equal n), and none that was acknowledged is lost (its
// number is at most n).
func kill9Rounds(t *testing.T, keys int, write func(ctx context.Context, rdb *redis.Client, i int) error) {
	dir := fresh(t, 4)
	cfg := filepath.Join(dir, "kvarray.yaml")
	ctx := context.Background()
	names := []string{"n"}
	for j := range keys {
		names = append(names, fmt.Sprintf("a%d", j))
	}
	for round := range 3 {
		cmd, addr, _ := startServeProcess(t, cfg)
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		n0, _ := rdb.Get(ctx, "n").Int()
		acked := make(chan int, 1)
		go func() {
			last := n0
			defer func() { acked <- last }()
			for i := n0 + 1; i < n0+100000; i++ {
				if write(ctx, rdb, i) != nil {
					return
				}
				last = i
			}
		}()
		// Kill at some moment while writes stream (not a timing
		// assertion: any moment must do).
		time.Sleep(time.Duration(200+150*round) * time.Millisecond)
		cmd.Process.Kill()
		cmd.Wait()
		last := <-acked
		rdb.Close()

		check, addr, _ := startServeProcess(t, cfg)
		rdb = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		vals, err := rdb.MGet(ctx, names...).Result()
		rdb.Close()
		if err != nil {
			t.Fatalf("round %d: MGET after the restart: %v", round, err)
		}
		n, _ := strconv.Atoi(fmt.Sprint(vals[0]))
		for j, v := range vals[1:] {
			if fmt.Sprint(v) != fmt.Sprint(vals[0]) {
				t.Fatalf("round %d: after kill -9, n = %v but a%d = %v: a unit was applied in part (%v)", round, vals[0], j, v, vals)
			}
		}
		if n < last {
			t.Fatalf("round %d: unit %d was acknowledged but n = %d after the restart", round, last, n)
		}
		t.Logf("round %d: killed after %d acknowledged units; %d after the restart", round, last-n0, n-n0)
		// The next round opens the devices again.
		check.Process.Signal(syscall.SIGTERM)
		check.Wait()
	}
}

// TestUncleanShutdownSaid: after `kvarray serve` is killed with SIGKILL,
// the next serve, run with --scrub-after-crash=false, and `kvarray
// status` say that a scrub is due; after `kvarray scrub --repair` status
// no longer does, and after a graceful stop the next serve does not
// either. By default serve runs that scrub itself after a SIGKILL: status
// then shows it done, and the values are there.
func TestUncleanShutdownSaid(t *testing.T) {
	dir := fresh(t, 4)
	cfg := filepath.Join(dir, "kvarray.yaml")
	ctx := context.Background()
	said := func(out string) bool { return strings.Contains(out, uncleanAdvice) }
	cmd, addr, out := startServeProcess(t, cfg)
	if said(out.String()) {
		t.Fatalf("serve of a new array: %s", out)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.Close()
	cmd.Process.Kill()
	cmd.Wait()

	cmd, _, out = startServeProcess(t, cfg, "--scrub-after-crash=false")
	if !said(out.String()) {
		t.Fatalf("serve after SIGKILL does not say a scrub is due: %s", out)
	}
	if st := ok(t, nil, "--config", cfg, "status"); !said(st) {
		t.Fatalf("status after SIGKILL: %s", st)
	}
	ok(t, nil, "--config", cfg, "scrub", "--repair")
	if st := ok(t, nil, "--config", cfg, "status"); said(st) {
		t.Fatalf("status after scrub --repair: %s", st)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve stopped by SIGTERM: %v", err)
	}

	cmd, addr, out = startServeProcess(t, cfg)
	if said(out.String()) || strings.Contains(out.String(), uncleanScrubbing) {
		t.Fatalf("serve after a graceful stop: %s", out)
	}
	rdb = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	if got, err := rdb.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("k after a graceful stop: %q, %v", got, err)
	}
	rdb.Close()
	cmd.Process.Kill()
	cmd.Wait()

	_, addr, out = startServeProcess(t, cfg)
	if !strings.Contains(out.String(), uncleanScrubbing) {
		t.Fatalf("serve after SIGKILL does not say it scrubs: %s", out)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		st := ok(t, nil, "--config", cfg, "status")
		if !said(st) && strings.Contains(st, "last scrub") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status a minute after serve began its scrub: %s", st)
		}
	}
	rdb = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	if got, err := rdb.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("k: %q, %v", got, err)
	}
}
