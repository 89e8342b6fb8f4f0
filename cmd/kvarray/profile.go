package main

import (
	"errors"
	"fmt"
	"io"
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

// startRecording starts, when the variable env names a file, what start
// writes to it, and returns what stops it and closes the file.
func startRecording(env string, start func(io.Writer) error, stop func()) func() {
	path := os.Getenv(env)
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = start(f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kvarray: %s: %v\n", env, err)
		return func() {}
	}
	return func() {
		stop()
		_ = f.Close()
	}
}

func startCPUProfile() func() {
	return startRecording("KVARRAY_CPUPROFILE", pprof.StartCPUProfile, pprof.StopCPUProfile)
}

func startTrace() func() { return startRecording("KVARRAY_TRACE", trace.Start, trace.Stop) }
