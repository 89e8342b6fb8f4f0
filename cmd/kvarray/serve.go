package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/config"
	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/server"
)

// shutdownTimeout bounds how long serve waits for connections to finish
// their commands after SIGINT or SIGTERM.
const shutdownTimeout = 30 * time.Second

func (c *cli) serveCmd() *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "serve [--listen ADDR]",
		Short: "Serve the array over the Redis protocol (redis-cli, Redis clients)",
		Long: `serve opens the array of the config file and serves it over the Redis
protocol (RESP2, and RESP3 after HELLO 3) on ADDR (default 127.0.0.1:6380), until SIGINT or SIGTERM:
then it stops accepting connections, lets each finish the commands it has
sent, and closes the array (flushing packing queues and closing devices).

With no --config and no ./kvarray.yaml, serve creates the default array
first: 6 Pebble devices under ./data in hybrid mode, with its config
written to ./kvarray.yaml so that the other commands see the same array.

Values are Redis strings, in databases 0 to 15, with expiry stored with
the value; MULTI/EXEC transactions are all-or-nothing, across a crash too.
The commands and what differs from Redis: docs/compatibility.md (COMMAND
lists them). The array's own commands: KVARRAY.STATUS, KVARRAY.SET key
value RM, KVARRAY.SCRUB, KVARRAY.REBUILD DEV, KVARRAY.FAIL DEV and
KVARRAY.RECOVER DEV (mem devices). The admin commands have no access
control: listen on a trusted address only.`,
		Args: args(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.serve(listen, cmd.Flags().Changed("config"))
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:6380", "listen on TCP address `ADDR`")
	return cmd
}

func (c *cli) serve(listen string, explicitConfig bool) error {
	ctx, stop := signal.NotifyContext(c.ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, devs, dbs, err := c.openForServe(ctx, explicitConfig)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		err = fmt.Errorf("serve: %w", err)
		if cerr := a.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return err
	}
	opts := []server.Option{server.WithDevices(devs)}
	if dbs > 0 {
		opts = append(opts, server.WithDatabases(dbs))
	}
	srv := server.New(a, opts...)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	fmt.Fprintf(c.stdout, "kvarray serve: array %s (%s, %d devices) listening on %s\n", a.ID(), a.Mode(), a.N(), l.Addr())
	fmt.Fprintf(c.stdout, "connect with: %s\n", connectHint(l.Addr()))

	var serveErr error
	select {
	case <-ctx.Done():
		fmt.Fprintln(c.stdout, "kvarray serve: shutting down")
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			serveErr = fmt.Errorf("serve: shutdown: connections still busy after %v were closed: %w", shutdownTimeout, err)
		}
		if err := <-served; !errors.Is(err, server.ErrServerClosed) && serveErr == nil {
			serveErr = fmt.Errorf("serve: %w", err)
		}
	case err := <-served:
		// The listener failed: stop serving the connections too.
		serveErr = fmt.Errorf("serve: %w", err)
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		srv.Shutdown(sctx)
	}
	if err := a.Close(); err != nil {
		serveErr = errors.Join(serveErr, fmt.Errorf("serve: closing the array: %w", err))
	}
	if serveErr == nil {
		fmt.Fprintln(c.stdout, "kvarray serve: stopped")
	}
	return serveErr
}

// openForServe opens the array of the config file, or creates the default
// one first when there is no config file and none was asked for. It opens
// the devices itself, to give them to the server (KVARRAY.FAIL and
// RECOVER work on mem devices) and to open the array with the options of
// a long-running process (automatic resync).
func (c *cli) openForServe(ctx context.Context, explicitConfig bool) (*array.Array, []device.Device, int, error) {
	cfg, err := config.Load(c.configPath)
	if errors.Is(err, fs.ErrNotExist) {
		if explicitConfig {
			return nil, nil, 0, fmt.Errorf("config file %s does not exist (create one with 'kvarray init', or run serve without --config for the default array)", c.configPath)
		}
		cfg, err = c.createDefault(ctx)
	}
	if err != nil {
		return nil, nil, 0, err
	}
	// mem devices are new at every open: their array is created.
	mem := allMem(cfg)
	devs := config.OpenDevices(cfg, mem)
	var a *array.Array
	if mem {
		a, err = array.Create(ctx, devs, cfg.ServeOptions()...)
	} else if err = someAnswers(ctx, cfg, devs); err == nil {
		a, err = array.Open(ctx, devs, cfg.ServeOptions()...)
	}
	if err != nil {
		for _, d := range devs {
			d.Close()
		}
		return nil, nil, 0, err
	}
	return a, devs, cfg.Databases, nil
}

// someAnswers fails, as config.OpenConfig does, when no device could be
// opened: the array was never created, or moved.
func someAnswers(ctx context.Context, cfg *config.Config, devs []device.Device) error {
	var first error
	for i, d := range devs {
		_, err := d.Info(ctx)
		if err == nil {
			return nil
		}
		if i == 0 {
			first = err
		}
	}
	return fmt.Errorf("open: none of the %d devices can be opened; device 0 (%s): %w", len(devs), cfg.Devices[0], first)
}

// createDefault creates the default array (what `kvarray init` makes) in
// the config file's directory, writes the config file and returns it.
func (c *cli) createDefault(ctx context.Context) (*config.Config, error) {
	dir, err := filepath.Abs(filepath.Dir(c.configPath))
	if err != nil {
		return nil, err
	}
	cfg := config.Default("data", 6)
	cfg.SetDir(dir)
	data, err := cfg.Marshal()
	if err != nil {
		return nil, err
	}
	a, err := config.Create(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("serve: no %s, and creating the default array in %s failed: %w", c.configPath, filepath.Join(dir, "data"), err)
	}
	id := a.ID()
	if err := a.Close(); err != nil {
		return nil, fmt.Errorf("serve: creating the default array: %w", err)
	}
	if err := writeFile(c.configPath, data); err != nil {
		return nil, fmt.Errorf("serve: array %s created, but writing its config: %w", id, err)
	}
	fmt.Fprintf(c.stdout, "created array %s: 6 pebble devices in %s, config %s\n", id, filepath.Join(dir, "data"), c.configPath)
	return config.Load(c.configPath)
}

func allMem(cfg *config.Config) bool {
	for _, d := range cfg.Devices {
		if !strings.HasPrefix(d, "mem:") {
			return false
		}
	}
	return len(cfg.Devices) > 0
}

// connectHint is the redis-cli command line that reaches addr.
func connectHint(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "redis-cli -h " + addr.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() || host == "localhost" {
		return "redis-cli -p " + port
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return "redis-cli -p " + port + " (from this machine)"
	}
	return "redis-cli -h " + host + " -p " + port
}
