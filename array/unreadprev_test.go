package array

import (
	"testing"
)

// TestStoreOverUnreadableValue: a store whose previous value cannot be
// read (its primary replaced, its other copies on failed devices or
// corrupt) is acknowledged with the pieces it wrote alone; the old copies
// left on the other devices must not come back. Here a Hashing value (one
// piece, on the primary being rebuilt) replaces a replicated one: once
// the failed devices are resynced and the primary rebuilt, the key reads
// the Hashing value, no other device holds a piece of it, and scrub finds
// nothing. (The randomized property test found it: the rebuild restored
// the old copy over the new piece.) Invariant: nothing acknowledged is
// lost.
func TestStoreOverUnreadableValue(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt bool // the last copy corrupt rather than on a failed device
	}{{"copies on failed devices", false}, {"one failed, one corrupt", true}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 6, everyMechanism(), WithDefault("replication"))
			const key = "over-unreadable"
			r.mustStore(key, []byte("old, replicated"), Using("replication"))
			copies := r.holders(key, 0)
			p := r.a.primary([]byte(key), 0)
			if len(copies) != 3 {
				t.Fatalf("%s: replicated on %v", key, copies)
			}
			r.reopen() // the metadata cache knows nothing of it
			r.replace(p)
			var failed []int
			for _, d := range copies {
				switch {
				case d == p:
				case tc.corrupt && len(failed) == 1:
					r.corruptDevice(d)
				default:
					r.mems[d].Fail()
					failed = append(failed, d)
				}
			}
			r.mustStore(key, []byte("new, hashing"), Using("hashing"))
			r.mustRead(key, []byte("new, hashing"))
			for _, d := range failed {
				r.mems[d].Recover()
			}
			for d, err := range r.heal() {
				if err != nil {
					t.Fatalf("heal device %d: %v", d, err)
				}
			}
			r.mustRead(key, []byte("new, hashing"))
			if got := r.holders(key, 0); len(got) != 1 || got[0] != p {
				t.Errorf("after the heal, %s's pieces are on %v; want only its primary %d", key, got, p)
			}
			rep, err := r.a.Scrub(ctx, false)
			if err != nil || rep.Problems() != 0 {
				t.Fatalf("scrub after the heal: %+v, %v", rep, err)
			}
		})
	}
}
