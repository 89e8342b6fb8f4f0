package format

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Header layout, little-endian:
//
//	off size field
//	0   2    magic "KV"
//	2   1    format version (Version)
//	3   1    RM id
//	4   1    EC id
//	5   1    flags (reserved, zero)
//	6   2    length of the RM fields (L)
//	8   4    total splits of the object
//	12  4    user bytes in this split
//	16  8    user bytes in the whole object
//	24  8    write version
//	32  4    CRC32C of the whole value with this field zeroed
//	36  L    RM fields
//	36+L     payload
const (
	HeaderLen = 36
	// Version is the current format version. Decoders reject other versions
	// rather than guess.
	Version = 1

	magic0, magic1 = 'K', 'V'
	crcOff         = 32
	maxFieldsLen   = 1<<16 - 1
)

// ErrCorrupt is returned for a value that fails decoding or verification.
var ErrCorrupt = errors.New("corrupt value")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// zeroCRC stands in for the CRC field while it is computed (a package
// variable: a local one escapes to the heap through crc32.Update).
var zeroCRC [4]byte

// RM identifies a reliability mechanism on disk. The numbers are part of the
// format: never reuse one.
type RM uint8

// Registered mechanism ids.
const (
	RMNone        RM = 0
	RMHashing     RM = 1
	RMReplication RM = 2
	RMSplitting   RM = 3
	RMPacking     RM = 4
)

// EC identifies an erasure code on disk (0: none).
type EC uint8

// Header is the metadata at the start of every internal value.
type Header struct {
	RM        RM
	EC        EC
	Splits    uint32 // total splits of the object (≥ 1)
	SplitLen  uint32 // user bytes held by this split of the object
	ObjectLen uint64 // user bytes of the whole object
	// Version orders writes of one key: every piece written by one store of
	// a key carries the same version, and a later store a larger one, so
	// pieces of different stores are told apart and the newest wins.
	Version uint64
	// Fields holds the mechanism's own metadata (copies, shard index, set
	// id...), opaque to this package.
	Fields []byte
}

// Value is a decoded internal value.
type Value struct {
	Header
	Payload []byte
}

// EncodedLen is the length of the encoding of a value with h and a payload
// of n bytes.
func EncodedLen(h *Header, n int) int { return HeaderLen + len(h.Fields) + n }

// Encode returns the encoding of h and payload.
func Encode(h *Header, payload []byte) []byte {
	return Append(make([]byte, 0, EncodedLen(h, len(payload))), h, payload)
}

// Append appends the encoding of h and payload to dst. It panics if
// h.Fields is longer than 65535 bytes, which no mechanism writes.
func Append(dst []byte, h *Header, payload []byte) []byte {
	if len(h.Fields) > maxFieldsLen {
		panic(fmt.Sprintf("format: %d bytes of RM fields", len(h.Fields)))
	}
	start := len(dst)
	dst = append(dst, magic0, magic1, Version, byte(h.RM), byte(h.EC), 0)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(h.Fields)))
	dst = binary.LittleEndian.AppendUint32(dst, h.Splits)
	dst = binary.LittleEndian.AppendUint32(dst, h.SplitLen)
	dst = binary.LittleEndian.AppendUint64(dst, h.ObjectLen)
	dst = binary.LittleEndian.AppendUint64(dst, h.Version)
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	dst = append(dst, h.Fields...)
	dst = append(dst, payload...)
	binary.LittleEndian.PutUint32(dst[start+crcOff:], checksum(dst[start:]))
	return dst
}

// checksum is the CRC32C of an encoded value, taken as if its CRC field were
// zero.
func checksum(b []byte) uint32 {
	c := crc32.Update(0, castagnoli, b[:crcOff])
	c = crc32.Update(c, castagnoli, zeroCRC[:])
	return crc32.Update(c, castagnoli, b[crcOff+4:])
}

// Decode parses and verifies an internal value. The returned Fields and
// Payload alias b. Every failure wraps ErrCorrupt.
func Decode(b []byte) (Value, error) {
	h, n, err := decodeHeader(b, false)
	if err != nil {
		return Value{}, err
	}
	if got, want := checksum(b), binary.LittleEndian.Uint32(b[crcOff:]); got != want {
		return Value{}, fmt.Errorf("%w: checksum %08x, header says %08x", ErrCorrupt, got, want)
	}
	return Value{Header: h, Payload: b[n:]}, nil
}

// PeekHeader parses the header at the start of b, the first bytes of an
// internal value (a partial read, device.Op.Len), WITHOUT verifying it:
// the checksum covers the whole value, so the caller must verify what it
// relies on some other way. Fields holds the RM fields b has (fewer than
// the header says when b ends first); fieldsLen is their full length.
func PeekHeader(b []byte) (h Header, fieldsLen int, err error) {
	h, n, err := decodeHeader(b, true)
	return h, n - HeaderLen, err
}

// decodeHeader checks the structure of b and returns its header and the
// offset of the payload, without verifying the checksum. A prefix may end
// within the RM fields.
func decodeHeader(b []byte, prefix bool) (Header, int, error) {
	if len(b) < HeaderLen {
		return Header{}, 0, fmt.Errorf("%w: %d bytes, shorter than a header", ErrCorrupt, len(b))
	}
	if b[0] != magic0 || b[1] != magic1 {
		return Header{}, 0, fmt.Errorf("%w: bad magic %#x", ErrCorrupt, b[:2])
	}
	if b[2] != Version {
		return Header{}, 0, fmt.Errorf("%w: format version %d, this build reads %d", ErrCorrupt, b[2], Version)
	}
	if b[5] != 0 {
		return Header{}, 0, fmt.Errorf("%w: unknown flags %#x", ErrCorrupt, b[5])
	}
	fl := int(binary.LittleEndian.Uint16(b[6:]))
	n := HeaderLen + fl
	if len(b) < n && !prefix {
		return Header{}, 0, fmt.Errorf("%w: %d bytes of RM fields past the end", ErrCorrupt, fl)
	}
	h := Header{
		RM:        RM(b[3]),
		EC:        EC(b[4]),
		Splits:    binary.LittleEndian.Uint32(b[8:]),
		SplitLen:  binary.LittleEndian.Uint32(b[12:]),
		ObjectLen: binary.LittleEndian.Uint64(b[16:]),
		Version:   binary.LittleEndian.Uint64(b[24:]),
		Fields:    b[HeaderLen:min(n, len(b)):min(n, len(b))],
	}
	if h.Splits == 0 || h.Splits > MaxSplits {
		return Header{}, 0, fmt.Errorf("%w: %d splits", ErrCorrupt, h.Splits)
	}
	if uint64(h.SplitLen) > h.ObjectLen {
		return Header{}, 0, fmt.Errorf("%w: split of %d bytes in an object of %d", ErrCorrupt, h.SplitLen, h.ObjectLen)
	}
	return h, n, nil
}

// maxTagged is the largest RM id a Tag can carry: tags have 3 bits
// (device.MaxTag), and 0 means unknown.
const maxTagged = 6

// Tag returns the tag of internal value b for a device that keeps one
// beside each key (device.Tag: Pebble keeps it with a value it separates
// into a blob file): 1 + the RM id in b's header, read WITHOUT verifying
// it, or 0 when b does not start with a header of this format version or
// names an RM id past 6. A scan can then tell a piece's mechanism without
// reading the piece. Part of the format: a device keeps the tags it
// stored as long as their values.
func Tag(b []byte) uint8 {
	if len(b) < HeaderLen || b[0] != magic0 || b[1] != magic1 || b[2] != Version || b[3] > maxTagged {
		return 0
	}
	return b[3] + 1
}

// TagRM returns the RM id a tag from Tag carries; false for 0 (unknown).
func TagRM(tag uint8) (RM, bool) {
	if tag == 0 || tag > maxTagged+1 {
		return 0, false
	}
	return RM(tag - 1), true
}
