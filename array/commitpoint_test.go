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
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism/packing"
	"github.com/kvarray/kvarray/mechanism/replication"
)

// TestFailedStoreKeepsALandedCommit: a Splitting overwrite of a Packing
// member whose shard 0 reached the primary, but whose answer was lost as
// the device died (with two other devices down: beyond the tolerance, so
// the store fails), leaves a value that reads back once the devices
// return. The invariant: a failed store costs neither value. The old
// member is gone (shard 0 replaced it), so the new value must keep its
// other shards: a primary that cannot be read says nothing about whether
// the commit landed. Found by TestScrubRollback: the cleanup of a failed
// store read the dying primary, took the error for "not committed", and
// deleted the shards.
func TestFailedStoreKeepsALandedCommit(t *testing.T) {
	key := []byte("commit-point")
	data := format.Key(key, 0, format.KindData)
	var down [6]atomic.Bool // refuses every op: a device already gone
	var dying [6]atomic.Bool
	var died [6]atomic.Bool // dying, past a store of key: every answer lost
	failed := fmt.Errorf("connection reset: %w", device.ErrDeviceFailed)
	r := newRigWrapped(t, 6, device.Limits{}, func(i int, m *mem.Device) device.Device {
		after := faultdev.WrapAfter(m, faultdev.InjectorFunc(func(op faultdev.Op) error {
			if dying[i].Load() && op.Kind == device.OpStore && bytes.Equal(op.Key, data) {
				died[i].Store(true)
			}
			if died[i].Load() {
				return failed
			}
			return nil
		}))
		return faultdev.Wrap(after, faultdev.InjectorFunc(func(faultdev.Op) error {
			if down[i].Load() {
				return failed
			}
			return nil
		}))
	}, hybridAll()...)
	rng := newRand(t)
	old := randBytes(rng, 16<<10) // Packing, by hybridAll's rules
	if err := r.a.Store(ctx, key, old); err != nil {
		t.Fatal(err)
	}
	p := r.a.primary(key, 0)
	down[(p+1)%6].Store(true)
	down[(p+2)%6].Store(true)
	dying[p].Store(true)
	new := randBytes(rng, 64<<10) // Splitting
	if err := r.a.Store(ctx, key, new); err == nil {
		t.Fatal("a store with three of six devices failing succeeded")
	}
	if !died[p].Load() {
		t.Fatal("the store never reached the primary: the case is not set up")
	}
	for i := range 6 {
		down[i].Store(false)
		dying[i].Store(false)
		died[i].Store(false)
	}
	r.reopen()
	got, err := r.a.Retrieve(ctx, key)
	switch {
	case err != nil:
		t.Fatalf("after a failed store and a restart: %v", err)
	case !bytes.Equal(got, old) && !bytes.Equal(got, new):
		t.Fatalf("after a failed store and a restart: %d bytes, neither value", len(got))
	}
}

// TestThirdFailureKeepsParityOnlyValues: a value that lives in its set's
// parities alone survives a third device failing under an update of
// another member of its set, once every device is back with what it held.
// The set: member A on device x, member W, parities on y and z. With y
// down, x dies under an update of A: A's new bytes are in z's parity alone
// (folded there: y cannot catch up from z's log). Then z fails, before or
// under an update of W (packed in place, or replicated: W leaves the set).
// A is decoded from z's parity with W's current bytes, so that update
// must fail without overwriting W. The invariant: every key reads back its
// last acknowledged value, or the value of a later store that failed.
// Found by TestScrubRollback: with both parity devices down, W moved to a
// new set (overwritten in place) as if no other member needed the
// parities; with z dying under the update, W was written beside the log
// entry that failed, or replicated over before its set recorded the leave.
// (W moving to another set is overwritten before the leave is recorded:
// see docs/ARCHITECTURE.md, Known limits.)
func TestThirdFailureKeepsParityOnlyValues(t *testing.T) {
	// Sets form as concurrent stores happen to meet: each round lays
	// the case out on different sets and devices.
	// W's new value: 500 bytes, packed in place; 6,000, replicated
	// (the array releases W from its set).
	for round := range 16 {
		for _, dies := range []bool{false, true} {
			for _, wlen := range []int{500, 6000} {
				t.Run(fmt.Sprintf("round %d dies under the update %v W %d bytes", round, dies, wlen), func(t *testing.T) {
					thirdFailure(t, dies, wlen)
				})
			}
		}
	}
}

func thirdFailure(t *testing.T, dies bool, wlen int) {
	faults := make([]*dying, 6)
	r := newFaultRig(t, func(i int, _ *mem.Device) faultdev.Injector {
		faults[i] = &dying{}
		return faults[i]
	}, WithMechanisms(packing.New(4, 2, 20*time.Millisecond, packing.WithIdleReplay(0)), replication.New(3)),
		WithMode(Hybrid), WithRules(Rule{Max: 4096, RM: "packing"}, Rule{RM: "replication"}))
	rng := newRand(t)
	keys, live := storePacked(t, r, rng, 24)
	out := outcomes{}
	for k, v := range live {
		out.record(k, v, nil)
	}
	// A full set: its members' keys by device, its parity devices.
	bySet := map[uint64]map[int]string{}
	for _, k := range keys {
		p := r.a.primary([]byte(k), 0)
		b, err := r.mems[p].Retrieve(ctx, format.Key([]byte(k), 0, format.KindData))
		if err != nil {
			t.Fatal(err)
		}
		format.Unkey(format.Key([]byte(k), 0, format.KindData), b, 0)
		v, err := format.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		set, _, err := packing.MemberOf(v)
		if err != nil {
			t.Fatal(err)
		}
		if bySet[set] == nil {
			bySet[set] = map[int]string{}
		}
		bySet[set][p] = k
	}
	var a, w string
	var x, y, z int
	eachParity(t, r, func(_ int, _ []byte, members, parity []int) {
		if a != "" || len(members) < 2 {
			return
		}
		for _, ks := range bySet {
			if ka, kw := ks[members[0]], ks[members[1]]; ka != "" && kw != "" && len(ks) == len(members) {
				a, w, x, y, z = ka, kw, members[0], parity[0], parity[1]
			}
		}
	})
	if a == "" {
		t.Fatal("no set of two members or more: the case is not set up")
	}
	store := func(k string, n int) error {
		v := randBytes(rng, n)
		err := r.a.Store(ctx, []byte(k), v)
		out.record(k, v, err)
		return err
	}
	r.mems[y].Fail()
	faults[x].armed.Store(true) // dies under A's update: A stays in its set
	if err := store(a, 1000+rng.IntN(3000)); err != nil {
		t.Fatalf("update of %q with two devices down: %v", a, err)
	}
	if err := r.a.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	if dies {
		faults[z].armed.Store(true)
	} else {
		r.mems[z].Fail()
	}
	err := store(w, wlen)
	t.Logf("A %q on %d, W %q, parities on %d and %d; the update of W with %d down: %v", a, x, w, y, z, z, err)
	for i := range 6 {
		r.mems[i].Recover()
		faults[i].armed.Store(false)
		faults[i].dead.Store(false)
	}
	r.reopen()
	for _, k := range keys {
		got, err := r.a.Retrieve(ctx, []byte(k))
		if !out.allows(k, got, err) {
			t.Errorf("%s: %s", k, out.describe(k, got, err, map[string]int{}))
		}
	}
}
