package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/config"
)

// Exit codes. Scripts can tell "no" (exists) from "could not answer".
const (
	exitOK    = 0
	exitNo    = 1 // exists: the key does not exist
	exitError = 2 // any error, usage errors included
)

// cli is one invocation: its streams, its flags, and the exit code a
// command chose when it succeeded with something other than 0.
type cli struct {
	ctx            context.Context
	stdin          io.Reader
	stdout, stderr io.Writer
	configPath     string
	exit           int
}

// run executes the command line args and returns the exit code. Errors are
// printed to stderr as one line, "kvarray: <message>".
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &cli{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr}
	root := c.root()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		msg := oneLine(err.Error())
		var u usageError
		switch {
		case errors.As(err, &u) && u.cmd != nil:
			msg += fmt.Sprintf(" (see '%s --help')", u.cmd.CommandPath())
		case strings.HasPrefix(msg, "unknown command"):
			msg += " (see 'kvarray --help')"
		}
		fmt.Fprintf(stderr, "kvarray: %s\n", msg)
		return exitError
	}
	return c.exit
}

func (c *cli) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "kvarray",
		Short: "A RAID-like reliability layer over key-value devices",
		Long: `kvarray stores each value over several key-value devices with a reliability
mechanism (hashing, replication, splitting, packing) chosen by size or per call, so
that values survive failed and corrupt devices.`,
		// Runtime errors are reported by run as one line; a usage dump
		// would bury them.
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.Version = version()
	root.SetVersionTemplate("kvarray {{.Version}}\n")
	root.PersistentFlags().StringVar(&c.configPath, "config", config.FileName, "config `FILE`")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageError{cmd, err} })
	root.AddCommand(c.initCmd(), c.putCmd(), c.getCmd(), c.delCmd(), c.existsCmd(), c.lsCmd(), c.statusCmd(), c.replaceCmd(), c.rebuildCmd(), c.resyncCmd(), c.scrubCmd(), c.failCmd(), c.serveCmd(), c.benchCmd(), c.loadCmd(), c.mttdlCmd(), c.tuneCmd(), c.importCmd(), c.exportCmd())
	return root
}

// usageError is a command line that does not parse; run adds a pointer to
// the command's help.
type usageError struct {
	cmd *cobra.Command
	err error
}

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// args checks the number of positional arguments.
func args(lo, hi int, want string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || len(args) > hi {
			return usageError{cmd, fmt.Errorf("%s: want %s, got %d arguments", cmd.Name(), want, len(args))}
		}
		return nil
	}
}

// oneLine joins a multi-line message (errors.Join, cobra suggestions) into
// one line.
func oneLine(s string) string {
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

// withArray opens the array of the config file, runs fn on it and closes it,
// reporting fn's error first.
func (c *cli) withArray(fn func(a *array.Array) error) error {
	cfg, err := config.Load(c.configPath)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("config file %s does not exist (create one with 'kvarray init', or pass --config FILE)", c.configPath)
	}
	if err != nil {
		return err
	}
	a, err := config.OpenConfig(c.ctx, cfg)
	if err != nil {
		return err
	}
	err = fn(a)
	if cerr := a.Close(); err == nil {
		err = cerr
	}
	return err
}
