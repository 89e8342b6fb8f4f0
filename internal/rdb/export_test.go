package rdb

// CRC exposes crc to the tests.
func CRC(p []byte) uint64 { return crc(0, p) }
