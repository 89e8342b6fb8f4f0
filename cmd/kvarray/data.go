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
)

func (c *cli) putCmd() *cobra.Command {
	var rm string
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
			return c.withArray(func(a *array.Array) error {
				var value []byte
				if len(args) == 2 {
					value = []byte(args[1])
				} else {
					var err error
					if value, err = io.ReadAll(c.stdin); err != nil {
						return fmt.Errorf("reading the value from stdin: %w", err)
					}
				}
				return a.Store(c.ctx, []byte(args[0]), value, opts...)
			})
		},
	}
	cmd.Flags().StringVar(&rm, "rm", "", "store with mechanism `NAME` ("+strings.Join(config.Mechanisms(), ", ")+")")
	return cmd
}

func (c *cli) getCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get KEY",
		Short: "Write a value's raw bytes to stdout",
		Args:  args(1, 1, "KEY"),
		RunE: func(_ *cobra.Command, args []string) error {
			return c.withArray(func(a *array.Array) error {
				v, err := a.Retrieve(c.ctx, []byte(args[0]))
				if err != nil {
					return err
				}
				_, err = c.stdout.Write(v)
				return err
			})
		},
	}
}

func (c *cli) delCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "del KEY",
		Short: "Delete a value",
		Args:  args(1, 1, "KEY"),
		RunE: func(_ *cobra.Command, args []string) error {
			return c.withArray(func(a *array.Array) error {
				return a.Delete(c.ctx, []byte(args[0]))
			})
		},
	}
}

func (c *cli) existsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "exists KEY",
		Short: "Print yes or no; exit 0 if KEY exists, 1 if not, 2 on error",
		Args:  args(1, 1, "KEY"),
		RunE: func(_ *cobra.Command, args []string) error {
			return c.withArray(func(a *array.Array) error {
				ok, err := a.Exist(c.ctx, []byte(args[0]))
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
}

func (c *cli) lsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ls [PREFIX]",
		Short: "List keys (that start with PREFIX), one per line, in order",
		Long: `ls lists the keys that start with PREFIX in ascending byte order, one per
line. A key that is not printable UTF-8 (or that starts with a double
quote) is printed as a Go-quoted string, so that every line is one key.`,
		Args: args(0, 1, "[PREFIX]"),
		RunE: func(_ *cobra.Command, args []string) error {
			var prefix []byte
			if len(args) == 1 {
				prefix = []byte(args[0])
			}
			return c.withArray(func(a *array.Array) error {
				keys, err := a.Keys(c.ctx, prefix)
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
