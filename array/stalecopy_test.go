package array

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/kvarray/kvarray/mechanism"
)

// contents copies everything device i holds.
func (r *rig) contents(i int) map[string][]byte {
	out := map[string][]byte{}
	_ = r.mems[i].Iterate(context.Background(), nil, func(k []byte) error {
		out[string(k)] = nil
		return nil
	})
	for k := range out {
		v, err := r.mems[i].Retrieve(context.Background(), []byte(k))
		if err != nil {
			r.t.Fatalf("copy %q from device %d: %v", k, i, err)
		}
		out[k] = v
	}
	return out
}

// restore puts device i back to contents, as a directory restored from a
// backup.
func (r *rig) restore(i int, contents map[string][]byte) {
	r.mems[i].Replace()
	for k, v := range contents {
		if err := r.mems[i].Store(context.Background(), []byte(k), v); err != nil {
			r.t.Fatalf("restore %q on device %d: %v", k, i, err)
		}
	}
}

// TestDeviceRestoredFromOlderCopy: a device put back from a copy taken
// before newer writes is known as stale when the array opens, for every
// mechanism. Invariant: no read ever returns a value older than the last
// acknowledged one; the device is refused by resync and restored by
// replace and rebuild, after which any r other devices may fail.
func TestDeviceRestoredFromOlderCopy(t *testing.T) {
	for _, fm := range faultMechanisms {
		if fm.tolerates == 0 {
			continue
		}
		t.Run(fm.name, func(t *testing.T) {
			rng := newRand(t)
			r := newRig(t, 6, everyMechanism(), WithDefault(fm.name))
			var keys []string
			var v1, v2 [][]byte
			for i := 0; i < 40; i++ {
				keys = append(keys, fmt.Sprintf("k%02d", i))
				v1 = append(v1, randBytes(rng, 1+rng.IntN(5000)))
				v2 = append(v2, randBytes(rng, 1+rng.IntN(5000)))
			}
			storeConcurrently(t, r.a, keys, v1)
			r.reopen()
			// A copy taken while the array runs (mem devices do not
			// survive Close, so the epoch Close writes is written here
			// as Close does).
			const stale = 2
			backup := r.contents(stale)
			storeConcurrently(t, r.a, keys, v2)
			r.a.advanceEpoch(ctx, r.a.env.Clock().Last()+1)
			r.restore(stale, backup)
			r.reopen()
			if st := r.a.DeviceState(stale); st != mechanism.Failed {
				t.Fatalf("device %d restored from an older copy opens %v, want failed (states %v)", stale, st, r.states())
			}
			for i := range keys {
				r.mustRead(keys[i], v2[i])
			}
			if _, err := r.a.Resync(ctx, stale); !errors.Is(err, ErrStaleCopy) {
				t.Fatalf("resync of the stale copy: %v, want %v", err, ErrStaleCopy)
			}
			r.replace(stale)
			if rep, err := r.a.Rebuild(ctx, stale); err != nil {
				t.Fatalf("rebuild: %v %+v", err, rep)
			}
			for _, devs := range combos(6, 2) {
				for _, d := range devs {
					r.mems[d].Fail()
					r.a.SetDeviceState(d, mechanism.Failed)
				}
				for i := range keys {
					r.mustRead(keys[i], v2[i])
				}
				for _, d := range devs {
					r.mems[d].Recover()
					r.a.SetDeviceState(d, mechanism.Healthy)
				}
			}
		})
	}
}
