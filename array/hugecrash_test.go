package array

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/faultdev"
	"github.com/kvarray/kvarray/device/mem"
)

// TestHugeOverwriteCrashAtEveryOperation (trust case 9): a huge value
// overwritten by another huge value, with the process "crashing" at each
// device operation in turn (that operation and every later one, on every
// device, is dropped), then the array reopened from the devices.
// Invariant: the key reads back whole as the old value or the new one,
// never neither, never a mix; and after a repair it still does.
func TestHugeOverwriteCrashAtEveryOperation(t *testing.T) {
	cases := []struct{ from, to string }{
		{"replication", "replication"}, {"packing", "packing"}, {"hashing", "hashing"},
		{"replication", "packing"}, {"packing", "replication"}, {"hashing", "replication"},
	}
	limits := device.Limits{MaxValueLen: 8 << 10}
	rng := newRand(t)
	for _, c := range cases {
		t.Run(c.from+"-to-"+c.to, func(t *testing.T) {
			v1 := randBytes(rng, 30<<10)
			v2 := randBytes(rng, 26<<10)
			// run stores v1, then v2 with the crash at operation crashAt
			// (< 0: none), and returns the devices and how many operations
			// the second store made.
			run := func(crashAt int64) ([]device.Device, int64) {
				var count atomic.Int64
				inj := &faultdev.Toggle{Injector: faultdev.InjectorFunc(func(faultdev.Op) error {
					if n := count.Add(1); crashAt >= 0 && n > crashAt {
						return faultdev.ErrInjected
					}
					return nil
				})}
				var raw, wrapped []device.Device
				for i := 0; i < 6; i++ {
					m := mem.New(mem.WithName(fmt.Sprintf("mem:dev%d", i)), mem.WithLimits(limits))
					raw = append(raw, m)
					wrapped = append(wrapped, faultdev.Wrap(m, inj))
				}
				a, err := Create(context.Background(), wrapped, everyMechanism())
				if err != nil {
					t.Fatal(err)
				}
				if err := a.Store(ctx, []byte("huge"), v1, Using(c.from)); err != nil {
					t.Fatal(err)
				}
				inj.On()
				_ = a.Store(ctx, []byte("huge"), v2, Using(c.to))
				// The crashed process is gone; its array is not closed.
				return raw, count.Load()
			}
			_, total := run(-1)
			for i := int64(0); i <= total; i++ {
				devs, _ := run(i)
				a, err := Open(ctx, devs, everyMechanism())
				if err != nil {
					t.Fatalf("crash at op %d: reopen: %v", i, err)
				}
				check := func(when string) {
					got, err := a.Retrieve(ctx, []byte("huge"))
					if err != nil || (!bytes.Equal(got, v1) && !bytes.Equal(got, v2)) {
						t.Fatalf("crash at op %d of %d, %s: %d bytes (old %v, new %v), %v", i, total, when, len(got),
							bytes.Equal(got, v1), bytes.Equal(got, v2), err)
					}
				}
				check("reopened")
				if _, err := a.Repair(ctx, []byte("huge")); err != nil {
					t.Fatalf("crash at op %d: repair: %v", i, err)
				}
				check("repaired")
			}
		})
	}
}
