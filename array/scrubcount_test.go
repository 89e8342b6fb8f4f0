package array

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/kvarray/kvarray/device"
)

// TestScrubCountsWhatRepairFixes: a scrub without repair reports the
// pieces a repair would write, no more, with a device being rebuilt too
// (whose absent pieces a repair sweeps blindly: those deletes name
// nothing, and counted they made a scrub of such an array report five
// bad pieces a key), and nothing once the repair has run.
func TestScrubCountsWhatRepairFixes(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, 6, allMechanisms())
	for i := range 20 {
		r.mustStore(fmt.Sprintf("key-%02d", i), []byte(fmt.Sprintf("value %d", i)))
	}
	r.replace(2)
	missing := 0
	for i := range 20 {
		for _, d := range r.a.env.Span(r.a.key([]byte(fmt.Sprintf("key-%02d", i)), 0), 0, 3) {
			if d == 2 {
				missing++
			}
		}
	}
	if missing == 0 {
		t.Fatal("no key has a piece on device 2: the test needs other keys")
	}
	scrub := func(repair bool) int64 {
		t.Helper()
		rep, err := r.a.Scrub(ctx, repair)
		if err != nil || len(rep.Errors) > 0 {
			t.Fatalf("scrub (repair %v): %v %v", repair, err, rep.Errors)
		}
		return rep.Problems()
	}
	if got := scrub(false); got != int64(missing) {
		t.Errorf("scrub of an array with a replaced device: %d problems, want the %d pieces it lacks", got, missing)
	}
	if got := scrub(true); got != int64(missing) {
		t.Errorf("scrub --repair: fixed %d, want %d", got, missing)
	}
	if got := scrub(false); got != 0 {
		t.Errorf("scrub after the repair: %d problems, want 0", got)
	}
}

// TestScrubListsEachKeyOnce: the internal keys of one user key need not
// be adjacent in the devices' order (a huge value's splits enclose the
// keys that extend its user key with the bytes of split 0), and more of
// them than the scan remembers at once come between: each user key is
// still checked once.
func TestScrubListsEachKeyOnce(t *testing.T) {
	ctx := context.Background()
	r := newRigLimits(t, 6, device.Limits{MaxValueLen: 300}, allMechanisms())
	r.mustStore("k", bytes.Repeat([]byte("huge "), 400)) // splits 0..7
	for i := range 100 {
		r.mustStore(fmt.Sprintf("k\x00\x00x%03d", i), []byte("small"))
	}
	rep, err := r.a.Scrub(ctx, false)
	if err != nil || len(rep.Errors) > 0 {
		t.Fatalf("scrub: %v %v", err, rep.Errors)
	}
	if rep.Keys != 101 || rep.Problems() != 0 {
		t.Errorf("scrub checked %d keys and found %d problems, want 101 and 0", rep.Keys, rep.Problems())
	}
}
