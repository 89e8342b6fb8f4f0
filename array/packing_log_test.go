package array

import (
	"testing"
	"time"

	"github.com/kvarray/kvarray/mechanism/packing"
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
		for _, d := range pair {
			r.mems[d].Recover()
			if _, err := r.a.Resync(ctx, d); err != nil {
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
	keys := balancedKeys(r, 96)
	vals := make([][]byte, len(keys))
	for i := range vals {
		vals[i] = randBytes(rng, 1000+rng.IntN(3000))
	}
	storeConcurrently(t, r.a, keys, vals)
	live := map[string][]byte{}
	for i, k := range keys {
		live[k] = vals[i]
	}

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
	for set, n := range members {
		if formed[set] > 1 && 2*n <= formed[set] {
			t.Errorf("set %x keeps %d of the %d members it was formed with after scrub --repair", set, n, formed[set])
		}
	}
	// No set is left empty.
	eachParity(t, r, func(d int, k []byte, members, _ []int) {
		if len(members) == 0 {
			t.Fatalf("device %d keeps an empty set %q", d, k)
		}
	})
}
