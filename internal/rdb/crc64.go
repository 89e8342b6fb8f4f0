package rdb

import "hash/crc64"

// Redis's CRC64 is Jones's polynomial, reflected, with no initial or
// final inversion (crc64.c); Go's package inverts both, so crc undoes
// that around it.
var jones = crc64.MakeTable(0x95ac9329ac4bc9b5)

// crc continues Redis's CRC64 c over p.
func crc(c uint64, p []byte) uint64 { return ^crc64.Update(^c, jones, p) }
