package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// startProfile writes a CPU profile of the whole command to the file
// KVARRAY_CPUPROFILE names, when it is set (for measuring, e.g. a
// rebuild: docs/benchmarks.md); the returned function stops it.
func startProfile() func() {
	path := os.Getenv("KVARRAY_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kvarray: KVARRAY_CPUPROFILE: %v\n", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}
