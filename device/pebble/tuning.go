package pebble

import (
	"time"

	pdb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// untuned leaves Pebble's defaults, unseparated keeps values inline and
// unfiltered writes no bloom filters, for BenchmarkWriteAmp to compare
// against.
var untuned, unseparated, unfiltered bool

// tuned sets Pebble's options for a kvarray device: pieces of KiB to MiB
// under random keys, every write synced (durability is unchanged: these
// options move no write out of the synced WAL).
//
// Measured by BenchmarkWriteAmp (4 KiB stores, 100k random keys, 16
// writers, 60k stores, until Close), disk bytes written per store: Pebble's
// defaults 35.6 KB, these memtable and level settings 23.7 KB, with value
// separation 13.2 KB, and CPU per store 159 -> 89 µs. (32 MiB memtables
// gave 9.4 KB, at twice the memory and WAL space below.)
//
// Costs: up to two 16 MiB memtables per device (32 MiB of memory under a
// sustained write load). Pebble preallocates each WAL at 110% of the
// memtable size and keeps up to three old ones for reuse, so a device's
// WAL files take up to about 70 MiB of disk, and rotating the WAL needs
// about 18 MiB free (less than that, and the device turns read-only: see
// the package doc). A database opened with these options is upgraded to
// Pebble's FormatValueSeparation, which older builds of kvarray cannot
// open.
// blobReferenceDepth bounds how many blob files the values of one table
// may be spread over before a compaction rewrites them into new blob files.
// At 10, compactions of random overwrites kept rewriting values (copying
// them out of old blob files and compressing them again: 15% of the
// server's CPU under redis-benchmark SET). BenchmarkWriteAmp
// (filtered+read, 60k stores): depth 10 -> 40, disk bytes per store 12.6
// -> 9.3 KB, CPU per store 107-122 -> 79-93 µs (100 measured the same as
// 40). A point read still reads one blob file; the garbage left in old
// blob files is reclaimed by Pebble's blob rewrites (TargetGarbageRatio).
const blobReferenceDepth = 40

// EngineOptions returns the Pebble options of a device's engine (tuned
// below) over fs, without the device's logger, event listener and fault
// guard: for programs that measure the engine alone (bench/ceiling), so
// that they measure what a device runs.
func EngineOptions(fs vfs.FS) *pdb.Options {
	return tuned(&pdb.Options{FS: fs, CacheSize: DefaultCacheSize})
}

func tuned(o *pdb.Options) *pdb.Options {
	if untuned {
		return o
	}
	// One write(2) per MiB of a table or blob file, not per block.
	o.FS = bufferedFS{o.FS}
	// Larger memtables: fewer, larger flushes, so fewer L0 tables to
	// compact again.
	o.MemTableSize = 16 << 20
	o.MemTableStopWritesThreshold = 2
	o.L0CompactionThreshold = 4
	o.L0StopWritesThreshold = 24
	o.LBaseMaxBytes = 256 << 20
	// L0 tables (and so flush splits) of 8 MiB rather than 2: fewer files
	// created and deleted. bench/ceiling, 3 devices: files created per
	// 100k SETs 17.5 -> 10.8 (100 B), 1,345 -> 723 (4 KiB), disk bytes
	// unchanged (6.63 and 3.31-3.34 per user byte).
	o.TargetFileSizes[0] = 8 << 20
	if !unfiltered {
		// Bloom filters (10 bits per key, 1% false positives) on every
		// level: a read of a key not stored (the hybrid read before
		// every store of a new key) skips the tables that cannot hold
		// it instead of reading their index and data blocks. Pebble
		// consults them for L0 to L5 (L6 is the last stop anyway).
		for i := range o.Levels {
			o.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		}
	}
	if !unseparated {
		// Values of 1 KiB and more go to blob files when flushed, so
		// compactions rewrite keys and references, not the values: the
		// WiscKey layout, which fits values of KiB to MiB.
		o.FormatMajorVersion = pdb.FormatValueSeparation
		o.Experimental.ValueSeparationPolicy = func() pdb.ValueSeparationPolicy {
			return pdb.ValueSeparationPolicy{
				Enabled:               true,
				MinimumSize:           1 << 10,
				MaxBlobReferenceDepth: blobReferenceDepth,
				RewriteMinimumAge:     time.Minute,
				TargetGarbageRatio:    0.2,
			}
		}
	}
	return o
}
