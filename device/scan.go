package device

import (
	"bytes"
	"context"
	"errors"
)

// Scanner is an optional interface of ordered devices (Info().Ordered):
// iteration that starts at a key and can hand out values, so that a
// listing resumes where it stopped without walking what came before, and
// a rebuild reads the pieces' headers in the same pass as their keys.
type Scanner interface {
	// Scan calls fn for each key that starts with prefix and is not
	// less than start (nil: from the first), in ascending byte order,
	// with its value when values is true (nil otherwise). Key and value
	// are valid only during the call. A non-nil error from fn stops the
	// scan and is returned. Keys stored or deleted during the scan may or
	// may not be seen; every other key is seen exactly once.
	Scan(ctx context.Context, prefix, start []byte, values bool, fn func(key, value []byte) error) error
}

// Scan is d's Scan when it implements Scanner. Otherwise it falls back to
// Iterate, skipping keys below start (in ascending order only when d is
// ordered) and reading each value with Retrieve when values is true (a key
// deleted meanwhile is skipped): correct for any device, but O(keys) per
// call and one read per value.
func Scan(ctx context.Context, d Device, prefix, start []byte, values bool, fn func(key, value []byte) error) error {
	if s, ok := d.(Scanner); ok {
		return s.Scan(ctx, prefix, start, values, fn)
	}
	return d.Iterate(ctx, prefix, func(k []byte) error {
		if start != nil && bytes.Compare(k, start) < 0 {
			return nil
		}
		if !values {
			return fn(k, nil)
		}
		v, err := d.Retrieve(ctx, k)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				return nil
			}
			return err
		}
		return fn(k, v)
	})
}

// Orderer is an optional interface of devices that know at no cost
// whether they iterate in ascending key order (Info().Ordered): Info may
// cost far more (Pebble's computes the disk usage and key count), and
// every listing page asks each device.
type Orderer interface {
	Ordered() bool
}

// IsOrdered is d's Ordered when it implements Orderer, else Info's.
func IsOrdered(ctx context.Context, d Device) (bool, error) {
	if o, ok := d.(Orderer); ok {
		return o.Ordered(), nil
	}
	info, err := d.Info(ctx)
	return info.Ordered, err
}

// Want is what a filtered scan (ScanFiltered) does with a key.
type Want uint8

const (
	Skip Want = iota // not handed out
	// KeyOnly: handed out without reading its value: with a nil value,
	// or with the value when the device had it at hand anyway (read
	// with the key: a small value Pebble keeps inline, or any value of
	// a device that reads values with their keys).
	KeyOnly
	KeyValue // handed out with its value
)

// A Tag summarises a value in 3 bits, as the device's Tagger computed it
// when the value was stored; 0 is unknown. A device that keeps values
// apart from keys can keep the tag beside the key (Pebble's short
// attribute), so that a filtered scan tells a value's tag without reading
// the value.
type Tag uint8

// MaxTag is the largest Tag.
const MaxTag Tag = 7

// A Tagger computes a value's Tag (at most MaxTag). It must be a pure
// function of the value's bytes, and the same for as long as the data
// lives: a device may store the tags it computed.
type Tagger func(value []byte) Tag

// Of is t's tag of value: 0 when t is nil, or when it returns more than
// MaxTag.
func (t Tagger) Of(value []byte) Tag {
	if t == nil {
		return 0
	}
	if tag := t(value); tag <= MaxTag {
		return tag
	}
	return 0
}

// FilterScanner is an optional interface of Scanners that can skip the
// values of keys a caller does not need: on devices that keep values
// apart from keys (Pebble's blob files), a value costs a read of its own,
// and a rebuild needs one value of each key, from one of its neighbours.
type FilterScanner interface {
	// ScanFiltered is Scan with values, except that want decides for
	// each key whether fn sees it, and with its value or not; a value
	// not handed out is not read. want sees each key once, in order,
	// with its value's tag when the device knows it without reading the
	// value (0 otherwise), and must not keep the key.
	ScanFiltered(ctx context.Context, prefix, start []byte, want func(key []byte, tag Tag) Want, fn func(key, value []byte) error) error
}

// ScanFiltered is d's ScanFiltered when it implements FilterScanner, and
// otherwise Scan with values, the skipped keys dropped after their values
// were read (every value is read, and handed out; want sees tag 0).
func ScanFiltered(ctx context.Context, d Device, prefix, start []byte, want func(key []byte, tag Tag) Want, fn func(key, value []byte) error) error {
	if s, ok := d.(FilterScanner); ok {
		return s.ScanFiltered(ctx, prefix, start, want, fn)
	}
	return Scan(ctx, d, prefix, start, true, func(k, v []byte) error {
		if want(k, 0) == Skip {
			return nil
		}
		return fn(k, v)
	})
}
