package pebble

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	pdb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/sstable/block"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Bulk loading. The stores of BatchDeferred (a rebuild's restored pieces,
// see device.Deferred) are not committed through the WAL and the
// memtable: they are collected in memory and, at Sync or once bulkMax
// bytes are collected, written in key order into one sorted table that
// is ingested (pebble.DB.Ingest): no WAL record, no memtable, no flush,
// and, for tables that overlap nothing (a rebuild's pieces arrive about
// in key order), no compaction either: Pebble puts them in the last
// level. Ingest syncs the table and the manifest: what it returns is
// durable.
//
// Until ingested, collected stores are invisible to reads, which is what
// device.Deferred allows (a rebuild does not read the device it
// restores). A write of the ordinary path (Store, Delete, Batch,
// commitDeferred) of a key that is collected drops it from the
// collection before it commits: the later write wins, as in a commit
// order. The writes of the ordinary path hold the gate shared while they
// drop and commit, and an ingest holds it alone from the moment it takes
// the collection until Pebble has given the table its sequence number:
// an ingested value, numbered after every write committed before, never
// hides a write that came after it was collected.
type bulkLoad struct {
	gate   sync.RWMutex
	active atomic.Bool // kv holds something: ordinary writes take the gate

	mu   sync.Mutex
	kv   map[string][]byte
	size int64
	// slab holds the collected values, copied one after the other (one
	// allocation per bulkSlab, not one per value: a rebuild's 4 KiB
	// pieces made the allocator and the collector a tenth of its CPU).
	slab []byte
	seq  int // names the table files
	// last is the greatest key ingested (under gate).
	last string
}

// bulkMax bounds the bytes collected before they are ingested.
const bulkMax = 16 << 20

// bulkSlab is the size of the slabs collected values are copied into.
const bulkSlab = 1 << 20

// bulkTable is the size of the tables an ingest writes. A table that
// overlaps no data goes to the last level as it is; one that does (keys
// a rebuild's workers finished after others past them were ingested)
// goes higher and is compacted with the tables it overlaps: small tables
// keep that rewrite small.
const bulkTable = 4 << 20

// bulkCut returns how many of the sorted keys go into the next table:
// up to bulkTable bytes, and the keys not past last (the greatest key
// ingested before: they overlap what is there) in a table of their own.
func bulkCut(keys []string, kv map[string][]byte, last string) int {
	under := keys[0] <= last
	size := 0
	for i, k := range keys {
		if (k <= last) != under || (i > 0 && size >= bulkTable) {
			return i
		}
		size += len(k) + len(kv[k])
	}
	return len(keys)
}

// writeTable writes keys, sorted, with their values in kv, into a new
// table name, synced.
func (d *Device) writeTable(fs vfs.FS, name string, keys []string, kv map[string][]byte) error {
	f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	wo := d.popts.MakeWriterOptions(6, d.db.TableFormat())
	// MinLZ (on amd64) rather than the levels' Snappy: a rebuild is bound
	// by the cores, and Snappy's encoding took 9% of its CPU
	// (bench/rebuildserve.sh, 4 KiB values of redis-benchmark's kind:
	// about 8% more MB/s). Older table formats fall back to Snappy.
	wo.Compression = block.FastestCompression
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), wo)
	for _, k := range keys {
		if err := w.Set([]byte(k), kv[k]); err != nil {
			_ = w.Close()
			return err
		}
	}
	return w.Close()
}

// bulkPrefix starts the names of the tables written for ingestion (in the
// device's directory; a crash may leave one, removed at Open).
const bulkPrefix = "kvarray-bulk-"

// collect adds a store to the collection (copying key and value: the
// caller may reuse its buffers), and reports whether the collection
// reached bulkMax.
func (l *bulkLoad) collect(key, value []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kv == nil {
		l.kv = map[string][]byte{}
	}
	if old, ok := l.kv[string(key)]; ok {
		l.size -= int64(len(key) + len(old))
	}
	if len(value) > cap(l.slab)-len(l.slab) {
		l.slab = make([]byte, 0, max(bulkSlab, len(value)))
	}
	at := len(l.slab)
	l.slab = append(l.slab, value...)
	l.kv[string(key)] = l.slab[at:len(l.slab):len(l.slab)]
	l.size += int64(len(key) + len(value))
	l.active.Store(true)
	return l.size >= bulkMax
}

// writing is called by every write of the ordinary path before it
// commits b: while stores are collected or being ingested, it takes the
// gate shared and drops b's keys from the collection. The caller calls
// the function it returns once its commit is done.
//
// Without the gate (active clear: nothing collected, no ingest running),
// a collect of one of b's keys may still slip in between this check and
// the commit; the array never lets that happen (it restores a key's piece
// and writes the key under the key's lock, one at a time), and this
// relies on it.
func (l *bulkLoad) writing(b *pdb.Batch) func() {
	if !l.active.Load() {
		return func() {}
	}
	l.gate.RLock()
	l.mu.Lock()
	if len(l.kv) > 0 {
		r := b.Reader()
		for {
			_, key, _, ok, err := r.Next()
			if !ok || err != nil {
				break
			}
			if old, ok := l.kv[string(key)]; ok {
				l.size -= int64(len(key) + len(old))
				delete(l.kv, string(key))
			}
		}
	}
	l.mu.Unlock()
	return l.gate.RUnlock
}

// ingestBulk writes the collected stores into a sorted table and ingests
// it. On failure the stores are lost: they were deferred, the caller's
// Sync fails, and it redoes them.
func (d *Device) ingestBulk(ctx context.Context) error {
	l := &d.bulk
	if !l.active.Load() {
		return nil
	}
	l.gate.Lock()
	defer l.gate.Unlock()
	// active stays set until the table has its sequence number: a write
	// that found it clear would commit without the gate, during the
	// ingest, and the table, numbered after it, would hide it.
	defer func() {
		l.mu.Lock()
		if len(l.kv) == 0 {
			l.active.Store(false)
		}
		l.mu.Unlock()
	}()
	l.mu.Lock()
	kv := l.kv
	l.kv, l.size, l.slab = nil, 0, nil
	l.seq++
	base := filepath.Join(d.dir, fmt.Sprintf("%s%06d", bulkPrefix, l.seq))
	l.mu.Unlock()
	if len(kv) == 0 {
		return nil
	}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	last, greatest := l.last, keys[len(keys)-1]
	// Not cut short by ctx: the gate is held until the ingest is done.
	err := d.call(context.WithoutCancel(ctx), true, func() error {
		fs := d.popts.FS // under the guard, as Pebble's own files
		var names []string
		defer func() {
			for _, name := range names {
				_ = fs.Remove(name) // ingested as a link, or not at all
			}
		}()
		for len(keys) > 0 {
			n := bulkCut(keys, kv, last)
			name := fmt.Sprintf("%s-%d.sst", base, len(names))
			names = append(names, name)
			if err := d.writeTable(fs, name, keys[:n], kv); err != nil {
				return err
			}
			keys = keys[n:]
		}
		return d.db.Ingest(context.WithoutCancel(ctx), names)
	})
	if err != nil {
		return fmt.Errorf("ingest: %w", classify(err))
	}
	l.last = max(last, greatest)
	return nil
}

// removeBulkLeftovers removes the tables a crash left before ingesting
// them (their stores were deferred, never reported durable).
func removeBulkLeftovers(fs vfs.FS, dir string) {
	names, err := fs.List(dir)
	if err != nil {
		return
	}
	for _, n := range names {
		if len(n) > len(bulkPrefix) && n[:len(bulkPrefix)] == bulkPrefix {
			_ = fs.Remove(filepath.Join(dir, n))
		}
	}
}
