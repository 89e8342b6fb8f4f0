package redis_test

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/redis"
	"github.com/kvarray/kvarray/device/redis/redistest"
	"github.com/kvarray/kvarray/mechanism"
	"github.com/kvarray/kvarray/mechanism/packing"
	"github.com/kvarray/kvarray/mechanism/replication"
	"github.com/kvarray/kvarray/mechanism/splitting"
)

// setMaxmemory sets srv's maxmemory: used_memory plus extra bytes (extra
// < 0: no limit), with noeviction, as an operator would.
func setMaxmemory(t *testing.T, srv *redistest.Server, extra int64) {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	limit := int64(0)
	if extra >= 0 {
		info, err := c.InfoMap(t.Context(), "memory").Result()
		if err != nil {
			t.Fatal(err)
		}
		used, err := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		limit = used + extra
	}
	if err := c.ConfigSet(t.Context(), "maxmemory", strconv.FormatInt(limit, 10)).Err(); err != nil {
		t.Fatal(err)
	}
}

// checkAll reads back every value of want.
func checkAll(t *testing.T, a *array.Array, want map[string][]byte, what string) {
	t.Helper()
	for key, v := range want {
		got, err := a.Retrieve(t.Context(), []byte(key))
		if err != nil || string(got) != string(v) {
			t.Fatalf("%s: %s reads %d bytes of %d: %v", what, key, len(got), len(v), err)
		}
	}
}

// openAll opens a device on each of srvs, with timeout.
func openAll(t *testing.T, srvs []*redistest.Server, timeout time.Duration) []device.Device {
	t.Helper()
	devs := make([]device.Device, len(srvs))
	for i, s := range srvs {
		d, err := redis.Open(t.Context(), s.URL(0), redis.WithTimeout(timeout))
		if err != nil {
			t.Fatal(err)
		}
		devs[i] = d
	}
	return devs
}

// TestArrayDeviceAtMaxmemory (issue 40, item 3): a redis:// device that
// reaches its maxmemory (noeviction) answers writes OOM; the array marks
// it full (not failed), every write is acknowledged on the others within
// tolerance, reads go on; with too many devices at maxmemory writes are
// refused with device.ErrFull naming them; once memory is raised the
// automatic resync brings the devices back, and every acknowledged value
// reads back. The array is owned (WithOwner), so writes are the fenced
// Lua scripts that serve sends.
func TestArrayDeviceAtMaxmemory(t *testing.T) {
	redistest.Need(t, "redis-server")
	srvs := redistest.StartN(t, nDevs, "--maxmemory-policy", "noeviction")
	a, err := array.Create(t.Context(), openAll(t, srvs, 5*time.Second),
		array.WithMechanisms(replication.New(3), splitting.New(4, 2), packing.New(4, 2, 0)),
		array.WithAutoResync(50*time.Millisecond),
		array.WithOwner(array.Owner{ID: "full-test", Process: "test", Lease: 10 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	rms := []string{"replication", "splitting", "packing"}
	rng := newRand(t)
	want := map[string][]byte{}
	k := 0
	store := func() error {
		key := fmt.Sprintf("key-%05d", k%2000)
		v := randBytes(rng, 500+rng.IntN(8000))
		err := a.Store(t.Context(), []byte(key), v, array.Using(rms[k%len(rms)]))
		k++
		if err == nil {
			want[key] = v
		} else {
			delete(want, key) // a failed store reads as the old value or the new
		}
		return err
	}
	check := func(what string) { t.Helper(); checkAll(t, a, want, what) }
	for range 200 {
		if err := store(); err != nil {
			t.Fatal(err)
		}
	}
	const full = 2
	setMaxmemory(t, srvs[full], 256<<10)
	for a.DeviceState(full) != mechanism.Full {
		if k > 20000 {
			t.Fatalf("device %d is %v after 20000 stores past its maxmemory", full, a.DeviceState(full))
		}
		if err := store(); err != nil {
			t.Fatalf("store %d with device %d at maxmemory: %v", k, full, err)
		}
	}
	for range 300 {
		if err := store(); err != nil {
			t.Fatalf("store %d with device %d full: %v", k, full, err)
		}
	}
	check("one device full")

	// Three full: a write whose pieces land on them is refused.
	setMaxmemory(t, srvs[full+1], 0)
	setMaxmemory(t, srvs[full+2], 0)
	var refused error
	for range 400 {
		if err := store(); err != nil {
			refused = err
			break
		}
	}
	if !errors.Is(refused, device.ErrFull) {
		t.Fatalf("stores with devices %d-%d at maxmemory: %v, want a refusal wrapping device.ErrFull", full, full+2, refused)
	}
	t.Logf("refused: %v", refused)
	check("three devices full")

	for _, s := range srvs[full : full+3] {
		setMaxmemory(t, s, -1)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for i := full; i < full+3; i++ {
		for a.DeviceState(i) != mechanism.Healthy {
			if time.Now().After(deadline) {
				t.Fatalf("device %d is %v two minutes after its memory was raised", i, a.DeviceState(i))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for range 100 {
		if err := store(); err != nil {
			t.Fatalf("store after memory was raised: %v", err)
		}
	}
	check("memory raised")
}
