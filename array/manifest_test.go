package array

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
)

// storeFlat writes value under key in the flat layout, as stores did
// before manifests: splits 1.. in the bank of the version, then split 0
// holding the first bytes, every split carrying split 0's version,
// length and split count. Over nothing: the key must not exist.
func storeFlat(t *testing.T, a *Array, key string, value []byte, mech string) {
	t.Helper()
	m := a.byName[mech]
	sc := m.SplitCap()
	n := splitsFor(m, len(value))
	if n < 2 {
		t.Fatalf("%d bytes are one split of %s", len(value), mech)
	}
	obj := mechanism.Object{Splits: uint32(n), ObjectLen: uint64(len(value)), Version: a.env.Clock().Next()}
	for _, s := range append(seq(1, n), 0) {
		k := a.splitKey([]byte(key), s, obj.Version)
		if err := m.Store(ctx, k, obj, value[s*sc:min((s+1)*sc, len(value))], nil); err != nil {
			t.Fatalf("store split %d flat: %v", s, err)
		}
	}
	a.meta.forget([]byte(key))
}

// seq returns lo, lo+1, ..., hi-1.
func seq(lo, hi int) []int {
	var out []int
	for i := lo; i < hi; i++ {
		out = append(out, i)
	}
	return out
}

// asFresh returns, for each of devs that holds other keys or bytes than a
// fresh array's device after stores of the given values (key, value) with
// mech, what it holds and what it would: nothing left behind, nothing
// missing.
func asFresh(t *testing.T, devs []device.Device, mech string, kv ...[]byte) []string {
	t.Helper()
	fresh := newRigLimits(t, len(devs), rangeLimits, everyMechanism())
	for i := 0; i+1 < len(kv); i += 2 {
		fresh.mustStore(string(kv[i]), kv[i+1], Using(mech))
	}
	var out []string
	for i, d := range devs {
		got, _ := d.Info(ctx)
		want, _ := fresh.mems[i].Info(ctx)
		if got.Keys != want.Keys || got.Used != want.Used {
			out = append(out, fmt.Sprintf("device %d holds %d keys, %d bytes; fresh stores of the values %d keys, %d bytes", i, got.Keys, got.Used, want.Keys, want.Used))
		}
	}
	return out
}

// memDevices returns mems as devices.
func memDevices(mems []*mem.Device) []device.Device {
	out := make([]device.Device, len(mems))
	for i, m := range mems {
		out[i] = m
	}
	return out
}

// split0 returns key's split 0 header as its primary holds it.
func split0(t *testing.T, r *rig, key string) format.Header {
	t.Helper()
	k := r.a.key([]byte(key), 0)
	v, err := r.piece(k.Primary, key, 0)
	if err != nil {
		t.Fatalf("split 0 of %q: %v", key, err)
	}
	return v.Header
}

// TestFlatLayoutValues: huge values written before manifests (the flat
// layout) are read whole and by range, survive the loss and rebuild of a
// device, are converted by their first range write, replaced by a store
// and deleted without leaving a piece behind.
func TestFlatLayoutValues(t *testing.T) {
	for _, mech := range []string{"splitting", "replication", "hashing", "packing"} {
		t.Run(mech, func(t *testing.T) {
			r := newRigLimits(t, 6, rangeLimits, everyMechanism())
			rng := newRand(t)
			sc := r.a.byName[mech].SplitCap()
			v := randBytes(rng, 3*sc+500)
			storeFlat(t, r.a, "flat", v, mech)
			if h := split0(t, r, "flat"); r.a.isManifest(&h) || h.Splits != 4 {
				t.Fatalf("split 0 of the flat value: %d splits", h.Splits)
			}
			r.mustRead("flat", v)
			if got, err := r.a.RetrieveRange(ctx, []byte("flat"), int64(sc-10), 20); err != nil || !bytes.Equal(got, v[sc-10:sc+10]) {
				t.Fatalf("range read across splits 0 and 1: %v", err)
			}
			if n, err := r.a.Len(ctx, []byte("flat")); err != nil || n != int64(len(v)) {
				t.Fatalf("len %d, %v", n, err)
			}
			if mech != "hashing" {
				// One copy: Hashing keeps no redundancy to rebuild from.
				r.mems[2].Fail()
				r.mustRead("flat", v)
				r.replace(2)
				for d, err := range r.heal() {
					if err != nil {
						t.Fatalf("heal device %d: %v", d, err)
					}
				}
				r.mustRead("flat", v)
			}
			// The first range write converts it to the manifest layout.
			data := randBytes(rng, 100)
			if _, err := r.a.StoreRange(ctx, []byte("flat"), int64(2*sc), data, Using(mech)); err != nil {
				t.Fatalf("range write: %v", err)
			}
			copy(v[2*sc:], data)
			r.mustRead("flat", v)
			if h := split0(t, r, "flat"); !r.a.isManifest(&h) || r.a.splitsOf(&h) != 5 {
				t.Fatalf("split 0 after a range write: %d splits, want the manifest of 4 data splits", h.Splits)
			}
			// A store replaces a flat value; a delete removes one.
			storeFlat(t, r.a, "other", v, mech)
			w := randBytes(rng, 2*sc+7)
			r.mustStore("other", w, Using(mech))
			r.mustRead("other", w)
			storeFlat(t, r.a, "gone", v, mech)
			if err := r.a.Delete(ctx, []byte("gone")); err != nil {
				t.Fatalf("delete: %v", err)
			}
			if _, err := r.a.Retrieve(ctx, []byte("gone")); err == nil {
				t.Fatal("deleted value still reads")
			}
			if mech == "packing" {
				return // its sets keep their parities (and slots) past a release
			}
			if _, err := r.a.Scrub(ctx, true); err != nil {
				t.Fatalf("scrub: %v", err)
			}
			for _, diff := range asFresh(t, memDevices(r.mems), mech, []byte("flat"), v, []byte("other"), w) {
				t.Error(diff)
			}
		})
	}
}

// TestRebuildRestoresEverySplit: a rebuild restores every piece of huge
// values in the manifest layout that the lost device held, byte for byte,
// also of values whose split 0 has no piece on it (a data split's piece
// alone says the value has one there).
func TestRebuildRestoresEverySplit(t *testing.T) {
	for _, mech := range []string{"replication", "splitting"} {
		t.Run(mech, func(t *testing.T) {
			r := newRigLimits(t, 6, rangeLimits, everyMechanism())
			rng := newRand(t)
			sc := r.a.byName[mech].SplitCap()
			for i := range 12 {
				r.mustStore(fmt.Sprint("huge-", i), randBytes(rng, 3*sc+100*i), Using(mech))
			}
			const lost = 2
			before := map[string][]byte{}
			if err := r.mems[lost].Iterate(ctx, []byte{}, func(k []byte) error {
				v, err := r.mems[lost].Retrieve(ctx, k)
				before[string(k)] = v
				return err
			}); err != nil {
				t.Fatal(err)
			}
			r.mems[lost].Fail()
			r.replace(lost)
			for d, err := range r.heal() {
				if err != nil {
					t.Fatalf("heal device %d: %v", d, err)
				}
			}
			after := 0
			if err := r.mems[lost].Iterate(ctx, []byte{}, func(k []byte) error {
				after++
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			for k, want := range before {
				got, err := r.mems[lost].Retrieve(ctx, []byte(k))
				if _, _, kind, _ := format.ParseKey([]byte(k)); kind == format.KindArray {
					continue // the array's header: rewritten with the device's new epoch
				}
				if err != nil || !bytes.Equal(got, want) {
					u, s, _, _ := format.ParseKey([]byte(k))
					t.Errorf("%q split %d: not restored as it was: %v", u, s, err)
				}
			}
			if after != len(before) {
				t.Errorf("device %d holds %d keys after the rebuild, %d before", lost, after, len(before))
			}
		})
	}
}
