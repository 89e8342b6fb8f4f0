package format

import (
	"encoding/binary"
	"hash/crc32"
)

// Keyed pieces. A piece as a device holds it is keyed: its flags byte has
// FlagKeyed and its CRC field is the value's CRC32C (as Encode computes
// it, flags zero) XOR the CRC32C of the internal key it is stored under.
// Unkey, given the key a piece was read from, turns it back into what
// Encode made, which Decode verifies: a piece stored under another key (a
// misdirected or swapped write) then fails its checksum like a corrupt
// one. The array keys pieces as it writes them and unkeys them as it
// reads them (mechanism.Env), so nothing above it sees the flag. A piece
// without the flag (written before keyed pieces) is read as it is.

// FlagKeyed is the flags bit of a keyed piece.
const FlagKeyed = 0x01

const flagsOff = 5

// isPieceKey reports whether k is the internal key of a piece: only
// those are keyed.
func isPieceKey(k []byte) bool {
	_, _, kind, err := ParseKey(k)
	return err == nil && HoldsPiece(kind)
}

// KeyPiece returns the keyed form of b for internal key k, in a new
// buffer (b is left as it is: it may be the caller's to reuse), and true;
// or b and false when k is not a piece's key or b not an encoding of
// this format version without flags.
func KeyPiece(k, b []byte) ([]byte, bool) {
	if len(b) < HeaderLen || b[0] != magic0 || b[1] != magic1 || b[2] != Version || b[flagsOff] != 0 || !isPieceKey(k) {
		return b, false
	}
	out := make([]byte, len(b))
	copy(out, b)
	out[flagsOff] = FlagKeyed
	binary.LittleEndian.PutUint32(out[crcOff:], binary.LittleEndian.Uint32(out[crcOff:])^crc32.Checksum(k, castagnoli))
	return out, true
}

// Unkey turns b, the bytes [off, off+len(b)) of a piece read from
// internal key k, back into Encode's form, in place: the flag cleared and
// the key taken out of the CRC. Bytes without the flag, and a range that
// does not start the value, are left as they are (a range past the
// header has neither field; one within it does not arise).
func Unkey(k, b []byte, off int) {
	if off != 0 || len(b) <= flagsOff || b[0] != magic0 || b[1] != magic1 || b[flagsOff] != FlagKeyed || !isPieceKey(k) {
		return
	}
	b[flagsOff] = 0
	if len(b) >= crcOff+4 {
		binary.LittleEndian.PutUint32(b[crcOff:], binary.LittleEndian.Uint32(b[crcOff:])^crc32.Checksum(k, castagnoli))
	}
}
