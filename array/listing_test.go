package array

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kvarray/kvarray/device"
)

// TestKeysExactWhileDegraded: with any one device gone, Keys lists exactly
// the keys that reads return, for values of every redundant mechanism
// (Hashing tolerates no loss), huge values
// and keys that moved from one mechanism to another or were deleted.
// Invariant: listing == model == the keys Retrieve returns.
func TestKeysExactWhileDegraded(t *testing.T) {
	const n = 6
	rng := newRand(t)
	// 8 KiB device values make the 20 KiB values huge (several splits).
	r := newRigLimits(t, n, device.Limits{MaxValueLen: 8 << 10}, everyMechanism())
	model := map[string][]byte{}
	var keys []string
	var vals [][]byte
	for i := 0; i < 96; i++ {
		keys = append(keys, fmt.Sprintf("k%03d", i))
		vals = append(vals, randBytes(rng, []int{10, 3000, 20000}[i%3]))
	}
	mechs := []string{"packing", "replication", "splitting"}
	for mi, m := range mechs {
		var ks []string
		var vs [][]byte
		for i := range keys {
			if i%len(mechs) == mi {
				ks, vs = append(ks, keys[i]), append(vs, vals[i])
			}
		}
		fs := make([]*Future, len(ks))
		for i := range ks {
			fs[i] = r.a.StoreAsync(ctx, []byte(ks[i]), vs[i], Using(m))
		}
		for i, f := range fs {
			if err := f.Err(); err != nil {
				t.Fatalf("store %s with %s: %v", ks[i], m, err)
			}
			model[ks[i]] = vs[i]
		}
	}
	// Packed keys that move to replication, and packed keys deleted: the
	// sets that listed them must not bring them back into the listing.
	for i := 0; i < 96; i += 6 {
		k := keys[i]
		if i%12 == 0 {
			r.mustStore(k, []byte("moved"), Using("replication"))
			model[k] = []byte("moved")
		} else {
			if err := r.a.Delete(ctx, []byte(k)); err != nil {
				t.Fatal(err)
			}
			delete(model, k)
		}
	}
	var want []string
	for k := range model {
		want = append(want, k)
	}
	slices.Sort(want)
	for d := 0; d < n; d++ {
		t.Run(fmt.Sprintf("dev%d-gone", d), func(t *testing.T) {
			r.mems[d].Fail()
			defer r.mems[d].Recover()
			r.reopen() // as after a restart with the device missing
			got, err := r.a.Keys(ctx, nil)
			if err != nil {
				t.Fatalf("keys: %v", err)
			}
			var names []string
			for _, k := range got {
				names = append(names, string(k))
			}
			if !slices.Equal(names, want) {
				t.Fatalf("device %d gone: listed %d keys, want %d\nmissing %v\nextra %v", d, len(names), len(want),
					setMinus(want, names), setMinus(names, want))
			}
			for k, v := range model {
				got, err := r.a.Retrieve(ctx, []byte(k))
				if err != nil || string(got) != string(v) {
					t.Fatalf("device %d gone: read %s: %d bytes, %v; want %d bytes", d, k, len(got), err, len(v))
				}
			}
		})
	}
}

// setMinus returns the elements of a not in b.
func setMinus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}
