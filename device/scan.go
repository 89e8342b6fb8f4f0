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
