package array

import (
	"fmt"
	"testing"

	"github.com/kvarray/kvarray/device"
)

// TestDegradedStoreReadable: with one device failed (within every
// mechanism's tolerance but Hashing's), a store of a value of several
// splits with each mechanism is acknowledged and reads back at once, for
// the failed device being the primary of each split in turn. Found by
// TestCrashDuringRepair: a Packing value whose split 1 has its primary on
// the failed device was acknowledged and read as data loss.
func TestDegradedStoreReadable(t *testing.T) {
	var fails []string
	rng := newRand(t)
	for _, rm := range []string{"replication", "splitting", "packing"} {
		// The value is new, or replaces one of one split, or one of
		// three splits, stored before the device failed.
		for _, prevSplits := range []int{0, 1, 3} {
			for s := 0; s < 3; s++ {
				r := newRigLimits(t, 6, device.Limits{MaxValueLen: 4 << 10}, everyMechanism(), WithDefault(rm))
				key := "key-degraded"
				splitCap := r.a.byName[rm].SplitCap()
				if prevSplits > 0 {
					r.mustStore(key, randBytes(rng, prevSplits*splitCap-100))
				}
				v := randBytes(rng, 3*splitCap-100)
				dead := r.a.primary([]byte(key), s)
				r.mems[dead].Fail()
				what := fmt.Sprintf("%s over a value of %d splits, primary of split %d (device %d) failed", rm, prevSplits, s, dead)
				if err := r.a.Store(ctx, []byte(key), v); err != nil {
					fails = append(fails, fmt.Sprintf("%s: store: %v", what, err))
					continue
				}
				got, err := r.a.Retrieve(ctx, []byte(key))
				if err != nil || string(got) != string(v) {
					fails = append(fails, fmt.Sprintf("%s: the acknowledged store reads back %d bytes of %d: %v", what, len(got), len(v), err))
				}
			}
		}
	}
	for _, f := range fails {
		t.Error(f)
	}
}
