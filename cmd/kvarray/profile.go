package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// startProfile writes a CPU profile of the whole command to the file
// KVARRAY_CPUPROFILE names, when it is set (for measuring, e.g. a
// rebuild: docs/benchmarks.md), and a heap profile at its end to the file
// KVARRAY_MEMPROFILE names, and an execution trace (go tool trace: where
// goroutines waited, not only where they ran) to the file KVARRAY_TRACE
// names; the returned function stops them and writes the heap profile.
func startProfile() func() {
	cpu := startCPUProfile()
	tr := startTrace()
	return func() {
		tr()
		cpu()
		if path := os.Getenv("KVARRAY_MEMPROFILE"); path != "" {
			f, err := os.Create(path)
			if err == nil {
				err = errors.Join(pprof.Lookup("heap").WriteTo(f, 0), f.Close())
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "kvarray: KVARRAY_MEMPROFILE: %v\n", err)
			}
		}
	}
}

func startCPUProfile() func() {
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

func startTrace() func() {
	path := os.Getenv("KVARRAY_TRACE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = trace.Start(f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kvarray: KVARRAY_TRACE: %v\n", err)
		return func() {}
	}
	return func() {
		trace.Stop()
		_ = f.Close()
	}
}
