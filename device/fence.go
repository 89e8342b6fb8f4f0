package device

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// ErrFenced: the device refused a write because another process has taken
// the array over (its fence holds a newer owner epoch). It is not a device
// failure: the device is fine, this process is no longer its writer, and
// nothing it writes may be acknowledged.
var ErrFenced = errors.New("fenced: the array has a newer owner")

// Fencer is implemented by devices that processes on other hosts can
// write (a redis:// server): the array fences them when it takes
// ownership, so that a deposed owner's late writes are refused by the
// device itself. A device only one process can open (Pebble's directory
// lock, mem) needs none.
//
// Contract: Fence(key, epoch, owner) stores FenceToken(epoch, owner) under
// key unless the token there is of a newer epoch, or of the same epoch and
// another owner (then ErrFenced, naming that token). From then on every
// write of this device object checks the fence in the same step as it
// writes (no round trip of its own) and fails with ErrFenced once another
// token holds it; a fence that is older or absent (a device that was down
// when the array was taken over) is set by the write.
type Fencer interface {
	Fence(ctx context.Context, key []byte, epoch uint64, owner string) error
}

// FenceToken is the value a fence holds: the epoch, fixed width, so that
// it parses from any token, then the owner.
func FenceToken(epoch uint64, owner string) string {
	return fmt.Sprintf("%020d %s", epoch, owner)
}

// ParseFenceToken returns the epoch and owner of a fence token.
func ParseFenceToken(tok []byte) (epoch uint64, owner string, ok bool) {
	if len(tok) < 21 || tok[20] != ' ' {
		return 0, "", false
	}
	e, err := strconv.ParseUint(string(tok[:20]), 10, 64)
	if err != nil {
		return 0, "", false
	}
	return e, string(tok[21:]), true
}

// AsFencer returns the Fencer under d's decorators (each exposing
// Unwrap() Device), if any.
func AsFencer(d Device) (Fencer, bool) {
	for d != nil {
		if f, ok := d.(Fencer); ok {
			return f, true
		}
		u, ok := d.(interface{ Unwrap() Device })
		if !ok {
			return nil, false
		}
		d = u.Unwrap()
	}
	return nil, false
}
