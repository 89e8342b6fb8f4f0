package main

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/config"
	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/mechanism"
	"github.com/kvarray/kvarray/metrics"
)

// slot is a device position of an array kvarray serve holds: the array
// keeps the slot for good, and an online replace swaps the device inside
// it (array.ReplaceDevice with nil: "swapped underneath"), so that the
// array's device table is never written while operations read it.
type slot struct {
	d     atomic.Pointer[device.Device]
	fence atomic.Pointer[fenceArgs] // the array's fence, for devices swapped in
	// reopen serialises reopenInSlot's close and open of the device.
	reopen sync.Mutex
}

// fenceArgs are the arguments of the array's device.Fencer call.
type fenceArgs struct {
	key   []byte
	epoch uint64
	owner string
}

// Fence implements device.Fencer for the device in the slot, and for
// every device swapped in later: an online replace must not put an
// unfenced device under the array (device.Fencer).
func (s *slot) Fence(ctx context.Context, key []byte, epoch uint64, owner string) error {
	s.fence.Store(&fenceArgs{key: key, epoch: epoch, owner: owner})
	if f, ok := device.AsFencer(s.dev()); ok {
		return f.Fence(ctx, key, epoch, owner)
	}
	return nil
}

func newSlot(d device.Device) *slot {
	s := &slot{}
	s.d.Store(&d)
	return s
}

func (s *slot) dev() device.Device { return *s.d.Load() }

// Unwrap exposes the device in the slot to device.AsSpaceProber: a full
// Pebble device says when its space is back.
func (s *slot) Unwrap() device.Device { return s.dev() }

// swap puts d in the slot and returns the device it held.
func (s *slot) swap(d device.Device) device.Device {
	if a := s.fence.Load(); a != nil {
		if f, ok := device.AsFencer(d); ok {
			// Refused (deposed) or failing: its writes fail the same way.
			_ = f.Fence(context.Background(), a.key, a.epoch, a.owner)
		}
	}
	return *s.d.Swap(&d)
}

func (s *slot) Store(ctx context.Context, key, value []byte) error {
	return s.dev().Store(ctx, key, value)
}
func (s *slot) Retrieve(ctx context.Context, key []byte) ([]byte, error) {
	return s.dev().Retrieve(ctx, key)
}
func (s *slot) Delete(ctx context.Context, key []byte) error { return s.dev().Delete(ctx, key) }
func (s *slot) Exist(ctx context.Context, key []byte) (bool, error) {
	return s.dev().Exist(ctx, key)
}
func (s *slot) Iterate(ctx context.Context, prefix []byte, fn func(key []byte) error) error {
	return s.dev().Iterate(ctx, prefix, fn)
}
func (s *slot) Batch(ctx context.Context, ops []device.Op) error { return s.dev().Batch(ctx, ops) }
func (s *slot) Info(ctx context.Context) (device.Info, error)    { return s.dev().Info(ctx) }
func (s *slot) Close() error                                     { return s.dev().Close() }

// The device's optional interfaces pass through the slot too: without
// them every SCAN page listed its database from the start (device.Scan's
// fallback on Iterate: 39 ms a page at 100k keys, a full redis-cli --scan
// in 6.5 minutes), and an online rebuild read every value of every
// neighbour and synced every batch.

// Scan implements device.Scanner.
func (s *slot) Scan(ctx context.Context, prefix, start []byte, values bool, fn func(key, value []byte) error) error {
	return device.Scan(ctx, s.dev(), prefix, start, values, fn)
}

// ScanFiltered implements device.FilterScanner.
func (s *slot) ScanFiltered(ctx context.Context, prefix, start []byte, want func(key []byte, tag device.Tag) device.Want, fn func(key, value []byte) error) error {
	return device.ScanFiltered(ctx, s.dev(), prefix, start, want, fn)
}

// Cursor implements device.Cursorer. A cursor stays on the device it was
// opened on; a device swapped meanwhile closes it when it is closed.
func (s *slot) Cursor(ctx context.Context, prefix, start []byte) (device.Cursor, error) {
	return device.OpenCursor(ctx, s.dev(), prefix, start)
}

// Ordered implements device.Orderer.
func (s *slot) Ordered() bool {
	ordered, err := device.IsOrdered(context.Background(), s.dev())
	return err == nil && ordered
}

// BatchDeferred implements device.Deferred: the device's, or a synced
// Batch on a device that cannot defer (more durable than asked).
func (s *slot) BatchDeferred(ctx context.Context, ops []device.Op) error {
	if d, ok := s.dev().(device.Deferred); ok {
		return d.BatchDeferred(ctx, ops)
	}
	return s.dev().Batch(ctx, ops)
}

// Sync implements device.Deferred. Deferred writes made to a device that
// was swapped out since are not its successor's to sync: a swap comes
// with a replace, which starts its rebuild over on the new device.
func (s *slot) Sync(ctx context.Context) error {
	if d, ok := s.dev().(device.Deferred); ok {
		return d.Sync(ctx)
	}
	return nil
}

// reopenInSlot opens device i of cfg again in s, for a full device whose
// space is back but whose engine stays read-only (a Pebble instance that
// met ENOSPC, device.ErrReopen): the old device is closed first (Pebble's
// lock), so calls meanwhile fail as on a device that is down, and the
// array resyncs the device once it is back. When it does not open, the
// slot holds a device that fails every call.
func reopenInSlot(cfg *config.Config, m *metrics.Metrics, s *slot, i int) error {
	s.reopen.Lock()
	defer s.reopen.Unlock()
	name, _ := cfg.DeviceName(i)
	_ = s.swap(device.Unavailable(name, errors.New("being opened again: its space is back"))).Close()
	nd, err := cfg.OpenDevice(i, false)
	if err != nil {
		s.swap(device.Unavailable(name, err))
		return err
	}
	if m != nil {
		nd = m.WrapDevice(i, name, nd)
	}
	s.swap(nd)
	return nil
}

// adoptInSlot is how an online replace hands the new device to the array:
// the device is marked failed first, so that no read takes the new,
// empty device for one that holds its keys; then the new device goes in
// the slot, the old one is closed, and the array adopts the slot's new
// content as a device to rebuild.
func adoptInSlot(ctx context.Context, a *array.Array, s *slot, dev int, nd device.Device) error {
	a.SetDeviceState(dev, mechanism.Failed)
	old := s.swap(nd)
	_ = old.Close()
	return a.ReplaceDevice(ctx, dev, nil)
}
