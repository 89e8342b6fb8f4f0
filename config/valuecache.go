package config

import "golang.org/x/sys/unix"

// The default value cache is a sixteenth of the machine's memory, at
// least minDefaultValueCache and at most maxDefaultValueCache: 512 MiB on
// a machine of 8 GiB or more.
//
// A GET answered from the cache costs about half the CPU of one answered
// by a device (Pebble's Get: its index, the blob file, decompression and
// its block cache's churn). `bench/serve.sh` on the 2-core VM, the
// issue's loads (about 100k keys of 4 KiB, 400 MB), the binaries one
// after the other: GET 32,693/s at 45 µs of CPU each with 64 MiB (the
// keys do not fit), 58,098/s at 21 µs with 512 MiB (they do), 0.27× ->
// 0.59× a durable redis-server's rate. The cache lives outside the Go
// heap and grows as it fills, so an array that reads little pays little.
const (
	minDefaultValueCache = Size(64 << 20)
	maxDefaultValueCache = Size(512 << 20)
)

// DefaultValueCache is value_cache's default on this machine.
func DefaultValueCache() Size {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return minDefaultValueCache
	}
	total := Size(uint64(si.Totalram) * uint64(si.Unit))
	return min(maxDefaultValueCache, max(minDefaultValueCache, total/16))
}
