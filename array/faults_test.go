package array

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism/hashing"
	"github.com/kvarray/kvarray/mechanism/packing"
	"github.com/kvarray/kvarray/mechanism/replication"
	"github.com/kvarray/kvarray/mechanism/splitting"
)

// everyMechanism configures all four mechanisms with the paper's
// parameters: 3 copies, k=4 r=2.
func everyMechanism() Option {
	return WithMechanisms(replication.New(3), hashing.New(), splitting.New(4, 2), packing.New(4, 2, 0))
}

// faultMechanisms are the mechanisms under fault injection, with the
// number of device losses each survives.
var faultMechanisms = []struct {
	name      string
	tolerates int
}{
	{"hashing", 0}, {"replication", 2}, {"splitting", 2}, {"packing", 2},
}

// storeConcurrently stores vals under keys with the asynchronous API, so
// that Packing forms full sets.
func storeConcurrently(t testing.TB, a *Array, keys []string, vals [][]byte) {
	t.Helper()
	fs := make([]*Future, len(keys))
	for i := range keys {
		fs[i] = a.StoreAsync(context.Background(), []byte(keys[i]), vals[i])
	}
	for i, f := range fs {
		if err := f.Err(); err != nil {
			t.Fatalf("store %q: %v", keys[i], err)
		}
	}
}

// corruptDevice flips a byte in every value stored on device i (data,
// parity and the array header alike).
func (r *rig) corruptDevice(i int) {
	r.t.Helper()
	var keys [][]byte
	_ = r.mems[i].Iterate(context.Background(), nil, func(k []byte) error {
		keys = append(keys, append([]byte(nil), k...))
		return nil
	})
	for _, k := range keys {
		if _, _, kind, _ := format.ParseKey(k); kind == format.KindArray {
			continue
		}
		if err := r.mems[i].Corrupt(k); err != nil {
			r.t.Fatalf("corrupt %q on %d: %v", k, i, err)
		}
	}
}

// checkAllPieces verifies that every value on every device decodes: after
// repair nothing corrupt is left behind.
func (r *rig) checkAllPieces() {
	r.t.Helper()
	for i, m := range r.mems {
		_ = m.Iterate(context.Background(), nil, func(k []byte) error {
			b, err := m.Retrieve(context.Background(), k)
			if err != nil {
				r.t.Errorf("device %d key %q: %v", i, k, err)
				return nil
			}
			format.Unkey(k, b, 0)
			if _, err := format.Decode(b); err != nil {
				r.t.Errorf("device %d key %q left corrupt: %v", i, k, err)
			}
			return nil
		})
	}
}

// combos returns every subset of {0..n-1} with at most max elements.
func combos(n, max int) [][]int {
	var out [][]int
	var rec func(start int, cur []int)
	rec = func(start int, cur []int) {
		out = append(out, append([]int(nil), cur...))
		if len(cur) == max {
			return
		}
		for i := start; i < n; i++ {
			rec(i+1, append(cur, i))
		}
	}
	rec(0, nil)
	return out
}

// TestEveryFaultCombination: for each mechanism, every combination of up
// to r devices, each either failed or corrupted: every value reads back
// byte-exact and the bad pieces are repaired.
func TestEveryFaultCombination(t *testing.T) {
	const n = 6
	for _, fm := range faultMechanisms {
		t.Run(fm.name, func(t *testing.T) {
			rng := newRand(t)
			cases := 0
			for _, devs := range combos(n, fm.tolerates) {
				for mask := 0; mask < 1<<len(devs); mask++ {
					if testing.Short() && cases%4 != 0 && len(devs) > 1 {
						cases++
						continue
					}
					cases++
					name := fmt.Sprintf("devs%v-mask%b", devs, mask)
					r := newRig(t, n, everyMechanism(), WithDefault(fm.name))
					var keys []string
					var vals [][]byte
					for i := 0; i < 24; i++ {
						keys = append(keys, fmt.Sprintf("%s-%d", name, i))
						vals = append(vals, randBytes(rng, 1+rng.IntN(6000)))
					}
					storeConcurrently(t, r.a, keys, vals)
					var failed []int
					for j, d := range devs {
						if mask&(1<<j) != 0 {
							r.mems[d].Fail()
							failed = append(failed, d)
						} else {
							r.corruptDevice(d)
						}
					}
					for i := range keys {
						r.mustRead(keys[i], vals[i])
					}
					// Bring the failed devices back (they hold all the data
					// still) and repair: nothing corrupt may remain.
					for _, d := range failed {
						r.mems[d].Recover()
					}
					r.repairAll(keys)
					r.checkAllPieces()
					for i := range keys {
						r.mustRead(keys[i], vals[i])
					}
				}
			}
			t.Logf("%d fault combinations", cases)
		})
	}
}

// TestBeyondTolerance: with r+1 devices failed, keys that lost more than
// r pieces get a clear error (never bytes), and keys whose pieces avoid
// the failed devices still read.
func TestBeyondTolerance(t *testing.T) {
	const n = 6
	for _, fm := range faultMechanisms {
		t.Run(fm.name, func(t *testing.T) {
			rng := newRand(t)
			r := newRig(t, n, everyMechanism(), WithDefault(fm.name))
			var keys []string
			var vals [][]byte
			for i := 0; i < 60; i++ {
				keys = append(keys, fmt.Sprint("key-", i))
				vals = append(vals, randBytes(rng, 1+rng.IntN(6000)))
			}
			storeConcurrently(t, r.a, keys, vals)
			failed := map[int]bool{}
			for d := 0; d <= fm.tolerates; d++ {
				r.mems[d].Fail()
				failed[d] = true
			}
			errs, reads := 0, 0
			for i, key := range keys {
				got, err := r.a.Retrieve(ctx, []byte(key))
				if err != nil {
					if !errors.Is(err, ErrDataLoss) && !errors.Is(err, ErrUnavailable) {
						t.Fatalf("%q: error is neither data loss nor unavailable: %v", key, err)
					}
					if want := fmt.Sprintf("%q", key); !strings.Contains(err.Error(), want) {
						t.Fatalf("%q: error does not name the key: %v", key, err)
					}
					if !failed[r.a.primary([]byte(key), 0)] && fm.name != "splitting" {
						t.Fatalf("%q: primary healthy, yet: %v", key, err)
					}
					errs++
					continue
				}
				if string(got) != string(vals[i]) {
					t.Fatalf("%q: wrong bytes", key)
				}
				reads++
			}
			if errs == 0 {
				t.Fatalf("%d devices failed and every key read: the test does not exercise loss", fm.tolerates+1)
			}
			t.Logf("%d keys lost, %d still read", errs, reads)
		})
	}
}
