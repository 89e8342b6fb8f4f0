package devicetest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/devicetest"
)

// TestMapDevice runs the suite on the simplest device that meets the
// contract: an unordered map whose Batch is device.RunBatch. It checks
// that the suite does not demand more than the contract (order from an
// unordered device, native batching), and that RunBatch conforms.
func TestMapDevice(t *testing.T) {
	devicetest.Run(t, func(t *testing.T, l device.Limits) device.Device {
		return &mapDevice{limits: l.WithDefaults(), m: map[string][]byte{}}
	})
}

type mapDevice struct {
	limits device.Limits
	mu     sync.RWMutex
	m      map[string][]byte
	used   int64
	closed bool
}

var errClosed = fmt.Errorf("map: closed: %w", device.ErrDeviceFailed)

func (d *mapDevice) check(ctx context.Context, key []byte, checkKey bool) error {
	if d.closed {
		return errClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if checkKey {
		return d.limits.CheckKey(key)
	}
	return nil
}

func (d *mapDevice) Store(ctx context.Context, key, value []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(ctx, key, true); err != nil {
		return err
	}
	if err := d.limits.CheckValue(value); err != nil {
		return err
	}
	if old, ok := d.m[string(key)]; ok {
		d.used -= int64(len(key) + len(old))
	}
	d.m[string(key)] = append([]byte{}, value...)
	d.used += int64(len(key) + len(value))
	return nil
}

func (d *mapDevice) Retrieve(ctx context.Context, key []byte) ([]byte, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if err := d.check(ctx, key, true); err != nil {
		return nil, err
	}
	v, ok := d.m[string(key)]
	if !ok {
		return nil, fmt.Errorf("map: %q: %w", key, device.ErrNotFound)
	}
	return append([]byte{}, v...), nil
}

func (d *mapDevice) Delete(ctx context.Context, key []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(ctx, key, true); err != nil {
		return err
	}
	if old, ok := d.m[string(key)]; ok {
		d.used -= int64(len(key) + len(old))
		delete(d.m, string(key))
	}
	return nil
}

func (d *mapDevice) Exist(ctx context.Context, key []byte) (bool, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if err := d.check(ctx, key, true); err != nil {
		return false, err
	}
	_, ok := d.m[string(key)]
	return ok, nil
}

func (d *mapDevice) Iterate(ctx context.Context, prefix []byte, fn func([]byte) error) error {
	d.mu.RLock()
	if err := d.check(ctx, nil, false); err != nil {
		d.mu.RUnlock()
		return err
	}
	var keys []string
	for k := range d.m { // map order: deliberately unordered
		if len(k) >= len(prefix) && k[:len(prefix)] == string(prefix) {
			keys = append(keys, k)
		}
	}
	d.mu.RUnlock()
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn([]byte(k)); err != nil {
			return err
		}
	}
	return nil
}

func (d *mapDevice) Batch(ctx context.Context, ops []device.Op) error {
	d.mu.RLock()
	closed := d.closed
	d.mu.RUnlock()
	if closed {
		for i := range ops {
			ops[i].Err = errClosed
		}
		return errClosed
	}
	return device.RunBatch(ctx, d, ops)
}

func (d *mapDevice) Info(ctx context.Context) (device.Info, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if err := d.check(ctx, nil, false); err != nil {
		return device.Info{}, err
	}
	return device.Info{
		Name: "map", Used: d.used, Keys: int64(len(d.m)),
		MinKeyLen: d.limits.MinKeyLen, MaxKeyLen: d.limits.MaxKeyLen, MaxValueLen: d.limits.MaxValueLen,
	}, nil
}

func (d *mapDevice) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	return nil
}
