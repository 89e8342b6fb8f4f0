package array

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// TestMeasureRebuild is the paper's rebuild experiment: store N values of
// 4 KiB with each mechanism, replace one device, rebuild it, and report
// time, keys/s and MB/s next to the time the stores took. It runs only
// with KVARRAY_REBUILD_N set (e.g. 100000), since it is a measurement:
//
//	KVARRAY_REBUILD_N=100000 go test -run MeasureRebuild -v ./array/
func TestMeasureRebuild(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("KVARRAY_REBUILD_N"))
	if n == 0 {
		t.Skip("set KVARRAY_REBUILD_N to measure")
	}
	for _, rm := range []string{"replication", "splitting", "packing"} {
		t.Run(rm, func(t *testing.T) {
			r := newRig(t, 6, everyMechanism(), WithDefault(rm))
			value := make([]byte, 4096)
			start := time.Now()
			const window = 256
			fs := make([]*Future, 0, window)
			for i := 0; i < n; i++ {
				value[0], value[1], value[2] = byte(i), byte(i>>8), byte(i>>16)
				fs = append(fs, r.a.StoreAsync(context.Background(), fmt.Appendf(nil, "key-%08d", i), append([]byte(nil), value...)))
				if len(fs) == window {
					for _, f := range fs {
						if err := f.Err(); err != nil {
							t.Fatal(err)
						}
					}
					fs = fs[:0]
				}
			}
			for _, f := range fs {
				if err := f.Err(); err != nil {
					t.Fatal(err)
				}
			}
			write := time.Since(start)
			info, _ := r.mems[2].Info(context.Background())
			r.replace(2)
			rep, err := r.a.Rebuild(context.Background(), 2, WithWorkers(32))
			if err != nil {
				t.Fatal(err)
			}
			after, _ := r.mems[2].Info(context.Background())
			mb := float64(after.Used) / 1e6
			t.Logf("%s: %d values written in %v (%.0f/s); device 2 held %d keys, %.1f MB; rebuild: %d keys repaired in %v = %.0f keys/s, %.1f MB/s; rebuild/write time %.2f",
				rm, n, write.Round(time.Millisecond), float64(n)/write.Seconds(), info.Keys, float64(info.Used)/1e6,
				rep.Keys, rep.Elapsed.Round(time.Millisecond), rep.KeysPerSec(), mb/rep.Elapsed.Seconds(), rep.Elapsed.Seconds()/write.Seconds())
			if after.Keys < info.Keys*9/10 {
				t.Fatalf("rebuilt device holds %d keys, had %d", after.Keys, info.Keys)
			}
		})
	}
}
