package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/config"
	"github.com/kvarray/kvarray/server"
)

// statusOut runs `kvarray status args...`, which must exit with code
// (-1: any health code, 0 to 2) and nothing on stderr, and returns stdout.
func statusOut(t *testing.T, code int, args ...string) string {
	t.Helper()
	r := kv(t, nil, append([]string{"status"}, args...)...)
	if r.stderr != "" || code >= 0 && r.code != code || code < 0 && r.code > healthAtRisk {
		t.Fatalf("kvarray status %s: exit %d (want %d), stderr %q, stdout:\n%s", strings.Join(args, " "), r.code, code, r.stderr, r.stdout)
	}
	return r.stdout
}

// TestStatusExitCodes: a clean array exits 0 with "clean"; with one of 4
// devices gone (every mechanism tolerates 2) it exits 1, "degraded"; with
// 3 gone (beyond every mechanism) it exits 2, "data at risk".
func TestStatusExitCodes(t *testing.T) {
	dir := fresh(t, 4)
	healValues(t, "k", 7)
	if out := statusOut(t, healthClean); !strings.HasPrefix(out, "clean\n") {
		t.Errorf("clean array: status starts %q", firstLine(out))
	}
	if out := statusOut(t, healthClean, "--json"); !strings.Contains(out, `"health": "clean"`) || !strings.Contains(out, `"exit_code": 0`) {
		t.Errorf("status --json lacks health and exit_code:\n%s", out)
	}
	back := away(t, dir, 1)
	if got := firstLine(statusOut(t, healthDegraded)); got != "degraded: device 1 failed, tolerates 1 more device" {
		t.Errorf("one device gone: headline %q", got)
	}
	back()
	back = away(t, dir, 0, 1, 2)
	if got := firstLine(statusOut(t, healthAtRisk)); !strings.HasPrefix(got, "data at risk: devices 0, 1, 2 failed, ") {
		t.Errorf("three devices gone: headline %q", got)
	}
	back()
	statusOut(t, healthClean)
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

// TestHealthHeadline covers what the CLI tests cannot set up in one
// process: a rebuild running in a server, a hashing array.
func TestHealthHeadline(t *testing.T) {
	cfg := config.Default("data", 6) // replication 3 copies, packing and splitting r=2
	devs := func(states ...string) array.Status {
		var st array.Status
		for i, s := range states {
			st.Devices = append(st.Devices, array.DeviceStatus{Index: i, State: s})
		}
		return st
	}
	h, r := "healthy", "rebuilding"
	for _, c := range []struct {
		st    array.Status
		tasks []server.Task
		want  string
		code  int
	}{
		{devs(h, h, h, h, h, h), nil, "clean", healthClean},
		{devs(h, h, "failed", h, h, h), nil, "degraded: device 2 failed, tolerates 1 more device", healthDegraded},
		{devs(h, h, r, h, h, h), []server.Task{{Kind: "rebuild", Dev: 2, Keys: 43, Total: 100, Elapsed: 60 * time.Second}},
			"rebuilding device 2: 43% ETA 1m20s", healthDegraded},
		{devs(h, h, r, h, h, h), nil, "degraded: device 2 to rebuild ('kvarray rebuild 2'), tolerates 1 more device", healthDegraded},
		{devs(h, "failed", h, h, "failed", "failed"), nil, "data at risk: devices 1, 4, 5 failed, replication tolerates 2 devices", healthAtRisk},
		{devs(h, h, h, h, h, array.StateDegradedBehind), nil, "degraded: device 5 behind ('kvarray resync 5'), tolerates 1 more device", healthDegraded},
	} {
		got, code := health(cfg, c.st, c.tasks)
		if got != c.want || code != c.code {
			t.Errorf("health = %q, %d; want %q, %d", got, code, c.want, c.code)
		}
	}
	// Hashing tolerates nothing: one device lost puts its values at risk.
	st := devs(h, "failed", h)
	st.Mechanisms = []array.MechanismStatus{{Name: "hashing", Objects: 3}}
	if got, code := health(config.Default("data", 3), st, nil); code != healthAtRisk || !strings.Contains(got, "hashing tolerates 0 devices") {
		t.Errorf("hashing array with a device lost: %q, %d", got, code)
	}
}

// TestStatusWatch: --watch redraws the status until interrupted, then
// exits with the health's code.
func TestStatusWatch(t *testing.T) {
	fresh(t, 3)
	defer func(d time.Duration) { watchEvery = d }(watchEvery)
	watchEvery = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncBuffer{}
	code := make(chan int, 1)
	go func() { code <- run(ctx, []string{"status", "--watch"}, nil, out, io.Discard) }()
	for deadline := time.Now().Add(time.Minute); strings.Count(out.String(), "clean\n") < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("status --watch drew %d times in a minute:\n%s", strings.Count(out.String(), "clean\n"), out)
		}
	}
	cancel()
	if c := <-code; c != healthClean {
		t.Errorf("status --watch exited %d, want 0", c)
	}
}
