package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvarray/kvarray/array"
)

// load writes values through redis clients until stopped, overwriting a
// fixed set of keys per writer, and remembers the last value each key was
// acknowledged with. Any client error fails the test.
type load struct {
	t       *testing.T
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	acked   map[string][]byte
	writes  atomic.Int64
	errs    atomic.Int64
	lastErr atomic.Value
}

func startLoad(t *testing.T, rdb *redis.Client, writers, keys int) *load {
	l := &load{t: t, stop: make(chan struct{}), acked: map[string][]byte{}}
	sizes := []int{10, 700, 5000, 12000, 40000}
	for w := range writers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			ctx := context.Background()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				k := fmt.Sprintf("w%d-k%d", w, i%keys)
				v := bytes.Repeat([]byte{byte('a' + i%26)}, sizes[i%len(sizes)])
				v = append(v, fmt.Sprintf("-%d-%d", w, i)...)
				if err := rdb.Set(ctx, k, v, 0).Err(); err != nil {
					l.errs.Add(1)
					l.lastErr.Store(err.Error())
					continue
				}
				l.writes.Add(1)
				l.mu.Lock()
				l.acked[k] = v
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// finish stops the writers and checks that no client saw an error and
// that every acknowledged value reads back as acknowledged.
func (l *load) finish(rdb *redis.Client) {
	l.t.Helper()
	close(l.stop)
	l.wg.Wait()
	if n := l.errs.Load(); n > 0 {
		l.t.Errorf("%d client errors under load (last: %v)", n, l.lastErr.Load())
	}
	ctx := context.Background()
	for k, want := range l.acked {
		got, err := rdb.Get(ctx, k).Bytes()
		if err != nil || !bytes.Equal(got, want) {
			l.t.Errorf("GET %s after the load: %d bytes, %v; want the %d bytes acknowledged", k, len(got), err, len(want))
		}
	}
}

// TestAdminOnline: while `kvarray serve` holds a Pebble array and redis
// clients write to it, status, replace, rebuild and scrub run through the
// server's admin socket: no client sees an error, and every acknowledged
// value reads back after the rebuild. Invariant: nothing acknowledged is
// lost or returned wrong.
func TestAdminOnline(t *testing.T) {
	dir := fresh(t, 6)
	s := serve(t)
	rdb := s.client(t)
	fails(t, nil, []string{"serve", "--listen", "127.0.0.1:0"}, "a kvarray serve already holds the array of kvarray.yaml", ".kvarray.yaml.sock")
	l := startLoad(t, rdb, 4, 50)
	waitWrites(t, l, 200)

	var st statusReport
	if err := json.Unmarshal([]byte(statusOut(t, healthClean, "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Health != "clean" || len(st.Devices) != 6 {
		t.Errorf("status --json through the server: health %q, %d devices", st.Health, len(st.Devices))
	}

	// A healthy device swapped for a new one, online.
	newDev := filepath.Join(dir, "new2")
	out := ok(t, nil, "replace", "2", "pebble:"+newDev, "--force")
	if !strings.Contains(out, "device 2 is now pebble:"+newDev) || !strings.Contains(out, "kvarray rebuild 2") {
		t.Errorf("replace through the server printed %q", out)
	}
	if h := firstLine(statusOut(t, healthDegraded)); !strings.Contains(h, "device 2 to rebuild") {
		t.Errorf("after replace: headline %q", h)
	}
	waitWrites(t, l, l.writes.Load()+100)
	rep := rebuildJSON(t, "rebuild", "2")
	if rep.Dev != 2 || rep.Keys == 0 || rep.Failed != 0 {
		t.Errorf("rebuild through the server: %+v", rep)
	}
	waitWrites(t, l, l.writes.Load()+100)
	l.finish(rdb)

	var sr array.ScrubReport
	if err := json.Unmarshal([]byte(ok(t, nil, "scrub", "--json")), &sr); err != nil {
		t.Fatal(err)
	}
	if sr.Keys == 0 || sr.Problems() != 0 {
		t.Errorf("scrub through the server after the rebuild: %+v", sr)
	}
	human := statusOut(t, healthClean)
	if !strings.HasPrefix(human, "clean\n") || !strings.Contains(human, "pebble:"+newDev) || !strings.Contains(human, "last scrub: ") {
		t.Errorf("status after rebuild and scrub:\n%s", human)
	}
	if out := s.errOut.String(); !strings.Contains(out, "rebuild started") || !strings.Contains(out, "rebuild finished") || !strings.Contains(out, "device replaced") {
		t.Errorf("serve logged no rebuild events:\n%s", out)
	}
	s.stop(t)
	// Stopped: the commands open the devices again, which hold the data.
	statusOut(t, healthClean)
	if got := ok(t, nil, "get", "w0-k1"); got != string(l.acked["w0-k1"]) {
		t.Errorf("after serve stopped, get w0-k1: %d bytes", len(got))
	}
}

func waitWrites(t *testing.T, l *load, n int64) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); l.writes.Load() < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the load made %d writes, waiting for %d", l.writes.Load(), n)
		}
	}
}

// TestAdminSocketOfADeadServer: a server killed with -9 leaves its admin
// socket file behind. A command then opens the devices itself, without
// go-redis's "failed to dial after 5 attempts" on stderr (which every
// command printed, after half a second of retries). Run as a process of
// its own, as go-redis's logger writes to the stderr it started with.
func TestAdminSocketOfADeadServer(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "kvarray.yaml")
	if err := os.WriteFile(cfg, []byte("devices: [mem:a, mem:b, mem:c]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path, err := adminSocket(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close() // the file stays, nobody listens
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeHelperProcess$")
	cmd.Env = append(os.Environ(), "KVARRAY_SERVE_HELPER=--config "+cfg+" status")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	_ = cmd.Run() // mem devices start empty: status reports what it finds
	if !strings.Contains(out.String(), "array ") {
		t.Fatalf("status did not report the array: stdout %q, stderr %q", out.String(), errOut.String())
	}
	if strings.Contains(errOut.String(), "dial") {
		t.Fatalf("status logged the dead socket: %q", errOut.String())
	}
}

// TestReplaceSamePathOnline (issue 40, item 5): while serving, a device
// whose directory was removed is replaced at the same path (the failed
// Pebble engine is closed first: it held the directory's lock), rebuilt,
// and every value reads back; a failed device, as status shows it, is
// replaced by a new path without --force.
func TestReplaceSamePathOnline(t *testing.T) {
	dir := fresh(t, 6)
	s := serve(t)
	rdb := s.client(t)
	l := startLoad(t, rdb, 2, 50)
	waitWrites(t, l, 200)

	if err := os.RemoveAll(filepath.Join(dir, "data", "dev2")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); !strings.Contains(statusOut(t, -1), "failed"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("device 2 never shows failed with its directory removed")
		}
	}
	out := ok(t, nil, "replace", "2")
	if !strings.Contains(out, "device 2 is now") {
		t.Fatalf("replace at the same path while serving printed %q", out)
	}
	if rep := rebuildJSON(t, "rebuild", "2"); rep.Failed != 0 {
		t.Fatalf("rebuild after the replace: %+v", rep)
	}

	// Failed as status shows it: a new path needs no --force.
	if err := os.RemoveAll(filepath.Join(dir, "data", "dev4")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); !strings.Contains(statusOut(t, -1), "failed"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("device 4 never shows failed with its directory removed")
		}
	}
	newDev := filepath.Join(dir, "new4")
	if out := ok(t, nil, "replace", "4", "pebble:"+newDev); !strings.Contains(out, "device 4 is now pebble:"+newDev) {
		t.Fatalf("replace of a failed device by a new path printed %q", out)
	}
	if rep := rebuildJSON(t, "rebuild", "4"); rep.Failed != 0 {
		t.Fatalf("rebuild of device 4: %+v", rep)
	}
	l.finish(rdb)
	statusOut(t, healthClean)
	s.stop(t)
	for k, v := range l.acked {
		if got := ok(t, nil, "get", k); got != string(v) {
			t.Fatalf("get %s after the replaces: %d bytes, want %d", k, len(got), len(v))
		}
	}
}
