package server

import (
	"context"
	"errors"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/keyspace"
)

// errorKinds maps the array's sentinels to the prefix of their RESP error,
// most specific first. The array's message follows the prefix, so that the
// client sees both the kind (to branch on) and the detail (key, sizes,
// devices).
var errorKinds = []struct {
	err    error
	prefix string
}{
	{array.ErrKeyTooLong, "ERR key too long: "},
	{array.ErrKeyTooShort, "ERR key too short: "},
	{array.ErrValueTooLarge, "ERR value too large: "},
	{array.ErrUnknownMechanism, "ERR unknown mechanism: "},
	{array.ErrDataLoss, "ERR data loss: "},
	// Redis's reply when maxmemory refuses a write, for clients that
	// branch on it: too many of the write's devices are full (the
	// message names them).
	{device.ErrFull, "OOM command not allowed when used memory > 'maxmemory'. "},
	{device.ErrNoSpace, "ERR device full: "},
	{array.ErrUnavailable, "ERR unavailable: "},
	{device.ErrDeviceFailed, "ERR device failed: "},
	{device.ErrCorrupt, "ERR corrupt: "},
	{array.ErrNotFound, "ERR not found: "},
	{array.ErrClosed, "ERR shutting down: "},
	{context.Canceled, "ERR shutting down: "},
	{context.DeadlineExceeded, "ERR timeout: "},
}

// errorReply is the RESP error for an error from the array.
func errorReply(err error) string {
	if errors.Is(err, keyspace.ErrWrongType) {
		return keyspace.ErrWrongType.Error() // Redis's, exactly
	}
	for _, k := range errorKinds {
		if errors.Is(err, k.err) {
			return k.prefix + err.Error()
		}
	}
	return "ERR " + err.Error()
}
