package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kvarray/kvarray/array"
)

type result struct {
	code           int
	stdout, stderr string
}

// kv runs one command line in-process, as a separate process would: every
// run loads the config and opens the array anew, and closes it.
func kv(t *testing.T, stdin []byte, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, bytes.NewReader(stdin), &out, &errOut)
	return result{code, out.String(), errOut.String()}
}

// ok runs a command that must succeed and returns its stdout.
func ok(t *testing.T, stdin []byte, args ...string) string {
	t.Helper()
	r := kv(t, stdin, args...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("kvarray %s: exit %d, stderr %q, stdout %.2000s", strings.Join(args, " "), r.code, r.stderr, r.stdout)
	}
	return r.stdout
}

// fails runs a command that must fail with exit 2 and one line on stderr
// containing every want, and nothing on stdout.
func fails(t *testing.T, stdin []byte, args []string, want ...string) string {
	t.Helper()
	r := kv(t, stdin, args...)
	if r.code != 2 {
		t.Fatalf("kvarray %s: exit %d (stdout %q stderr %q), want 2", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("kvarray %s: stdout %q on error", strings.Join(args, " "), r.stdout)
	}
	if !strings.HasPrefix(r.stderr, "kvarray: ") || strings.Count(r.stderr, "\n") != 1 || !strings.HasSuffix(r.stderr, "\n") {
		t.Errorf("kvarray %s: stderr is not one 'kvarray: ' line: %q", strings.Join(args, " "), r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("kvarray %s: stderr %q lacks %q", strings.Join(args, " "), r.stderr, w)
		}
	}
	return r.stderr
}

// fresh makes a temporary working directory with a new array of n devices.
func fresh(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	t.Chdir(dir)
	out := ok(t, nil, "init", "--devices", itoa(n))
	if !strings.HasPrefix(out, "created array ") {
		t.Errorf("init printed %q", out)
	}
	return dir
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	dir := fresh(t, 6)
	if _, err := os.Stat(filepath.Join(dir, "data", "dev5")); err != nil {
		t.Fatalf("init did not create the devices: %v", err)
	}
	ok(t, nil, "put", "hello", "world")
	if got := ok(t, nil, "get", "hello"); got != "world" {
		t.Errorf("get hello = %q", got)
	}
	ok(t, nil, "put", "empty", "")
	if got := ok(t, nil, "get", "empty"); got != "" {
		t.Errorf("get empty = %q", got)
	}
	// Values from stdin: 5 MiB (splits over several devices) and 25 MB,
	// over ten times the devices' 2 MiB value limit.
	for _, size := range []int{5 << 20, 25_000_000} {
		v := randomBytes(uint64(size), size)
		ok(t, v, "put", "big")
		if got := ok(t, nil, "get", "big"); got != string(v) {
			t.Fatalf("%d-byte value came back as %d bytes, different", size, len(got))
		}
	}
	for _, rm := range []string{"hashing", "replication", "splitting"} {
		ok(t, nil, "put", "k-"+rm, "v-"+rm, "--rm", rm)
	}
	fails(t, nil, []string{"put", "k", "v", "--rm", "raid5"}, `unknown mechanism`, "raid5")

	// Every run reopens the array: this is the restart check.
	for _, rm := range []string{"hashing", "replication", "splitting"} {
		if got := ok(t, nil, "get", "k-"+rm); got != "v-"+rm {
			t.Errorf("get k-%s = %q", rm, got)
		}
	}

	var st array.Status
	if err := json.Unmarshal([]byte(ok(t, nil, "status", "--json", "--deep")), &st); err != nil {
		t.Fatalf("status --json: %v", err)
	}
	if st.Objects != 6 || len(st.Devices) != 6 || st.Overhead < 1 {
		t.Errorf("status: %+v", st)
	}
	per := map[string]int64{}
	for _, m := range st.Mechanisms {
		per[m.Name] = m.Objects
	}
	// hybrid: small values replicated, big one split, plus the overrides.
	if per["hashing"] != 1 || per["replication"] != 3 || per["splitting"] != 2 {
		t.Errorf("objects per mechanism: %v", per)
	}
	human := ok(t, nil, "status", "--deep")
	for _, w := range []string{"DEVICE", "pebble:" + filepath.Join(dir, "data", "dev0"), "healthy", "MECHANISM", "splitting", "storage overhead"} {
		if !strings.Contains(human, w) {
			t.Errorf("status --deep lacks %q:\n%s", w, human)
		}
	}
	// Without --deep: the devices, no pass over the objects.
	human = ok(t, nil, "status")
	if !strings.Contains(human, "healthy") || strings.Contains(human, "MECHANISM") || !strings.Contains(human, "objects not counted") {
		t.Errorf("status without --deep:\n%s", human)
	}

	ok(t, nil, "del", "hello")
	fails(t, nil, []string{"get", "hello"}, `"hello"`, "not found")
	fails(t, nil, []string{"del", "hello"}, "not found")
}

func TestExists(t *testing.T) {
	fresh(t, 3)
	ok(t, nil, "put", "here", "v")
	if r := kv(t, nil, "exists", "here"); r.code != 0 || r.stdout != "yes\n" {
		t.Errorf("exists here: %+v", r)
	}
	if r := kv(t, nil, "exists", "gone"); r.code != 1 || r.stdout != "no\n" || r.stderr != "" {
		t.Errorf("exists gone: %+v", r)
	}
	if r := kv(t, nil, "exists", strings.Repeat("k", 300)); r.code != 1 || r.stdout != "no\n" {
		t.Errorf("exists of a 300-byte key: %+v", r)
	}
	fails(t, nil, []string{"exists", "a", "b"}, "exists: want KEY, got 2 arguments")
	fails(t, nil, []string{"--config", "nope.yaml", "exists", "here"}, "nope.yaml does not exist", "kvarray init")
}

func TestLs(t *testing.T) {
	fresh(t, 3)
	for _, k := range []string{"b/2", "a/1", "b/1", "c", "ke\x01y", `"q`} {
		ok(t, nil, "put", k, "v")
	}
	if got, want := ok(t, nil, "ls"), "\"\\\"q\"\na/1\nb/1\nb/2\nc\n\"ke\\x01y\"\n"; got != want {
		t.Errorf("ls = %q, want %q", got, want)
	}
	if got := ok(t, nil, "ls", "b/"); got != "b/1\nb/2\n" {
		t.Errorf("ls b/ = %q", got)
	}
	if got := ok(t, nil, "ls", "zz"); got != "" {
		t.Errorf("ls zz = %q", got)
	}
}

func TestShowKey(t *testing.T) {
	for in, want := range map[string]string{
		"plain": "plain", "with space": "with space", "ünï": "ünï",
		"tab\t": `"tab\t"`, "nl\n": `"nl\n"`, "\xff": `"\xff"`, `"x`: `"\"x"`, "": "",
	} {
		if got := showKey([]byte(in)); got != want {
			t.Errorf("showKey(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestLongKey(t *testing.T) {
	fresh(t, 3)
	// Keys past the 241 bytes a device key leaves are stored under their
	// names (keyspace.NameLen), listed whole.
	for _, n := range []int{241, 242, 300, 5000} {
		key := strings.Repeat("a", n)
		ok(t, nil, "put", key, "v"+strconv.Itoa(n))
		if got := ok(t, nil, "get", key); got != "v"+strconv.Itoa(n) {
			t.Errorf("get of a %d-byte key = %q", n, got)
		}
	}
	if got := ok(t, nil, "ls"); strings.Count(got, "\n") != 4 || !strings.Contains(got, strings.Repeat("a", 5000)+"\n") {
		t.Errorf("ls lists %d keys", strings.Count(got, "\n"))
	}
}

func TestShuffledDevices(t *testing.T) {
	dir := fresh(t, 4)
	ok(t, nil, "put", "hello", "world")
	path := filepath.Join(dir, "kvarray.yaml")
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	shuffled := strings.NewReplacer("dev0", "dev1", "dev1", "dev0").Replace(string(orig))
	if err := os.WriteFile(path, []byte(shuffled), 0o644); err != nil {
		t.Fatal(err)
	}
	fails(t, nil, []string{"get", "hello"}, "device 0 (pebble:"+filepath.Join(dir, "data", "dev1")+")", "out of order")
	if err := os.WriteFile(path, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := ok(t, nil, "get", "hello"); got != "world" {
		t.Errorf("after restoring the order: %q", got)
	}
}

func TestMissingDevice(t *testing.T) {
	dir := fresh(t, 4)
	ok(t, nil, "put", "hello", "world")
	dev := filepath.Join(dir, "data", "dev2")
	if err := os.RemoveAll(dev); err != nil {
		t.Fatal(err)
	}
	var st array.Status
	if err := json.Unmarshal([]byte(statusOut(t, healthDegraded, "--json")), &st); err != nil {
		t.Fatal(err)
	}
	d := st.Devices[2]
	if d.Name != "pebble:"+dev || d.State != "failed" || !strings.Contains(d.Reason, "does not exist") {
		t.Errorf("missing device in status: %+v", d)
	}
	human := statusOut(t, healthDegraded)
	if !strings.Contains(human, "2       pebble:"+dev+"  failed") {
		t.Errorf("status does not report device 2 as failed:\n%s", human)
	}
	// Reads go on from the other copies, and the directory stays absent:
	// an empty directory must not pass for the lost device.
	if got := ok(t, nil, "get", "hello"); got != "world" {
		t.Errorf("degraded get = %q", got)
	}
	if _, err := os.Stat(dev); !os.IsNotExist(err) {
		t.Errorf("the missing device directory was recreated: %v", err)
	}
}

func TestInit(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	fails(t, nil, []string{"init", "--devices", "0"}, "--devices 0: want at least 1")
	ok(t, nil, "init", "--devices", "2", "--dir", "one")
	cfg, _ := os.ReadFile("kvarray.yaml")
	if !strings.Contains(string(cfg), "pebble:one/dev1") || strings.Contains(string(cfg), "splitting") {
		t.Errorf("config of 2 devices:\n%s", cfg)
	}
	fails(t, nil, []string{"init"}, "kvarray.yaml already exists", "--force")
	// --force overwrites the config but never reuses another array's devices.
	fails(t, nil, []string{"init", "--force", "--devices", "2", "--dir", "one"}, "already belongs to array")
	after, _ := os.ReadFile("kvarray.yaml")
	if !bytes.Equal(cfg, after) {
		t.Error("a failed init changed the config")
	}
	ok(t, nil, "init", "--force", "--dir", "two")
	ok(t, nil, "put", "k", "v")

	// A config elsewhere: relative paths are relative to it.
	ok(t, nil, "--config", "sub/k.yaml", "init", "--devices", "3")
	if _, err := os.Stat(filepath.Join(dir, "sub", "data", "dev2")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	ok(t, nil, "--config", filepath.Join(dir, "sub", "k.yaml"), "put", "k", "v2")
	if got := ok(t, nil, "--config", filepath.Join(dir, "sub", "k.yaml"), "get", "k"); got != "v2" {
		t.Errorf("get through a config elsewhere = %q", got)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get"}, "get: want KEY, got 0 arguments (see 'kvarray get --help')"},
		{[]string{"put", "a", "b", "c"}, "put: want KEY [VALUE], got 3 arguments"},
		{[]string{"put", "--bogus"}, "unknown flag: --bogus (see 'kvarray put --help')"},
		{[]string{"frobnicate"}, `unknown command "frobnicate" for "kvarray" (see 'kvarray --help')`},
		{[]string{"init", "--devices", "many"}, `--devices "many": want a number of pebble devices or a list`},
	} {
		msg := fails(t, nil, tc.args, tc.want)
		if strings.Contains(msg, "Usage:") {
			t.Errorf("usage dump for %v", tc.args)
		}
	}
	if _, err := os.Stat("kvarray.yaml"); !os.IsNotExist(err) {
		t.Error("a usage error wrote a config")
	}
	if r := kv(t, nil, "--help"); r.code != 0 || !strings.Contains(r.stdout, "status") {
		t.Errorf("--help: %+v", r)
	}
}

func TestBadConfig(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.WriteFile("kvarray.yaml", []byte("devices: [pebble:data/dev0]\nthresholds: [{max: 8KiB, rm: nope}]\ncolour: red\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fails(t, nil, []string{"put", "k", "v"}, "config kvarray.yaml", `line 3: unknown field "colour"`)
	if _, err := os.Stat("data"); !os.IsNotExist(err) {
		t.Error("a bad config created device directories")
	}
}

// TestMemDevices: a config of mem devices works for one process's life.
func TestMemDevices(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.WriteFile("kvarray.yaml", []byte("devices: [mem:a, mem:b, mem:c]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ok(t, nil, "put", "k", "v")
	if r := kv(t, nil, "exists", "k"); r.code != 1 {
		t.Errorf("a mem array kept data across opens: %+v", r)
	}
}
