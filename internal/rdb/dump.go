package rdb

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Dump is DUMP's payload of o: its RDB type and encoding, then the RDB
// version (2 bytes) and the CRC64 of all before it (8 bytes), both
// little-endian (createDumpPayload).
func Dump(o Object) []byte {
	b := appendObject([]byte{rdbType(o)}, o)
	b = binary.LittleEndian.AppendUint16(b, Version)
	return binary.LittleEndian.AppendUint64(b, crc(0, b))
}

// ParseDump is the Object of a DUMP payload (verifyDumpPayload, then
// rdbLoadObject), from any Redis version this package reads. A payload
// of a type kvarray does not hold is an error wrapping ErrUnsupported.
func ParseDump(p []byte) (Object, error) {
	if len(p) < 10 {
		return Object{}, fmt.Errorf("payload of %d bytes, shorter than its footer: %w", len(p), ErrChecksum)
	}
	body := p[:len(p)-10]
	if v := binary.LittleEndian.Uint16(p[len(p)-10:]); v > MaxVersion {
		return Object{}, fmt.Errorf("payload of RDB version %d: %w", v, ErrVersion)
	}
	if crc(0, p[:len(p)-8]) != binary.LittleEndian.Uint64(p[len(p)-8:]) {
		return Object{}, ErrChecksum
	}
	if len(body) < 1 {
		return Object{}, fmt.Errorf("payload without a value: %w", ErrCorrupt)
	}
	r := newReader(bytes.NewReader(body[1:]), int64(len(body)-1))
	o, err := r.readObject(body[0])
	if err != nil {
		return Object{}, err
	}
	if r.left != 0 {
		return Object{}, fmt.Errorf("payload: %d bytes after the value: %w", r.left, ErrCorrupt)
	}
	return o, nil
}
