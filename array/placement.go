package array

import (
	"context"
	"fmt"
	"slices"

	"github.com/cespare/xxhash/v2"

	"github.com/kvarray/kvarray/mechanism"
)

// Placement (see mechanism.Placement) is fixed when the array is created:
// the weights are recorded in the array header on every device, and every
// open places keys by what the header says, never by the devices' current
// sizes or the config, so that every key stays where it was written.

// WithWeights sets the devices' placement weights at Create, one positive
// number per device in array order (their ratios count: capacities in
// bytes or in TB alike). Open ignores it: the header's weights rule.
// Default: the devices' capacities (device.Info) when every device reports
// one; equal weights, or a device of unknown capacity, give the
// unweighted placement.
func WithWeights(w ...uint64) Option {
	return func(o *options) { o.weights = slices.Clone(w) }
}

// hash is the placement hash of a user key.
func hash(key []byte) uint64 { return xxhash.Sum64(key) }

// primary returns the primary device of split s of key.
func (a *Array) primary(key []byte, s int) int {
	p, _ := a.env.Placement().Place(hash(key), s)
	return p
}

// key returns split s of user (s without the bank bit: see splitKey).
func (a *Array) key(user []byte, s int) mechanism.Key {
	p, x := a.env.Placement().Place(hash(user), s)
	return mechanism.Key{User: user, Split: s, Primary: p, Point: x}
}

// offset returns the offset of device dev in the placement of split s
// (without the bank bit) of user: the piece at offset i < Width of a
// mechanism is on dev when offset < Width.
func (a *Array) offset(user []byte, s, dev int) int {
	return a.env.Offset(a.key(user, s), dev)
}

// createWeights returns the weights Create records (nil: unweighted):
// those given, or the devices' capacities, scaled to fit (see
// mechanism.NormalizeWeights) and capped so that no device is asked to
// hold more than one piece in maxWidth (mechanism.CapWeights).
func (a *Array) createWeights(ctx context.Context) ([]uint64, error) {
	w := a.o.weights
	n := a.env.N()
	if w == nil {
		w = make([]uint64, n)
		for i := range n {
			info, err := a.env.Device(i).Info(ctx)
			if err != nil || info.Capacity <= 0 {
				return nil, nil
			}
			w[i] = uint64(info.Capacity)
		}
	}
	if len(w) != n {
		return nil, fmt.Errorf("%d weights for %d devices: %w", len(w), n, mechanism.ErrBadWeights)
	}
	if slices.Contains(w, 0) {
		return nil, fmt.Errorf("weights %v: each must be positive: %w", w, mechanism.ErrBadWeights)
	}
	w = mechanism.CapWeights(mechanism.NormalizeWeights(w), min(a.maxWidth, n))
	if slices.Min(w) == slices.Max(w) {
		return nil, nil
	}
	return w, nil
}

// setPlacement sets the placement the header records.
func (a *Array) setPlacement() error {
	p, err := mechanism.NewPlacement(a.env.N(), a.hdr.weights)
	if err != nil {
		return err
	}
	a.env.SetPlacement(p)
	return nil
}

// Weights returns the placement weights the array was created with (nil:
// unweighted, every device alike).
func (a *Array) Weights() []uint64 { return a.env.Placement().Weights() }

// sharesSplits reports whether devices d and i can hold pieces of one
// split of a mechanism of width w: unweighted, when they are less than w
// apart in device order; weighted, any two can (a split's points are
// spread over the ring), so a rebuild lists every device.
func (a *Array) sharesSplits(d, i, w int) bool {
	if a.env.Placement().Weighted() {
		return true
	}
	n := a.env.N()
	return (i-d+n)%n < w || (d-i+n)%n < w
}
