// Package format is kvarray's on-device encoding: how a user key becomes the
// internal keys stored on devices, and how a piece of a value is framed with a
// self-describing, checksummed header.
//
// Internal key = user key ‖ split number (2 bytes, big-endian) ‖ kind (1 byte).
// The suffix has a fixed length, so parsing from the end is unambiguous for
// any user key. Split 0 with kind KindData is the key every mechanism stores
// on the primary device (the KVMD rule "store at least the first piece under
// the user key"), so one read of the primary always finds the header.
//
// Internal value = header ‖ RM fields ‖ payload, see Header. The CRC32C
// covers all three, so a value is either whole and self-consistent or is
// reported as ErrCorrupt; nothing is trusted before the checksum verifies.
package format

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// KeyOverhead is the number of bytes an internal key adds to a user key: the
// largest user key is the device's largest key minus KeyOverhead.
const KeyOverhead = 3

// MaxSplits is the number of splits a split number can address.
const MaxSplits = 1 << 16

// Kind tells what an internal key holds. Mechanisms may define their own
// kinds in the range [KindMechanism, KindBank).
type Kind uint8

// Kinds.
const (
	// KindData holds a piece of a user value (a copy, a shard, a member).
	KindData Kind = 0
	// KindMechanism is the first kind reserved for mechanisms' own objects
	// (parity, metadata).
	KindMechanism Kind = 1
	// KindBank holds a piece of a user value that its mechanism wrote out
	// of place: the pieces past the primary of a write of odd version,
	// for mechanisms whose in-place overwrite could leave neither the old
	// nor the new value whole (Splitting, see mechanism.Key.PieceKey).
	// Its pieces obey the placement rules of KindData's.
	KindBank Kind = 0xFE
	// KindArray holds the array's own metadata (the array header).
	KindArray Kind = 0xFF
)

// HoldsPiece reports whether keys of kind hold pieces of user values,
// placed on the devices from their split's primary: KindData and KindBank.
func HoldsPiece(kind Kind) bool { return kind == KindData || kind == KindBank }

// ErrBadKey is returned when an internal key cannot be parsed.
var ErrBadKey = errors.New("malformed internal key")

// Key returns the internal key for user key, split and kind.
func Key(user []byte, split int, kind Kind) []byte {
	return AppendKey(make([]byte, 0, len(user)+KeyOverhead), user, split, kind)
}

// AppendKey appends the internal key to dst.
func AppendKey(dst, user []byte, split int, kind Kind) []byte {
	dst = append(dst, user...)
	dst = binary.BigEndian.AppendUint16(dst, uint16(split))
	return append(dst, byte(kind))
}

// ParseKey splits an internal key into its parts. The user key aliases k.
func ParseKey(k []byte) (user []byte, split int, kind Kind, err error) {
	if len(k) < KeyOverhead {
		return nil, 0, 0, fmt.Errorf("%w: %d bytes", ErrBadKey, len(k))
	}
	n := len(k) - KeyOverhead
	return k[:n], int(binary.BigEndian.Uint16(k[n:])), Kind(k[n+2]), nil
}
