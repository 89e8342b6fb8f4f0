package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/config"
)

func (c *cli) initCmd() *cobra.Command {
	var (
		dir     string
		devices string
		specs   []string
		force   bool
		fromCfg bool
	)
	cmd := &cobra.Command{
		Use:   "init [--dir DIR] [--devices N | --devices SPEC,SPEC,... | --device SPEC ...] [--force] | init --from-config",
		Short: "Create an array and write its config file",
		Long: `init creates a new array in hybrid mode and writes its config to kvarray.yaml
(or --config FILE).

With --devices N (default 6) the devices are N pebble devices DIR/dev0 ...
DIR/dev{N-1}. Otherwise list the devices, in array order, with --devices
SPEC,SPEC,... or --device SPEC once per device, of any kinds mixed:
pebble:DIR (a directory, created if missing) or redis://HOST:PORT/DB (a
database of a running Redis-protocol server, which must hold no other
data). A relative DIR is relative to the config file's directory.

init refuses to overwrite an existing config file unless --force is given,
and never reuses devices that already belong to an array.

With --from-config, init creates the array that the existing config file
(kvarray.yaml or --config FILE) describes, and leaves the file as it is:
write or edit a config first (for example one init wrote for other
devices), then create it. This is how settings fixed at creation are
chosen: tiny values, device weights, device limits (docs/config.md).`,
		Example: `  kvarray init --devices 6
  kvarray init --devices redis://10.0.0.1:6379/0,redis://10.0.0.2:6379/0,redis://10.0.0.3:6379/0
  kvarray init --device pebble:data/dev0 --device redis://127.0.0.1:6379/1 --device redis://127.0.0.1:6380/0
  kvarray init --from-config --config tiny.yaml`,
		Args: args(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if fromCfg {
				for _, f := range []string{"dir", "devices", "device", "force"} {
					if cmd.Flags().Changed(f) {
						return usageError{cmd, fmt.Errorf("--from-config creates the array the config file describes: --%s does not apply", f)}
					}
				}
				return c.initFromConfig()
			}
			list, n, err := initDevices(cmd, devices, specs)
			if err != nil {
				return usageError{cmd, err}
			}
			if list == nil {
				return c.init(config.Default(dir, n), force, fmt.Sprintf("%d pebble devices in %s", n, dir))
			}
			if cmd.Flags().Changed("dir") {
				return usageError{cmd, errors.New("--dir names the directory of --devices N pebble devices; with a device list, give each pebble:DIR")}
			}
			return c.init(config.DefaultDevices(list), force, describeDevices(list))
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "data", "`DIR`ectory of the device directories (with --devices N)")
	cmd.Flags().StringVar(&devices, "devices", "6", "number `N` of pebble devices, or the devices as SPEC,SPEC,...")
	cmd.Flags().StringArrayVar(&specs, "device", nil, "a device `SPEC` (pebble:DIR or redis://HOST:PORT/DB); repeat in array order")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite an existing config file")
	cmd.Flags().BoolVar(&fromCfg, "from-config", false, "create the array the existing config file describes; the file is left as it is")
	return cmd
}

// initDevices reads init's device flags: a list of specs (from --device
// or a --devices list), or else a number of pebble devices.
func initDevices(cmd *cobra.Command, devices string, specs []string) ([]string, int, error) {
	if len(specs) > 0 {
		if cmd.Flags().Changed("devices") {
			return nil, 0, errors.New("--devices and --device: give one")
		}
	} else if n, err := strconv.Atoi(devices); err == nil {
		if n < 1 {
			return nil, 0, fmt.Errorf("--devices %d: want at least 1", n)
		}
		return nil, n, nil
	} else if !strings.Contains(devices, ":") {
		return nil, 0, fmt.Errorf("--devices %q: want a number of pebble devices or a list like pebble:DIR,redis://HOST:PORT/DB", devices)
	} else {
		specs = strings.Split(devices, ",")
	}
	for i, s := range specs {
		specs[i] = strings.TrimSpace(s)
		switch {
		case specs[i] == "":
			return nil, 0, fmt.Errorf("device %d of the list is empty", i)
		case strings.HasPrefix(specs[i], "mem:"):
			return nil, 0, memRefused(i, specs[i])
		}
	}
	return specs, 0, nil
}

// memRefused is init's refusal of device i, a mem device.
func memRefused(i int, spec string) error {
	return fmt.Errorf("device %d %q: a mem device lives only as long as one process; init creates arrays that last (pebble:DIR or redis://HOST:PORT/DB)", i, spec)
}

// describeDevices counts the devices by kind: "4 redis, 2 pebble devices".
func describeDevices(specs []string) string {
	var kinds []string
	count := map[string]int{}
	for _, s := range specs {
		kind, _, _ := strings.Cut(s, ":")
		if count[kind] == 0 {
			kinds = append(kinds, kind)
		}
		count[kind]++
	}
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%d %s", count[k], k)
	}
	return strings.Join(parts, ", ") + " devices"
}

// initFromConfig creates the array the existing config file describes,
// which it does not rewrite (its comments and layout are the user's).
func (c *cli) initFromConfig() error {
	cfg, err := config.Load(c.configPath)
	if err != nil {
		return fmt.Errorf("init --from-config: %w", err)
	}
	for i, spec := range cfg.Devices {
		if strings.HasPrefix(spec, "mem:") {
			return fmt.Errorf("init --from-config: %w", memRefused(i, spec))
		}
	}
	id, err := c.create(cfg)
	if err != nil {
		return fmt.Errorf("init --from-config: %w", err)
	}
	fmt.Fprintf(c.stdout, "created array %s: %s, config %s\n", id, describeDevices(cfg.Devices), c.configPath)
	return nil
}

// init creates the array cfg describes (what: its devices, for the
// message) and writes cfg to the config file.
func (c *cli) init(cfg *config.Config, force bool, what string) error {
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
	cfg.SetDir(cfgDir)
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	data, err := cfg.Marshal()
	if err != nil {
		return err
	}
	// The array first: a config file is only written for an array that
	// exists, so a failed init leaves no config pointing at nothing.
	id, err := c.create(cfg)
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if err := writeFile(path, data); err != nil {
		return fmt.Errorf("init: array %s created, but writing its config: %w", id, err)
	}
	fmt.Fprintf(c.stdout, "created array %s: %s, config %s\n", id, what, path)
	return nil
}

// create creates the array cfg describes, closes it and returns its id.
func (c *cli) create(cfg *config.Config) (array.ID, error) {
	a, err := config.Create(c.ctx, cfg)
	if err != nil {
		return array.ID{}, err
	}
	return a.ID(), a.Close()
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
