package array

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/kvarray/kvarray/format"
)

// checkLiesOnPrimary (issue 40, item 2): on each value's primary device,
// its split-0 piece is replaced by the key's own older piece (valid, its
// key's, an older version: a device that lost a write it acknowledged),
// or deleted (a device that lost the piece). A read of a key the
// metadata cache knows (warm) notices that the primary answers for an
// older value, or none, repairs the key and returns its last value; one
// that only the primary can answer for (cold: after a restart) trusts it,
// as the hot path reads the primary alone (docs/ARCHITECTURE.md), and may
// return the older value or not-found. A scrub counts every lie, and
// after scrub --repair, which reads every piece and takes the newest,
// every value reads its last acknowledged bytes and a second scrub finds
// nothing. Before the repair learnt this, it made the older copy the
// value everywhere, and swept a deleted primary's surviving pieces as
// orphans.
func checkLiesOnPrimary(t *testing.T, a *Array, rm, lie string, warm bool) {
	rng := newRand(t)
	var keys []string
	want, old := map[string][]byte{}, map[string][]byte{}
	for i := range 12 {
		key := fmt.Sprintf("lie-%02d", i)
		if err := a.Store(ctx, []byte(key), randBytes(rng, 300+rng.IntN(2000)), Using(rm)); err != nil {
			t.Fatal(err)
		}
		ik := format.Key([]byte(key), 0, format.KindData)
		b, err := a.env.Device(a.primary([]byte(key), 0)).Retrieve(ctx, ik)
		if err != nil {
			t.Fatal(err)
		}
		old[key] = b
		v := randBytes(rng, 300+rng.IntN(2000))
		if err := a.Store(ctx, []byte(key), v, Using(rm)); err != nil {
			t.Fatal(err)
		}
		want[key] = v
		keys = append(keys, key)
	}
	for _, key := range keys {
		dev := a.env.Device(a.primary([]byte(key), 0))
		ik := format.Key([]byte(key), 0, format.KindData)
		var err error
		if lie == "older" {
			err = dev.Store(ctx, ik, old[key])
		} else {
			err = dev.Delete(ctx, ik)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range keys {
		got, err := a.Retrieve(ctx, []byte(key))
		switch {
		case warm && (err != nil || !bytes.Equal(got, want[key])):
			t.Fatalf("a read of %s, its version known: %d bytes, %v, want its %d bytes", key, len(got), err, len(want[key]))
		case err == nil && !bytes.Equal(got, want[key]) && !bytes.HasSuffix(old[key], got):
			t.Fatalf("before the repair: %s reads bytes it never held", key)
		}
	}
	if warm {
		return // the reads repaired every key
	}
	check, err := a.Scrub(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := a.Scrub(ctx, true)
	if err != nil || len(rep.Errors) > 0 {
		t.Fatalf("scrub --repair: %v %v", err, rep.Errors)
	}
	if rm != "splitting" || lie != "older" {
		// (Splitting reads shards by version: an older shard 0 is one
		// bad piece of the value, found and counted like the others.)
		if check.Problems() < int64(len(keys)) || rep.Problems() != check.Problems() {
			t.Errorf("scrub found %d problems and scrub --repair %d, want the same, at least %d", check.Problems(), rep.Problems(), len(keys))
		}
	}
	for _, key := range keys {
		got, err := a.Retrieve(ctx, []byte(key))
		if err != nil || !bytes.Equal(got, want[key]) {
			t.Errorf("after scrub --repair: %s: %d bytes, %v, want its %d bytes", key, len(got), err, len(want[key]))
		}
	}
	if again, _ := a.Scrub(ctx, false); again.Problems() != 0 {
		t.Errorf("a scrub after the repair: %d problems", again.Problems())
	}
}

// TestLiesOnPrimary runs checkLiesOnPrimary for every redundant
// mechanism, both lies, cold and warm, on mem, Pebble and redis://
// devices.
func TestLiesOnPrimary(t *testing.T) {
	for _, kind := range deviceKinds {
		for _, rm := range []string{"replication", "splitting", "packing"} {
			for _, lie := range []string{"older", "deleted"} {
				for _, warm := range []bool{false, true} {
					name, opts := kind+"/"+rm+"/"+lie+"/cold", []Option{WithMetaCache(0)}
					if warm {
						name, opts = kind+"/"+rm+"/"+lie+"/warm", nil
					}
					t.Run(name, func(t *testing.T) {
						checkLiesOnPrimary(t, createOn(t, devicesOf(t, kind, 6), opts...), rm, lie, warm)
					})
				}
			}
		}
	}
}
