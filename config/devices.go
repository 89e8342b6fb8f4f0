package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/device/pebble"
	"github.com/kvarray/kvarray/device/redis"
	"github.com/kvarray/kvarray/format"
)

// spec is a parsed device spec.
type spec struct {
	kind string // "pebble", "mem" or "redis"
	arg  string // resolved directory, emulator name, or redis:// URL as given
	// canon is a redis device's name: redis://HOST:PORT/DB, port and
	// database filled in, credentials left out.
	canon string
}

// name is the device's name in messages and status, the one the backend
// itself reports.
func (s spec) name() string {
	if s.kind == "redis" {
		return s.canon
	}
	return s.kind + ":" + s.arg
}

// id identifies the device for duplicate detection.
func (s spec) id() string {
	if s.kind == "pebble" {
		if abs, err := filepath.Abs(s.arg); err == nil {
			return s.kind + ":" + abs
		}
	}
	return s.name()
}

func (c *Config) parseSpec(s string) (spec, error) {
	kind, arg, ok := strings.Cut(s, ":")
	switch {
	case strings.HasPrefix(s, "redis://"):
		name, err := redis.Name(s)
		if err != nil {
			return spec{}, err // names s already
		}
		return spec{kind: "redis", arg: s, canon: name}, nil
	case !ok:
		return spec{}, fmt.Errorf("%q: want pebble:DIR, mem:NAME or redis://HOST:PORT/DB", s)
	case kind == "pebble":
		if arg == "" {
			return spec{}, fmt.Errorf("%q: pebble needs a directory, e.g. pebble:./data/dev0", s)
		}
		if !filepath.IsAbs(arg) && c.dir != "" {
			arg = filepath.Join(c.dir, arg)
		}
		return spec{kind: kind, arg: filepath.Clean(arg)}, nil
	case kind == "mem":
		if arg == "" {
			return spec{}, fmt.Errorf("%q: mem needs a name, e.g. mem:dev0", s)
		}
		return spec{kind: kind, arg: arg}, nil
	}
	return spec{}, fmt.Errorf("%q: unknown device kind %q; want pebble:DIR, mem:NAME or redis://HOST:PORT/DB", s, kind)
}

// OpenDevices opens the config's devices in order. A device that cannot be
// opened becomes a device.Unavailable stand-in under its name, so that the
// array reports it as failed by name instead of failing to open. create
// lets pebble devices create their directories; without it a missing or
// empty directory is a failed device. mem devices are new and empty every
// time. redis devices connect to their server, and one that cannot be
// reached (within the device's timeout) is a stand-in like the others; an
// empty database is left to the array to judge. The config should be valid.
func OpenDevices(cfg *Config, create bool) []device.Device {
	devs, _ := openDevices(cfg, create)
	return devs
}

// inUseWait is how long opening a pebble device waits for another process
// that holds it to let go.
var inUseWait = 5 * time.Second

// openDevices also returns why each device could not be opened.
func openDevices(cfg *Config, create bool) ([]device.Device, []error) {
	c := cfg.withDefaults()
	limits := device.Limits{MinKeyLen: c.Device.MinKey, MaxKeyLen: c.Device.MaxKey, MaxValueLen: int(c.Device.MaxValue)}
	capacity := int64(c.Device.Capacity)
	devs := make([]device.Device, len(c.Devices))
	errs := make([]error, len(c.Devices))
	for i, s := range c.Devices {
		sp, err := c.parseSpec(s)
		if err != nil {
			devs[i], errs[i] = device.Unavailable(s, err), err
			continue
		}
		switch sp.kind {
		case "pebble":
			open := func() (*pebble.Device, error) {
				return pebble.Open(sp.arg, pebble.WithCreate(create), pebble.WithLimits(limits), pebble.WithCapacity(capacity), pebble.WithCacheSize(int64(c.Device.Cache)), pebble.WithTagger(pieceTag))
			}
			d, err := open()
			// A holder that is exiting (a restart overlapping the old
			// process's shutdown) lets go within moments.
			for deadline := time.Now().Add(inUseWait); errors.Is(err, pebble.ErrInUse) && time.Now().Before(deadline); {
				time.Sleep(inUseWait / 50)
				d, err = open()
			}
			if err != nil {
				// The backend's error starts with the name, which
				// the stand-in adds again.
				err = renamed{strings.TrimPrefix(err.Error(), sp.name()+": "), err}
				devs[i], errs[i] = device.Unavailable(sp.name(), err), err
				continue
			}
			devs[i] = d
		case "mem":
			opts := []mem.Option{mem.WithName(sp.name()), mem.WithLimits(limits), mem.WithCapacity(capacity)}
			if p := c.Device.Perf; p != nil {
				opts = append(opts, mem.WithPerf(mem.Perf{
					Latency:     time.Duration(p.Latency),
					OpsPerSec:   p.OpsPerSec,
					BytesPerSec: float64(p.BytesPerSec),
				}))
			}
			devs[i] = mem.New(opts...)
		case "redis":
			d, err := redis.Open(context.Background(), sp.arg, redis.WithLimits(limits), redis.WithCapacity(capacity))
			if err != nil {
				err = renamed{strings.TrimPrefix(err.Error(), sp.name()+": "), err}
				devs[i], errs[i] = device.Unavailable(sp.name(), err), err
				continue
			}
			devs[i] = d
		}
	}
	return devs, errs
}

// ErrNotEmpty: a device holds keys that no kvarray array wrote, so an
// array is not created on it (its scrub would take them for orphan pieces).
var ErrNotEmpty = errors.New("device holds other data")

// arrayHeaderKey is where the array keeps its header on every device
// (array/header.go): a device holding it belongs to an array, which
// array.Create names.
var arrayHeaderKey = format.Key([]byte("kvarray"), 0, format.KindArray)

// checkUnused returns ErrNotEmpty, naming a key, when d holds keys but no
// array header: a redis database (or a directory) in use for something
// else.
func checkUnused(ctx context.Context, d device.Device) error {
	info, err := d.Info(ctx)
	if err != nil || info.Keys == 0 {
		return err
	}
	if ok, err := d.Exist(ctx, arrayHeaderKey); err != nil || ok {
		return err
	}
	var first []byte
	stop := errors.New("stop")
	if err := d.Iterate(ctx, nil, func(k []byte) error {
		first = bytes.Clone(k)
		return stop
	}); err != nil && !errors.Is(err, stop) {
		return err
	}
	return fmt.Errorf("%d keys that kvarray did not write (one is %q); create the array on empty devices (for redis, another database number): %w",
		info.Keys, first, ErrNotEmpty)
}

// renamed is an error with a reworded message and the original's chain.
type renamed struct {
	msg string
	err error
}

func (r renamed) Error() string { return r.msg }
func (r renamed) Unwrap() error { return r.err }

func closeAll(devs []device.Device) {
	for _, d := range devs {
		_ = d.Close()
	}
}

// allMem reports whether every device is an in-process emulator, whose
// array exists only for as long as the process.
func (c *Config) allMem() bool {
	for _, s := range c.Devices {
		if !strings.HasPrefix(s, "mem:") {
			return false
		}
	}
	return len(c.Devices) > 0
}

// Create validates cfg, creates its devices (pebble directories included)
// and a new array on them, and returns it open. Every device must open and
// hold no array yet.
func Create(ctx context.Context, cfg *Config) (*array.Array, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	devs, errs := openDevices(cfg, true)
	for i, err := range errs {
		if err == nil {
			err = checkUnused(ctx, devs[i])
		}
		if err != nil {
			closeAll(devs)
			return nil, fmt.Errorf("create: device %d (%s): %w", i, cfg.Devices[i], err)
		}
	}
	a, err := array.Create(ctx, devs, cfg.Options()...)
	if err != nil {
		closeAll(devs)
		return nil, err
	}
	return a, nil
}

// Open loads the config file at path and opens its array. See OpenConfig.
func Open(ctx context.Context, path string) (*array.Array, error) {
	cfg, err := Load(path)
	if err != nil {
		return nil, err
	}
	return OpenConfig(ctx, cfg)
}

// OpenConfig opens the array cfg describes. Devices that cannot be opened
// are reported as failed in the array's Status, by name; a foreign or
// shuffled device is an error naming it. A config of mem devices only
// describes an array that lives as long as the process, so it is created
// instead.
func OpenConfig(ctx context.Context, cfg *Config) (*array.Array, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.allMem() {
		return Create(ctx, cfg)
	}
	devs, errs := openDevices(cfg, false)
	for i, err := range errs {
		// Another process serves the array: opening the devices it lets
		// go of would make two writers (and fail the others in their
		// headers). Refused, naming the holder.
		if errors.Is(err, pebble.ErrInUse) {
			closeAll(devs)
			return nil, fmt.Errorf("open: device %d (%s): %w", i, cfg.Devices[i], err)
		}
	}
	if !slices.ContainsFunc(errs, func(err error) bool { return err == nil }) {
		// Said plainly, rather than as N "no array header" reasons: the
		// usual cause is an array that was never created, or moved.
		closeAll(devs)
		return nil, fmt.Errorf("open: none of the %d devices can be opened; device 0 (%s): %w", len(devs), cfg.Devices[0], errs[0])
	}
	a, err := array.Open(ctx, devs, cfg.Options()...)
	if err != nil {
		closeAll(devs)
		return nil, err
	}
	return a, nil
}

// pieceTag tags each value of a Pebble device with its piece's mechanism
// (format.Tag), so that a rebuild's scan skips reading the pieces whose
// mechanism puts none on the lost device.
func pieceTag(value []byte) device.Tag { return device.Tag(format.Tag(value)) }
