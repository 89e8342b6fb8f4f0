package pebble

import (
	"bytes"
	"context"
	"errors"
	"sync"

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
// With a Tagger (WithTagger), want sees the tag of every value: an inline
// value's computed from it, a separated value's from its blob reference,
// where Pebble keeps it as the value's short attribute (0 for a value
// separated before the device had a Tagger).
func (d *Device) ScanFiltered(ctx context.Context, prefix, start []byte, want func(key []byte, tag device.Tag) device.Want, fn func(key, value []byte) error) error {
	return d.scan(ctx, prefix, start, true, want, fn)
}

// tag is the tag of the value lv, as ScanFiltered hands it to want.
func (d *Device) tag(lv pdb.LazyValue) device.Tag {
	if d.tagger == nil {
		return 0 // the attributes stored are no one's to interpret
	}
	if lv.Fetcher == nil {
		return d.tagger.Of(lv.ValueOrHandle)
	}
	attr, _ := lv.TryGetShortAttribute()
	return device.Tag(attr)
}

// scan is Scan, filtered by want when it is not nil (see ScanFiltered).
func (d *Device) scan(ctx context.Context, prefix, start []byte, values bool, want func([]byte, device.Tag) device.Want, fn func(key, value []byte) error) error {
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
			lv := it.LazyValue()
			switch want(it.Key(), d.tag(lv)) {
			case device.Skip:
				continue
			case device.KeyOnly:
				// A value kept inline was read with the key.
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

var _ device.Cursorer = (*Device)(nil)

// Cursor implements device.Cursorer with one Pebble iterator kept open
// between calls. The iterator holds the state of the database it was
// opened on (memtables, and tables a compaction has since replaced, stay
// until it is closed), so callers keep cursors for seconds, not hours.
func (d *Device) Cursor(ctx context.Context, prefix, start []byte) (device.Cursor, error) {
	if err := d.enter(ctx); err != nil {
		return nil, d.errorf("cursor %q: %w", prefix, err)
	}
	defer d.exit()
	it, err := d.db.NewIterWithContext(ctx, &pdb.IterOptions{LowerBound: bytes.Clone(prefix), UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, d.errorf("cursor %q: %w", prefix, failed(err))
	}
	c := &cursor{d: d, it: it, prefix: bytes.Clone(prefix), start: bytes.Clone(start)}
	d.cursorMu.Lock()
	if d.cursors == nil {
		d.cursors = make(map[*cursor]struct{})
	}
	d.cursors[c] = struct{}{}
	d.cursorMu.Unlock()
	return c, nil
}

// cursor is the Device's device.Cursor.
type cursor struct {
	d  *Device
	mu sync.Mutex
	it *pdb.Iterator // nil once closed
	// prefix and start: where the first Next seeks.
	prefix, start []byte
	started       bool
	done          bool // the iterator is exhausted
	err           error
}

func (c *cursor) Next(ctx context.Context) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil || c.done {
		return nil, false
	}
	if c.it == nil {
		c.err = c.d.errorf("cursor %q: %w", c.prefix, errClosed)
		return nil, false
	}
	if err := c.d.enter(ctx); err != nil {
		c.err = c.d.errorf("cursor %q: %w", c.prefix, err)
		return nil, false
	}
	defer c.d.exit()
	var ok bool
	switch {
	case c.started:
		ok = c.it.Next()
	case bytes.Compare(c.start, c.prefix) > 0:
		ok = c.it.SeekGE(c.start)
	default:
		ok = c.it.First()
	}
	c.started = true
	if !ok {
		c.done = true
		if err := c.it.Error(); err != nil {
			c.err = c.d.errorf("cursor %q: %w", c.prefix, failed(err))
		}
		return nil, false
	}
	return c.it.Key(), true
}

func (c *cursor) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *cursor) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.it == nil {
		return nil
	}
	err := c.it.Close()
	c.it = nil
	c.d.cursorMu.Lock()
	delete(c.d.cursors, c)
	c.d.cursorMu.Unlock()
	if err != nil {
		return c.d.errorf("cursor %q: close: %w", c.prefix, failed(err))
	}
	return nil
}

// closeCursors closes the cursors still open, for Close.
func (d *Device) closeCursors() {
	d.cursorMu.Lock()
	open := make([]*cursor, 0, len(d.cursors))
	for c := range d.cursors {
		open = append(open, c)
	}
	d.cursorMu.Unlock()
	for _, c := range open {
		_ = c.Close()
	}
}
