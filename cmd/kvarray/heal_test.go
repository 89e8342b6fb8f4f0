package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/config"
	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/pebble"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/keyspace"
)

// healValues stores values of every hybrid class (replication, packing,
// splitting) through the CLI and returns them by key.
func healValues(t *testing.T, prefix string, n int) map[string][]byte {
	t.Helper()
	sizes := []int{0, 100, 3000, 9000, 20000, 40000, 70000}
	vals := map[string][]byte{}
	for i := range n {
		k := fmt.Sprintf("%s%03d", prefix, i)
		v := randomBytes(uint64(len(prefix)*1000+i), sizes[i%len(sizes)])
		ok(t, v, "put", k)
		vals[k] = v
	}
	return vals
}

// checkValues reads every value back byte-exact.
func checkValues(t *testing.T, vals map[string][]byte, when string) {
	t.Helper()
	for k, v := range vals {
		r := kv(t, nil, "get", k)
		if r.code != 0 || r.stdout != string(v) {
			t.Fatalf("%s: get %s: exit %d, %d bytes (want %d), stderr %q", when, k, r.code, len(r.stdout), len(v), r.stderr)
		}
	}
}

func status(t *testing.T) array.Status {
	t.Helper()
	var st array.Status
	if err := json.Unmarshal([]byte(statusOut(t, -1, "--json")), &st); err != nil {
		t.Fatalf("status --json: %v", err)
	}
	return st
}

func wantState(t *testing.T, dev int, state string) array.DeviceStatus {
	t.Helper()
	d := status(t).Devices[dev]
	if d.State != state {
		t.Fatalf("device %d: state %q (%s), want %q", dev, d.State, d.Reason, state)
	}
	return d
}

func rebuildJSON(t *testing.T, args ...string) array.RebuildReport {
	t.Helper()
	var rep array.RebuildReport
	if err := json.Unmarshal([]byte(ok(t, nil, append(args, "--json")...)), &rep); err != nil {
		t.Fatalf("%s --json: %v", strings.Join(args, " "), err)
	}
	return rep
}

// away moves the directories of devs aside and returns a function that
// puts them back.
func away(t *testing.T, dir string, devs ...int) func() {
	t.Helper()
	for _, d := range devs {
		p := filepath.Join(dir, "data", fmt.Sprintf("dev%d", d))
		if err := os.Rename(p, p+".away"); err != nil {
			t.Fatal(err)
		}
	}
	return func() {
		t.Helper()
		for _, d := range devs {
			p := filepath.Join(dir, "data", fmt.Sprintf("dev%d", d))
			if err := os.Rename(p+".away", p); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestHealReplaceRebuild: a device lost with its data is replaced by a new
// one at the same path and rebuilt; then every value reads back with the
// device's two neighbours gone, so the rebuilt device holds its data.
func TestHealReplaceRebuild(t *testing.T) {
	dir := fresh(t, 5)
	vals := healValues(t, "k", 28)
	dev := filepath.Join(dir, "data", "dev2")
	if err := os.RemoveAll(dev); err != nil {
		t.Fatal(err)
	}
	wantState(t, 2, "failed")
	// Writes go on degraded, and are recorded for the missing device.
	for k, v := range healValues(t, "degraded", 7) {
		vals[k] = v
	}
	if d := wantState(t, 2, "failed"); d.ResyncKeys == 0 {
		t.Errorf("device 2 missed degraded writes, but status lists no keys to resync: %+v", d)
	}
	human := statusOut(t, healthDegraded)
	if !strings.Contains(human, "RESYNC") {
		t.Errorf("status has no RESYNC column:\n%s", human)
	}

	fails(t, nil, []string{"rebuild", "2"}, "replace it first")
	fails(t, nil, []string{"resync", "2"}, "device 2")

	out := ok(t, nil, "replace", "2")
	for _, w := range []string{"device 2 is now pebble:" + dev, "rebuilding", "kvarray rebuild 2"} {
		if !strings.Contains(out, w) {
			t.Errorf("replace printed %q, lacking %q", out, w)
		}
	}
	if d := wantState(t, 2, "rebuilding"); d.ResyncKeys != 0 {
		t.Errorf("a replaced device keeps the old one's resync record: %+v", d)
	}
	if !strings.Contains(statusOut(t, healthDegraded), "rebuilding") {
		t.Error("human status does not show rebuilding")
	}
	// The device is now a member: replacing it again needs it wiped.
	fails(t, nil, []string{"replace", "2"}, "holds this array's header for position 2", "remove its directory")

	rep := rebuildJSON(t, "rebuild", "2")
	if rep.Dev != 2 || rep.Keys == 0 || rep.Failed != 0 || rep.Repaired == 0 || rep.Elapsed <= 0 {
		t.Errorf("rebuild report: %+v", rep)
	}
	if d := wantState(t, 2, "healthy"); d.Keys == 0 {
		t.Errorf("rebuilt device holds no keys: %+v", d)
	}
	fails(t, nil, []string{"rebuild", "2"}, "not being rebuilt")
	checkValues(t, vals, "after rebuild")

	back := away(t, dir, 1, 3)
	wantState(t, 1, "failed")
	checkValues(t, vals, "after rebuild, devices 1 and 3 gone")
	back()
	wantState(t, 1, "healthy")
}

// TestHealReplaceNewSpec: replacing by another device rewrites the config
// file's entry, and the checks that keep replace from taking the wrong
// device.
func TestHealReplaceNewSpec(t *testing.T) {
	dir := fresh(t, 4)
	vals := healValues(t, "k", 14)
	if err := os.RemoveAll(filepath.Join(dir, "data", "dev1")); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(config.FileName)
	if err != nil {
		t.Fatal(err)
	}

	// Refusals, none of which changes the config or leaves a directory.
	fails(t, nil, []string{"replace", "1", "pebble:data/dev2"}, "is the same device as")
	fails(t, nil, []string{"replace", "3", "pebble:data/spare"}, "healthy", "--force")
	if _, err := os.Stat(filepath.Join(dir, "data", "spare")); !os.IsNotExist(err) {
		t.Errorf("a refused replace left data/spare behind: %v", err)
	}
	junk := filepath.Join(dir, "junk")
	if err := os.MkdirAll(junk, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(junk, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	fails(t, nil, []string{"replace", "1", "pebble:junk"}, "not empty")
	if ents, _ := os.ReadDir(junk); len(ents) != 1 {
		t.Errorf("replace touched a non-empty directory: %v", ents)
	}
	other := filepath.Join(dir, "other")
	ok(t, nil, "--config", filepath.Join(other, "kvarray.yaml"), "init", "--devices", "3")
	fails(t, nil, []string{"replace", "1", "pebble:" + filepath.Join(other, "data", "dev0")}, "header of another array")
	fails(t, nil, []string{"replace", "7"}, "devices 0..3")
	if after, _ := os.ReadFile(config.FileName); !bytes.Equal(after, before) {
		t.Fatalf("a refused replace changed the config:\n%s", after)
	}

	out := ok(t, nil, "replace", "1", "pebble:data/new1")
	if !strings.Contains(out, "was pebble:"+filepath.Join(dir, "data", "dev1")) {
		t.Errorf("replace printed %q", out)
	}
	cfg, err := config.Load(config.FileName)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Devices[1] != "pebble:data/new1" || cfg.Devices[0] != "pebble:data/dev0" {
		t.Errorf("config devices after replace: %v", cfg.Devices)
	}
	if text, _ := os.ReadFile(config.FileName); !strings.Contains(string(text), "Devices in creation order") {
		t.Errorf("the config lost its comments:\n%s", text)
	}
	wantState(t, 1, "rebuilding")
	if rep := rebuildJSON(t, "rebuild", "1"); rep.Failed != 0 || rep.Keys == 0 {
		t.Errorf("rebuild: %+v", rep)
	}
	wantState(t, 1, "healthy")
	back := away(t, dir, 0, 2)
	checkValues(t, vals, "after rebuild on a new spec, devices 0 and 2 gone")
	back()
}

// TestHealResync: a device that was only unreachable comes back behind,
// never serves what it missed, and resync brings exactly that up to date.
func TestHealResync(t *testing.T) {
	dir := fresh(t, 4)
	vals := healValues(t, "k", 14)
	back := away(t, dir, 2)
	// Overwrite some values and add others while device 2 is away.
	for k := range vals {
		if strings.HasPrefix(k, "k00") {
			ok(t, []byte("new "+k), "put", k)
			vals[k] = []byte("new " + k)
		}
	}
	for k, v := range healValues(t, "late", 5) {
		vals[k] = v
	}
	missed := wantState(t, 2, "failed").ResyncKeys
	back()
	d := wantState(t, 2, array.StateDegradedBehind)
	if d.ResyncKeys == 0 || d.ResyncKeys != missed {
		t.Errorf("returned device: %d keys to resync, %d recorded while it was away", d.ResyncKeys, missed)
	}
	human := statusOut(t, healthDegraded)
	if !strings.Contains(human, "degraded-behind") || !strings.Contains(human, fmt.Sprintf("degraded-behind  %d ", missed)) {
		t.Errorf("status does not show device 2 behind by %d keys:\n%s", missed, human)
	}
	checkValues(t, vals, "device back, not resynced")
	// (Reads may have repaired some of the keys already.)
	left := wantState(t, 2, array.StateDegradedBehind).ResyncKeys

	rep := rebuildJSON(t, "resync", "2")
	if rep.Dev != 2 || rep.Keys != int64(left) || rep.Failed != 0 {
		t.Errorf("resync report: %+v (%d keys recorded)", rep, left)
	}
	if d := wantState(t, 2, "healthy"); d.ResyncKeys != 0 {
		t.Errorf("after resync: %+v", d)
	}
	back = away(t, dir, 1, 3)
	checkValues(t, vals, "after resync, devices 1 and 3 gone")
	back()
	// Nothing left to do: a second resync repairs nothing.
	if rep := rebuildJSON(t, "resync", "2"); rep.Keys != 0 {
		t.Errorf("second resync: %+v", rep)
	}
	out := ok(t, nil, "resync", "2")
	if !strings.Contains(out, "resync of device 2") || !strings.Contains(out, "keys/s") {
		t.Errorf("resync report:\n%s", out)
	}
}

// TestHealScrub: a value corrupted on one device is found by scrub (exit
// 1), repaired by scrub --repair (exit 0), and a third scrub finds
// nothing.
func TestHealScrub(t *testing.T) {
	dir := fresh(t, 4)
	vals := healValues(t, "k", 14)
	r := kv(t, nil, "scrub")
	if r.code != 0 || !strings.Contains(r.stdout, "no problems found") {
		t.Fatalf("scrub of a clean array: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Garbage under k001's data key on the first device that holds it.
	corrupted := garble(t, dir, 4, "k001", 1)[0]

	r = kv(t, nil, "scrub")
	if r.code != 1 || r.stderr != "" || !strings.Contains(r.stdout, "not repaired") || !strings.Contains(r.stdout, "BAD PIECES") {
		t.Fatalf("scrub after corrupting device %d: exit %d, stderr %q\n%s", corrupted, r.code, r.stderr, r.stdout)
	}
	r = kv(t, nil, "scrub", "--json")
	var rep array.ScrubReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 1 {
		t.Fatalf("scrub --json: exit %d, %v\n%s", r.code, err, r.stdout)
	}
	if rep.Problems() == 0 || rep.Repair || rep.Keys < int64(len(vals)) {
		t.Errorf("scrub --json: %+v", rep)
	}

	r = kv(t, nil, "scrub", "--repair", "--json")
	rep = array.ScrubReport{}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 0 {
		t.Fatalf("scrub --repair --json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if rep.Problems() == 0 || !rep.Repair {
		t.Errorf("scrub --repair found nothing to repair: %+v", rep)
	}
	r = kv(t, nil, "scrub")
	if r.code != 0 || !strings.Contains(r.stdout, "no problems found") {
		t.Fatalf("scrub after repair: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	checkValues(t, vals, "after scrub --repair")
}

// garble writes garbage under db 0's key's split-0 data key on up to max
// of the n Pebble devices under dir that hold it, and returns which.
func garble(t *testing.T, dir string, n int, key string, max int) []int {
	t.Helper()
	internal := format.Key(keyspace.RawKey(0, []byte(key)), 0, format.KindData)
	var done []int
	for i := 0; i < n && len(done) < max; i++ {
		d, err := pebble.Open(filepath.Join(dir, "data", fmt.Sprintf("dev%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Retrieve(context.Background(), internal); err == nil {
			if err := d.Store(context.Background(), internal, []byte("garbage, not a value")); err != nil {
				t.Fatal(err)
			}
			done = append(done, i)
		} else if !errors.Is(err, device.ErrNotFound) {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if len(done) == 0 {
		t.Fatalf("no device holds %s", key)
	}
	return done
}

// TestScrubUnreadableKey: a key none of whose pieces has a readable header
// (garbage on every device) is unrecoverable: scrub counts it (in the
// "unlocated" row, its mechanism unknown) and exits 2, never "no problems
// found".
func TestScrubUnreadableKey(t *testing.T) {
	dir := fresh(t, 4)
	healValues(t, "k", 3)
	garble(t, dir, 4, "k001", 4)
	r := kv(t, nil, "scrub")
	if r.code != 2 || !strings.Contains(r.stdout, array.Unlocated) || !strings.Contains(r.stderr, "1 keys are unrecoverable") {
		t.Fatalf("scrub of an unreadable key: exit %d, stderr %q\n%s", r.code, r.stderr, r.stdout)
	}
}

// cancelWriter is a stderr that cancels a context once a progress update
// drawn on it shows at least after keys done.
type cancelWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	after  int
	cancel context.CancelFunc
}

var keysDone = regexp.MustCompile(`([0-9,]+)/[0-9,]+ keys`)

func (w *cancelWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if m := keysDone.FindSubmatch(p); m != nil {
		if n, _ := strconv.Atoi(strings.ReplaceAll(string(m[1]), ",", "")); n >= w.after {
			w.cancel()
		}
	}
	return w.buf.Write(p)
}

func (w *cancelWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestHealRebuildInterrupted: a rebuild cancelled (as by ^C) once its
// progress line shows 200 keys done stops, says how to resume, and the rerun skips
// what was done and completes. It also runs the progress line, with the
// error stream taken for a terminal.
func TestHealRebuildInterrupted(t *testing.T) {
	dir := fresh(t, 4)
	// Many small values, stored through the Go API for speed.
	a, err := config.Open(context.Background(), config.FileName)
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string][]byte{}
	for i := range 1500 {
		k := fmt.Sprintf("key%05d", i)
		vals[k] = randomBytes(uint64(i), 64+i%200)
		if err := a.Store(context.Background(), []byte(k), vals[k]); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "data", "dev2")); err != nil {
		t.Fatal(err)
	}
	ok(t, nil, "replace", "2")

	oldEvery, oldTerm := progressEvery, terminal
	progressEvery = time.Millisecond
	terminal = func(w io.Writer) (int, bool) { _, ok := w.(*cancelWriter); return 100, ok }
	t.Cleanup(func() { progressEvery, terminal = oldEvery, oldTerm })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &cancelWriter{cancel: cancel, after: 200}
	var out bytes.Buffer
	code := run(ctx, []string{"rebuild", "2", "--workers", "1", "--json"}, nil, &out, stderr)
	errText := stderr.String()
	if code != 2 || !strings.Contains(errText, "kvarray: rebuild of device 2 interrupted") || !strings.Contains(errText, "run 'kvarray rebuild 2' again to resume") {
		t.Fatalf("interrupted rebuild: exit %d, stderr %q", code, errText)
	}
	if !strings.Contains(errText, "\r") || !strings.Contains(errText, "keys/s") || !strings.Contains(errText, "left") {
		t.Errorf("no progress line on the terminal: %q", errText)
	}
	var first array.RebuildReport
	if err := json.Unmarshal(out.Bytes(), &first); err != nil {
		t.Fatalf("interrupted rebuild --json: %v\n%s", err, out.String())
	}
	wantState(t, 2, "rebuilding")

	second := rebuildJSON(t, "rebuild", "2")
	done := first.Keys - first.Failed
	if second.Skipped != done || done < 200 || second.Failed != 0 || second.Skipped+second.Keys < int64(len(vals))/4 {
		t.Errorf("resumed rebuild: %+v after %+v: want %d skipped", second, first, done)
	}
	t.Logf("first run: %d keys; second: %d skipped, %d repaired", first.Keys, second.Skipped, second.Keys)
	wantState(t, 2, "healthy")
	back := away(t, dir, 1, 3)
	defer back()
	b, err := config.Open(context.Background(), config.FileName)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for k, v := range vals {
		got, err := b.Retrieve(context.Background(), []byte(k))
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("after resumed rebuild, devices 1 and 3 gone: %s: %v", k, err)
		}
	}
}

func TestHealUsage(t *testing.T) {
	fresh(t, 3)
	fails(t, nil, []string{"rebuild"}, "want DEV", "kvarray rebuild --help")
	fails(t, nil, []string{"rebuild", "two"}, `DEV "two"`)
	fails(t, nil, []string{"rebuild", "5"}, "devices 0..2")
	fails(t, nil, []string{"resync", "1x"}, `DEV "1x"`)
	fails(t, nil, []string{"rebuild", "1", "--workers", "0"}, "--workers 0")
	fails(t, nil, []string{"scrub", "--workers", "0"}, "--workers 0")
	fails(t, nil, []string{"scrub", "extra"}, "no arguments")
	fails(t, nil, []string{"replace"}, "DEV [NEWSPEC]")
	fails(t, nil, []string{"replace", "1", "ftp:x"}, "unknown device kind")
}

func TestRenderProgress(t *testing.T) {
	p := array.Progress{Keys: 450, Total: 1000, Bytes: 45 << 20, Elapsed: 9 * time.Second}
	line := renderProgress("rebuild 2", p, true, 120)
	for _, w := range []string{"rebuild 2 [", "45.0%", "450/1,000 keys", "45 MiB", "50 keys/s", "5.2 MB/s", "0:09 elapsed", "0:11 left"} {
		if !strings.Contains(line, w) {
			t.Errorf("%q lacks %q", line, w)
		}
	}
	if len(line) > 119 {
		t.Errorf("line of %d columns on a 120-column terminal", len(line))
	}
	narrow := renderProgress("rebuild 2", p, true, 60)
	if len(narrow) > 59 || strings.Contains(narrow, "[") {
		t.Errorf("narrow terminal: %q", narrow)
	}
	scrub := renderProgress("scrub", array.Progress{Keys: 0, Total: 10}, false, 100)
	if strings.Contains(scrub, "MB/s") || !strings.Contains(scrub, "--:-- left") {
		t.Errorf("scrub line: %q", scrub)
	}
	if got := clock(3723 * time.Second); got != "1:02:03" {
		t.Errorf("clock = %q", got)
	}

	var buf bytes.Buffer
	pr := &progress{w: &buf, width: 100, label: "scrub"}
	pr.note("listing")
	pr.update(p)
	pr.finish()
	pr.update(p) // a late tick draws nothing
	if s := buf.String(); strings.Count(s, "\r\x1b[K") != 3 || !strings.HasSuffix(s, "\r\x1b[K") {
		t.Errorf("progress output %q", s)
	}
	var none *progress
	none.note("x")
	none.update(p)
	none.finish()
	if none.options() != nil {
		t.Error("a nil progress has options")
	}
}

// TestHealNotHealthyAtItsEnd (issue 40): a resync that repaired every key
// it was given but left its device failed (a full disk's writes refused
// under it) printed "complete; the device is failed" and exited 0.
func TestHealNotHealthyAtItsEnd(t *testing.T) {
	var out bytes.Buffer
	c := &cli{ctx: context.Background(), stdout: &out, stderr: &out}
	rep := array.RebuildReport{Dev: 2, Name: "pebble:dev2", Elapsed: time.Millisecond}
	err := c.reportHeal("resync", 2, false, rep, nil, false, "failed")
	if err == nil || !strings.Contains(err.Error(), "not healthy") {
		t.Fatalf("resync that left its device failed: %v\n%s", err, out.String())
	}
	if err := c.reportHeal("resync", 2, false, rep, nil, false, "healthy"); err != nil {
		t.Fatalf("resync that left its device healthy: %v", err)
	}
}
