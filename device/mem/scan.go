package mem

import (
	"bytes"
	"context"

	"github.com/kvarray/kvarray/device"
)

var (
	_ device.Scanner       = (*Device)(nil)
	_ device.FilterScanner = (*Device)(nil)
)

// Scan implements device.Scanner as Iterate does: a chunk at a time, with
// no lock held while fn runs. It counts as one iteration in Stats (the
// values it hands out are not counted as retrieves), and the speed model
// charges the values' bytes.
func (d *Device) Scan(ctx context.Context, prefix, start []byte, values bool, fn func(key, value []byte) error) error {
	return d.scan(ctx, prefix, start, values, nil, fn)
}

// ScanFiltered implements device.FilterScanner. With a tagger
// (WithTagger), want sees each value's tag and a device.KeyOnly key is
// handed out without its value; without one, want sees tag 0 and every
// key it does not skip comes with its value.
func (d *Device) ScanFiltered(ctx context.Context, prefix, start []byte, want func(key []byte, tag device.Tag) device.Want, fn func(key, value []byte) error) error {
	return d.scan(ctx, prefix, start, true, want, fn)
}

// scan is Scan, filtered by want when it is not nil (see ScanFiltered).
func (d *Device) scan(ctx context.Context, prefix, start []byte, values bool, want func([]byte, device.Tag) device.Want, fn func(key, value []byte) error) error {
	d.iterates.Add(1)
	if err := d.begin(ctx, nil, false); err != nil {
		return d.errorf("scan %q: %w", prefix, err)
	}
	if err := d.delay(ctx, 1, 0, true); err != nil {
		return d.errorf("scan %q: %w", prefix, err)
	}
	cursor := bytes.Clone(prefix)
	if bytes.Compare(start, cursor) > 0 {
		cursor = bytes.Clone(start)
	}
	var (
		chunk = make([]entry, 0, iterChunk)
		key   []byte // handed to fn, so fn cannot reach the stored key
	)
	for {
		chunk = chunk[:0]
		more := false
		d.mu.RLock()
		err := d.stateLocked()
		if err == nil {
			d.tree.AscendGreaterOrEqual(entry{key: cursor}, func(e entry) bool {
				if !bytes.HasPrefix(e.key, prefix) {
					return false
				}
				if len(chunk) == iterChunk {
					more = true
					return false
				}
				// Copied under the lock: Corrupt modifies values in
				// place. Stored keys never change.
				c := entry{key: e.key}
				if values {
					c.value = bytes.Clone(e.value)
				}
				chunk = append(chunk, c)
				return true
			})
		}
		d.mu.RUnlock()
		if err != nil {
			return d.errorf("scan %q: %w", prefix, err)
		}
		var n int
		for _, e := range chunk {
			if err := ctx.Err(); err != nil {
				return d.errorf("scan %q: %w", prefix, err)
			}
			key = append(key[:0], e.key...)
			v := e.value
			if want != nil {
				switch want(key, d.tagger.Of(v)) {
				case device.Skip:
					continue
				case device.KeyOnly:
					if d.tagger != nil {
						v = nil // kept apart: not read
					}
				}
			}
			n += len(v)
			if err := fn(key, v); err != nil {
				return err
			}
		}
		if n > 0 {
			if err := d.delay(ctx, 0, n, false); err != nil {
				return d.errorf("scan %q: %w", prefix, err)
			}
		}
		if !more {
			return nil
		}
		last := chunk[len(chunk)-1].key
		cursor = append(append(cursor[:0], last...), 0)
	}
}
