package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvarray/kvarray/internal/rdb"
	"github.com/kvarray/kvarray/internal/transfer"
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

// The reports are package transfer's, which does the work for serve too.
type (
	importReport = transfer.ImportReport
	exportReport = transfer.ExportReport
)

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

// importRDB stores r's entries with workers writers, reporting progress.
func (c *cli) importRDB(ks *keyspace.Store, r *rdb.FileReader, size int64, workers int) (importReport, error) {
	start := time.Now()
	var done atomic.Int64
	stop := ticking(time.Second, func() {
		d := done.Load()
		fmt.Fprintf(c.stderr, "import: %d keys, %.0f%% of %d bytes, %.0f keys/s\n", d, 100*float64(r.Offset())/float64(max(size, 1)),
			size, float64(d)/time.Since(start).Seconds())
	})
	defer stop()
	return transfer.Import(c.ctx, ks, r, transfer.ImportOptions{Workers: workers, Done: &done})
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
	var done atomic.Int64
	stop := ticking(time.Second, func() { fmt.Fprintf(c.stderr, "export: %d keys\n", done.Load()) })
	defer stop()
	return transfer.ExportFile(c.ctx, ks, path, transfer.ExportOptions{Done: &done})
}
