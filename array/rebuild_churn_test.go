package array

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
)

// TestRebuildWhileKeysChange: a rebuild restores copies from what its scan
// read of the other devices; stores and deletes of the same keys run while
// it does. Invariant: once the rebuild is done, the rebuilt device holds,
// for every key with a copy there, exactly the last acknowledged value
// (none for a deleted key): never what the scan read before a write.
func TestRebuildWhileKeysChange(t *testing.T) {
	for round := range 4 {
		rm, width := "replication", 3
		if round%2 == 1 {
			rm, width = "splitting", 6
		}
		t.Run(fmt.Sprint(rm, round), func(t *testing.T) {
			r := newRig(t, 6, everyMechanism(), WithDefault(rm))
			rng := newRand(t)
			const n = 400
			model := r.storeKeys(rng, n)
			const dev = 2
			r.replace(dev)
			var mu sync.Mutex
			stop := make(chan struct{})
			done := make(chan error)
			go func() {
				// Keys changed in a loop, each change acknowledged before
				// the model takes it.
				for j := 0; ; j++ {
					select {
					case <-stop:
						done <- nil
						return
					default:
					}
					i := (j * 7) % n
					mu.Lock()
					live := model[i] != nil
					mu.Unlock()
					// A deleted key is stored again rather than deleted:
					// with its primary being rebuilt, a second delete
					// cannot tell whether it exists (ErrUnavailable).
					if j%5 == 4 && live {
						err := r.a.Delete(ctx, []byte(churnKey(i)))
						if err != nil && !errors.Is(err, ErrNotFound) {
							done <- err
							return
						}
						mu.Lock()
						model[i] = nil
						mu.Unlock()
						continue
					}
					v := fmt.Appendf(nil, "value %d of %d", j, i)
					if err := r.a.Store(ctx, []byte(churnKey(i)), v); err != nil {
						done <- err
						return
					}
					mu.Lock()
					model[i] = v
					mu.Unlock()
				}
			}()
			rep, err := r.a.Rebuild(ctx, dev, WithWorkers(1+round))
			close(stop)
			if werr := <-done; werr != nil {
				t.Fatal(werr)
			}
			if err != nil {
				t.Fatalf("rebuild: %v (%+v)", err, rep)
			}
			for i := range n {
				p := r.a.primary([]byte(churnKey(i)), 0)
				onDev := (dev-p+6)%6 < width
				b, err := r.raw(dev, churnKey(i), 0)
				switch {
				case model[i] == nil || !onDev:
					if !errors.Is(err, device.ErrNotFound) {
						t.Fatalf("%s (deleted %v, copy on device %d: %v): rebuilt device holds %d bytes, %v", churnKey(i), model[i] == nil, dev, onDev, len(b), err)
					}
				case err != nil:
					t.Fatalf("%s: rebuilt device lacks its copy: %v", churnKey(i), err)
				default:
					// A shard: it must be of the write the other
					// shards are of, the value of which is the model's.
					v, err := format.Decode(b)
					if err == nil && rm == "splitting" {
						other, oerr := r.piece((dev+1)%6, churnKey(i), 0)
						if oerr != nil || other.Version != v.Version {
							t.Fatalf("%s: rebuilt device holds a shard of version %d, device %d of %d (%v)", churnKey(i), v.Version, (dev+1)%6, other.Version, oerr)
						}
						v.Payload, err = r.a.Retrieve(ctx, []byte(churnKey(i)))
					}
					if err != nil || !bytes.Equal(v.Payload, model[i]) {
						t.Fatalf("%s: rebuilt device holds %q (%v), the last acknowledged value is %q", churnKey(i), v.Payload, err, model[i])
					}
				}
			}
			if r.a.DeviceState(dev) != mechanism.Healthy {
				t.Fatalf("device %d is %v after its rebuild", dev, r.a.DeviceState(dev))
			}
		})
	}
}
