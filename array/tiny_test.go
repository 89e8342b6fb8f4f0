package array

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/faultdev"
	"github.com/kvarray/kvarray/device/mem"

	"github.com/kvarray/kvarray/format"
)

// tinyOpts is a hybrid array with tiny values up to 32 bytes in a few
// buckets (so that buckets are shared), replication up to 512 bytes,
// Packing and Splitting above.
func tinyOpts(buckets int) []Option {
	return []Option{quietMechanisms(), WithMode(Hybrid),
		WithRules(Rule{Max: 512, RM: "replication"}, Rule{Max: 3 << 10, RM: "packing"}, Rule{RM: "splitting"}),
		WithTiny(Tiny{Max: 32, Buckets: buckets})}
}

// tinyValue returns a value of a size class: tiny (≤ 32 B), just above
// the threshold, or larger (several KiB, some of several splits).
func tinyValue(rng *rand.Rand) []byte {
	switch x := rng.IntN(10); {
	case x < 6:
		return randBytes(rng, rng.IntN(33))
	case x < 8:
		return randBytes(rng, 33+rng.IntN(200))
	default:
		return randBytes(rng, 1<<10+rng.IntN(12<<10))
	}
}

// tinyModel is what the array should hold.
type tinyModel map[string][]byte

// check reads every key the model knows (and some it does not) through
// each read path, and lists the keys.
func (m tinyModel) check(t *testing.T, a *Array, phase string) {
	t.Helper()
	for k, want := range m {
		got, err := a.Retrieve(ctx, []byte(k))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: retrieve %q: %d bytes, %v; want %d bytes", phase, k, len(got), err, len(want))
		}
		n, err := a.Len(ctx, []byte(k))
		if err != nil || n != int64(len(want)) {
			t.Fatalf("%s: len %q: %d, %v; want %d", phase, k, n, err, len(want))
		}
		rs, total, err := a.RetrieveRanges(ctx, []byte(k), Range{1, 5})
		if err != nil || total != int64(len(want)) || !bytes.Equal(rs[0], want[min(1, len(want)):min(6, len(want))]) {
			t.Fatalf("%s: range of %q: %q of %d, %v", phase, k, rs, total, err)
		}
		if ok, err := a.Exist(ctx, []byte(k)); !ok || err != nil {
			t.Fatalf("%s: exist %q: %v, %v", phase, k, ok, err)
		}
	}
	for i := range 20 {
		k := fmt.Sprint("key-", i)
		if _, ok := m[k]; ok {
			continue
		}
		if _, err := a.Retrieve(ctx, []byte(k)); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: retrieve of absent %q: %v", phase, k, err)
		}
		if ok, err := a.Exist(ctx, []byte(k)); ok || err != nil {
			t.Fatalf("%s: exist of absent %q: %v, %v", phase, k, ok, err)
		}
	}
	want := slices.Sorted(maps.Keys(m))
	keys, err := a.Keys(ctx, nil)
	if err != nil {
		t.Fatalf("%s: keys: %v", phase, err)
	}
	if got := strs(keys); !slices.Equal(got, want) {
		t.Fatalf("%s: keys %q, want %q", phase, got, want)
	}
	var paged []string
	var after []byte
	for {
		page, next, err := a.KeysFrom(ctx, nil, after, 3)
		if err != nil {
			t.Fatalf("%s: keys from %q: %v", phase, after, err)
		}
		paged = append(paged, strs(page)...)
		if next == nil {
			break
		}
		after = next
	}
	if !slices.Equal(paged, want) {
		t.Fatalf("%s: paged keys %q, want %q", phase, paged, want)
	}
}

func strs(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

// checkPlaces asserts the layout: a tiny value has no pieces of its own,
// and a larger one no bucket entry.
func (m tinyModel) checkPlaces(t *testing.T, r *rig) {
	t.Helper()
	for k, v := range m {
		own := len(r.holders(k, 0)) > 0
		inBucket := false
		_ = r.a.withBucket(ctx, []byte(k), func(b *bucket) error {
			inBucket = findEntry(b.entries, []byte(k)) >= 0
			return nil
		})
		if tiny := len(v) <= 32; own == tiny || inBucket != tiny {
			t.Fatalf("%q (%d bytes): own pieces %v, in its bucket %v", k, len(v), own, inBucket)
		}
	}
}

// TestTinyModel runs random stores (tiny, just above the threshold,
// larger), deletes and reads over a few keys, so that keys move between
// buckets and their own pieces both ways, and checks every read path and
// the listing against a model; then after a restart, with two devices
// failed, after a device is replaced and rebuilt, and after a scrub.
func TestTinyModel(t *testing.T) {
	r := newRig(t, 6, tinyOpts(4)...)
	rng := newRand(t)
	m := tinyModel{}
	for i := range 300 {
		k := fmt.Sprint("key-", rng.IntN(12))
		if rng.IntN(6) == 0 {
			err := r.a.Delete(ctx, []byte(k))
			if _, ok := m[k]; ok != (err == nil) || !ok && !errors.Is(err, ErrNotFound) {
				t.Fatalf("op %d: delete %q: %v (in model %v)", i, k, err, ok)
			}
			delete(m, k)
		} else {
			v := tinyValue(rng)
			r.mustStore(k, v)
			m[k] = v
		}
		if i%25 == 0 {
			m.check(t, r.a, fmt.Sprint("op ", i))
			m.checkPlaces(t, r)
		}
	}
	m.check(t, r.a, "end")
	m.checkPlaces(t, r)
	r.reopen()
	m.check(t, r.a, "reopen")

	// Two devices down: every value still reads (buckets are Packing
	// members), and writes go on.
	r.mems[1].Fail()
	r.mems[4].Fail()
	m.check(t, r.a, "two failed")
	for i := range 40 {
		k := fmt.Sprint("key-", rng.IntN(12))
		v := tinyValue(rng)
		if err := r.a.Store(ctx, []byte(k), v); err != nil {
			t.Fatalf("degraded op %d: store %q: %v", i, k, err)
		}
		m[k] = v
	}
	m.check(t, r.a, "two failed, after writes")
	r.mems[1].Recover()
	r.mems[4].Recover()
	r.mems[4].Replace()
	if err := r.a.ReplaceDevice(ctx, 4, nil); err != nil {
		t.Fatal(err)
	}
	for d, err := range r.heal() {
		if err != nil {
			t.Fatalf("heal %d: %v", d, err)
		}
	}
	m.check(t, r.a, "healed")
	rep, err := r.a.Scrub(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("scrub after heal: %+v", rep)
	rep, err = r.a.Scrub(ctx, false)
	if err != nil || rep.Problems() != 0 {
		t.Fatalf("scrub after repair: %+v, %v", rep, err)
	}
	// The rebuilt device alone with two others failed still serves.
	r.mems[0].Fail()
	r.mems[2].Fail()
	m.check(t, r.a, "rebuilt device with two others failed")
}

// TestTinyMoveCutShort: a move between a bucket and a key's own pieces
// stopped after its first step (as a crash would) reads as the newer
// side, and the next store, delete or repair settles it.
func TestTinyMoveCutShort(t *testing.T) {
	for _, tc := range []struct {
		name       string
		entryNewer bool
	}{{"to tiny", true}, {"to big", false}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 6, tinyOpts(4)...)
			k := []byte("moving")
			big, tiny := bytes.Repeat([]byte("B"), 100), []byte("tiny")
			// Both sides present, the entry flagged moving: the state
			// between the first two steps of a move.
			r.mustStore(string(k), big)
			_, err := r.a.run(ctx, k, "test", func() ([]byte, error) {
				return nil, r.a.withBucket(ctx, k, func(b *bucket) error {
					b.entries = append(b.entries, tinyEntry{key: k, val: tiny, moving: true, version: r.a.env.Clock().Next()})
					return r.a.writeBucket(ctx, b, k)
				})
			})
			if err != nil {
				t.Fatal(err)
			}
			want := tiny
			if !tc.entryNewer {
				if err := r.a.run2(k, func() error { return r.a.storeValue(ctx, k, big, r.a.byName["replication"], call{}) }); err != nil {
					t.Fatal(err)
				}
				want = big
			}
			r.mustRead(string(k), want)
			r.reopen()
			r.mustRead(string(k), want)
			if _, err := r.a.Repair(ctx, k); err != nil {
				t.Fatal(err)
			}
			r.mustRead(string(k), want)
			if own := len(r.holders(string(k), 0)) > 0; own == tc.entryNewer {
				t.Fatalf("after repair: own pieces %v", own)
			}
			if err := r.a.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
			if _, err := r.a.Retrieve(ctx, k); !errors.Is(err, ErrNotFound) {
				t.Fatalf("after delete: %v", err)
			}
		})
	}
}

// run2 runs fn under key's turn.
func (a *Array) run2(key []byte, fn func() error) error {
	_, err := a.run(ctx, key, "test", func() ([]byte, error) { return nil, fn() })
	return err
}

// TestTinyGeometryIsFixed: the tiny geometry is in the array header; an
// array created without tiny values refuses them at open, bucket keys are
// refused to callers, and a header from another geometry is refused.
func TestTinyGeometryIsFixed(t *testing.T) {
	r := newRig(t, 6, tinyOpts(4)...)
	r.mustStore("a", []byte("tiny"))
	r.opts = []Option{quietMechanisms(), WithTiny(Tiny{Max: 999, Buckets: 77})}
	r.reopen()
	if r.a.tiny.max != 32 || r.a.tiny.buckets != 4 {
		t.Fatalf("reopened with tiny values up to %d bytes in %d buckets, want the header's 32 B in 4 buckets", r.a.tiny.max, r.a.tiny.buckets)
	}
	r.mustRead("a", []byte("tiny"))
	if err := r.a.Store(ctx, bucketKey(0), []byte("x")); !errors.Is(err, ErrReservedKey) {
		t.Fatalf("store to a bucket key: %v", err)
	}
	if err := r.a.Delete(ctx, bucketKey(0)); !errors.Is(err, ErrReservedKey) {
		t.Fatalf("delete of a bucket key: %v", err)
	}

	plain := newRig(t, 6, quietMechanisms())
	plain.opts = []Option{quietMechanisms(), WithTiny(Tiny{Max: 32, Buckets: 4})}
	plain.a.haltOnce.Do(plain.a.halt)
	if _, err := Open(context.Background(), plain.devs, plain.opts...); err == nil {
		t.Fatal("open with tiny values of an array created without them succeeded")
	}

	// One device's header claims another geometry.
	h := r.a.hdr
	h.tinyBuckets = 5
	h.pos = 2
	if err := r.mems[2].Store(ctx, headerKey, h.encode()); err != nil {
		t.Fatal(err)
	}
	r.a.haltOnce.Do(r.a.halt)
	if _, err := Open(context.Background(), r.devs, r.opts...); err == nil {
		t.Fatal("open with devices disagreeing on the tiny geometry succeeded")
	}
}

// TestTinyHeaderRoundTrip: the tiny trailer survives encode and decode,
// with and without weights.
func TestTinyHeaderRoundTrip(t *testing.T) {
	for _, w := range [][]uint64{nil, {1, 2, 3}} {
		h := header{id: newID(), n: 3, pos: 1, flags: flagTiny | flagBanked, epoch: 7, vec: []uint64{1, 2, 3}, weights: w, tinyMax: 64, tinyBuckets: 1 << 20}
		got, err := decodeHeader(h.encode())
		if err != nil {
			t.Fatal(err)
		}
		if got.tinyMax != 64 || got.tinyBuckets != 1<<20 || !slices.Equal(got.weights, w) || got.epoch != 7 {
			t.Fatalf("decoded %+v from %+v", got, h)
		}
	}
}

// TestBucketEncoding: entries round-trip, and truncations are corrupt.
func TestBucketEncoding(t *testing.T) {
	es := []tinyEntry{{key: []byte("k1"), val: []byte{}}, {key: []byte("k2"), val: []byte("v"), moving: true, version: 42}}
	b := encodeBucket(es)
	got, err := decodeBucket(b)
	if err != nil || len(got) != 2 || !got[1].moving || got[1].version != 42 || string(got[1].val) != "v" || string(got[0].key) != "k1" {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	for n := 2; n < len(b); n++ {
		if _, err := decodeBucket(b[:n]); n != 1+1+1+2 && !errors.Is(err, format.ErrCorrupt) {
			t.Fatalf("truncated to %d bytes: %v", n, err)
		}
	}
}

// tinyCrashWorkload is crashWorkload's shape with half the values tiny:
// every store either updates a bucket or moves a key across the
// threshold.
func tinyCrashWorkload(rng *rand.Rand, n int) []crashOp {
	var ops []crashOp
	for range n {
		key := fmt.Sprint("key-", rng.IntN(8))
		switch x := rng.IntN(14); {
		case x < 2:
			ops = append(ops, crashOp{del: true, key: key})
		case x == 2:
			ops = append(ops, crashOp{key: key, value: randBytes(rng, rng.IntN(33)), using: "replication"})
		default:
			ops = append(ops, crashOp{key: key, value: tinyValue(rng)})
		}
	}
	return ops
}

// TestTinyListingAfterFailedWrites: bucket writes that fail (three
// devices refuse stores, beyond Packing's tolerance, while reads work)
// leave their keys' presence unknown; the listing index is dropped and
// rebuilt, so the listing still lists exactly the keys that read back.
func TestTinyListingAfterFailedWrites(t *testing.T) {
	var refuse atomic.Bool
	var devs []device.Device
	for i := range 6 {
		m := mem.New(mem.WithName(fmt.Sprintf("mem:dev%d", i)))
		devs = append(devs, faultdev.Wrap(m, faultdev.InjectorFunc(func(op faultdev.Op) error {
			if op.Kind == device.OpStore && i%2 == 0 && refuse.Load() {
				return fmt.Errorf("refused: %w", device.ErrNoSpace)
			}
			return nil
		})))
	}
	a, err := Create(ctx, devs, tinyOpts(2)...)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i := range 10 {
		if err := a.Store(ctx, []byte(fmt.Sprint("key-", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Keys(ctx, nil); err != nil { // builds the index
		t.Fatal(err)
	}
	refuse.Store(true)
	failed := 0
	for i := 5; i < 15; i++ {
		k := []byte(fmt.Sprint("key-", i))
		var err error
		if i < 10 {
			err = a.Delete(ctx, k)
		} else {
			err = a.Store(ctx, k, []byte("w"))
		}
		if err != nil {
			failed++
		}
	}
	refuse.Store(false)
	if failed == 0 {
		t.Fatal("no write failed with three devices refusing stores")
	}
	var want []string
	for i := range 15 {
		k := fmt.Sprint("key-", i)
		if _, err := a.Retrieve(ctx, []byte(k)); err == nil {
			want = append(want, k)
		} else if !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: %v", k, err)
		}
	}
	slices.Sort(want)
	t.Logf("%d writes failed; keys that read back: %q", failed, want)
	keys, err := a.Keys(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strs(keys); !slices.Equal(got, want) {
		t.Fatalf("keys %q, want %q (%d writes failed)", got, want, failed)
	}
}

// TestTinyBucketWriteHoleSettled: a bucket write cut short after its
// member landed on the bucket's primary, before any parity took the change
// (a crash, or a failed write the process outlives), leaves parities that
// still list the key's old entry. A later write of the key that does not
// write the bucket (a move to its own pieces, a delete of the key the
// bucket no longer holds) must not be acknowledged on top of that state:
// with the bucket's primary lost, the old entry would be decoded and read
// back over it (found by the strict crash run: a delete cut short, the
// key stored with its own mechanism, the primary lost, the value before
// the delete back). Invariant: after each such write, with the primary
// lost, the key reads as that write left it.
func TestTinyBucketWriteHoleSettled(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restart bool // a crash and restart; else the process goes on
		then    string
	}{
		{"crash, then own pieces", true, "big"},
		{"crash, then delete", true, "delete"},
		{"failed write, then own pieces", false, "big"},
		{"failed write, then delete", false, "delete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// cut fails every change but the stores of buckets' own
			// pieces: a bucket write's member lands, its parity log
			// entries do not.
			var cut atomic.Bool
			cutErr := faultdev.ErrCrashed
			if !tc.restart {
				// A full disk: the devices stay in service.
				cutErr = fmt.Errorf("cut: %w", device.ErrNoSpace)
			}
			r := newFaultRig(t, func(int, *mem.Device) faultdev.Injector {
				return faultdev.InjectorFunc(func(op faultdev.Op) error {
					if cut.Load() && (op.Kind == device.OpStore || op.Kind == device.OpDelete) &&
						!(op.Kind == device.OpStore && bytes.HasPrefix(op.Key, []byte(tinyPrefix))) {
						return cutErr
					}
					return nil
				})
			}, tinyOpts(1)...)
			k, other := "key", "other"
			old := []byte("old tiny value")
			r.mustStore(k, old)
			r.mustStore(other, []byte("neighbour"))
			bk := string(bucketKey(0))
			primary := r.holders(bk, 0)
			if len(primary) != 1 {
				t.Fatalf("bucket on devices %v, want its primary alone", primary)
			}

			cut.Store(true)
			if err := r.a.Delete(ctx, []byte(k)); err == nil {
				t.Fatal("delete with every parity write failing succeeded")
			}
			cut.Store(false)
			if tc.restart {
				r.reopen()
			}
			// The member landed: a read returns what the primary holds.
			if _, err := r.a.Retrieve(ctx, []byte(k)); !errors.Is(err, ErrNotFound) {
				t.Fatalf("after the cut delete: %v, want not found (the member landed)", err)
			}

			var want []byte
			switch tc.then {
			case "big":
				want = []byte("own pieces")
				r.mustStore(k, want, Using("replication"))
			case "delete":
				if err := r.a.Delete(ctx, []byte(k)); err != nil && !errors.Is(err, ErrNotFound) {
					t.Fatal(err)
				}
			}
			r.mems[primary[0]].Fail()
			got, err := r.a.Retrieve(ctx, []byte(k))
			if want == nil && !errors.Is(err, ErrNotFound) || want != nil && (err != nil || !bytes.Equal(got, want)) {
				t.Fatalf("bucket's primary lost: %q, %v; want %q", got, err, want)
			}
			r.mustRead(other, []byte("neighbour"))
		})
	}
}
