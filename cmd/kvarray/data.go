package main

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/config"
	"github.com/kvarray/kvarray/keyspace"
)

// The data commands read and write Redis keys through package keyspace,
// exactly as `kvarray serve` does, so that both always see the same data:
// --db picks the database (default 0), a value keeps no expiry once put,
// and an expired value is not found.

// withKeyspace opens the array and its keyspace and runs fn.
func (c *cli) withKeyspace(db int, fn func(ks *keyspace.Store) error) error {
	return c.withArray(func(a *array.Array) error {
		ks, err := keyspace.Open(c.ctx, a, keyspace.MaxDatabases)
		if err != nil {
			return err
		}
		if db < 0 || db >= keyspace.MaxDatabases {
			return fmt.Errorf("--db %d: databases are 0 to %d: %w", db, keyspace.MaxDatabases-1, keyspace.ErrBadDB)
		}
		return fn(ks)
	})
}

func dbFlag(cmd *cobra.Command, db *int) {
	cmd.Flags().IntVar(db, "db", 0, "the Redis database `N` (SELECT N in kvarray serve)")
}

func (c *cli) putCmd() *cobra.Command {
	var rm string
	var db int
	cmd := &cobra.Command{
		Use:   "put KEY [VALUE] [--rm NAME]",
		Short: "Store a value (read from stdin when VALUE is absent)",
		Long: `put stores VALUE under KEY, replacing any previous value. Without VALUE the
value is read from standard input. --rm stores it with the named mechanism
instead of the one the mode picks.`,
		Args: args(1, 2, "KEY [VALUE]"),
		RunE: func(_ *cobra.Command, args []string) error {
			var opts []array.CallOption
			if rm != "" {
				opts = append(opts, array.Using(rm))
			}
			// stdin is read once the array is open, so that a missing
			// config or array is reported at once rather than after
			// waiting for input.
			return c.withKeyspace(db, func(ks *keyspace.Store) error {
				var value []byte
				if len(args) == 2 {
					value = []byte(args[1])
				} else {
					var err error
					if value, err = io.ReadAll(c.stdin); err != nil {
						return fmt.Errorf("reading the value from stdin: %w", err)
					}
				}
				if err := ks.CheckKey([]byte(args[0])); err != nil {
					return err
				}
				return ks.Set(c.ctx, db, []byte(args[0]), value, 0, opts...)
			})
		},
	}
	cmd.Flags().StringVar(&rm, "rm", "", "store with mechanism `NAME` ("+strings.Join(config.Mechanisms(), ", ")+")")
	dbFlag(cmd, &db)
	return cmd
}

func (c *cli) getCmd() *cobra.Command {
	var db int
	cmd := &cobra.Command{
		Use:   "get KEY",
		Short: "Write a value's raw bytes to stdout",
		Args:  args(1, 1, "KEY"),
		RunE: func(_ *cobra.Command, args []string) error {
			return c.withKeyspace(db, func(ks *keyspace.Store) error {
				if err := ks.CheckKey([]byte(args[0])); err != nil {
					return err
				}
				v, _, err := ks.Get(c.ctx, db, []byte(args[0]))
				if err != nil {
					return err
				}
				_, err = c.stdout.Write(v)
				return err
			})
		},
	}
	dbFlag(cmd, &db)
	return cmd
}

func (c *cli) delCmd() *cobra.Command {
	var db int
	cmd := &cobra.Command{
		Use:   "del KEY",
		Short: "Delete a value",
		Args:  args(1, 1, "KEY"),
		RunE: func(_ *cobra.Command, args []string) error {
			return c.withKeyspace(db, func(ks *keyspace.Store) error {
				if err := ks.CheckKey([]byte(args[0])); err != nil {
					return err
				}
				existed, err := ks.Delete(c.ctx, db, []byte(args[0]))
				if err == nil && !existed {
					err = fmt.Errorf("delete %q: %w", args[0], array.ErrNotFound)
				}
				return err
			})
		},
	}
	dbFlag(cmd, &db)
	return cmd
}

func (c *cli) existsCmd() *cobra.Command {
	var db int
	cmd := &cobra.Command{
		Use:   "exists KEY",
		Short: "Print yes or no; exit 0 if KEY exists, 1 if not, 2 on error",
		Args:  args(1, 1, "KEY"),
		RunE: func(_ *cobra.Command, args []string) error {
			return c.withKeyspace(db, func(ks *keyspace.Store) error {
				if err := ks.CheckKey([]byte(args[0])); err != nil {
					return err
				}
				ok, err := ks.Exists(c.ctx, db, []byte(args[0]))
				if err != nil {
					return err
				}
				if ok {
					fmt.Fprintln(c.stdout, "yes")
				} else {
					fmt.Fprintln(c.stdout, "no")
					c.exit = exitNo
				}
				return nil
			})
		},
	}
	dbFlag(cmd, &db)
	return cmd
}

func (c *cli) lsCmd() *cobra.Command {
	var db int
	cmd := &cobra.Command{
		Use:   "ls [PREFIX]",
		Short: "List keys (that start with PREFIX), one per line, in order",
		Long: `ls lists the keys that start with PREFIX in ascending byte order, one per
line. A key that is not printable UTF-8 (or that starts with a double
quote) is printed as a Go-quoted string, so that every line is one key.
It lists one database: 0 unless --db says otherwise. Keys that expired but
are not yet reclaimed by kvarray serve are listed.`,
		Args: args(0, 1, "[PREFIX]"),
		RunE: func(_ *cobra.Command, args []string) error {
			var prefix []byte
			if len(args) == 1 {
				prefix = []byte(args[0])
			}
			return c.withKeyspace(db, func(ks *keyspace.Store) error {
				keys, err := ks.Keys(c.ctx, db, prefix)
				if err != nil {
					return err
				}
				w := bufio.NewWriter(c.stdout)
				for _, k := range keys {
					fmt.Fprintln(w, showKey(k))
				}
				return w.Flush()
			})
		},
	}
	dbFlag(cmd, &db)
	return cmd
}

// showKey returns k as is when it prints as one unambiguous line, and
// Go-quoted otherwise.
func showKey(k []byte) string {
	s := string(k)
	if !utf8.ValidString(s) || len(s) > 0 && s[0] == '"' {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}
