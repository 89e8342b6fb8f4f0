package bench

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/device/mem"
)

// RebuildCounts is what a rebuild reports of its work.
type RebuildCounts struct {
	Keys   int64 // user keys that had a piece on the device, repaired
	Pieces int64 // pieces written to the device
}

// rebuilder rebuilds device dev of a, which the benchmark has just
// replaced by an empty device underneath the array (the array still
// believes it healthy), and returns once the device holds everything it
// should: ReplaceDevice, then Rebuild. A variable so that tests can stand
// in for it.
var rebuilder = func(ctx context.Context, a *array.Array, dev int) (RebuildCounts, error) {
	if err := a.ReplaceDevice(ctx, dev, nil); err != nil {
		return RebuildCounts{}, err
	}
	rep, err := a.Rebuild(ctx, dev, array.WithWorkers(32))
	return RebuildCounts{Keys: rep.Keys, Pieces: rep.Repaired}, err
}

// RebuildResult is the rebuild benchmark's outcome for one mechanism: the
// paper's experiment (Figure 12): Keys values of Size bytes stored, one
// device replaced by an empty one, rebuilt.
type RebuildResult struct {
	Mechanism string `json:"mechanism"`
	Keys      int64  `json:"keys"`
	Size      int    `json:"size"`
	Device    int    `json:"device"`
	// Rebuilt counts the keys that had a piece on the device, Pieces the
	// pieces written back.
	Rebuilt int64   `json:"rebuilt_keys"`
	Pieces  int64   `json:"pieces"`
	Seconds float64 `json:"seconds"`
	// KeysPerSec is Rebuilt per second, MiBPerSec their user bytes per
	// second: the repair rates `kvarray mttdl --from-bench` uses.
	KeysPerSec float64 `json:"keys_per_sec"`
	MiBPerSec  float64 `json:"mib_per_sec"`
	// DeviceOps are the device operations of the rebuild.
	DeviceOps Counts `json:"device_ops"`
}

// rebuild runs the rebuild benchmark for mechanism m.
func (r *runner) rebuild(ctx context.Context, m string) (RebuildResult, error) {
	res := RebuildResult{Mechanism: m, Keys: int64(r.o.RebuildKeys), Size: r.o.RebuildSize}
	r.step++
	runtime.GC()
	in, err := r.open(ctx, target{m, ModeStandalone})
	if err != nil {
		return res, err
	}
	defer func() { _ = in.close() }()
	v := r.value(r.o.RebuildSize)
	if _, err := r.measure(ctx, in, phase{workload: "rebuild-fill", label: sizeLabel(r.o.RebuildSize), total: res.Keys, untimed: true,
		op: func(_ *worker, i int64, buf []byte) (int, error) { return len(v), in.store(ctx, key(buf, i), v) },
	}); err != nil {
		return res, fmt.Errorf("fill: %w", err)
	}
	// Replace device 0 by an empty one, as a failed drive is.
	if d, ok := in.raw[0].(*mem.Device); ok {
		d.Replace()
	} else if err := erase(ctx, in.raw[0]); err != nil {
		return res, fmt.Errorf("replace device 0: %w", err)
	}
	in.resetCounts()
	done := make(chan struct{})
	if r.o.Progress != nil {
		start := time.Now()
		go func() {
			tick := time.NewTicker(250 * time.Millisecond)
			defer tick.Stop()
			for {
				r.o.Progress(Progress{Step: r.step, Steps: r.steps, Workload: "rebuild", Size: sizeLabel(r.o.RebuildSize),
					Mechanism: m, Mode: ModeStandalone, Elapsed: time.Since(start)})
				select {
				case <-done:
					return
				case <-tick.C:
				}
			}
		}()
	}
	start := time.Now()
	c, err := rebuilder(ctx, in.a, 0)
	elapsed := time.Since(start)
	close(done)
	if err != nil {
		return res, err
	}
	res.Rebuilt, res.Pieces, res.Seconds = c.Keys, c.Pieces, elapsed.Seconds()
	if res.Seconds > 0 {
		res.KeysPerSec = float64(c.Keys) / res.Seconds
		res.MiBPerSec = float64(c.Keys) * float64(r.o.RebuildSize) / res.Seconds / (1 << 20)
	}
	res.DeviceOps = in.counts()
	return res, nil
}
