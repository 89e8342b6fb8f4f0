package array

import (
	"bytes"
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
	"github.com/kvarray/kvarray/mechanism/packing"
	"github.com/kvarray/kvarray/mechanism/replication"
)

// packingMech returns the rig's Packing mechanism.
func packingMech(t *testing.T, r *rig) *packing.Mechanism {
	t.Helper()
	for _, m := range r.a.mechs {
		if p, ok := m.(*packing.Mechanism); ok {
			return p
		}
	}
	t.Fatal("no packing mechanism")
	return nil
}

// segments counts the delta-log segments on the rig's devices.
func segments(r *rig) int {
	n := 0
	for _, m := range r.mems {
		_ = m.Iterate(ctx, []byte("\x00kvarray-plog"), func([]byte) error {
			n++
			return nil
		})
	}
	return n
}

// everyPairReads fails each pair of devices in turn (Packing's r=2) and
// checks that every live value reads back byte-exact, then resyncs them.
func everyPairReads(t *testing.T, r *rig, live map[string][]byte, when string) {
	t.Helper()
	for _, pair := range combos(6, 2) {
		if len(pair) != 2 {
			continue
		}
		for _, d := range pair {
			r.mems[d].Fail()
		}
		for k, v := range live {
			got, err := r.a.Retrieve(ctx, []byte(k))
			if err != nil || string(got) != string(v) {
				t.Fatalf("%s, devices %v failed: %q: %v (%d bytes, want %d)", when, pair, k, err, len(got), len(v))
			}
		}
		// Both come back before either resyncs: a set whose parities
		// are both on the pair (formed, or changed, while they were down)
		// is rebuilt by the resync of one only once the other answers
		// (heal's rounds).
		for _, d := range pair {
			r.mems[d].Recover()
		}
		for d, err := range r.heal() {
			if err != nil {
				t.Fatalf("%s: resync %d: %v", when, d, err)
			}
		}
	}
}

// TestPackingLoggedUpdates: updates of packed values are logged as data
// deltas (no parity read or rewritten), and the invariant
// holds at every stage: every live value reads back byte-exact with any
// two devices failed — with the deltas only in the log, after a restart
// that must load the log from the devices, and after the scrub that folds
// the log into the parities and deletes every segment. Deleting every
// member of a set leaves no parity behind once folded.
func TestPackingLoggedUpdates(t *testing.T) {
	r := packingRig(t, 20*time.Millisecond)
	rng := newRand(t)
	keys, live := storePacked(t, r, rng, 96)

	// Updates no larger than the set's shard: each stays in its set.
	r.resetStats()
	var ks []string
	var vs [][]byte
	for i, k := range keys {
		if i%4 == 3 {
			continue
		}
		ks, vs = append(ks, k), append(vs, randBytes(rng, 200+rng.IntN(800)))
	}
	storeConcurrently(t, r.a, ks, vs)
	for i, k := range ks {
		live[k] = vs[i]
	}
	w, rd := r.devWrites()
	t.Logf("%d updates: %.2f device writes, %.2f reads each", len(ks), float64(w)/float64(len(ks)), float64(rd)/float64(len(ks)))
	// One read each: the array's read of the old value (its header and the
	// bytes the delta needs). No parity is read.
	if rd != int64(len(ks)) {
		t.Fatalf("%d device reads for %d updates, want one each", rd, len(ks))
	}
	m := packingMech(t, r)
	if m.LogBytes() == 0 || segments(r) == 0 {
		t.Fatalf("after updates the log holds %d bytes in %d segments, want some", m.LogBytes(), segments(r))
	}
	everyPairReads(t, r, live, "logged")

	// A restart: the log is read back from the segments.
	r.reopen()
	everyPairReads(t, r, live, "after a restart")

	// Deletes (they patch the parities in place) leave sets sparse.
	for _, k := range keys {
		if p := r.a.primary([]byte(k), 0); p == 0 || p == 1 {
			if err := r.a.Delete(ctx, []byte(k)); err != nil {
				t.Fatalf("delete %q: %v", k, err)
			}
			delete(live, k)
		}
	}
	everyPairReads(t, r, live, "after deletes")

	// Scrub folds the log: parities rewritten, segments deleted, and a
	// check finds nothing bad.
	if _, err := r.a.Scrub(ctx, true); err != nil {
		t.Fatalf("scrub --repair: %v", err)
	}
	m = packingMech(t, r)
	if m.LogBytes() != 0 || segments(r) != 0 {
		t.Fatalf("after scrub --repair the log holds %d bytes in %d segments, want none", m.LogBytes(), segments(r))
	}
	rep, err := r.a.Scrub(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Mechanisms {
		if c.BadPieces != 0 || c.Unrecoverable != 0 {
			t.Fatalf("scrub after the fold: %+v", rep.Mechanisms)
		}
	}
	everyPairReads(t, r, live, "folded")
	checkSetsDistinctDevices(t, r)
	// The deletes left sets with half their members or fewer: the scrub
	// moved those members to new sets (regroup), so none is left.
	if sparse := sparseSets(t, r, live); len(sparse) > 0 {
		t.Errorf("after scrub --repair: %v", sparse)
	}
	// No set is left empty.
	eachParity(t, r, func(d int, k []byte, members, _ []int) {
		if len(members) == 0 {
			t.Fatalf("device %d keeps an empty set %q", d, k)
		}
	})
}

// TestVersionsPassARestartWhoseClockWentBack: after a restart whose wall
// clock went back an hour (or stood still: a restart within one
// millisecond), updates of packed values are still newer than everything
// the previous process wrote. Their logged deltas chain to parities the
// update never reads, so a delta versioned older than its parity would be
// ignored, and a degraded read would rebuild the value it replaced.
// Invariant: with any two devices failed, every value reads back as last
// acknowledged.
func TestVersionsPassARestartWhoseClockWentBack(t *testing.T) {
	r := packingRig(t, 20*time.Millisecond)
	rng := newRand(t)
	keys, live := storePacked(t, r, rng, 24)
	r.reopen()
	back := time.Now().Add(-time.Hour)
	r.a.env.Clock().SetNow(func() time.Time { return back })
	vals := make([][]byte, len(keys))
	for i, k := range keys {
		vals[i] = randBytes(rng, 200+rng.IntN(800)) // stays in its set: logged
		live[k] = vals[i]
	}
	storeConcurrently(t, r.a, keys, vals)
	if packingMech(t, r).LogBytes() == 0 {
		t.Fatal("the updates were not logged")
	}
	everyPairReads(t, r, live, "after a restart whose clock went back")
}

// TestPackedUpdateWithItsPrimaryDown: an update of a packed value whose
// primary device is down (known failed, or failing under the write)
// succeeds: the delta is logged on the parity devices and the primary's
// miss is recorded, as a degraded write of any other mechanism. Invariant:
// with the primary still down and one more device failed, and after the
// primary is back and resynced, every value reads back as last
// acknowledged.
func TestPackedUpdateWithItsPrimaryDown(t *testing.T) {
	for _, known := range []bool{true, false} {
		t.Run(fmt.Sprintf("known down %v", known), func(t *testing.T) { packedUpdateWithPrimaryDown(t, known) })
	}
}

// dying fails every operation once it has failed one: a device that
// dies at its first write after armed (a hang past its time limit).
type dying struct{ armed, dead atomic.Bool }

func (d *dying) MaybeError(op faultdev.Op) error {
	if d.dead.Load() || d.armed.Load() && op.Kind == device.OpStore {
		d.dead.Store(true)
		return faultdev.ErrInjected
	}
	return nil
}

func packedUpdateWithPrimaryDown(t *testing.T, known bool) {
	faults := make([]*dying, 6)
	r := newFaultRig(t, func(i int, _ *mem.Device) faultdev.Injector {
		faults[i] = &dying{}
		return faults[i]
	}, WithMechanisms(packing.New(4, 2, 20*time.Millisecond), replication.New(3)), WithDefault("packing"))
	rng := newRand(t)
	keys, live := storePacked(t, r, rng, 24)
	const down = 3
	if known {
		r.mems[down].Fail()
	} else {
		faults[down].armed.Store(true)
	}
	for _, k := range keys {
		if r.a.primary([]byte(k), 0) != down {
			continue
		}
		v := randBytes(rng, 200+rng.IntN(800))
		if err := r.a.Store(ctx, []byte(k), v); err != nil {
			t.Fatalf("update of %q with its primary %d down: %v", k, down, err)
		}
		live[k] = v
	}
	for other := range 6 {
		if other == down {
			continue
		}
		r.mems[other].Fail()
		for k, v := range live {
			if got, err := r.a.Retrieve(ctx, []byte(k)); err != nil || string(got) != string(v) {
				t.Fatalf("devices %d and %d down: %q: %v (%d bytes, want %d)", down, other, k, err, len(got), len(v))
			}
		}
		r.mems[other].Recover()
		if _, err := r.a.Resync(ctx, other); err != nil {
			t.Fatal(err)
		}
	}
	r.mems[down].Recover()
	faults[down].armed.Store(false)
	faults[down].dead.Store(false)
	if _, err := r.a.Resync(ctx, down); err != nil {
		t.Fatal(err)
	}
	everyPairReads(t, r, live, "after the primary's resync")
}

// TestResyncWaitsForASetItCannotRead: a device B missed the parity write
// of a new set (it failed under it), and the set's other parity device A
// is down when B is resynced. B's record must not be cleared as if the
// set were gone: nothing readable says so. Invariant: once B reads as
// caught up, the value survives any two other devices failing (here A
// and the value's primary).
func TestResyncWaitsForASetItCannotRead(t *testing.T) {
	const key = "k"
	// Parities go where the set id's order says: try until B was one.
	for attempt := range 100 {
		b := attempt % 6
		r := packingRig(t, 5*time.Millisecond)
		if b == r.a.primary([]byte(key), 0) {
			continue
		}
		r.mems[b].Fail() // not known to the array until a write fails
		val := randBytes(newRand(t), 3000)
		r.mustStore(key, val)
		var pars []int
		eachParity(t, r, func(_ int, _ []byte, _, parity []int) { pars = parity })
		if !slices.Contains(pars, b) {
			continue // B was not one of the set's parity devices
		}
		a := pars[0]
		if a == b {
			a = pars[1]
		}
		r.mems[a].Fail()
		r.mems[b].Recover()
		_, err := r.a.Resync(ctx, b)
		t.Logf("parities on %v; device %d down; resync of %d: %v (%d keys behind)", pars, a, b, err, r.a.env.MissedCount(b))
		if r.a.env.MissedCount(b) > 0 {
			// Still behind, as it should be until the set can be read:
			// bring A back, and catch both up.
			r.mems[a].Recover()
			for _, d := range []int{a, b} {
				if _, err := r.a.Resync(ctx, d); err != nil {
					t.Fatalf("resync %d: %v", d, err)
				}
			}
			r.mems[a].Fail()
		}
		p := r.a.primary([]byte(key), 0)
		r.mems[p].Fail()
		if got, err := r.a.Retrieve(ctx, []byte(key)); err != nil || string(got) != string(val) {
			t.Fatalf("devices %d and %d down, %d caught up: %v (%d bytes, want %d)", a, p, b, err, len(got), len(val))
		}
		return
	}
	t.Fatal("no device failed under the set's parity write: the test set nothing up")
}

// storePacked stores n values of 1,000 to 4,000 random bytes under
// balanced keys (see balancedKeys) and returns the keys and the values
// they hold.
func storePacked(t *testing.T, r *rig, rng *rand.Rand, n int) ([]string, map[string][]byte) {
	t.Helper()
	keys := balancedKeys(r, n)
	vals := make([][]byte, len(keys))
	live := map[string][]byte{}
	for i := range vals {
		vals[i] = randBytes(rng, 1000+rng.IntN(3000))
		live[keys[i]] = vals[i]
	}
	storeConcurrently(t, r.a, keys, vals)
	return keys, live
}

// sparseSets describes the sets holding live values that keep half the
// members they were formed with or fewer.
func sparseSets(t *testing.T, r *rig, live map[string][]byte) []string {
	t.Helper()
	members := map[uint64]int{}
	formed := map[uint64]int{}
	for k := range live {
		v, err := r.piece(r.a.primary([]byte(k), 0), k, 0)
		if err != nil {
			t.Fatal(err)
		}
		set, n, err := packing.MemberOf(v)
		if err != nil {
			t.Fatalf("%q: %v", k, err)
		}
		members[set]++
		formed[set] = n
	}
	var out []string
	for set, n := range members {
		if formed[set] > 1 && 2*n <= formed[set] {
			out = append(out, fmt.Sprintf("set %x keeps %d of the %d members it was formed with", set, n, formed[set]))
		}
	}
	return out
}

// TestDeletesCompactInTheBackground: deletes thin sets (logged leaves);
// once the idle replay has folded them, the array's background work
// (WithAutoResync's interval) regroups the members of sets left with half
// their members or fewer, without a scrub. Invariant: every live value
// reads back with any two devices failed, before and after.
func TestDeletesCompactInTheBackground(t *testing.T) {
	r := newRig(t, 6, WithMechanisms(packing.New(4, 2, 20*time.Millisecond, packing.WithIdleReplay(50*time.Millisecond)), replication.New(3)),
		WithDefault("packing"), WithAutoResync(50*time.Millisecond))
	keys, live := storePacked(t, r, newRand(t), 96)
	kept := map[string][]byte{}
	for i, k := range keys {
		if i%4 == 0 {
			kept[k] = live[k]
		}
	}
	// Which sets the deletes will leave sparse is known before them (the
	// background compaction may regroup some as soon as they are done).
	if sparse := sparseSets(t, r, kept); len(sparse) == 0 {
		t.Fatal("the deletes will leave no set sparse: the test sets nothing up")
	}
	for i, k := range keys {
		if i%4 != 0 {
			if err := r.a.Delete(ctx, []byte(k)); err != nil {
				t.Fatalf("delete %q: %v", k, err)
			}
			delete(live, k)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		sparse := sparseSets(t, r, live)
		if len(sparse) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the deletes, without a scrub: %v", sparse)
		}
	}
	everyPairReads(t, r, live, "compacted")
}

// TestCompactFoldsLoggedLeaves: deletes leave their sets by logged entries,
// and Packing learns that a set was thinned only once it folds them.
// Compact folds those sets itself (here nothing else does: no idle replay,
// no automatic resync), so one call regroups every set the deletes left
// sparse, and then its own moves' leaves. Invariant: every live value
// reads back with any two devices failed afterwards.
func TestCompactFoldsLoggedLeaves(t *testing.T) {
	r := newRig(t, 6, WithMechanisms(packing.New(4, 2, 20*time.Millisecond, packing.WithIdleReplay(0)), replication.New(3)),
		WithDefault("packing"))
	keys, live := storePacked(t, r, newRand(t), 96)
	for i, k := range keys {
		if i%4 != 0 {
			if err := r.a.Delete(ctx, []byte(k)); err != nil {
				t.Fatalf("delete %q: %v", k, err)
			}
			delete(live, k)
		}
	}
	if packingMech(t, r).LogBytes() == 0 {
		t.Fatal("the deletes logged nothing: the test exercises no logged leave")
	}
	if len(sparseSets(t, r, live)) == 0 {
		t.Fatal("the deletes left no set sparse: the test sets nothing up")
	}
	if err := r.a.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if sparse := sparseSets(t, r, live); len(sparse) > 0 {
		t.Fatalf("after Compact: %v", sparse)
	}
	everyPairReads(t, r, live, "compacted")
}

// TestPackingLogStraySegment: a log segment no entry refers to (left by a
// fold whose delete its device missed) is deleted by scrub --repair, which
// leaves every value readable with any two devices failed.
func TestPackingLogStraySegment(t *testing.T) {
	r := packingRig(t, 20*time.Millisecond)
	rng := newRand(t)
	keys, live := storePacked(t, r, rng, 48)
	var vs [][]byte
	for range keys {
		vs = append(vs, randBytes(rng, 200+rng.IntN(800)))
	}
	storeConcurrently(t, r.a, keys, vs)
	for i, k := range keys {
		live[k] = vs[i]
	}
	// A copy of a segment, under a key of its own, once its entries are
	// folded: what a fold's delete that its device missed leaves.
	var seg []byte
	for d := range r.mems {
		_ = r.mems[d].Iterate(ctx, []byte("\x00kvarray-plog"), func(k []byte) error {
			if seg == nil {
				seg, _ = r.mems[d].Retrieve(ctx, k)
			}
			return nil
		})
	}
	if seg == nil {
		t.Fatal("no segment after logged updates")
	}
	// Every device's log loaded, and folded: the copy is then known to
	// no load to come.
	if err := r.a.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	stray := format.Key(append([]byte("\x00kvarray-plog"), 0xff, 0, 0, 0, 0, 0, 0, 1), 0, format.KindArray)
	if err := r.mems[2].Store(ctx, stray, seg); err != nil {
		t.Fatal(err)
	}
	if _, err := r.a.Scrub(ctx, true); err != nil {
		t.Fatalf("scrub --repair: %v", err)
	}
	if n := segments(r); n != 0 {
		t.Errorf("after scrub --repair %d segments are left, want none", n)
	}
	everyPairReads(t, r, live, "after the sweep")
}

// TestUpdateAfterACutShortLeave: a store that moves a packed value to
// another mechanism logs the member's leave on its set's parity devices
// before the new value overwrites the member on its primary. A crash
// between the two leaves the member whole on its primary, listed by no
// set (the leave is logged), and reads still return it. A later in-place
// update of it must not log a change of a slot its set no longer has: that
// entry, and every one after it, would not chain, and both parities of
// the set, protecting its other members too, would read as bad for good
// (found by a chaos run of `kvarray serve`: scrub reported the set as
// unrecoverable after every repair). The same holds when a replay (idle,
// in the background) ran between the crash and the update: folded, the
// leave would be gone from the log, which alone tells the update that
// its set no longer lists the piece. Invariant: after the update, every
// value of the set reads back with any two devices failed, and a scrub
// finds nothing unrecoverable.
func TestUpdateAfterACutShortLeave(t *testing.T) {
	for _, replayed := range []bool{false, true} {
		t.Run(map[bool]string{false: "logged", true: "replayed"}[replayed], func(t *testing.T) {
			r := packingRig(t, 0)
			rng := newRand(t)
			keys, live := storePacked(t, r, rng, 8)
			// The cut-short move of packed-0: its leave logged, its
			// primary not yet overwritten.
			key := []byte(keys[0])
			k := r.a.key(key, 0)
			v, err := r.piece(k.Primary, keys[0], 0)
			if err != nil {
				t.Fatal(err)
			}
			pm := packingMech(t, r)
			if err := pm.Release(ctx, k, &mechanism.Prev{Header: v.Header, Payload: v.Payload}, 1); err != nil {
				t.Fatalf("leave: %v", err)
			}
			r.reopen()
			settleIf(t, r, replayed)
			r.mustRead(keys[0], live[keys[0]])
			live[keys[0]] = randBytes(rng, 500)
			r.mustStore(keys[0], live[keys[0]])
			nothingUnrecoverable(t, r, "after the update")
			everyPairReads(t, r, live, "after the update")
		})
	}
}

// settleIf replays the delta log (Settle) when replayed is set, as the
// idle replay of a serving process would.
func settleIf(t *testing.T, r *rig, replayed bool) {
	t.Helper()
	if !replayed {
		return
	}
	if err := r.a.Settle(ctx); err != nil {
		t.Fatalf("settle: %v", err)
	}
}

// TestChangeAfterACutShortUpdate: an in-place update of a packed value logs
// its delta on the parity devices beside the write of the member; a
// failure (or crash) of that write alone leaves the entry logged and the
// old member on its primary, which reads return. The next change of the
// value, an update or a delete, starts from that old piece: it must not
// log a change that does not chain with the logged one (both parities of
// the set would read as bad for good). Invariant: after the change,
// every live value of the set reads back with any two devices failed, and
// a scrub finds nothing unrecoverable.
func TestChangeAfterACutShortUpdate(t *testing.T) {
	for _, c := range []struct{ del, replayed bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		del := c.del
		t.Run(map[bool]string{false: "update", true: "delete"}[del]+map[bool]string{false: "", true: "/replayed"}[c.replayed], func(t *testing.T) {
			var cut [6]faultdev.Toggle
			r := newFaultRig(t, func(i int, _ *mem.Device) faultdev.Injector { return &cut[i] },
				WithMechanisms(packing.New(4, 2, 0), replication.New(3)), WithDefault("packing"))
			rng := newRand(t)
			keys, live := storePacked(t, r, rng, 8)
			key := keys[0]
			// Set while the toggles are off: MaybeError reads it only when on.
			p := r.a.primary([]byte(key), 0)
			cut[p].Injector = faultdev.OnWrites(faultdev.OnPrefix(format.Key([]byte(key), 0, format.KindData),
				faultdev.Always(errors.New("the write was cut short"))))
			cut[p].On()
			if err := r.a.Store(ctx, []byte(key), randBytes(rng, 500)); err == nil {
				t.Fatal("the update whose member write failed succeeded")
			}
			cut[p].Off()
			r.reopen()
			settleIf(t, r, c.replayed)
			r.mustRead(key, live[key])
			if del {
				if err := r.a.Delete(ctx, []byte(key)); err != nil {
					t.Fatalf("delete: %v", err)
				}
				delete(live, key)
			} else {
				live[key] = randBytes(rng, 500)
				r.mustStore(key, live[key])
			}
			nothingUnrecoverable(t, r, "after the change")
			everyPairReads(t, r, live, "after the change")
		})
	}
}

// nothingUnrecoverable fails the test when a scrub (a check) finds a key
// it cannot recover.
func nothingUnrecoverable(t *testing.T, r *rig, when string) {
	t.Helper()
	rep, err := r.a.Scrub(ctx, false)
	if err != nil {
		t.Fatalf("scrub %s: %v", when, err)
	}
	for _, m := range rep.Mechanisms {
		if m.Unrecoverable > 0 {
			t.Fatalf("scrub %s: %d %s keys unrecoverable: %v", when, m.Unrecoverable, m.Mechanism, rep.Errors)
		}
	}
}

// TestLeftoverNotReadOverAnUnvouchedMember: a key's old piece of another
// mechanism may outlive its move to Packing on a device past the primary
// (a crash between the member's store and the release of the old copies).
// While the primary answers, reads never look there. With the primary
// lost, the set's parities must vouch for the newer member; when they
// cannot (a delta log that does not chain, here made by rolling the
// parities back to an older version, as any source of such a gap would),
// the read must fail rather than return the older piece: the invariant is
// that a read returns the last acknowledged write or an error, never an
// older write.
func TestLeftoverNotReadOverAnUnvouchedMember(t *testing.T) {
	r := newRig(t, 6, WithMechanisms(packing.New(4, 2, 0, packing.WithIdleReplay(0)), replication.New(3)), WithDefault("packing"))
	rng := newRand(t)
	keys := balancedKeys(r, 8)
	key := keys[0]
	k := r.a.key([]byte(key), 0)
	old := randBytes(rng, 300)
	r.mustStore(key, old, Using("replication"))
	leftover := map[int][]byte{}
	for _, d := range r.holders(key, 0) {
		if d != k.Primary {
			b, err := r.raw(d, key, 0)
			if err != nil {
				t.Fatal(err)
			}
			leftover[d] = b
		}
	}
	if len(leftover) == 0 {
		t.Fatal("no copy past the primary")
	}
	vals := make([][]byte, len(keys))
	live := map[string][]byte{}
	for i := range keys {
		vals[i] = randBytes(rng, 1000+rng.IntN(2000))
		live[keys[i]] = vals[i]
	}
	storeConcurrently(t, r.a, keys, vals)
	for d, b := range leftover {
		if err := r.mems[d].Store(ctx, format.Key([]byte(key), 0, format.KindData), b); err != nil {
			t.Fatal(err)
		}
	}
	parities := map[int]map[string][]byte{}
	for d, m := range r.mems {
		parities[d] = map[string][]byte{}
		_ = m.Iterate(ctx, []byte("\x00kvarray-set"), func(pk []byte) error {
			b, err := m.Retrieve(ctx, pk)
			if err != nil {
				return err
			}
			parities[d][string(pk)] = b
			return nil
		})
	}
	// Two in-place updates with a settle between: the log then holds
	// only the second, which does not chain with the parities put back.
	for range 2 {
		live[key] = randBytes(rng, 1000)
		r.mustStore(key, live[key])
		if err := r.a.Settle(ctx); err != nil {
			t.Fatal(err)
		}
	}
	live[key] = randBytes(rng, 1000)
	r.mustStore(key, live[key])
	for d, ps := range parities {
		for pk, b := range ps {
			if err := r.mems[d].Store(ctx, []byte(pk), b); err != nil {
				t.Fatal(err)
			}
		}
	}
	r.reopen()
	r.mustRead(key, live[key])
	r.mems[k.Primary].Fail()
	got, err := r.a.Retrieve(ctx, []byte(key))
	if err == nil && bytes.Equal(got, old) {
		t.Fatalf("with its primary failed, %s read as the write it had replaced", key)
	}
	if err == nil && !bytes.Equal(got, live[key]) {
		t.Fatalf("with its primary failed, %s read %d bytes that are no write of it", key, len(got))
	}
	if err != nil && !errors.Is(err, ErrDataLoss) {
		t.Fatalf("with its primary failed, %s: %v; want a data loss error", key, err)
	}
	r.mems[k.Primary].Recover()
	r.reopen()
	r.mustRead(key, live[key])
}

// TestDeleteAfterACutShortMove: a store that moves a packed value to a new
// set joins the new set before its old set records the leave; a failure of
// the leave's writes, or a crash, between the two leaves both sets listing
// the key, the old one at its older version. Then (after a restart, for
// the crash, before any scrub) the key is deleted and its primary lost.
// Invariant: the deleted key stays deleted through the rebuild of its
// primary (the old set's listing must not be restored as its value), and
// every other value reads back.
func TestDeleteAfterACutShortMove(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(map[bool]string{false: "failed", true: "crash"}[crash], func(t *testing.T) {
			deleteAfterACutShortMove(t, crash)
		})
	}
}

func deleteAfterACutShortMove(t *testing.T, crash bool) {
	var cut [6]faultdev.Toggle
	r := newFaultRig(t, func(i int, _ *mem.Device) faultdev.Injector { return &cut[i] },
		WithMechanisms(packing.New(4, 2, 0, packing.WithIdleReplay(0)), replication.New(3)), WithDefault("packing"))
	rng := newRand(t)
	keys, live := storePacked(t, r, rng, 8)
	key := keys[0]
	old, err := r.piece(r.a.primary([]byte(key), 0), key, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range cut {
		cut[i].Injector = faultdev.OnWrites(faultdev.OnPrefix([]byte("\x00kvarray-plog"),
			faultdev.Always(errors.New("the leave was cut short"))))
		cut[i].On()
	}
	// Larger than its slot: the value moves to a new set.
	if err := r.a.Store(ctx, []byte(key), randBytes(rng, 8000)); err == nil {
		t.Fatal("the move whose leave failed succeeded")
	}
	for i := range cut {
		cut[i].Off()
	}
	if crash {
		r.reopen()
		if !r.a.Unclean() {
			t.Fatal("a reopen without a close is not unclean")
		}
	}
	if err := r.a.Delete(ctx, []byte(key)); err != nil {
		t.Fatalf("delete: %v", err)
	}
	delete(live, key)
	p := r.a.primary([]byte(key), 0)
	r.replace(p)
	if errs := r.heal(); errs[p] != nil {
		t.Fatalf("rebuild of device %d: %v", p, errs[p])
	}
	got, err := r.a.Retrieve(ctx, []byte(key))
	switch {
	case err == nil && bytes.Equal(got, old.Payload):
		t.Fatalf("deleted %s read as the value its cut-short move left listed in its old set", key)
	case err == nil:
		t.Fatalf("deleted %s read %d bytes", key, len(got))
	case !errors.Is(err, ErrNotFound):
		t.Fatalf("deleted %s: %v; want not found", key, err)
	}
	for k, v := range live {
		r.mustRead(k, v)
	}
	nothingUnrecoverable(t, r, "after the rebuild")
}

// TestSetWithNoParityLanded: with two devices down, a set whose members
// are on the four others has its parities on the two that are down: none
// lands, and the members are acknowledged (two failures are within
// Packing's tolerance), their parities recorded missed. Invariant: once
// the two devices are resynced (after a crash: and the array scrubbed),
// the set is whole again: every member reads back after the loss (and
// rebuild) of its own primary.
func TestSetWithNoParityLanded(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(map[bool]string{false: "live", true: "crash"}[crash], func(t *testing.T) {
			setWithNoParityLanded(t, crash)
		})
	}
}

func setWithNoParityLanded(t *testing.T, crash bool) {
	r := newRig(t, 6, WithMechanisms(packing.New(4, 2, time.Second), replication.New(3)), WithDefault("packing"))
	rng := newRand(t)
	var keys []string
	for i, d := 0, 0; d < 4; i++ {
		if k := fmt.Sprint("member-", i); r.a.primary([]byte(k), 0) == d {
			keys = append(keys, k)
			d++
		}
	}
	r.mems[4].Fail()
	r.mems[5].Fail()
	vals := make([][]byte, len(keys))
	for i := range vals {
		vals[i] = randBytes(rng, 1000)
	}
	storeConcurrently(t, r.a, keys, vals)
	if crash {
		r.reopen()
	}
	r.mems[4].Recover()
	r.mems[5].Recover()
	for d, err := range r.heal() {
		if err != nil {
			t.Fatalf("resync of device %d: %v", d, err)
		}
	}
	if crash {
		// What the process kept in memory is gone: the scrub after the
		// crash (serve starts it) repairs the set from its members.
		if _, err := r.a.Scrub(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	for i, k := range keys {
		r.mustRead(k, vals[i])
	}
	for i, k := range keys {
		p := r.a.primary([]byte(k), 0)
		r.replace(p)
		if errs := r.heal(); errs[p] != nil {
			t.Fatalf("rebuild of device %d, %s's primary: %v", p, k, errs[p])
		}
		r.mustRead(k, vals[i])
	}
}
