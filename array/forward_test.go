package array

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/faultdev"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
)

// Repair only moves forward: these tests give the array pieces of older
// versions that still look authoritative (a packing set listing a member
// whose key moved on) and check that no repair, read or scrub ever brings
// the older bytes back.

// mechanismPieces copies every piece on the devices that is not a user
// value's data piece (packing parities, for one): to put back later, as a
// set whose update never landed would leave them.
func (r *rig) mechanismPieces() []map[string][]byte {
	out := make([]map[string][]byte, len(r.mems))
	for i, m := range r.mems {
		out[i] = map[string][]byte{}
		_ = m.Iterate(context.Background(), nil, func(k []byte) error {
			if _, _, kind, err := format.ParseKey(k); err == nil && kind != format.KindData && kind != format.KindArray {
				out[i][string(k)] = nil
			}
			return nil
		})
		for k := range out[i] {
			v, err := m.Retrieve(context.Background(), []byte(k))
			if err != nil {
				r.t.Fatalf("copy %q from device %d: %v", k, i, err)
			}
			out[i][k] = v
		}
	}
	return out
}

// storePacked stores n keys k00, k01, … with random values of 100 to
// 100+spread bytes concurrently, so that Packing (the rig's default) forms
// full sets, and returns them.
func (r *rig) storePacked(rng *rand.Rand, n, spread int) ([]string, [][]byte) {
	var keys []string
	var vals [][]byte
	for i := 0; i < n; i++ {
		keys = append(keys, fmt.Sprintf("k%02d", i))
		vals = append(vals, randBytes(rng, 100+rng.IntN(spread)))
	}
	storeConcurrently(r.t, r.a, keys, vals)
	return keys, vals
}

// checkModel reads every key of keys: those in model must read back
// their value, the others (deleted) must not read as any bytes: not found,
// or unknown while their primary is down (they may have been Hashing
// values).
func (r *rig) checkModel(what string, keys []string, model map[string][]byte) {
	r.t.Helper()
	for _, k := range keys {
		got, err := r.a.Retrieve(ctx, []byte(k))
		want, ok := model[k]
		switch {
		case !ok && (errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnavailable)):
		case !ok:
			r.t.Fatalf("%s: deleted key %s: %d bytes, %v; want not found", what, k, len(got), err)
		case err != nil || string(got) != string(want):
			r.t.Fatalf("%s: %s: %d bytes (%.20q), %v; want %d bytes (%.20q)", what, k, len(got), got, err, len(want), want)
		}
	}
}

func (r *rig) putBack(pieces []map[string][]byte) {
	for i, m := range pieces {
		for k, v := range m {
			if err := r.mems[i].Store(context.Background(), []byte(k), v); err != nil {
				r.t.Fatalf("put back %q on device %d: %v", k, i, err)
			}
		}
	}
}

// TestScrubNeverRollsBackSupersededMembers: packed keys overwritten with
// replication (and one deleted), whose old sets' parities come back as
// they were before (the detach that should have updated them did not
// land). Scrub with repair must retire the old members, not write them
// over the newer values; afterwards any two devices may fail and every
// key still reads its newest value (or stays deleted).
func TestScrubNeverRollsBackSupersededMembers(t *testing.T) {
	r := newRig(t, 6, everyMechanism(), WithDefault("packing"))
	keys, vals := r.storePacked(newRand(t), 24, 3000)
	old := r.mechanismPieces()
	model := map[string][]byte{}
	for i, k := range keys {
		switch i % 3 {
		case 0:
			model[k] = []byte(fmt.Sprintf("newer value of %s", k))
			r.mustStore(k, model[k], Using("replication"))
		case 1:
			if err := r.a.Delete(ctx, []byte(k)); err != nil {
				t.Fatal(err)
			}
		default:
			model[k] = vals[i]
		}
	}
	r.putBack(old)
	check := func(what string) {
		t.Helper()
		r.checkModel(what, keys, model)
	}
	check("stale sets put back")
	if _, err := r.a.Scrub(ctx, true); err != nil {
		t.Fatalf("scrub: %v", err)
	}
	check("after scrub --repair")
	if _, err := r.a.Scrub(ctx, true); err != nil {
		t.Fatalf("second scrub: %v", err)
	}
	for _, devs := range combos(6, 2) {
		for _, d := range devs {
			r.mems[d].Fail()
			r.a.SetDeviceState(d, mechanism.Failed)
		}
		check(fmt.Sprintf("after scrub, devices %v failed", devs))
		for _, d := range devs {
			r.mems[d].Recover()
			r.a.SetDeviceState(d, mechanism.Healthy)
		}
	}
}

// TestHugePackingValueGrowsItsLastSplit (trust case 1): a huge packed value
// whose last split grows moves that split to a new set; the move must
// leave the old set, not the new one, so the value survives losing the
// split's primary and a scrub.
func TestHugePackingValueGrowsItsLastSplit(t *testing.T) {
	r := newRigLimits(t, 6, device.Limits{MaxValueLen: 8 << 10}, everyMechanism(), WithDefault("packing"), WithParallelism(1))
	capacity := 0
	for _, m := range r.a.mechs {
		if m.Name() == "packing" {
			capacity = m.SplitCap()
		}
	}
	rng := newRand(t)
	v1 := randBytes(rng, capacity+10)
	v2 := randBytes(rng, capacity+3000)
	r.mustStore("huge", v1)
	r.mustStore("huge", v2)
	r.mustRead("huge", v2)
	p1 := r.a.primary([]byte("huge"), 1)
	for other := 0; other < 6; other++ {
		if other == p1 {
			continue
		}
		for _, d := range []int{p1, other} {
			r.mems[d].Fail()
			r.a.SetDeviceState(d, mechanism.Failed)
		}
		r.mustRead("huge", v2)
		for _, d := range []int{p1, other} {
			r.mems[d].Recover()
			r.a.SetDeviceState(d, mechanism.Healthy)
		}
	}
	if _, err := r.a.Scrub(ctx, true); err != nil {
		t.Fatalf("scrub: %v", err)
	}
	r.mustRead("huge", v2)
}

// TestHugePackingValueMovesToReplication (trust case 2): overwriting a
// packed huge value with replication, with no fault at all, succeeds and
// leaves nothing behind that a scrub calls bad.
func TestHugePackingValueMovesToReplication(t *testing.T) {
	r := newRigLimits(t, 6, device.Limits{MaxValueLen: 8 << 10}, everyMechanism(), WithDefault("packing"))
	rng := newRand(t)
	v1 := randBytes(rng, 30<<10) // 4 splits
	r.mustStore("huge", v1)
	v2 := randBytes(rng, 30<<10)
	r.mustStore("huge", v2, Using("replication"))
	r.mustRead("huge", v2)
	rep, err := r.a.Scrub(ctx, false)
	if err != nil {
		t.Fatalf("scrub: %v", err)
	}
	for _, c := range rep.Mechanisms {
		if c.BadPieces != 0 || c.Unrecoverable != 0 {
			t.Fatalf("scrub after the move finds %+v", rep.Mechanisms)
		}
	}
}

// TestPackingWritesWithinTolerance: with any two devices down (packing's
// r), every overwrite and delete of packed keys succeeds, with the new
// value packed again, replicated or deleted, and after the devices come
// back and are resynced, a scrub leaves every key at its last value; then
// any two devices may fail and every key still reads.
func TestPackingWritesWithinTolerance(t *testing.T) {
	for _, down := range combos(6, 2) {
		if len(down) != 2 {
			continue
		}
		t.Run(fmt.Sprint(down), func(t *testing.T) {
			r := newRig(t, 6, everyMechanism(), WithDefault("packing"))
			rng := newRand(t)
			keys, vals := r.storePacked(rng, 24, 2000)
			model := map[string][]byte{}
			for i, k := range keys {
				model[k] = vals[i]
			}
			for _, d := range down {
				r.mems[d].Fail()
				r.a.SetDeviceState(d, mechanism.Failed)
			}
			for i, k := range keys {
				var err error
				switch i % 4 {
				case 0: // larger: moves to a new set
					model[k] = randBytes(rng, 2500+rng.IntN(1000))
					err = r.a.Store(ctx, []byte(k), model[k])
				case 1:
					model[k] = randBytes(rng, 100)
					err = r.a.Store(ctx, []byte(k), model[k], Using("replication"))
				case 2:
					delete(model, k)
					err = r.a.Delete(ctx, []byte(k))
				}
				if err != nil {
					t.Fatalf("devices %v down: write %s: %v", down, k, err)
				}
			}
			for _, d := range down {
				r.mems[d].Recover()
			}
			r.repairAll(nil)
			if rep, err := r.a.Scrub(ctx, true); err != nil || len(rep.Errors) > 0 {
				t.Fatalf("scrub: %v %v", err, rep.Errors)
			}
			for _, fail := range combos(6, 2) {
				for _, d := range fail {
					r.mems[d].Fail()
					r.a.SetDeviceState(d, mechanism.Failed)
				}
				r.checkModel(fmt.Sprintf("devices %v failed", fail), keys, model)
				for _, d := range fail {
					r.mems[d].Recover()
					r.a.SetDeviceState(d, mechanism.Healthy)
				}
			}
		})
	}
}

// TestOlderCopyNeverBeatsNewerMember (trust case 6): replication copies
// that an interrupted change to packing left on the neighbours are older
// than the packed member; with the primary down, the read returns the
// member, reconstructed from its set, not the copy.
func TestOlderCopyNeverBeatsNewerMember(t *testing.T) {
	r := newRig(t, 6, everyMechanism(), WithDefault("packing"))
	rng := newRand(t)
	v1, v2 := randBytes(rng, 1000), randBytes(rng, 1000)
	r.mustStore("k", v1, Using("replication"))
	p := r.a.primary([]byte("k"), 0)
	copies := map[int][]byte{}
	for _, d := range []int{(p + 1) % 6, (p + 2) % 6} {
		b, err := r.mems[d].Retrieve(ctx, format.Key([]byte("k"), 0, format.KindData))
		if err != nil {
			t.Fatal(err)
		}
		copies[d] = b
	}
	r.mustStore("k", v2, Using("packing"))
	for d, b := range copies { // the release's deletes never landed
		if err := r.mems[d].Store(ctx, format.Key([]byte("k"), 0, format.KindData), b); err != nil {
			t.Fatal(err)
		}
	}
	r.mems[p].Fail()
	r.a.SetDeviceState(p, mechanism.Failed)
	r.mustRead("k", v2)
}

// TestWrongVersionOnLaterSplitPrimary (trust case 7): the primary of a
// later split of a huge value holds a piece of another version; the good
// replicas on the other devices still give the value.
func TestWrongVersionOnLaterSplitPrimary(t *testing.T) {
	r := newRigLimits(t, 6, device.Limits{MaxValueLen: 8 << 10}, everyMechanism(), WithDefault("replication"))
	rng := newRand(t)
	v := randBytes(rng, 30<<10)
	r.mustStore("huge", v)
	h0, err := r.piece(r.a.primary([]byte("huge"), 0), "huge", 0)
	if err != nil {
		t.Fatal(err)
	}
	k1 := r.a.splitKey([]byte("huge"), 1, h0.Version)
	b, err := r.mems[k1.Primary].Retrieve(ctx, k1.Data())
	if err != nil {
		t.Fatal(err)
	}
	format.Unkey(k1.Data(), b, 0)
	wrong, err := format.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	wrong.Version++ // as a store that failed after landing here would leave
	if err := r.mems[k1.Primary].Store(ctx, k1.Data(), format.Encode(&wrong.Header, wrong.Payload)); err != nil {
		t.Fatal(err)
	}
	r.mustRead("huge", v)
}

// TestResyncSweepsEveryMissedSplit (trust case 5): a device that missed
// the delete of a huge value holds copies of its later splits only; its
// resync removes them all and leaves it with nothing to catch up on.
func TestResyncSweepsEveryMissedSplit(t *testing.T) {
	r := newRigLimits(t, 6, device.Limits{MaxValueLen: 8 << 10}, everyMechanism(), WithDefault("replication"))
	rng := newRand(t)
	r.mustStore("huge", randBytes(rng, 30<<10)) // 4 splits
	d := (r.a.primary([]byte("huge"), 0) + 4) % 6
	r.mems[d].Fail()
	r.a.SetDeviceState(d, mechanism.Failed)
	if err := r.a.Delete(ctx, []byte("huge")); err != nil {
		t.Fatal(err)
	}
	r.mems[d].Recover()
	if _, err := r.a.Resync(ctx, d); err != nil {
		t.Fatalf("resync: %v", err)
	}
	if n := r.a.env.MissedCount(d); n != 0 {
		t.Fatalf("device %d still has %d keys to catch up on after its resync", d, n)
	}
	for i, m := range r.mems {
		_ = m.Iterate(ctx, []byte("huge"), func(k []byte) error {
			t.Errorf("device %d still holds %q", i, k)
			return nil
		})
	}
}

// TestClearedRecordStaysCleared (trust case 4): a resync record cleared
// while one of its holders was down does not come back when that holder
// returns and the array is reopened; the device it named is not taken
// for stale, so two further losses still leave enough shards.
func TestClearedRecordStaysCleared(t *testing.T) {
	r := newRig(t, 6, everyMechanism(), WithDefault("splitting"))
	rng := newRand(t)
	const a, b = 0, 1 // b holds one of a's record copies
	r.mems[a].Fail()
	r.a.SetDeviceState(a, mechanism.Failed)
	v := randBytes(rng, 3000)
	r.mustStore("k", v)
	r.mems[b].Fail()
	r.a.SetDeviceState(b, mechanism.Failed)
	r.mems[a].Recover()
	if _, err := r.a.Resync(ctx, a); err != nil {
		t.Fatalf("resync %d: %v", a, err)
	}
	r.mems[b].Recover()
	r.reopen()
	if n := r.a.env.MissedCount(a); n != 0 {
		t.Fatalf("after reopening, device %d has %d keys to catch up on again", a, n)
	}
	if _, err := r.a.Resync(ctx, b); err != nil {
		t.Fatalf("resync %d: %v", b, err)
	}
	for _, d := range []int{3, 4} {
		r.mems[d].Fail()
		r.a.SetDeviceState(d, mechanism.Failed)
	}
	r.mustRead("k", v)
	for _, d := range []int{3, 4} {
		r.mems[d].Recover()
	}
	r.reopen()
	for d := range r.mems {
		if n := r.a.env.MissedCount(d); n != 0 {
			t.Fatalf("device %d has %d keys to catch up on after every device was resynced", d, n)
		}
	}
}

// TestCustomStoreWithOneDeviceDown (trust case 8): the first per-call
// mechanism on a standalone array records that in the array header; a
// device that cannot take the header must not fail the store of a key
// that does not touch it, and gets the flag when it is resynced.
func TestCustomStoreWithOneDeviceDown(t *testing.T) {
	r := newRig(t, 6, everyMechanism(), WithDefault("hashing"))
	key := "k"
	p := r.a.primary([]byte(key), 0)
	down := (p + 3) % 6
	r.mems[down].Fail()
	r.mustStore(key, []byte("v"), Using("replication"))
	r.mems[down].Recover()
	if _, err := r.a.Resync(ctx, down); err != nil {
		t.Fatal(err)
	}
	b, err := r.mems[down].Retrieve(ctx, headerKey)
	if err != nil {
		t.Fatal(err)
	}
	if h, err := decodeHeader(b); err != nil || h.flags&flagMixed == 0 {
		t.Fatalf("resynced device's header: %+v %v, want the mixed flag", h, err)
	}
	r.mustRead(key, []byte("v"))
}

// TestOldSetNeverResurrectsOldValue (trust case 3): a packed key whose
// set's parity devices are both down (one known to the array, one not)
// is overwritten with replication (which may fail after writing), then
// with splitting; after the devices return, heal and scrub, the key reads
// the last value, and still does with any two devices failed.
func TestOldSetNeverResurrectsOldValue(t *testing.T) {
	r := newRig(t, 6, everyMechanism(), WithDefault("packing"))
	rng := newRand(t)
	v1, v2, v3 := randBytes(rng, 900), randBytes(rng, 900), randBytes(rng, 900)
	r.mustStore("k", v1)
	var parity []int
	for d, m := range r.mechanismPieces() {
		if len(m) > 0 {
			parity = append(parity, d)
		}
	}
	if len(parity) != 2 {
		t.Fatalf("parities on devices %v, want 2", parity)
	}
	r.mems[parity[0]].Fail()
	r.a.SetDeviceState(parity[0], mechanism.Failed)
	r.mems[parity[1]].Fail() // not known to the array yet
	last := v1
	if err := r.a.Store(ctx, []byte("k"), v2, Using("replication")); err == nil {
		last = v2
	}
	r.mustStore("k", v3, Using("splitting"))
	last = v3
	for _, d := range parity {
		r.mems[d].Recover()
	}
	r.repairAll(nil)
	if _, err := r.a.Scrub(ctx, true); err != nil {
		t.Fatal(err)
	}
	r.mustRead("k", last)
	for _, devs := range combos(6, 2) {
		for _, d := range devs {
			r.mems[d].Fail()
			r.a.SetDeviceState(d, mechanism.Failed)
		}
		r.mustRead("k", last)
		for _, d := range devs {
			r.mems[d].Recover()
			r.a.SetDeviceState(d, mechanism.Healthy)
		}
	}
}

// TestStaleMemberStillCountsForItsSet: a Packing set formed while two of
// its members' devices were down holds those two members in its parities
// alone. A third member's key then moves to Replication while its device
// is down too, so the set cannot let that member go. When the three come
// back, the third still holds the member's bytes: no longer its key's
// value (it missed the newer write), but what the parities still cover,
// and what the first two are rebuilt from. Reads must use them; no store
// or repair may overwrite them before the set has let them go.
// (CI's TestScrubRollback found it: "3 of 6 pieces bad" after a restart,
// and the scrub then destroyed the third member's bytes.)
func TestStaleMemberStillCountsForItsSet(t *testing.T) {
	for _, how := range []string{"scrub", "store"} {
		t.Run(how, func(t *testing.T) {
			r := packingRig(t, time.Second)
			rng := newRand(t)
			keys := balancedKeys(r, 4)
			vals := make([][]byte, len(keys))
			for i := range vals {
				vals[i] = randBytes(rng, 1000)
			}
			down := func(key string) int {
				d := r.a.primary([]byte(key), 0)
				r.mems[d].Fail()
				r.a.SetDeviceState(d, mechanism.Failed)
				return d
			}
			a, b := down(keys[0]), down(keys[1])
			storeConcurrently(t, r.a, keys, vals)
			sets := 0
			eachParity(t, r, func(_ int, _ []byte, members, _ []int) {
				if slices.Contains(members, a) && slices.Contains(members, b) && len(members) == 4 {
					sets++
				}
			})
			if sets == 0 {
				t.Fatal("setup: the four keys formed no one set")
			}
			c := down(keys[2])
			newC := randBytes(rng, 1000)
			// Its release fails (the set cannot be patched with three of its
			// pieces out of reach), so the store fails: key-2 may then read
			// as either value, and once read, must stay at it.
			err := r.a.Store(ctx, []byte(keys[2]), newC, Using("replication"))
			t.Logf("store while three devices are down: %v", err)
			for _, d := range []int{a, b, c} {
				r.mems[d].Recover()
			}
			r.reopen()
			// The first two first: their reads need the third's old bytes.
			r.mustRead(keys[0], vals[0])
			r.mustRead(keys[1], vals[1])
			if err == nil {
				vals[2] = newC
			} else if got, err := r.a.Retrieve(ctx, []byte(keys[2])); err == nil && bytes.Equal(got, newC) {
				vals[2] = newC
			}
			for i := range keys {
				r.mustRead(keys[i], vals[i])
			}
			switch how {
			case "scrub":
				if _, err := r.a.Scrub(ctx, true); err != nil {
					t.Fatalf("scrub: %v", err)
				}
			case "store":
				vals[2] = randBytes(rng, 1000)
				r.mustStore(keys[2], vals[2], Using("replication"))
			}
			for i := range keys {
				r.mustRead(keys[i], vals[i])
			}
			// Nothing the repairs left depends on the third device: it may
			// fail now with one other, as any two may.
			r.repairAll(keys)
			for _, d := range []int{c, a} {
				r.mems[d].Fail()
				r.a.SetDeviceState(d, mechanism.Failed)
			}
			for i := range keys {
				r.mustRead(keys[i], vals[i])
			}
		})
	}
}

// TestFailedBankedStoreLeavesOldValueReadable: a store whose pieces past
// the primary go under the bank key (Splitting) fails short of its quorum
// with its primary down: three of its six shards landed, too few to
// decode. The old value (Replication, whole on the neighbours; the
// primary missed it) stands, and must read back: the failed store's
// shards, newer than it, must not make the key unreadable. (CI's
// TestScrubRollback: "3 good shards of version …, 4 needed".)
func TestFailedBankedStoreLeavesOldValueReadable(t *testing.T) {
	// dies is the device that fails under the store, at its shard's write.
	var dies atomic.Int64
	dies.Store(-1)
	r := newFaultRig(t, func(i int, m *mem.Device) faultdev.Injector {
		return faultdev.InjectorFunc(func(op faultdev.Op) error {
			if dies.Load() == int64(i) && op.Kind == device.OpStore && bytes.HasPrefix(op.Key, []byte("k\x00")) {
				m.Fail()
				return faultdev.ErrInjected
			}
			return nil
		})
	}, everyMechanism(), WithDefault("replication"))
	rng := newRand(t)
	old := randBytes(rng, 4096)
	p := r.a.primary([]byte("k"), 0)
	down := func(d int) {
		r.mems[d].Fail()
		r.a.SetDeviceState(d, mechanism.Failed)
	}
	down(p)
	r.mustStore("k", old) // the primary misses it
	down((p + 3) % 6)
	dies.Store(int64((p + 4) % 6))
	if err := r.a.Store(ctx, []byte("k"), randBytes(rng, 64<<10), Using("splitting")); err == nil {
		t.Fatal("a store that lost three of six shards succeeded")
	}
	dies.Store(-1)
	r.mustRead("k", old)
	for _, d := range []int{p, (p + 3) % 6, (p + 4) % 6} {
		r.mems[d].Recover()
	}
	r.reopen()
	r.mustRead("k", old)
	r.heal()
	r.mustRead("k", old)
}
