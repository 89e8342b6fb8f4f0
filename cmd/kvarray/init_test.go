package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/kvarray/kvarray/device/pebble"
	"github.com/kvarray/kvarray/device/redis/redistest"
)

// TestInitRedisDevices: init creates an array on real redis-server
// devices, alone or mixed with pebble devices, given as a --devices list
// or as --device flags; the array then works through every command, and
// init refuses what it must: devices of another array, a database holding
// other data (untouched), an unreachable server, mem devices.
func TestInitRedisDevices(t *testing.T) {
	srvs := redistest.StartN(t, 4)
	t.Chdir(t.TempDir())

	// Four redis databases and two pebble directories, as one list.
	list := []string{srvs[0].URL(0), srvs[1].URL(0), srvs[2].URL(0), srvs[3].URL(0), "pebble:data/p4", "pebble:data/p5"}
	out := ok(t, nil, "init", "--devices", strings.Join(list, ","))
	if !strings.HasPrefix(out, "created array ") || !strings.Contains(out, "4 redis, 2 pebble devices") {
		t.Errorf("init printed %q", out)
	}
	cfg, err := os.ReadFile("kvarray.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if !strings.Contains(string(cfg), s) {
			t.Errorf("config lacks %s:\n%s", s, cfg)
		}
	}
	if !strings.Contains(string(cfg), "splitting") || !strings.Contains(string(cfg), "packing") {
		t.Errorf("config of 6 devices is not the hybrid default:\n%s", cfg)
	}
	v := randomBytes(1, 100<<10) // splitting: pieces on every device
	ok(t, v, "put", "big")
	ok(t, nil, "put", "small", "v")
	if got := ok(t, nil, "get", "big"); got != string(v) {
		t.Fatalf("get big: %d bytes, want %d", len(got), len(v))
	}
	if st := ok(t, nil, "status"); strings.Count(st, "healthy") < 6 {
		t.Errorf("status after init:\n%s", st)
	}
	// The redis databases hold pieces now.
	for i := range 4 {
		c := goredis.NewClient(&goredis.Options{Addr: srvs[i].Addr()})
		n, err := c.DBSize(context.Background()).Result()
		c.Close()
		if err != nil || n == 0 {
			t.Errorf("redis device %d holds %d keys (%v)", i, n, err)
		}
	}

	// The same devices again, even with --force: another array's.
	fails(t, nil, []string{"init", "--force", "--devices", strings.Join(list, ",")}, "already belongs to array")
	if got := ok(t, nil, "get", "small"); got != "v" {
		t.Errorf("after a refused init: get small = %q", got)
	}

	// --device, once per device, other databases of the same servers.
	var args []string
	for i := range 4 {
		args = append(args, "--device", srvs[i].URL(1))
	}
	ok(t, nil, append([]string{"--config", "two.yaml", "init", "--device", "pebble:data/q0"}, args...)...)
	ok(t, nil, "--config", "two.yaml", "put", "k", "in two")
	if got := ok(t, nil, "--config", "two.yaml", "get", "k"); got != "in two" {
		t.Errorf("second array: get k = %q", got)
	}
	if got := kv(t, nil, "get", "k"); got.code == 0 {
		t.Errorf("the first array sees the second's key: %q", got.stdout)
	}

	// A database in use for something else is refused and left as it was.
	c := goredis.NewClient(&goredis.Options{Addr: srvs[0].Addr(), DB: 2})
	defer c.Close()
	if err := c.Set(context.Background(), "user:1", "alice", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var third []string
	for i := range 3 {
		third = append(third, srvs[i+1].URL(2))
	}
	third = append(third, srvs[0].URL(2))
	fails(t, nil, []string{"--config", "three.yaml", "init", "--devices", strings.Join(third, ",")},
		"device 3 ("+srvs[0].URL(2)+")", "1 keys that kvarray did not write", `"user:1"`)
	if n, _ := c.DBSize(context.Background()).Result(); n != 1 {
		t.Errorf("the refused database holds %d keys, want its 1", n)
	}
	for i := range 3 {
		o := goredis.NewClient(&goredis.Options{Addr: srvs[i+1].Addr(), DB: 2})
		n, _ := o.DBSize(context.Background()).Result()
		o.Close()
		if n != 0 {
			t.Errorf("a refused init wrote %d keys on device %d", n, i)
		}
	}
	if _, err := os.Stat("three.yaml"); !os.IsNotExist(err) {
		t.Error("a refused init wrote its config")
	}

	// An unreachable server.
	srvs[3].Kill()
	fails(t, nil, []string{"--config", "four.yaml", "init", "--devices", srvs[2].URL(3) + "," + srvs[3].URL(3)},
		"device 1 ("+srvs[3].URL(3)+")")
	if _, err := os.Stat("four.yaml"); !os.IsNotExist(err) {
		t.Error("a failed init wrote its config")
	}

	// Usage errors.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"init", "--devices", "mem:a,mem:b"}, "a mem device lives only as long as one process"},
		{[]string{"init", "--device", "pebble:x", "--devices", "3"}, "--devices and --device: give one"},
		{[]string{"init", "--dir", "d", "--devices", "pebble:x,pebble:y"}, "--dir names the directory"},
		{[]string{"init", "--devices", "pebble:x,,pebble:y"}, "device 1 of the list is empty"},
		{[]string{"init", "--devices", "pebble:x,bogus:y"}, `unknown device kind "bogus"`},
		{[]string{"init", "--devices", "pebble:x,pebble:x"}, "is the same device as"},
	} {
		fails(t, nil, append([]string{"--config", "five.yaml"}, tc.args...), tc.want)
	}
	if _, err := os.Stat("five.yaml"); !os.IsNotExist(err) {
		t.Error("a usage error wrote a config")
	}
}

// TestInitFromConfig: init --from-config creates the array a config file
// written by hand describes, settings fixed at creation included (device
// weights, tiny values), and leaves the file byte for byte; it refuses the
// device flags, a missing file, and devices that already hold an array.
func TestInitFromConfig(t *testing.T) {
	t.Chdir(t.TempDir())
	cfg := `# written by hand
devices: [pebble:d/0, pebble:d/1, pebble:d/2, pebble:d/3, pebble:d/4, pebble:d/5]
weights: [1TB, 1TB, 2TB, 2TB, 1TB, 1TB]
packing: {k: 4, r: 2}
tiny: {max: 64B, buckets: 8}
`
	if err := os.WriteFile("tiny.yaml", []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	fails(t, nil, []string{"--config", "none.yaml", "init", "--from-config"}, "none.yaml")
	if err := os.WriteFile("mem.yaml", []byte("devices: [mem:a, mem:b, mem:c]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fails(t, nil, []string{"--config", "mem.yaml", "init", "--from-config"}, "a mem device lives only as long as one process")
	fails(t, nil, []string{"--config", "tiny.yaml", "init", "--from-config", "--devices", "3"}, "--devices does not apply")
	out := ok(t, nil, "--config", "tiny.yaml", "init", "--from-config")
	if !strings.HasPrefix(out, "created array ") || !strings.Contains(out, "6 pebble devices") {
		t.Errorf("init printed %q", out)
	}
	if got, _ := os.ReadFile("tiny.yaml"); string(got) != cfg {
		t.Errorf("init --from-config rewrote the config:\n%s", got)
	}
	fails(t, nil, []string{"--config", "tiny.yaml", "init", "--from-config"}, "already belongs to array")

	ok(t, nil, "--config", "tiny.yaml", "put", "small", "v")
	if got := ok(t, nil, "--config", "tiny.yaml", "get", "small"); got != "v" {
		t.Fatalf("get small: %q", got)
	}
	var st struct {
		Weights []uint64 `json:"placement_weights"`
	}
	if err := json.Unmarshal([]byte(ok(t, nil, "--config", "tiny.yaml", "status", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Weights) != 6 || st.Weights[2]/st.Weights[0] != 2 || st.Weights[1] != st.Weights[0] {
		t.Errorf("placement weights %v, want the config's", st.Weights)
	}
	// The small value is a bucket entry: some device holds a bucket, and
	// none holds the value under its own key.
	buckets := 0
	for i := range 6 {
		d, err := pebble.Open(fmt.Sprintf("d/%d", i))
		if err != nil {
			t.Fatal(err)
		}
		err = d.Iterate(context.Background(), nil, func(k []byte) error {
			if bytes.Contains(k, []byte("kvarray-tiny")) {
				buckets++
			}
			if bytes.Contains(k, []byte("small")) {
				t.Errorf("device %d holds %q: the tiny value is stored on its own", i, k)
			}
			return nil
		})
		d.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if buckets == 0 {
		t.Error("no device holds a tiny bucket")
	}
}
