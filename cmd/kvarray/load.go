package main

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvarray/kvarray/keyspace"
)

// loadReport is what `kvarray load` did.
type loadReport struct {
	Keys    int64         `json:"keys"`
	Size    int           `json:"value_size"`
	Elapsed time.Duration `json:"elapsed_ns"`
	Rate    float64       `json:"keys_per_second"`
}

// loadCmd fills the array with generated Redis strings, written as SET
// writes them (keyspace.Store.Set, key counts kept), so that a large
// array for serve's scale checks (issue 10: 10M small values) takes
// minutes rather than the hours a client's SETs through the server would.
func (c *cli) loadCmd() *cobra.Command {
	var (
		size, workers, db int
		prefix            string
		asJSON            bool
	)
	cmd := &cobra.Command{
		Use:   "load N [--size BYTES] [--prefix P] [--workers W] [--json]",
		Short: "Store N generated values (for scale tests)",
		Long: `load stores N values of --size bytes under keys P0000000000, P0000000001, ...
(--prefix P, 10 digits), as SET would store them, with --workers stores in
flight. Existing keys of those names are overwritten. Progress goes to
standard error every second; the report (--json for JSON) to standard
output. Values are the key's digits repeated, so a GET can check them.`,
		Args: args(1, 1, "N"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var n int64
			if _, err := fmt.Sscan(args[0], &n); err != nil || n < 1 {
				return usageError{cmd, fmt.Errorf("load: N %q is not a positive number", args[0])}
			}
			if size < 1 || workers < 1 {
				return usageError{cmd, fmt.Errorf("--size %d, --workers %d: want at least 1 each", size, workers)}
			}
			return c.withKeyspace(db, func(ks *keyspace.Store) error {
				ks.StartCounting(c.ctx)
				defer ks.StopCounting()
				rep, err := c.load(ks, db, n, size, workers, prefix)
				if err != nil {
					return err
				}
				// The counts are saved as a clean shutdown of serve saves
				// them: the next serve starts with DBSIZE known.
				if err := ks.SaveCounts(c.ctx); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(c.stdout, rep)
				}
				_, err = fmt.Fprintf(c.stdout, "loaded %d keys of %d bytes in %v (%.0f keys/s)\n", rep.Keys, rep.Size, rep.Elapsed.Round(time.Millisecond), rep.Rate)
				return err
			})
		},
	}
	cmd.Flags().IntVar(&size, "size", 16, "value size in bytes")
	cmd.Flags().IntVar(&workers, "workers", 256, "stores in flight")
	cmd.Flags().StringVar(&prefix, "prefix", "key:", "key prefix")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	dbFlag(cmd, &db)
	return cmd
}

// loadValue is key i's value: its 10 digits repeated to size bytes.
func loadValue(i int64, size int) []byte {
	d := fmt.Sprintf("%010d", i)
	v := make([]byte, size)
	for j := range v {
		v[j] = d[j%len(d)]
	}
	return v
}

func (c *cli) load(ks *keyspace.Store, db int, n int64, size, workers int, prefix string) (loadReport, error) {
	start := time.Now()
	var next, done atomic.Int64
	var firstErr error
	var errOnce sync.Once
	stop := ticking(time.Second, func() {
		d := done.Load()
		fmt.Fprintf(c.stderr, "load: %d of %d keys, %.0f keys/s\n", d, n, float64(d)/time.Since(start).Seconds())
	})
	var wg sync.WaitGroup
	for range min(int64(workers), n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= n || c.ctx.Err() != nil {
					return
				}
				key := fmt.Appendf(nil, "%s%010d", prefix, i)
				if err := ks.Set(c.ctx, db, key, loadValue(i, size), 0); err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("load %s: %w", key, err) })
					next.Store(n) // the others stop too
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	stop()
	rep := loadReport{Keys: done.Load(), Size: size, Elapsed: time.Since(start)}
	rep.Rate = float64(rep.Keys) / rep.Elapsed.Seconds()
	if firstErr != nil {
		return rep, firstErr
	}
	return rep, c.ctx.Err()
}
