package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/kvarray/kvarray/config"
)

func (c *cli) initCmd() *cobra.Command {
	var (
		dir   string
		n     int
		force bool
	)
	cmd := &cobra.Command{
		Use:   "init [--dir DIR] [--devices N] [--force]",
		Short: "Create an array of N pebble devices and write its config file",
		Long: `init creates a new array of N pebble devices DIR/dev0 ... DIR/dev{N-1} in
hybrid mode and writes its config to kvarray.yaml (or --config FILE). A
relative DIR is relative to the config file's directory. init refuses to
overwrite an existing config file unless --force is given, and never reuses
devices that already belong to an array.`,
		Args: args(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if n < 1 {
				return usageError{cmd, fmt.Errorf("--devices %d: want at least 1", n)}
			}
			return c.init(dir, n, force)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "data", "`DIR`ectory of the device directories")
	cmd.Flags().IntVar(&n, "devices", 6, "number of devices `N`")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite an existing config file")
	return cmd
}

func (c *cli) init(dir string, n int, force bool) error {
	path := c.configPath
	if _, err := os.Stat(path); err == nil && !force {
		return fmt.Errorf("%s already exists; use --force to overwrite it (its devices are not reused)", path)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	cfgDir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return err
	}
	cfg := config.Default(dir, n)
	cfg.SetDir(cfgDir)
	data, err := cfg.Marshal()
	if err != nil {
		return err
	}
	// The array first: a config file is only written for an array that
	// exists, so a failed init leaves no config pointing at nothing.
	a, err := config.Create(c.ctx, cfg)
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	id := a.ID()
	if err := a.Close(); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if err := writeFile(path, data); err != nil {
		return fmt.Errorf("init: array %s created, but writing its config: %w", id, err)
	}
	fmt.Fprintf(c.stdout, "created array %s: %d pebble devices in %s, config %s\n", id, n, dir, path)
	return nil
}

// writeFile replaces path atomically, so that an interrupted init --force
// leaves the old config whole.
func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".kvarray-*.yaml")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}
