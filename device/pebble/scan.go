package pebble

import (
	"bytes"
	"context"
	"errors"

	pdb "github.com/cockroachdb/pebble/v2"

	"github.com/kvarray/kvarray/device"
)

var (
	_ device.Scanner       = (*Device)(nil)
	_ device.FilterScanner = (*Device)(nil)
)

// Scan implements device.Scanner with one Pebble iterator seeked to start:
// a listing that resumes costs a seek, not a walk from the prefix.
func (d *Device) Scan(ctx context.Context, prefix, start []byte, values bool, fn func(key, value []byte) error) error {
	return d.scan(ctx, prefix, start, values, nil, fn)
}

// ScanFiltered implements device.FilterScanner: a separated value
// (tuning.go: 1 KiB and more) that want does not ask for stays unread in
// its blob file; a value kept inline in the key's table is handed out.
func (d *Device) ScanFiltered(ctx context.Context, prefix, start []byte, want func(key []byte) device.Want, fn func(key, value []byte) error) error {
	return d.scan(ctx, prefix, start, true, want, fn)
}

// scan is Scan, filtered by want when it is not nil (see ScanFiltered).
func (d *Device) scan(ctx context.Context, prefix, start []byte, values bool, want func([]byte) device.Want, fn func(key, value []byte) error) error {
	if err := d.enter(ctx); err != nil {
		return d.errorf("scan %q: %w", prefix, err)
	}
	defer d.exit()
	it, err := d.db.NewIterWithContext(ctx, &pdb.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return d.errorf("scan %q: %w", prefix, failed(err))
	}
	var ok bool
	if bytes.Compare(start, prefix) > 0 {
		ok = it.SeekGE(start)
	} else {
		ok = it.First()
	}
	var key, val []byte // copies, so fn cannot disturb the iterator's buffers
	for ; ok; ok = it.Next() {
		if err := ctx.Err(); err != nil {
			_ = it.Close()
			return d.errorf("scan %q: %w", prefix, err)
		}
		read := values
		if want != nil {
			switch want(it.Key()) {
			case device.Skip:
				continue
			case device.KeyOnly:
				// A value kept inline was read with the key.
				lv := it.LazyValue()
				read = lv.Fetcher == nil
			}
		}
		key = append(key[:0], it.Key()...)
		var v []byte
		if read {
			b, err := it.ValueAndErr()
			if err != nil {
				_ = it.Close()
				return d.errorf("scan %q: value of %q: %w", prefix, key, failed(err))
			}
			val = append(val[:0], b...)
			v = val
		}
		if err := fn(key, v); err != nil {
			_ = it.Close()
			return err
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return d.errorf("scan %q: %w", prefix, failed(err))
	}
	return nil
}
