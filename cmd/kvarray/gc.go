package main

import (
	"os"
	"runtime/debug"
)

// serveGCPercent and serveMemoryLimit are the garbage collector's settings
// for `kvarray serve` unless GOGC or GOMEMLIMIT set them.
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
const (
	serveGCPercent   = 400
	serveMemoryLimit = 768 << 20
)

// tuneGC applies serve's garbage collector settings, leaving those that
// the environment sets.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(serveGCPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(serveMemoryLimit)
	}
}
