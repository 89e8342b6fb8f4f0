package main

import (
	"os"
	"runtime"
	"runtime/debug"
)

// gcPercent and the memory limits are the garbage collector's settings
// for `kvarray serve` and for the commands that heal an array in process
// (rebuild, resync, scrub), unless GOGC or GOMEMLIMIT set them.
//
// Reading an 8 MiB value allocates it several times over (each device's
// pieces, the joined splits, the value), while the live heap is a few
// tens of MB: with Go's default (GOGC=100) a collection started every
// 40 MB allocated, ten a second under a load of large reads, and each one
// stops both cores for its mark termination and lends the allocating
// goroutines mark work, which is what other clients' PINGs waited behind
// (bench/memory.sh). A heap goal five times the live heap makes them four
// times rarer; the soft limit keeps that goal under the RSS the server is
// meant to stay within (1 GB in docs/serving.md) when the live heap grows,
// collecting more often instead.
//
// A rebuild streams every value of a device through the heap (a copy per
// piece read, another per piece written) over a live heap of a few tens
// of MB: the same goal took its CPU time 3.5 -> 3.1 s and its elapsed time
// 2.1 -> 1.8 s (bench/rebuildserve.sh, 99,899 pieces of 4 KiB). Its soft
// limit bounds what that costs in memory: at 384 MiB the rebuild of
// bench/scale.sh's 1 M small keys peaked at 351-375 MiB of RSS, past
// issue 10's 300 MB; at 128 MiB, 201 MiB, and the 4 KiB rebuild kept its
// speed (250 MB/s, 2.7 s of CPU, 204 MiB: A/B of 384, 192 and 128 MiB).
const (
	gcPercent        = 400
	serveMemoryLimit = 768 << 20
	healMemoryLimit  = 128 << 20
)

// tuneGC applies gcPercent and the soft memory limit, leaving what the
// environment sets.
func tuneGC(memoryLimit int64) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
}

// serveMinProcs is the least GOMAXPROCS of `kvarray serve`, unless
// GOMAXPROCS sets it. A durable write waits in fdatasync on each of its
// devices' WALs, and a goroutine in a system call keeps its P until the
// runtime's monitor hands the P off (20 µs to 10 ms later): on 2 cores, 2
// Ps were often both held so, while the connections and commit loops
// ready to run waited (a trace of a SET load: 9.5 s of scheduling delay
// in the commit loops in 5 s). With 8, redis-benchmark SETs of 4 KiB ran
// 11–27% faster and GETs 25% faster, at no more CPU per operation
// (bench/serve.sh A/B, docs/benchmarks.md). A rebuild, bound by the cores,
// ran about 10% slower with 8: the heal commands keep the default.
const serveMinProcs = 8

// tuneProcs raises GOMAXPROCS to serveMinProcs, leaving what the
// environment sets.
func tuneProcs() {
	if os.Getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) < serveMinProcs {
		runtime.GOMAXPROCS(serveMinProcs)
	}
}
