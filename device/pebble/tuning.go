package pebble

import (
	"time"

	pdb "github.com/cockroachdb/pebble/v2"
)

// untuned leaves Pebble's defaults, for the write-amplification benchmark
// to compare against.
var untuned, unseparated bool

// tuned sets Pebble's options for a kvarray device: values of KiB to MiB
// under random keys, every write synced. BenchmarkWriteAmp measures the
// disk bytes written per 4 KiB store with and without these.
func tuned(o *pdb.Options) *pdb.Options {
	if untuned {
		return o
	}
	// Larger memtables: fewer, larger flushes, so fewer L0 tables to
	// compact again.
	o.MemTableSize = 32 << 20
	o.MemTableStopWritesThreshold = 4
	o.L0CompactionThreshold = 4
	o.L0StopWritesThreshold = 24
	o.LBaseMaxBytes = 256 << 20
	if !unseparated {
		o.FormatMajorVersion = pdb.FormatValueSeparation
		o.Experimental.ValueSeparationPolicy = func() pdb.ValueSeparationPolicy {
			return pdb.ValueSeparationPolicy{Enabled: true, MinimumSize: 1024, MaxBlobReferenceDepth: 10, RewriteMinimumAge: time.Minute, TargetGarbageRatio: 0.2}
		}
	}
	return o
}
