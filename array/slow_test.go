package array

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/faultdev"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/mechanism"
	"github.com/kvarray/kvarray/mechanism/packing"
	"github.com/kvarray/kvarray/mechanism/replication"
	"github.com/kvarray/kvarray/mechanism/splitting"
)

// slowMechanisms each tolerate two lost devices: none of them keeps a
// device from being judged slow.
func slowMechanisms() Option {
	return WithMechanisms(replication.New(3), splitting.New(4, 2), packing.New(4, 2, 0))
}

// counting counts the operations that reach its device, but for the
// array's probes of its latency.
type counting struct{ n atomic.Int64 }

func (c *counting) MaybeError(op faultdev.Op) error {
	if !bytes.Equal(op.Key, spaceProbeKey) {
		c.n.Add(1)
	}
	return nil
}

// delayedRig is a rig of six devices, device dev behind delay (and
// behind also, nearest the device), replication by default, whose slow
// devices are judged on a test's scale: every 10 ms, over a floor of
// 20 ms, 50 ms after a device turns healthy.
func delayedRig(t *testing.T, dev int, delay *faultdev.Delay, mechs Option, also ...faultdev.Injector) *rig {
	return newRigWrapped(t, 6, device.Limits{MaxValueLen: 4 << 10}, func(i int, m *mem.Device) device.Device {
		if i != dev {
			return m
		}
		d := device.Device(m)
		for _, inj := range also {
			d = faultdev.Wrap(d, inj)
		}
		return faultdev.Wrap(d, delay)
	}, mechs, WithDefault("replication"),
		WithSlowDevices(SlowPolicy{Every: 10 * time.Millisecond, Floor: 20 * time.Millisecond, Grace: 50 * time.Millisecond}))
}

// TestSlowDevice: one device of six made 200 ms slower than its peers
// (latency injected in front of it) is judged slow from its latency
// against theirs; while slow it is sent nothing (no operation reaches it),
// reads are served by the other pieces and writes are acknowledged on
// them, its misses recorded; once it answers as fast as its peers again it
// is re-admitted by itself, healthy with nothing left to resync, and a
// scrub finds nothing to repair. Every acknowledged value reads back
// throughout.
func TestSlowDevice(t *testing.T) {
	const slow = 2
	delay := &faultdev.Delay{}
	seen := &counting{}
	r := delayedRig(t, slow, delay, slowMechanisms(), seen)
	w := newAcked(t, r.a)
	store, check := w.store, w.check
	store(0, 60)
	check("healthy")
	delay.Set(200 * time.Millisecond)
	// Load finds it slow: the writes that reach it before then are slow,
	// not failed.
	for round := 1; r.a.DeviceState(slow) != mechanism.Slow; round++ {
		if round > 200 {
			t.Fatalf("device %d, 200 ms slower than its peers, is %v after %d rounds of writes", slow, r.a.DeviceState(slow), round)
		}
		store(round, 10)
	}
	for i := range 6 {
		if i != slow && r.a.DeviceState(i) != mechanism.Healthy {
			t.Fatalf("device %d is %v beside the slow one", i, r.a.DeviceState(i))
		}
	}
	st, err := r.a.Status(ctx)
	if err != nil || st.Devices[slow].State != "slow" || st.Devices[slow].Reason == "" {
		t.Fatalf("status of the slow device: %+v, %v", st.Devices[slow], err)
	}
	before := seen.n.Load()
	store(300, 60)
	check("slow")
	if got := seen.n.Load() - before; got != 0 {
		t.Fatalf("%d operations reached the slow device", got)
	}
	if r.a.env.MissedCount(slow) == 0 {
		t.Fatalf("writes while device %d was slow recorded no miss", slow)
	}
	delay.Set(0)
	waitCaughtUp(t, r.a, slow)
	check("re-admitted")
	store(400, 60)
	check("after")
	rep, err := r.a.Scrub(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Problems() > 0 {
		t.Fatalf("scrub after the slow device's return: %+v", rep)
	}
}

// TestSlowWithHashingConfigured: Hashing configured but unused (as on
// every array built from a config, for per-call stores) keeps no device
// from being judged slow; the first value stored with it (no other piece
// to turn to) re-admits the slow device, and none is judged slow after.
// Every acknowledged value reads back throughout.
func TestSlowWithHashingConfigured(t *testing.T) {
	const slow = 4
	delay := &faultdev.Delay{}
	r := delayedRig(t, slow, delay, everyMechanism())
	w := newAcked(t, r.a)
	w.store(0, 30)
	delay.Set(100 * time.Millisecond)
	for round := 1; r.a.DeviceState(slow) != mechanism.Slow; round++ {
		if round > 50 {
			t.Fatalf("device %d, 100 ms slower than its peers, is %v after %d rounds of writes", slow, r.a.DeviceState(slow), round)
		}
		w.store(round, 2)
	}
	w.check("slow")
	delay.Set(0)
	// On a device the slow one is not: a Hashing value has one piece.
	key := "unprotected"
	for i := 0; r.a.primary([]byte(key), 0) == slow; i++ {
		key = fmt.Sprintf("unprotected-%d", i)
	}
	r.mustStore(key, []byte("no redundancy"), Using("hashing"))
	waitCaughtUp(t, r.a, slow)
	delay.Set(100 * time.Millisecond)
	w.store(500, 20)
	if st := r.a.DeviceState(slow); st != mechanism.Healthy {
		t.Fatalf("device %d is %v once the array holds a Hashing value", slow, st)
	}
	delay.Set(0)
	w.check("after")
	r.mustRead(key, []byte("no redundancy"))
}

// TestSlowNotJudgedOnItsRebuild: what a device answered while it was not
// healthy (here slow writes while it was being rebuilt) does not count
// once it is: a device just rebuilt, now as fast as its peers, stays
// healthy. Every acknowledged value reads back.
func TestSlowNotJudgedOnItsRebuild(t *testing.T) {
	const dev = 1
	delay := &faultdev.Delay{}
	r := delayedRig(t, dev, delay, slowMechanisms())
	w := newAcked(t, r.a)
	w.store(0, 30)
	r.replace(dev)
	delay.Set(60 * time.Millisecond)
	w.store(1, 30) // each write's piece on the rebuilding device is slow
	if p99, _, n := r.a.env.Latency(dev); n < slowSamples || p99 < 60*time.Millisecond {
		t.Fatalf("device %d, rebuilding behind 60 ms, measured p99 %v over %d batches", dev, p99, n)
	}
	delay.Set(0)
	if _, err := r.a.Rebuild(ctx, dev); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, r.a, dev)
	// Past its grace, idle: judged on the rebuild's writes, it would be
	// marked slow now.
	time.Sleep(300 * time.Millisecond)
	for round := 2; round < 12; round++ {
		w.store(round, 30)
		time.Sleep(20 * time.Millisecond)
		if st := r.a.DeviceState(dev); st != mechanism.Healthy {
			t.Fatalf("round %d: device %d, rebuilt and as fast as its peers, is %v: %s", round, dev, st, r.a.slowReason(dev))
		}
	}
	w.check("after the rebuild")
}
