package array

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
)

// A full device (mechanism.Full) is read-only-full: a write of it failed
// with device.ErrFull (a file system out of space, a Redis server at its
// maxmemory). It keeps serving reads; writes miss it and are recorded, as
// for a failed device, and a write for which more of its devices are
// full or failed than its mechanism tolerates is refused with an error
// wrapping device.ErrFull that names them. Space coming back is found by
// probing (spaceBack): on every automatic resync round and on Resync,
// which then re-admits the device and repairs what it missed, while the
// array serves. A Pebble device that met ENOSPC cannot write again in the
// same instance: it is opened again (WithReopen) before the resync.

// spaceProbeKey is the key a trial write uses to find whether a full
// device takes writes again (a device without device.SpaceProber). It is
// array metadata: never listed as a user key, and deleted after.
var spaceProbeKey = format.Key([]byte("\x00kvarray-space-probe"), 0, format.KindArray)

// Reopener opens device i of the array again, for a full device whose
// space is back but whose device object stays read-only
// (device.ErrReopen): it closes the old device, opens the same one again
// and returns it, or returns nil when it swapped the new one in
// underneath (a slot, as kvarray serve's).
type Reopener func(ctx context.Context, i int) (device.Device, error)

// WithReopen gives the array a way to reopen a full device whose space is
// back (see Reopener). Without it such a device stays full until the
// process opens the array again.
func WithReopen(r Reopener) Option { return func(o *options) { o.reopen = r } }

// ErrStillFull is the error of a resync of a full device whose space has
// not come back. It wraps device.ErrFull.
var ErrStillFull = fmt.Errorf("still full: %w", device.ErrFull)

// spaceBack returns nil once full device i takes writes again, reopening
// it when its device says it must be (device.ErrReopen); an error wrapping
// ErrStillFull while it does not.
func (a *Array) spaceBack(ctx context.Context, i int) error {
	a.spaceMu.Lock()
	defer a.spaceMu.Unlock()
	if a.env.State(i) != mechanism.Full {
		return nil // brought back meanwhile (another resync), or failed
	}
	d := a.env.Device(i)
	var err error
	if p, ok := device.AsSpaceProber(d); ok {
		err = p.ProbeSpace(ctx)
	} else {
		err = d.Store(ctx, spaceProbeKey, []byte("kvarray: is there space?"))
		if err == nil {
			_ = d.Delete(ctx, spaceProbeKey)
		}
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, device.ErrReopen):
		if a.o.reopen == nil {
			return fmt.Errorf("device %d (%s): %w; this process cannot open it again: restart it", i, a.env.Name(i), err)
		}
		nd, rerr := a.o.reopen(ctx, i)
		if rerr != nil {
			return fmt.Errorf("device %d (%s): space is back, but opening it again failed: %w", i, a.env.Name(i), rerr)
		}
		if nd != nil {
			a.env.SetDevice(i, nd)
		}
		return nil
	case errors.Is(err, device.ErrFull), errors.Is(err, device.ErrNoSpace):
		return fmt.Errorf("device %d (%s): %w: %v", i, a.env.Name(i), ErrStillFull, err)
	}
	return fmt.Errorf("device %d (%s): probe its space: %w", i, a.env.Name(i), err)
}

// FullDevices lists the devices marked full.
func (a *Array) FullDevices() []int { return a.devicesIn(mechanism.Full) }

// devicesIn lists the devices in state s.
func (a *Array) devicesIn(s mechanism.State) []int {
	var in []int
	for i := range a.env.N() {
		if a.env.State(i) == s {
			in = append(in, i)
		}
	}
	return in
}
