package array

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/faultdev"
	"github.com/kvarray/kvarray/device/mem"
)

// TestTwoFailedStoresKeepTheOldValue: two overwrites of a Splitting value
// that each fail (three of six devices refuse their shards: beyond the
// tolerance, so the store fails) leave the value last stored whole. The
// invariant: a store that fails never costs the value it would replace.
// Found by the partial-I/O work: shard 0 written with the other shards
// named the failed write's bank, and the second store overwrote the old
// value's shards in the other one.
func TestTwoFailedStoresKeepTheOldValue(t *testing.T) {
	var refuse [6]atomic.Bool
	var devs []device.Device
	for i := range 6 {
		m := mem.New(mem.WithName(fmt.Sprintf("mem:dev%d", i)), mem.WithLimits(rangeLimits))
		devs = append(devs, faultdev.Wrap(m, faultdev.InjectorFunc(func(op faultdev.Op) error {
			if op.Kind == device.OpStore && refuse[i].Load() {
				return fmt.Errorf("refused: %w", device.ErrNoSpace)
			}
			return nil
		})))
	}
	a, err := Create(ctx, devs, everyMechanism(), WithMetaCache(0))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rng := newRand(t)
	old := randBytes(rng, 24<<10)
	key := []byte("cut-short")
	if err := a.Store(ctx, key, old, Using("splitting")); err != nil {
		t.Fatal(err)
	}
	p := a.primary(key, 0)
	set := func(offs ...int) {
		for i := range refuse {
			refuse[i].Store(false)
		}
		for _, off := range offs {
			refuse[(p+off)%6].Store(true)
		}
	}
	set(1, 4, 5)
	if err := a.Store(ctx, key, randBytes(rng, 24<<10), Using("splitting")); err == nil {
		t.Fatal("first store succeeded")
	}
	set(3, 4, 5)
	err = a.Store(ctx, key, randBytes(rng, 24<<10), Using("splitting"))
	t.Logf("second store: %v", err)
	set()
	got, err := a.Retrieve(ctx, key)
	if err != nil || !bytes.Equal(got, old) {
		t.Fatalf("the acknowledged value after two failed stores: %v (old %v)", err, bytes.Equal(got, old))
	}
}
