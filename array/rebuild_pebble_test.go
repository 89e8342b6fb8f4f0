package array

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/pebble"
)

// TestMeasureRebuildPebble is the rebuild experiment on Pebble devices:
// KVARRAY_REBUILD_PEBBLE_N values of 4 KiB stored with replication (or
// KVARRAY_REBUILD_RM) in a
// standalone array of 6 devices under KVARRAY_REBUILD_DIR (default: a
// temporary directory), one device's directory removed and replaced by an
// empty database, rebuilt by KVARRAY_REBUILD_WORKERS workers (default
// 32). It reports pieces/s, MB/s written to the
// device, device operations per restored piece and the heap's peak; run
// bench/rebuild.sh for the ratio to the disk's sequential write speed.
//
//	KVARRAY_REBUILD_PEBBLE_N=200000 go test -run MeasureRebuildPebble -v ./array/
func TestMeasureRebuildPebble(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("KVARRAY_REBUILD_PEBBLE_N"))
	if n == 0 {
		t.Skip("set KVARRAY_REBUILD_PEBBLE_N to measure")
	}
	dir := os.Getenv("KVARRAY_REBUILD_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	open := func(i int) device.Device {
		d, err := pebble.Open(filepath.Join(dir, fmt.Sprintf("dev%d", i)), pebble.WithCreate(true))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	devs := make([]device.Device, 6)
	for i := range devs {
		devs[i] = open(i)
	}
	rm := cmp.Or(os.Getenv("KVARRAY_REBUILD_RM"), "replication")
	a, err := Create(ctx, devs, everyMechanism(), WithDefault(rm))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close() }()
	value := make([]byte, 4096)
	start := time.Now()
	const window = 256
	fs := make([]*Future, 0, window)
	for i := 0; i < n; i++ {
		value[0], value[1], value[2] = byte(i), byte(i>>8), byte(i>>16)
		fs = append(fs, a.StoreAsync(ctx, fmt.Appendf(nil, "key-%08d", i), append([]byte(nil), value...)))
		if len(fs) == window || i == n-1 {
			for _, f := range fs {
				if err := f.Err(); err != nil {
					t.Fatal(err)
				}
			}
			fs = fs[:0]
		}
	}
	write := time.Since(start)
	const lost = 2
	if err := devs[lost].Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, fmt.Sprintf("dev%d", lost))); err != nil {
		t.Fatal(err)
	}
	if err := a.ReplaceDevice(ctx, lost, open(lost)); err != nil {
		t.Fatal(err)
	}
	var peak uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	workers, _ := strconv.Atoi(os.Getenv("KVARRAY_REBUILD_WORKERS"))
	rep, err := a.Rebuild(context.Background(), lost, WithWorkers(cmp.Or(workers, 32)))
	close(stop)
	<-sampled
	if err != nil {
		t.Fatal(err)
	}
	info, err := a.env.Device(lost).Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	secs := rep.Elapsed.Seconds()
	t.Logf("%s on pebble, %d workers: %d values stored in %v; rebuild restored %d pieces (%.1f MB) in %v: %.0f pieces/s, %.1f MB/s; peak heap %.0f MB",
		rm, cmp.Or(workers, 32), n, write.Round(time.Millisecond), rep.Repaired, float64(info.Used)/1e6, rep.Elapsed.Round(time.Millisecond),
		float64(rep.Repaired)/secs, float64(info.Used)/1e6/secs, float64(peak)/1e6)
}
