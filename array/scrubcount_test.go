package array

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
	"github.com/kvarray/kvarray/mechanism/replication"
	"github.com/kvarray/kvarray/mechanism/splitting"
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

// TestScrubSweepsOrphans: a scrub finds the pieces that belong to no
// value (a copy past its mechanism's width, a piece under the bank key
// of a mechanism that does not bank, a piece of a key that has no value)
// from its scan of the devices, counts them without repair, deletes
// them with it, and finds none after.
func TestScrubSweepsOrphans(t *testing.T) {
	ctx := context.Background()
	// Splitting's six pieces make room past replication's three.
	r := newRig(t, 6, WithMechanisms(replication.New(3), splitting.New(4, 2)))
	r.mustStore("kept", []byte("a value"))
	r.mustStore("gone", []byte("another value"))
	k := r.a.key([]byte("kept"), 0)
	raw, err := r.raw(r.a.env.Span(k, 0, 1)[0], "kept", 0)
	if err != nil {
		t.Fatal(err)
	}
	plant := func(user string, kind format.Kind, offset int) {
		d := r.a.env.Span(r.a.key([]byte(user), 0), offset, offset+1)[0]
		if err := r.mems[d].Store(ctx, format.Key([]byte(user), 0, kind), raw); err != nil {
			t.Fatal(err)
		}
	}
	plant("kept", format.KindData, 4) // past replication's 3 copies
	plant("kept", format.KindBank, 1) // replication does not bank
	if err := r.a.Delete(ctx, []byte("gone")); err != nil {
		t.Fatal(err)
	}
	plant("gone", format.KindData, 2) // a copy the delete missed
	// Orphans counts the pieces of keys without a value; the others are
	// their keys' bad pieces.
	const planted, ofNoValue = 3, 1
	scrub := func(repair bool) ScrubReport {
		t.Helper()
		rep, err := r.a.Scrub(ctx, repair)
		if err != nil || len(rep.Errors) > 0 {
			t.Fatalf("scrub (repair %v): %v %v", repair, err, rep.Errors)
		}
		return rep
	}
	if rep := scrub(false); rep.Orphans != ofNoValue || rep.Problems() != planted {
		t.Errorf("scrub: %d orphans, %d problems, want %d and %d", rep.Orphans, rep.Problems(), ofNoValue, planted)
	}
	if rep := scrub(true); rep.Orphans != ofNoValue || rep.Problems() != planted {
		t.Errorf("scrub --repair: %d orphans, %d problems, want %d and %d", rep.Orphans, rep.Problems(), ofNoValue, planted)
	}
	for _, user := range []string{"kept", "gone"} {
		for _, kind := range []format.Kind{format.KindData, format.KindBank} {
			for d, m := range r.mems {
				ok, _ := m.Exist(ctx, format.Key([]byte(user), 0, kind))
				if want := user == "kept" && kind == format.KindData && slices.Contains(r.a.env.Span(k, 0, 3), d); ok != want {
					t.Errorf("after scrub --repair, device %d holds %q (kind %d): %v, want %v", d, user, kind, ok, want)
				}
			}
		}
	}
	if rep := scrub(false); rep.Problems() != 0 {
		t.Errorf("scrub after the repair: %d problems", rep.Problems())
	}
	r.mustRead("kept", []byte("a value"))
}

// TestScrubProgressTotal: until its scan ends, a scrub's progress total is
// the devices' keys over the pieces a key found so far holds: close to the
// number of keys, whatever the mechanisms' widths.
func TestScrubProgressTotal(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, 6, WithMechanisms(replication.New(3), splitting.New(4, 2)))
	const n = 3000
	for i := range n {
		r.mustStore(fmt.Sprintf("key-%05d", i), []byte("v"))
	}
	var mu sync.Mutex
	var ticks []Progress
	rep, err := r.a.Scrub(ctx, false, WithProgress(func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		ticks = append(ticks, p)
	}, time.Millisecond))
	if err != nil || rep.Keys != n {
		t.Fatalf("scrub: %d keys, %v", rep.Keys, err)
	}
	mu.Lock()
	defer mu.Unlock()
	checked := 0
	for _, p := range ticks {
		if p.Completed || p.Keys < 100 {
			continue
		}
		checked++
		if p.Total < n*9/10 || p.Total > n*11/10 {
			t.Errorf("progress at %d keys: total %d, want within 10%% of %d", p.Keys, p.Total, n)
		}
	}
	if checked == 0 {
		t.Skip("the scrub ended before a progress report past 100 keys")
	}
}

// TestScrubWhileKeysChange: a scrub with repair sweeps orphans from what
// its scan found (withHeld), while stores and deletes of the same keys
// run. Invariant: every key reads back its last acknowledged value (none
// for a deleted one), and a scrub after the writes finds nothing to fix:
// the sweep never deleted a piece of a value written after its scan.
func TestScrubWhileKeysChange(t *testing.T) {
	for _, rm := range []string{"replication", "splitting"} {
		t.Run(rm, func(t *testing.T) {
			r := newRig(t, 6, everyMechanism(), WithDefault(rm))
			rng := newRand(t)
			const n = 300
			model := r.storeKeys(rng, n)
			var mu sync.Mutex
			var writes atomic.Int64
			stop := make(chan struct{})
			done := make(chan error)
			go func() {
				wrng := newRand(t)
				defer writes.Add(1 << 40) // ended: no more to wait for
				for j := 0; ; j++ {
					select {
					case <-stop:
						done <- nil
						return
					default:
					}
					i := wrng.IntN(n)
					if j%4 == 3 {
						if err := r.a.Delete(ctx, []byte(churnKey(i))); err != nil && !errors.Is(err, ErrNotFound) {
							done <- err
							return
						}
						mu.Lock()
						model[i] = nil
						mu.Unlock()
						continue
					}
					v := randBytes(wrng, 1+wrng.IntN(200))
					if err := r.a.Store(ctx, []byte(churnKey(i)), v); err != nil {
						done <- err
						return
					}
					mu.Lock()
					model[i] = v
					mu.Unlock()
					writes.Add(1)
				}
			}()
			// Scrubs until a thousand writes ran beside them.
			for writes.Load() < 1000 {
				if rep, err := r.a.Scrub(ctx, true); err != nil || len(rep.Errors) > 0 {
					t.Fatalf("scrub --repair under writes: %v %v", err, rep.Errors)
				}
			}
			close(stop)
			if err := <-done; err != nil {
				t.Fatalf("writer: %v", err)
			}
			for i := range n {
				got, err := r.a.Retrieve(ctx, []byte(churnKey(i)))
				switch {
				case model[i] == nil && !errors.Is(err, ErrNotFound):
					t.Errorf("%s: deleted, read %d bytes, %v", churnKey(i), len(got), err)
				case model[i] != nil && (err != nil || !bytes.Equal(got, model[i])):
					t.Errorf("%s: read %q, %v; want %q", churnKey(i), got, err, model[i])
				}
			}
			if rep, err := r.a.Scrub(ctx, false); err != nil || rep.Problems() != 0 {
				t.Errorf("scrub after the writes: %d problems, %v %v", rep.Problems(), err, rep.Errors)
			}
		})
	}
}

// TestScrubWaitsForADownDevice: a key that cannot be checked because a
// device it needs is down (here a Packing set: one parity corrupt, the
// other on a failed device) is waiting, not unrecoverable: nothing says it
// is lost, and once the device is back a repair restores the set. A value
// whose pieces are there but bad beyond its tolerance (a corrupt Hashing
// copy, its only one) is unrecoverable, and counted although its
// mechanism cannot be told (a scrub once left such keys out of every
// count, and exited 0).
func TestScrubWaitsForADownDevice(t *testing.T) {
	ctx := context.Background()
	r := packingRig(t, 0)
	keys, live := storePacked(t, r, newRand(t), 4)
	var parity []byte
	var devs []int
	eachParity(t, r, func(d int, k []byte, _, _ []int) {
		if parity == nil || string(k) == string(parity) {
			parity = k
			devs = append(devs, d)
		}
	})
	if len(devs) != 2 {
		t.Fatalf("parity %q on devices %v, want 2", parity, devs)
	}
	if err := r.mems[devs[0]].Corrupt(parity); err != nil {
		t.Fatal(err)
	}
	r.reopen()
	r.mems[devs[1]].Fail()
	var last Progress
	counts := func() map[string]ScrubCounts {
		t.Helper()
		rep, err := r.a.Scrub(ctx, false, WithProgress(func(p Progress) { last = p }, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		failed := int64(0)
		for _, m := range rep.Mechanisms {
			failed += m.Unrecoverable + m.Waiting
		}
		if !last.Completed || last.Failed != failed || failed == 0 {
			t.Fatalf("the scrub's last progress, %+v, does not count the keys it failed: %+v", last, rep)
		}
		c := map[string]ScrubCounts{}
		for _, m := range rep.Mechanisms {
			c[m.Mechanism] = m
		}
		return c
	}
	if p := counts()["packing"]; p.Waiting != 1 || p.Unrecoverable != 0 {
		t.Fatalf("packing: %d waiting, %d unrecoverable; want 1 and 0", p.Waiting, p.Unrecoverable)
	}
	r.mems[devs[1]].Recover()
	for d, err := range r.heal() {
		if err != nil {
			t.Fatalf("resync %d: %v", d, err)
		}
	}
	if _, err := r.a.Scrub(ctx, true); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		r.mustRead(k, live[k])
	}
	nothingUnrecoverable(t, r, "once the device is back")
	r.mustStore("bad", []byte("corrupt"), Using("hashing"))
	if err := r.mems[r.a.key([]byte("bad"), 0).Primary].Corrupt(format.Key([]byte("bad"), 0, format.KindData)); err != nil {
		t.Fatal(err)
	}
	if u := counts()[Unlocated]; u.Keys != 1 || u.Unrecoverable != 1 {
		t.Fatalf("unlocated: %d keys, %d unrecoverable; want 1 and 1", u.Keys, u.Unrecoverable)
	}
}

// TestScrubAgreesWithRepairWithAFailedDevice (issue 40, item 5): with a
// device failed, a scrub without repair counts what a repair can fix, no
// more: it counted the writes to the failed device (293 bad Packing
// pieces, exit 1) that the repair cannot make and then did not report.
func TestScrubAgreesWithRepairWithAFailedDevice(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, 6, hybridAll()...)
	for i := range 60 {
		r.mustStore(fmt.Sprintf("key-%02d", i), bytes.Repeat([]byte{byte(i)}, 1000+i*500))
	}
	if err := r.a.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	r.mems[3].Fail()
	r.a.SetDeviceState(3, mechanism.Failed)
	dry, err := r.a.Scrub(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	wet, err := r.a.Scrub(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if dry.Problems() != wet.Problems() {
		t.Fatalf("with device 3 failed: scrub counts %d problems, scrub --repair %d (%+v / %+v)", dry.Problems(), wet.Problems(), dry.Mechanisms, wet.Mechanisms)
	}
}
