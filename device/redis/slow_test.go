package redis_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/device/redis/redistest"
	"github.com/kvarray/kvarray/mechanism"
	"github.com/kvarray/kvarray/mechanism/packing"
	"github.com/kvarray/kvarray/mechanism/replication"
	"github.com/kvarray/kvarray/mechanism/splitting"
)

// TestArrayPausedDevice (issue 40, item 4): one redis-server paused
// (SIGSTOP: its connections open, nothing answering) is judged slow from
// its calls unanswered against its peers' latency, before they time out;
// it is slow, not failed, while it stays paused (its calls' time-outs do
// not fail it): stores are acknowledged on the other devices and reads
// served by them; once resumed it is re-admitted by itself, healthy with
// nothing left to resync, and a scrub finds nothing wrong. Every
// acknowledged value reads back throughout.
func TestArrayPausedDevice(t *testing.T) {
	redistest.Need(t, "redis-server")
	srvs := redistest.StartN(t, nDevs)
	a, err := array.Create(t.Context(), openAll(t, srvs, 2*time.Second),
		array.WithMechanisms(replication.New(3), splitting.New(4, 2), packing.New(4, 2, 0)),
		array.WithSlowDevices(array.SlowPolicy{}), array.WithAutoResync(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	rms := []string{"replication", "splitting", "packing"}
	rng := newRand(t)
	want := map[string][]byte{}
	k := 0
	store := func(what string) {
		t.Helper()
		key := fmt.Sprintf("key-%04d", k%300)
		v := randBytes(rng, 100+rng.IntN(6000))
		if err := a.Store(t.Context(), []byte(key), v, array.Using(rms[k%len(rms)])); err != nil {
			t.Fatalf("%s: store %s: %v", what, key, err)
		}
		want[key] = v
		k++
	}
	check := func(what string) { t.Helper(); checkAll(t, a, want, what) }
	for range 300 {
		store("healthy")
	}
	const paused = 3
	srvs[paused].Freeze()
	for a.DeviceState(paused) != mechanism.Slow {
		if st := a.DeviceState(paused); st != mechanism.Healthy {
			t.Fatalf("paused device %d is %v, want slow", paused, st)
		}
		store("paused")
	}
	slowAt := k
	// Past its calls' time-out: still slow, and not in the way.
	until := time.Now().Add(3 * time.Second)
	for time.Now().Before(until) {
		store("slow")
	}
	t.Logf("slow after %d stores; %d stores while slow", slowAt-300, k-slowAt)
	check("slow")
	if st := a.DeviceState(paused); st != mechanism.Slow {
		t.Fatalf("paused device %d is %v past its calls' time-out, want slow", paused, st)
	}
	s, err := a.Status(t.Context())
	if err != nil || s.Devices[paused].State != "slow" {
		t.Fatalf("status of the paused device: %+v, %v", s.Devices[paused], err)
	}
	t.Logf("status: %s", s.Devices[paused].Reason)

	srvs[paused].Thaw()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s, err := a.Status(t.Context())
		if err == nil && s.Devices[paused].State == "healthy" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("resumed device %d is %+v after 2 minutes: %v", paused, s.Devices[paused], err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	check("resumed")
	for range 100 {
		store("resumed")
	}
	check("after")
	rep, err := a.Scrub(t.Context(), false)
	if err != nil || rep.Problems() > 0 {
		t.Fatalf("scrub after the paused device's return: %+v, %v", rep, err)
	}
}
