package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/kvarray/kvarray/config"
	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/device/pebble"
)

// Backend makes the devices of a run. Every measurement (one workload
// sequence of one mechanism and mode, or the None baseline) gets fresh,
// empty devices of the same kind, so that no result inherits another's
// data, compaction debt or counters.
type Backend interface {
	// Name is what reports call the backend: "mem", "pebble", "config".
	Name() string
	// Describe says what the devices are, for the report.
	Describe() string
	// Devices returns n empty devices. release closes what the array has
	// not closed and removes what the devices left behind.
	Devices(ctx context.Context, n int) (devs []device.Device, release func() error, err error)
}

// KVSSD is the mem backend's default performance model: a KV SSD scaled
// down so that a 2-core host drives six of them with CPU to spare, and
// the measurements are bound by the devices as they are on real drives.
// See the README ("kvarray bench") for where the numbers come from.
var KVSSD = mem.Perf{
	Latency:     100 * time.Microsecond,
	OpsPerSec:   5000,
	BytesPerSec: 80e6,
}

// Mem is the in-memory emulator backend with performance model p.
func Mem(p mem.Perf) Backend { return memBackend{p} }

type memBackend struct{ perf mem.Perf }

func (memBackend) Name() string { return "mem" }

func (b memBackend) Describe() string {
	p := b.perf
	if p == (mem.Perf{}) {
		return "mem devices, no performance model (as fast as the host)"
	}
	return fmt.Sprintf("mem devices: latency %v, %.0f ops/s, %.0f MB/s each", p.Latency, p.OpsPerSec, p.BytesPerSec/1e6)
}

func (b memBackend) Devices(_ context.Context, n int) ([]device.Device, func() error, error) {
	devs := make([]device.Device, n)
	for i := range devs {
		devs[i] = mem.New(mem.WithName(fmt.Sprintf("mem:bench%d", i)), mem.WithPerf(b.perf))
	}
	return devs, func() error { closeQuietly(devs); return nil }, nil
}

// Pebble is the Pebble backend: each measurement gets new databases in
// new directories under dir, removed afterwards.
func Pebble(dir string) Backend { return pebbleBackend{dir} }

type pebbleBackend struct{ dir string }

func (pebbleBackend) Name() string { return "pebble" }

func (b pebbleBackend) Describe() string {
	return fmt.Sprintf("pebble devices in fresh directories under %s", b.dir)
}

var pebbleRuns atomic.Int64

func (b pebbleBackend) Devices(_ context.Context, n int) ([]device.Device, func() error, error) {
	if err := os.MkdirAll(b.dir, 0o755); err != nil {
		return nil, nil, err
	}
	root, err := os.MkdirTemp(b.dir, fmt.Sprintf("kvarray-bench-%d-", pebbleRuns.Add(1)))
	if err != nil {
		return nil, nil, err
	}
	devs := make([]device.Device, 0, n)
	release := func() error {
		closeQuietly(devs)
		return os.RemoveAll(root)
	}
	for i := 0; i < n; i++ {
		d, err := pebble.Open(filepath.Join(root, fmt.Sprintf("dev%d", i)), pebble.WithCreate(true))
		if err != nil {
			_ = release()
			return nil, nil, err
		}
		devs = append(devs, d)
	}
	return devs, release, nil
}

// Config is the backend of the devices a config file lists, whatever
// their kind. They must be empty at the start: the bench erases every key
// on them after each measurement, so it refuses devices that hold data
// rather than destroy an array.
func Config(cfg *config.Config) Backend { return &configBackend{cfg: cfg} }

type configBackend struct {
	cfg     *config.Config
	checked bool
}

func (*configBackend) Name() string { return "config" }

func (b *configBackend) Describe() string {
	return fmt.Sprintf("the %d devices of the config file, erased after each measurement", len(b.cfg.Devices))
}

func (b *configBackend) Devices(ctx context.Context, n int) ([]device.Device, func() error, error) {
	if n != len(b.cfg.Devices) {
		return nil, nil, fmt.Errorf("the config lists %d devices, the bench asked for %d", len(b.cfg.Devices), n)
	}
	devs := config.OpenDevices(b.cfg, true)
	for i, d := range devs {
		info, err := d.Info(ctx)
		if err != nil {
			closeQuietly(devs)
			return nil, nil, fmt.Errorf("device %d (%s): %w", i, b.cfg.Devices[i], err)
		}
		if info.Keys > 0 && !b.checked {
			closeQuietly(devs)
			return nil, nil, fmt.Errorf("device %d (%s) holds %d keys: the bench needs empty devices, and erases what it writes", i, b.cfg.Devices[i], info.Keys)
		}
		if info.Keys > 0 {
			// Left behind by an earlier measurement that failed midway.
			if err := erase(ctx, d); err != nil {
				closeQuietly(devs)
				return nil, nil, fmt.Errorf("device %d (%s): %w", i, b.cfg.Devices[i], err)
			}
		}
	}
	b.checked = true
	// The array closes its devices when it closes; these must stay open
	// until they are erased.
	open := make([]device.Device, len(devs))
	for i, d := range devs {
		open[i] = keepOpen{d}
	}
	release := func() error {
		var errs []error
		for i, d := range devs {
			if err := erase(context.Background(), d); err != nil && !errors.Is(err, device.ErrDeviceFailed) {
				errs = append(errs, fmt.Errorf("erase device %d: %w", i, err))
			}
		}
		closeQuietly(devs)
		return errors.Join(errs...)
	}
	return open, release, nil
}

// keepOpen is a device whose Close does nothing.
type keepOpen struct{ device.Device }

func (keepOpen) Close() error { return nil }

// erase deletes every key of d.
func erase(ctx context.Context, d device.Device) error {
	var keys [][]byte
	if err := d.Iterate(ctx, nil, func(k []byte) error {
		keys = append(keys, append([]byte(nil), k...))
		return nil
	}); err != nil {
		return err
	}
	const batch = 256
	for len(keys) > 0 {
		n := min(batch, len(keys))
		ops := make([]device.Op, n)
		for i := range ops {
			ops[i] = device.Op{Kind: device.OpDelete, Key: keys[i]}
		}
		if err := d.Batch(ctx, ops); err != nil {
			return err
		}
		for i := range ops {
			if ops[i].Err != nil {
				return ops[i].Err
			}
		}
		keys = keys[n:]
	}
	return nil
}

// closeQuietly closes devices the array may already have closed.
func closeQuietly(devs []device.Device) {
	for _, d := range devs {
		if d != nil {
			_ = d.Close()
		}
	}
}

// Counts are device operations and value bytes, summed over the devices.
type Counts struct {
	Stores       int64 `json:"stores"`
	Retrieves    int64 `json:"retrieves"`
	Deletes      int64 `json:"deletes"`
	Exists       int64 `json:"exists"`
	Iterates     int64 `json:"iterates"`
	BytesWritten int64 `json:"bytes_written"`
	BytesRead    int64 `json:"bytes_read"`
}

func (c *Counts) add(o Counts) {
	c.Stores += o.Stores
	c.Retrieves += o.Retrieves
	c.Deletes += o.Deletes
	c.Exists += o.Exists
	c.Iterates += o.Iterates
	c.BytesWritten += o.BytesWritten
	c.BytesRead += o.BytesRead
}

// counter reads and resets one device's counters.
type counter interface {
	counts() Counts
	reset()
}

type memCounter struct{ d *mem.Device }

func (m memCounter) counts() Counts {
	s := m.d.Stats()
	return Counts{Stores: s.Stores, Retrieves: s.Retrieves, Deletes: s.Deletes, Exists: s.Exists,
		Iterates: s.Iterates, BytesWritten: s.BytesWritten, BytesRead: s.BytesRead}
}

func (m memCounter) reset() { m.d.ResetStats() }

// instrument returns devs with counters: mem devices count for
// themselves; every other device is wrapped in a counting device, which
// counts as mem does (every attempted op once, a batch's ops one by one;
// value bytes of successful stores and retrieves).
func instrument(devs []device.Device) ([]device.Device, []counter) {
	out := make([]device.Device, len(devs))
	cs := make([]counter, len(devs))
	for i, d := range devs {
		if m, ok := d.(*mem.Device); ok {
			out[i], cs[i] = d, memCounter{m}
			continue
		}
		c := &counting{Device: d}
		out[i], cs[i] = c, c
	}
	return out, cs
}

// counting wraps a device and counts its operations.
type counting struct {
	device.Device
	stores, retrieves, deletes, exists, iterates atomic.Int64
	written, read                                atomic.Int64
}

func (c *counting) Store(ctx context.Context, key, value []byte) error {
	c.stores.Add(1)
	err := c.Device.Store(ctx, key, value)
	if err == nil {
		c.written.Add(int64(len(value)))
	}
	return err
}

func (c *counting) Retrieve(ctx context.Context, key []byte) ([]byte, error) {
	c.retrieves.Add(1)
	v, err := c.Device.Retrieve(ctx, key)
	if err == nil {
		c.read.Add(int64(len(v)))
	}
	return v, err
}

func (c *counting) Delete(ctx context.Context, key []byte) error {
	c.deletes.Add(1)
	return c.Device.Delete(ctx, key)
}

func (c *counting) Exist(ctx context.Context, key []byte) (bool, error) {
	c.exists.Add(1)
	return c.Device.Exist(ctx, key)
}

func (c *counting) Iterate(ctx context.Context, prefix []byte, fn func([]byte) error) error {
	c.iterates.Add(1)
	return c.Device.Iterate(ctx, prefix, fn)
}

// Scan forwards device.Scan, counted as one iteration (the values it
// hands out are sequential reads, not retrieves), so that a wrapped
// Scanner keeps its seek and its values.
func (c *counting) Scan(ctx context.Context, prefix, start []byte, values bool, fn func(key, value []byte) error) error {
	c.iterates.Add(1)
	return device.Scan(ctx, c.Device, prefix, start, values, fn)
}

func (c *counting) Batch(ctx context.Context, ops []device.Op) error {
	err := c.Device.Batch(ctx, ops)
	for i := range ops {
		op := &ops[i]
		switch op.Kind {
		case device.OpStore:
			c.stores.Add(1)
			if op.Err == nil {
				c.written.Add(int64(len(op.Value)))
			}
		case device.OpRetrieve:
			c.retrieves.Add(1)
			if op.Err == nil && op.Found {
				c.read.Add(int64(len(op.Result)))
			}
		case device.OpDelete:
			c.deletes.Add(1)
		case device.OpExist:
			c.exists.Add(1)
		}
	}
	return err
}

func (c *counting) counts() Counts {
	return Counts{Stores: c.stores.Load(), Retrieves: c.retrieves.Load(), Deletes: c.deletes.Load(),
		Exists: c.exists.Load(), Iterates: c.iterates.Load(), BytesWritten: c.written.Load(), BytesRead: c.read.Load()}
}

func (c *counting) reset() {
	for _, a := range []*atomic.Int64{&c.stores, &c.retrieves, &c.deletes, &c.exists, &c.iterates, &c.written, &c.read} {
		a.Store(0)
	}
}
