// Package transfer moves a keyspace's data in and out as Redis RDB
// files: Import stores an RDB's entries, Export writes every key to one,
// and Link speaks the replica side of Redis's SYNC/PSYNC handshake. The
// CLI (`kvarray import`, `kvarray export`) and the server (SYNC, BGSAVE,
// REPLICAOF) both use it, so a file is read and written one way only.
//
// Invariants:
//   - A key is written whole: a collection's elements first, under a new
//     version nothing refers to, then its value (storeEntry). An import
//     stopped midway leaves whole keys, and running it again replaces
//     them.
//   - Export reads each key, its elements included, under the lock the
//     caller gives for it (ExportOptions.Lock): a key is exported as it
//     was between two writes of it. With no writer (the CLI: serve does
//     not hold the array) the file is the array at one point in time;
//     while a server writes, a Snapshot (snapshot.go) whose Preserve
//     every writer calls makes it the keyspace at the snapshot's start.
//   - An entry of a type the array does not hold is counted and named in
//     the report, never dropped silently.
package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/collection"
	"github.com/kvarray/kvarray/internal/fanout"
	"github.com/kvarray/kvarray/internal/rdb"
	"github.com/kvarray/kvarray/keyspace"
)

// ImportReport is what an import did.
type ImportReport struct {
	File       string         `json:"file"`
	RDBVersion int            `json:"rdb_version"`
	Keys       int64          `json:"keys"`
	ByType     map[string]int `json:"keys_by_type"`
	ByDB       map[int]int    `json:"keys_by_db"`
	WithTTL    int64          `json:"keys_with_expiry"`
	Expired    int64          `json:"expired_skipped"`
	// Unsupported counts the values of types the array does not hold,
	// by type; UnsupportedKeys names the first few.
	Unsupported     map[string]int `json:"unsupported"`
	UnsupportedKeys []string       `json:"unsupported_keys,omitempty"`
	Functions       int            `json:"function_libraries_skipped"`
	Bytes           int64          `json:"bytes"`
	Elapsed         time.Duration  `json:"elapsed_ns"`
	Rate            float64        `json:"keys_per_second"`
	ExitCode        int            `json:"exit_code"`
}

// Lock takes the write lock of a key of a database and returns its
// release; nil means none is needed (nothing else writes).
type Lock func(ctx context.Context, db int, key []byte) (func(), error)

// ImportOptions tune Import.
type ImportOptions struct {
	Workers int // keys written at once (at least 1)
	Lock    Lock
	// Done, when set, counts the keys written, for a caller's progress
	// report.
	Done *atomic.Int64
}

// Import reads r's entries in order and stores them in ks with
// o.Workers writers. It stops at the first error (ctx's included).
func Import(ctx context.Context, ks *keyspace.Store, r *rdb.FileReader, o ImportOptions) (ImportReport, error) {
	start := time.Now()
	rep := ImportReport{RDBVersion: r.Version(), ByType: map[string]int{}, ByDB: map[int]int{}, Unsupported: map[string]int{}}
	done := o.Done
	if done == nil {
		done = new(atomic.Int64)
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers := max(o.Workers, 1)
	entries := make(chan rdb.Entry, 2*workers)
	var firstErr error
	var errOnce sync.Once
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; cancel() })
	}
	var wg sync.WaitGroup
	lim := collection.DefaultLimits
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range entries {
				if err := storeEntry(ctx, ks, e, lim, o.Lock); err != nil {
					fail(fmt.Errorf("import: db %d key %q: %w", e.DB, TruncKey(e.Key), err))
					continue
				}
				done.Add(1)
			}
		}()
	}
	now := keyspace.NowMs()
read:
	for ctx.Err() == nil {
		e, err := r.Next()
		switch {
		case errors.Is(err, io.EOF):
			break read
		case err != nil:
			fail(fmt.Errorf("import: %w", err))
			break read
		case e.Unsupported != nil:
			rep.Unsupported[rdb.TypeName(e.Type)]++
			if len(rep.UnsupportedKeys) < 10 {
				rep.UnsupportedKeys = append(rep.UnsupportedKeys, string(TruncKey(e.Key)))
			}
			continue
		case keyspace.Expired(e.ExpireAt, now):
			rep.Expired++
			continue
		case e.DB >= ks.DBs():
			fail(fmt.Errorf("import: key %q is in database %d; the array has databases 0 to %d: %w", TruncKey(e.Key), e.DB, ks.DBs()-1, keyspace.ErrBadDB))
			break read
		}
		rep.ByType[e.Object.Kind.String()]++
		rep.ByDB[e.DB]++
		if e.ExpireAt != 0 {
			rep.WithTTL++
		}
		entries <- e
	}
	close(entries)
	wg.Wait()
	rep.Functions = r.Functions
	rep.Bytes = r.Offset()
	rep.Keys = done.Load()
	rep.Elapsed = time.Since(start)
	rep.Rate = float64(rep.Keys) / rep.Elapsed.Seconds()
	if firstErr == nil {
		firstErr = parent.Err()
	}
	return rep, firstErr
}

// TruncKey is a key cut for messages.
func TruncKey(k []byte) []byte { return k[:min(len(k), 64)] }

// storeEntry writes one key: a collection's elements first (under a new
// version nothing refers to until its value is written), then its value,
// under the key's lock when one is given.
func storeEntry(ctx context.Context, ks *keyspace.Store, e rdb.Entry, lim collection.Limits, lock Lock) error {
	v, ops, err := collection.FromObject(ctx, e.Object, e.ExpireAt, lim, ks.MaxElement())
	if err != nil {
		return err
	}
	// A large collection's elements are most of a file's writes: as many
	// in flight as load keeps.
	if err := fanout.Each(len(ops), 256, func(i int) error { return ks.Apply(ctx, ops[i]) }); err != nil {
		return err
	}
	if lock != nil {
		unlock, err := lock(ctx, e.DB, e.Key)
		if err != nil {
			return err
		}
		defer unlock()
	}
	return ks.Save(ctx, e.DB, e.Key, v)
}

// ExportReport is what an export did.
type ExportReport struct {
	File    string         `json:"file"`
	Keys    int64          `json:"keys"`
	ByType  map[string]int `json:"keys_by_type"`
	ByDB    map[int]int    `json:"keys_by_db"`
	Bytes   int64          `json:"bytes"`
	Elapsed time.Duration  `json:"elapsed_ns"`
}

// ExportOptions tune Export.
type ExportOptions struct {
	Lock Lock
	// Snapshot, when set, makes the export the keyspace at the
	// snapshot's start (writers call its Preserve).
	Snapshot *Snapshot
	// Done, when set, counts the keys written, for a caller's progress
	// report.
	Done *atomic.Int64
}

// ExportFile writes every key of ks to path: into a file beside it,
// synced, then renamed over it, so path is never half written.
func ExportFile(ctx context.Context, ks *keyspace.Store, path string, o ExportOptions) (ExportReport, error) {
	start := time.Now()
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return ExportReport{File: path}, fmt.Errorf("export: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	rep, err := Export(ctx, ks, tmp, o)
	rep.File = path
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return rep, fmt.Errorf("export %s: %w", path, err)
	}
	if st, err := os.Stat(path); err == nil {
		rep.Bytes = st.Size()
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// Export writes every live key of ks, database by database, as one RDB
// file to out; a collection's elements are read as serve's commands read
// them, each key under o.Lock.
func Export(ctx context.Context, ks *keyspace.Store, out io.Writer, o ExportOptions) (ExportReport, error) {
	start := time.Now()
	rep := ExportReport{ByType: map[string]int{}, ByDB: map[int]int{}}
	done := o.Done
	if done == nil {
		done = new(atomic.Int64)
	}
	w := rdb.NewFileWriter(out)
	err := exportKeys(ctx, ks, w, o, &rep, done)
	if err == nil {
		err = w.Close()
	}
	rep.Keys = done.Load()
	rep.Elapsed = time.Since(start)
	return rep, err
}

func exportKeys(ctx context.Context, ks *keyspace.Store, w *rdb.FileWriter, opt ExportOptions, rep *ExportReport, done *atomic.Int64) error {
	src := collection.StoreSource(ks)
	write := func(db int, k []byte, at int64, o rdb.Object) error {
		if err := w.Write(db, k, at, o); err != nil {
			return err
		}
		rep.ByType[o.Kind.String()]++
		rep.ByDB[db]++
		done.Add(1)
		return nil
	}
	for db := range ks.DBs() {
		keys, err := ks.Keys(ctx, db, nil)
		if err != nil {
			return err
		}
		for _, k := range keys {
			o, at, found, err := readAt(ctx, ks, src, db, k, opt)
			if err != nil {
				return fmt.Errorf("db %d key %q: %w", db, TruncKey(k), err)
			}
			if !found {
				continue // expired, or deleted since the listing
			}
			if err := write(db, k, at, o); err != nil {
				return err
			}
		}
		if opt.Snapshot == nil {
			continue
		}
		names, items, err := opt.Snapshot.rest(db)
		if err != nil {
			return err
		}
		for i, it := range items {
			if err := write(db, []byte(names[i]), it.at, it.obj); err != nil {
				return err
			}
		}
	}
	return nil
}

// readAt reads one key as the export sees it: at the snapshot's start
// when there is one.
func readAt(ctx context.Context, ks *keyspace.Store, src collection.Source, db int, k []byte, opt ExportOptions) (rdb.Object, int64, bool, error) {
	if opt.Snapshot == nil {
		return readKey(ctx, ks, src, db, k, opt.Lock)
	}
	if opt.Lock != nil {
		unlock, err := opt.Lock(ctx, db, k)
		if err != nil {
			return rdb.Object{}, 0, false, err
		}
		defer unlock()
	}
	it, changed, err := opt.Snapshot.take(db, k)
	switch {
	case err != nil:
		return rdb.Object{}, 0, false, err
	case changed:
		return it.obj, it.at, it.found, nil
	}
	return readKey(ctx, ks, src, db, k, nil)
}

// readKey reads one key whole, under its lock when one is given.
func readKey(ctx context.Context, ks *keyspace.Store, src collection.Source, db int, k []byte, lock Lock) (rdb.Object, int64, bool, error) {
	if lock != nil {
		unlock, err := lock(ctx, db, k)
		if err != nil {
			return rdb.Object{}, 0, false, err
		}
		defer unlock()
	}
	v, err := ks.Load(ctx, db, k)
	if errors.Is(err, array.ErrNotFound) {
		return rdb.Object{}, 0, false, nil
	}
	if err != nil {
		return rdb.Object{}, 0, false, err
	}
	o, err := collection.ToObject(ctx, src, v, collection.DefaultLimits, ks.MaxElement())
	return o, v.At, err == nil, err
}
