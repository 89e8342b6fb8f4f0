package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/collection"
	"github.com/kvarray/kvarray/internal/fanout"
	"github.com/kvarray/kvarray/internal/rdb"
	"github.com/kvarray/kvarray/keyspace"
)

// Moving data in and out as RDB files: `kvarray import FILE.rdb` and
// `kvarray export FILE.rdb`, over the keyspace as serve keeps it (the
// format is package rdb's, values are turned into collections by
// package collection).

// exitUnsupported: the import wrote what it could, but the file held
// values of a type the array does not hold (and --skip-unsupported was
// not given).
const exitUnsupported = 1

// importReport is what `kvarray import` did.
type importReport struct {
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

func (c *cli) importCmd() *cobra.Command {
	var workers int
	var asJSON, skip bool
	cmd := &cobra.Command{
		Use:   "import FILE.rdb|redis://[USER:PASSWORD@]HOST:PORT [--skip-unsupported] [--workers W] [--json]",
		Short: "Load a Redis RDB file, or a running Redis's data, into the array",
		Long: `import reads an RDB file, as redis-server's SAVE or BGSAVE writes it
(RDB versions 1 to 12: Redis 6.0 to 7.4 and Valkey write 9 to 12), or
with redis://HOST:PORT asks a running Redis for one through SYNC, as
'redis-cli --rdb' does (a one-shot copy: Redis saves a snapshot and
sends it; writes to it after that are not copied), and
stores every key in its database with its expiry, as serve's commands
would store it: strings (HyperLogLogs too), lists, sets, sorted sets and
hashes. A key already in the array under the same name in the same
database is replaced; other keys stay. Keys whose expiry has passed are
skipped (and counted), as Redis skips them when it loads a file.

A value of a type the array does not hold (streams, module types, hashes
with field expiry) is skipped, counted and named in the report; the
command then exits with status 1 unless --skip-unsupported is given.
Function libraries in the file are counted and skipped.

Progress goes to standard error every second; the report (--json for
JSON) to standard output. An import that stops midway (^C, a crash) is
resumed by running it again: every key it writes is written whole, and
writing one again replaces it. Serve must not hold the array meanwhile.`,
		Args: args(1, 1, "FILE.rdb or redis://HOST:PORT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if workers < 1 {
				return usageError{cmd, fmt.Errorf("--workers %d: want at least 1", workers)}
			}
			in, size, closer, err := importSource(c.ctx, args[0])
			if err != nil {
				return err
			}
			defer closer.Close()
			r, err := rdb.NewFileReader(in, size)
			if err != nil {
				return fmt.Errorf("import %s: %w", args[0], err)
			}
			return c.withKeyspace(0, func(ks *keyspace.Store) error {
				ks.StartCounting(c.ctx)
				defer ks.StopCounting()
				rep, err := c.importRDB(ks, r, size, workers)
				rep.File = args[0]
				if serr := ks.SaveCounts(c.ctx); err == nil {
					err = serr
				}
				if err != nil {
					return err
				}
				if n := sum(rep.Unsupported); n > 0 && !skip {
					rep.ExitCode = exitUnsupported
					c.exit = exitUnsupported
				}
				if asJSON {
					return writeJSON(c.stdout, rep)
				}
				return printImport(c.stdout, rep, skip)
			})
		},
	}
	cmd.Flags().IntVar(&workers, "workers", 64, "keys written at once")
	cmd.Flags().BoolVar(&skip, "skip-unsupported", false, "exit 0 even when values of unsupported types were skipped")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// importSource opens what import reads: a file, or a running Redis's
// RDB through SYNC (redis://…).
func importSource(ctx context.Context, from string) (io.Reader, int64, io.Closer, error) {
	if strings.HasPrefix(from, "redis://") {
		return syncSource(ctx, from)
	}
	f, err := os.Open(from)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("import: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, nil, fmt.Errorf("import: %w", err)
	}
	return f, st.Size(), f, nil
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func printImport(w io.Writer, rep importReport, skip bool) error {
	fmt.Fprintf(w, "imported %d keys from %s (RDB version %d) in %v (%.0f keys/s)\n", rep.Keys, rep.File, rep.RDBVersion,
		rep.Elapsed.Round(time.Millisecond), rep.Rate)
	fmt.Fprintf(w, "  by type: %s\n", countList(rep.ByType))
	fmt.Fprintf(w, "  with expiry: %d; expired, skipped: %d\n", rep.WithTTL, rep.Expired)
	if rep.Functions > 0 {
		fmt.Fprintf(w, "  function libraries skipped: %d\n", rep.Functions)
	}
	if n := sum(rep.Unsupported); n > 0 {
		what := "not imported"
		if skip {
			what = "skipped (--skip-unsupported)"
		}
		fmt.Fprintf(w, "  %d values of types kvarray does not hold, %s: %s (keys %q)\n", n, what, countList(rep.Unsupported), rep.UnsupportedKeys)
	}
	return nil
}

func countList(m map[string]int) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	s := ""
	for i, k := range names {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %d", k, m[k])
	}
	if s == "" {
		return "none"
	}
	return s
}

// importRDB reads r's entries in order and writes them with workers
// writers.
func (c *cli) importRDB(ks *keyspace.Store, r *rdb.FileReader, size int64, workers int) (importReport, error) {
	start := time.Now()
	rep := importReport{RDBVersion: r.Version(), ByType: map[string]int{}, ByDB: map[int]int{}, Unsupported: map[string]int{}}
	var done atomic.Int64
	stop := ticking(time.Second, func() {
		d := done.Load()
		fmt.Fprintf(c.stderr, "import: %d keys, %.0f%% of %d bytes, %.0f keys/s\n", d, 100*float64(r.Offset())/float64(max(size, 1)),
			size, float64(d)/time.Since(start).Seconds())
	})
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
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
				if err := storeEntry(ctx, ks, e, lim); err != nil {
					fail(fmt.Errorf("import: db %d key %q: %w", e.DB, truncKey(e.Key), err))
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
				rep.UnsupportedKeys = append(rep.UnsupportedKeys, string(truncKey(e.Key)))
			}
			continue
		case keyspace.Expired(e.ExpireAt, now):
			rep.Expired++
			continue
		case e.DB >= ks.DBs():
			fail(fmt.Errorf("import: key %q is in database %d; the array has databases 0 to %d: %w", truncKey(e.Key), e.DB, ks.DBs()-1, keyspace.ErrBadDB))
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
	stop()
	rep.Functions = r.Functions
	rep.Bytes = r.Offset()
	rep.Keys = done.Load()
	rep.Elapsed = time.Since(start)
	rep.Rate = float64(rep.Keys) / rep.Elapsed.Seconds()
	if firstErr == nil {
		firstErr = c.ctx.Err()
	}
	return rep, firstErr
}

func truncKey(k []byte) []byte { return k[:min(len(k), 64)] }

// storeEntry writes one key: a collection's elements first (under a new
// version nothing refers to until its value is written), then its value.
func storeEntry(ctx context.Context, ks *keyspace.Store, e rdb.Entry, lim collection.Limits) error {
	v, ops, err := collection.FromObject(ctx, e.Object, e.ExpireAt, lim, ks.MaxElement())
	if err != nil {
		return err
	}
	// A large collection's elements are most of a file's writes: as many
	// in flight as load keeps.
	if err := fanout.Each(len(ops), 256, func(i int) error { return ks.Apply(ctx, ops[i]) }); err != nil {
		return err
	}
	return ks.Save(ctx, e.DB, e.Key, v)
}

// exportReport is what `kvarray export` did.
type exportReport struct {
	File    string         `json:"file"`
	Keys    int64          `json:"keys"`
	ByType  map[string]int `json:"keys_by_type"`
	ByDB    map[int]int    `json:"keys_by_db"`
	Bytes   int64          `json:"bytes"`
	Elapsed time.Duration  `json:"elapsed_ns"`
}

func (c *cli) exportCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "export FILE.rdb [--json]",
		Short: "Write every key of the array to a Redis RDB file",
		Long: `export writes every key of every database, with its expiry, to FILE.rdb
in Redis's RDB format (version 9, which Redis 6.0 and later load), as
redis-server's SAVE would: put it where a redis-server's dir and
dbfilename point and start it. The file is written beside FILE.rdb and
renamed over it once complete, so FILE.rdb is never half written. Serve
must not hold the array meanwhile (it is the array at one point in time
then); while serving, DUMP moves keys one by one.`,
		Args: args(1, 1, "FILE.rdb"),
		RunE: func(_ *cobra.Command, args []string) error {
			return c.withKeyspace(0, func(ks *keyspace.Store) error {
				rep, err := c.exportRDB(ks, args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(c.stdout, rep)
				}
				_, err = fmt.Fprintf(c.stdout, "exported %d keys (%s) to %s, %d bytes, in %v\n", rep.Keys, countList(rep.ByType), rep.File,
					rep.Bytes, rep.Elapsed.Round(time.Millisecond))
				return err
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func (c *cli) exportRDB(ks *keyspace.Store, path string) (exportReport, error) {
	start := time.Now()
	rep := exportReport{File: path, ByType: map[string]int{}, ByDB: map[int]int{}}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return rep, fmt.Errorf("export: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	var done atomic.Int64
	stop := ticking(time.Second, func() { fmt.Fprintf(c.stderr, "export: %d keys\n", done.Load()) })
	w := rdb.NewFileWriter(tmp)
	err = c.exportKeys(ks, w, &rep, &done)
	stop()
	if err == nil {
		err = w.Close()
	}
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
	rep.Keys = done.Load()
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// exportKeys writes every live key, database by database; a collection's
// elements are read as serve's commands read them.
func (c *cli) exportKeys(ks *keyspace.Store, w *rdb.FileWriter, rep *exportReport, done *atomic.Int64) error {
	src := collection.StoreSource(ks)
	for db := range ks.DBs() {
		keys, err := ks.Keys(c.ctx, db, nil)
		if err != nil {
			return err
		}
		for _, k := range keys {
			v, err := ks.Load(c.ctx, db, k)
			if errors.Is(err, array.ErrNotFound) {
				continue // expired
			}
			if err != nil {
				return err
			}
			o, err := collection.ToObject(c.ctx, src, v, collection.DefaultLimits, ks.MaxElement())
			if err != nil {
				return fmt.Errorf("db %d key %q: %w", db, truncKey(k), err)
			}
			if err := w.Write(db, k, v.At, o); err != nil {
				return err
			}
			rep.ByType[o.Kind.String()]++
			rep.ByDB[db]++
			done.Add(1)
		}
	}
	return nil
}
