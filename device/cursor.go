package device

import (
	"bytes"
	"context"
	"errors"
	"slices"
)

// Cursor is a pull iteration over a device's keys that start with a
// prefix, in ascending byte order, from a start key. A listing that goes
// on over many calls (a SCAN cursor's pages) keeps one open between them
// instead of seeking anew on every call: on an LSM a seek touches every
// level, a step touches the block at hand.
//
// A cursor is used by one goroutine at a time. Keys stored or deleted
// after it was opened may or may not be seen; every other key is seen
// exactly once. It must be closed; a device closes the cursors still open
// when it is closed, and their Next then fails.
type Cursor interface {
	// Next returns the next key, valid until the following call, or false
	// at the end or on an error (then Err says which).
	Next(ctx context.Context) ([]byte, bool)
	Err() error
	Close() error
}

// Cursorer is an optional interface of devices that open Cursors natively
// (Pebble: one iterator, kept open).
type Cursorer interface {
	Cursor(ctx context.Context, prefix, start []byte) (Cursor, error)
}

// OpenCursor is d's Cursor when it implements Cursorer. Otherwise it is a
// cursor over Scan that reads cursorChunk keys a call (a seek per chunk:
// correct for any ordered device, and no worse than a listing that seeks
// every call), or, on a device that does not iterate in order, over all
// its matching keys collected and sorted at once (O(keys) memory, as any
// ordered listing of such a device needs).
func OpenCursor(ctx context.Context, d Device, prefix, start []byte) (Cursor, error) {
	if c, ok := d.(Cursorer); ok {
		return c.Cursor(ctx, prefix, start)
	}
	ordered, err := IsOrdered(ctx, d)
	if err != nil {
		return nil, err
	}
	c := &chunkCursor{d: d, prefix: bytes.Clone(prefix), from: bytes.Clone(start)}
	if !ordered {
		if c.keys, err = SortedKeys(ctx, d, prefix, start, nil); err != nil {
			return nil, err
		}
		c.end = true
	}
	return c, nil
}

// SortedKeys returns d's keys that start with prefix, are not less than
// start and that keep (nil: every one) lets through, sorted: what an
// ordered listing of a device that does not iterate in order takes, in
// O(keys) memory.
func SortedKeys(ctx context.Context, d Device, prefix, start []byte, keep func([]byte) bool) ([][]byte, error) {
	var keys [][]byte
	err := d.Iterate(ctx, prefix, func(k []byte) error {
		if bytes.Compare(k, start) >= 0 && (keep == nil || keep(k)) {
			keys = append(keys, slices.Clone(k))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(keys, bytes.Compare)
	return keys, nil
}

// cursorChunk is how many keys a chunkCursor reads per Scan.
const cursorChunk = 128

// chunkCursor is OpenCursor's cursor over Scan.
type chunkCursor struct {
	d      Device
	prefix []byte
	from   []byte // where the next chunk starts
	keys   [][]byte
	end    bool // no chunk is left to read
	err    error
}

var errChunkFull = errors.New("chunk full")

func (c *chunkCursor) Next(ctx context.Context) ([]byte, bool) {
	if len(c.keys) == 0 && !c.end && c.err == nil {
		err := Scan(ctx, c.d, c.prefix, c.from, false, func(k, _ []byte) error {
			c.keys = append(c.keys, slices.Clone(k))
			if len(c.keys) == cursorChunk {
				return errChunkFull
			}
			return nil
		})
		switch {
		case errors.Is(err, errChunkFull):
			c.from = append(slices.Clip(c.keys[len(c.keys)-1]), 0)
		case err != nil:
			c.err, c.keys = err, nil
		default:
			c.end = true
		}
	}
	if len(c.keys) == 0 {
		return nil, false
	}
	k := c.keys[0]
	c.keys = c.keys[1:]
	return k, true
}

func (c *chunkCursor) Err() error { return c.err }

func (c *chunkCursor) Close() error {
	c.keys, c.end = nil, true
	return nil
}
