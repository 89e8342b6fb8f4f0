package array

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/faultdev"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/mechanism/packing"
	"github.com/kvarray/kvarray/mechanism/replication"
)

// TestFailedSetLeavesNoParity is the set write TestScrubRollback once
// failed on: two members' primaries are down, and of the two parities one
// lands while its device reports a failure (it dies after taking the
// write), so three of the set's pieces count as missed and both stores
// fail. The parity that landed must not outlive the failure: it would
// list members whose pieces never landed, and a read through the sets
// would find that set newest and unrecoverable instead of the previous
// one.
//
// Invariant: each key reads back as its acknowledged value or as the
// value of its failed write, with its primary up, lost (read through the
// sets) and rebuilt.
func TestFailedSetLeavesNoParity(t *testing.T) {
	var armed atomic.Bool
	var lost atomic.Int32 // parity stores whose answer was lost: only the first
	parity := []byte("\x00kvarray-set")
	r := newRigWrapped(t, 6, device.Limits{}, func(i int, m *mem.Device) device.Device {
		return faultdev.WrapAfter(m, faultdev.InjectorFunc(func(op faultdev.Op) error {
			if armed.Load() && op.Kind == device.OpStore && bytes.HasPrefix(op.Key, parity) && lost.Add(1) == 1 {
				return faultdev.ErrInjected
			}
			return nil
		}))
	}, WithMechanisms(packing.New(4, 2, 200*time.Millisecond), replication.New(3)), WithDefault("packing"))
	ctx := context.Background()
	keys := balancedKeys(r, 6)
	x, y := keys[0], keys[1]
	p, q := r.a.primary([]byte(x), 0), r.a.primary([]byte(y), 0)
	if p == q {
		t.Fatalf("keys %q and %q share primary %d", x, y, p)
	}
	v1 := make([][]byte, len(keys))
	for i := range v1 {
		v1[i] = bytes.Repeat([]byte{byte(i + 1)}, 4096)
	}
	storeConcurrently(t, r.a, keys, v1)
	parityKeys := func() []string {
		var out []string
		for _, m := range r.mems {
			_ = m.Iterate(ctx, parity, func(k []byte) error { out = append(out, string(k)); return nil })
		}
		return out
	}
	before := parityKeys()

	// Both updates go to a new set together (their primaries are down, so
	// neither can be updated in place), and that set's write fails.
	r.mems[p].Fail()
	r.mems[q].Fail()
	armed.Store(true)
	v2 := [][]byte{bytes.Repeat([]byte{0xf0}, 4096), bytes.Repeat([]byte{0xf1}, 4096)}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, k := range []string{x, y} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.a.Store(ctx, []byte(k), v2[i])
		}()
	}
	wg.Wait()
	armed.Store(false)
	if lost.Load() == 0 {
		t.Fatal("no parity store was written and failed: the scenario did not happen")
	}
	for i, err := range errs {
		if err == nil {
			t.Fatalf("store %d acknowledged with three of its set's pieces missed", i)
		}
	}

	check := func(when string) {
		t.Helper()
		for i, k := range keys {
			got, err := r.a.Retrieve(ctx, []byte(k))
			ok := err == nil && bytes.Equal(got, v1[i])
			if i < 2 {
				ok = ok || (err == nil && bytes.Equal(got, v2[i]))
			}
			if !ok {
				t.Errorf("%s: %q: %d bytes, %v; want its acknowledged value (or its failed write's)", when, k, len(got), err)
			}
		}
	}
	r.mems[p].Recover()
	r.mems[q].Recover()
	for d, err := range r.heal() {
		if err != nil {
			t.Fatalf("heal device %d: %v", d, err)
		}
	}
	check("after the resyncs")
	r.reopen() // the next process learns the sets from the parities
	check("after a restart")
	for _, k := range parityKeys() {
		if !slices.Contains(before, k) {
			t.Errorf("parity %q of the failed set outlived it", k)
		}
	}
	r.replace(p)
	check("with the primary of " + x + " replaced")
	if _, err := r.a.Rebuild(ctx, p); err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	check("after the rebuild")
}

// TestCutWriteLeavesNoListing: a packed update is cut off as a crash cuts
// it, after its set's parities (a new set's, or an in-place update's log
// entry) landed but before the member's piece did or its miss was
// recorded, and nothing after lands (the parities' retraction neither).
// The write is not acknowledged and the next process reads the old value
// from the primary. Invariant: from then on the key reads the old value
// (a read returned it), after a scrub, with its primary lost (read
// through the sets) and after the rebuild: the scrub retires the listing
// of the cut write, which would otherwise be the newest the sets know.
func TestCutWriteLeavesNoListing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		v2size int
	}{
		{"to a new set", 3000}, // larger than the set's shard: the member moves
		{"in place", 1000},     // logged on the parities
	} {
		t.Run(tc.name, func(t *testing.T) {
			var armed atomic.Bool
			key := []byte("key-x")
			var p int
			records, sets := []byte("\x00kvarray-resync"), []byte("\x00kvarray-set")
			r := newRigWrapped(t, 6, device.Limits{}, func(i int, m *mem.Device) device.Device {
				return faultdev.Wrap(m, faultdev.InjectorFunc(func(op faultdev.Op) error {
					if !armed.Load() {
						return nil
					}
					switch {
					case op.Kind == device.OpStore && i == p && bytes.HasPrefix(op.Key, key),
						op.Kind == device.OpStore && bytes.HasPrefix(op.Key, records),
						op.Kind == device.OpDelete && bytes.HasPrefix(op.Key, sets):
						return faultdev.ErrInjected
					}
					return nil
				}))
			}, WithMechanisms(packing.New(4, 2, 20*time.Millisecond), replication.New(3)), WithDefault("packing"))
			ctx := context.Background()
			p = r.a.primary(key, 0)
			v1, v2 := bytes.Repeat([]byte{1}, 1000), bytes.Repeat([]byte{2}, tc.v2size)
			if err := r.a.Store(ctx, key, v1); err != nil {
				t.Fatal(err)
			}
			armed.Store(true)
			if err := r.a.Store(ctx, key, v2); err == nil {
				t.Fatal("the cut write was acknowledged")
			}
			armed.Store(false)
			r.reopen()
			check := func(when string) {
				t.Helper()
				got, err := r.a.Retrieve(ctx, key)
				switch {
				case err != nil:
					t.Fatalf("%s: %v, want the value a read returned after the restart", when, err)
				case bytes.Equal(got, v2):
					t.Fatalf("%s: the cut write's value, after a read returned the old one", when)
				case !bytes.Equal(got, v1):
					t.Fatalf("%s: %d other bytes, want the value a read returned after the restart", when, len(got))
				}
			}
			check("after the restart")
			if _, err := r.a.Scrub(ctx, true); err != nil {
				t.Fatalf("scrub: %v", err)
			}
			check("after the scrub")
			r.replace(p)
			check("with the primary lost")
			if _, err := r.a.Rebuild(ctx, p); err != nil {
				t.Fatalf("rebuild: %v", err)
			}
			check("after the rebuild")
		})
	}
}

// TestCutWriteDoesNotHideOldValue: a crash cuts a Splitting store over a
// Replication value after one of its six shards landed (past the
// primary, which is written last), and the primary is lost before any
// repair. Invariant: the old value, acknowledged and whole on its other
// copies, reads back, with the primary lost and after its rebuild: the
// cut write's shard is newer than it but was never acknowledged, and is
// too few to read.
func TestCutWriteDoesNotHideOldValue(t *testing.T) {
	var armed, crashed atomic.Bool
	r := newRigWrapped(t, 6, device.Limits{}, func(i int, m *mem.Device) device.Device {
		return faultdev.Wrap(m, faultdev.InjectorFunc(func(op faultdev.Op) error {
			switch {
			case !armed.Load():
			case crashed.Load():
				return faultdev.ErrCrashed
			case op.Kind == device.OpStore && bytes.HasPrefix(op.Key, []byte("k\x00")):
				if !crashed.CompareAndSwap(false, true) { // the first lands, then the crash
					return faultdev.ErrCrashed
				}
			}
			return nil
		}))
	}, everyMechanism(), WithDefault("replication"))
	ctx := context.Background()
	rng := newRand(t)
	old := randBytes(rng, 4096)
	r.mustStore("k", old)
	armed.Store(true)
	if err := r.a.Store(ctx, []byte("k"), randBytes(rng, 64<<10), Using("splitting")); err == nil {
		t.Fatal("a store cut after its first shard was acknowledged")
	}
	armed.Store(false)
	r.reopen() // the restart after the crash
	r.mustRead("k", old)
	p := r.a.primary([]byte("k"), 0)
	r.replace(p)
	r.mustRead("k", old)
	if _, err := r.a.Rebuild(ctx, p); err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	r.mustRead("k", old)
}

// TestHugeStoreOverUnknownValueKeepsIt: a huge value stored over one the
// array cannot see, because its split 0's primary is down and nothing
// else holds split 0 (a Hashing value, after a restart: the metadata
// cache is empty), writes its splits 1.. first, into the bank its version
// selects, which may be the unseen value's. Its split 0 then cannot be
// written (Hashing, its device down), so the store fails: it must fail
// before writing anything, not after overwriting the old value's splits.
//
// Invariant: the old, acknowledged value reads back whole once the device
// is back, for every key (eight keys: a shared bank is a coin's toss).
func TestHugeStoreOverUnknownValueKeepsIt(t *testing.T) {
	r := newRigLimits(t, 6, rangeLimits, allMechanisms(), WithDefault("replication"))
	old := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, 20<<10) }
	key := func(i int) []byte { return []byte{'k', 'e', 'y', '-', byte('0' + i)} }
	const keys = 8
	for i := range keys {
		if err := r.a.Store(ctx, key(i), old(i), Using("hashing")); err != nil {
			t.Fatal(err)
		}
	}
	for i := range keys {
		r.reopen() // forget the values: an empty metadata cache
		p := r.a.primary(key(i), 0)
		r.mems[p].Fail()
		if err := r.a.Store(ctx, key(i), bytes.Repeat([]byte("new"), 7<<10), Using("hashing")); err == nil {
			t.Fatalf("key %d: a Hashing store with its split 0's device %d down succeeded", i, p)
		}
		r.mems[p].Recover()
		for d, err := range r.heal() {
			if err != nil {
				t.Fatalf("heal device %d: %v", d, err)
			}
		}
		got, err := r.a.Retrieve(ctx, key(i))
		if err != nil || !bytes.Equal(got, old(i)) {
			t.Fatalf("key %d after the failed store: %d bytes, %v; want its old value", i, len(got), err)
		}
	}
}
