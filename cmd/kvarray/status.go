package main

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/config"
)

// watchEvery is how often status --watch redraws (a variable for tests).
var watchEvery = 2 * time.Second

func (c *cli) statusCmd() *cobra.Command {
	var asJSON, watch, deep bool
	cmd := &cobra.Command{
		Use:   "status [--json] [--watch] [--deep]",
		Short: "Report the array's health, devices, objects per mechanism and storage overhead",
		Long: `status starts with the array's health in one line:
  clean                                    every device healthy
  degraded: device 2 failed, tolerates 1 more device
  rebuilding device 2: 43% ETA 1m20s       (a rebuild running in kvarray serve)
  data at risk: ...                        more devices lost than a mechanism
                                           in use tolerates, or unreadable objects
then every device (index, name, state, keys to resync, keys, used bytes,
capacity and free space where the device has a capacity, and why it
failed) and the bytes they hold: one call per device, fast whatever the
number of keys. --deep also counts the objects and user bytes per
mechanism, the storage overhead (bytes on the devices per user byte) and
the objects whose header cannot be read: it reads every object's header,
a pass over the keys. --json prints the same as JSON, with "health" and
"exit_code". --watch redraws it every 2 seconds until ^C.

While 'kvarray serve' holds the array, status asks it (through the admin
socket beside the config file), and shows the rebuild, resync or scrub it
runs and when it last scrubbed.

Exit status, as mdadm --detail --test: 0 clean, 1 degraded, 2 data at
risk or error.

A device's state is one of:
  healthy          serving, and holding everything that belongs on it
  failed           cannot be opened or read, or holds no array header
  degraded-behind  serving, but missed writes while it was failed: RESYNC
                   keys to bring up to date ('kvarray resync DEV')
  rebuilding       replaced by a new device, not yet rebuilt
                   ('kvarray rebuild DEV')`,
		Args: args(0, 0, "no arguments"),
		RunE: func(_ *cobra.Command, _ []string) error {
			if !watch {
				return c.status(asJSON, false, deep)
			}
			for {
				if err := c.status(asJSON, true, deep); err != nil {
					return err
				}
				select {
				case <-c.ctx.Done():
					return nil
				case <-time.After(watchEvery):
				}
			}
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	cmd.Flags().BoolVar(&watch, "watch", false, "redraw every 2 seconds until interrupted")
	cmd.Flags().BoolVar(&deep, "deep", false, "count objects per mechanism: reads every object's header")
	return cmd
}

// statusReport is what status --json prints.
type statusReport struct {
	Health   string `json:"health"`
	ExitCode int    `json:"exit_code"`
	serverStatus
}

// status prints the status once and sets the exit code from the health.
func (c *cli) status(asJSON, redraw, deep bool) error {
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
	cl, err := c.online()
	if err != nil {
		return err
	}
	var st serverStatus
	if cl != nil {
		defer cl.Close()
		if st, err = remoteStatus(c.ctx, cl, deep); err != nil {
			return err
		}
		// The server names devices as they were when it started; the
		// config file names them as replaced since.
		for i := range st.Devices {
			if i >= len(cfg.Devices) {
				break
			}
			if name, err := cfg.DeviceName(i); err == nil {
				st.Devices[i].Name = name
			}
		}
	} else {
		a, err := config.OpenConfig(c.ctx, cfg)
		if err != nil {
			return err
		}
		var opts []array.StatusOption
		if deep {
			opts = append(opts, array.StatusDeep())
		}
		st.Status, err = a.Status(c.ctx, opts...)
		if cerr := a.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	line, code := health(cfg, st.Status, st.Tasks)
	c.exit = code
	if redraw {
		if _, tty := terminal(c.stdout); tty {
			fmt.Fprint(c.stdout, "\x1b[H\x1b[2J")
		}
	}
	if asJSON {
		return writeJSON(c.stdout, statusReport{Health: line, ExitCode: code, serverStatus: st})
	}
	fmt.Fprintln(c.stdout, line)
	return printStatus(c.stdout, st)
}

// uncleanAdvice is what serve and status say of an array that its last
// process did not close (array.Array.Unclean).
const uncleanAdvice = "unclean shutdown: writes in flight when the array was last stopped may lack redundancy until 'kvarray scrub --repair' settles them"

// uncleanScrubbing is what serve says when it starts that scrub itself.
const uncleanScrubbing = "unclean shutdown: 'scrub --repair' runs in the background to settle the writes in flight when the array was last stopped ('kvarray status' shows its progress)"

func printStatus(out io.Writer, ss serverStatus) error {
	st := ss.Status
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "array %s, mode %s, default mechanism %s\n", st.ID, st.Mode, st.Default)
	if st.Weights != nil {
		fmt.Fprintf(w, "placement weights %v (devices fill in proportion)\n", st.Weights)
	}
	for _, t := range ss.Tasks {
		what := t.Kind
		if t.Dev >= 0 {
			what += " of device " + strconv.Itoa(t.Dev)
		}
		fmt.Fprintf(w, "running: %s, %s keys of %s, %s\n", what, humanize.Comma(t.Keys), humanize.Comma(t.Total), taskProgress(t))
	}
	if ss.LastScrub != nil {
		fmt.Fprintf(w, "last scrub: %s\n", humanize.Time(*ss.LastScrub))
	}
	if st.Unclean {
		fmt.Fprintln(w, uncleanAdvice)
	}
	fmt.Fprintln(w, "\nDEVICE\tNAME\tSTATE\tRESYNC\tKEYS\tUSED\tCAPACITY\tFREE\tREASON")
	for _, d := range st.Devices {
		keys, used := strconv.FormatInt(d.Keys, 10), humanize.IBytes(uint64(d.Used))
		capacity, free := "-", "-"
		if d.Capacity > 0 {
			capacity = humanize.IBytes(uint64(d.Capacity))
			free = humanize.IBytes(uint64(max(0, d.Capacity-d.Used)))
		}
		if d.State == "failed" && d.Keys == 0 && d.Used == 0 {
			keys, used = "-", "-"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s", d.Index, d.Name, d.State, d.ResyncKeys, keys, used, capacity, free)
		if d.Reason != "" {
			// Only here, so that rows without a reason end unpadded.
			fmt.Fprintf(w, "\t%s", oneLine(d.Reason))
		}
		fmt.Fprintln(w)
	}
	if !st.Deep {
		fmt.Fprintf(w, "\ndevice bytes %s; objects not counted (--deep reads every object's header)\n", humanize.IBytes(uint64(st.DeviceBytes)))
		return w.Flush()
	}
	fmt.Fprintln(w, "\nMECHANISM\tOBJECTS\tBYTES")
	for _, m := range st.Mechanisms {
		fmt.Fprintf(w, "%s\t%d\t%s\n", m.Name, m.Objects, humanize.IBytes(uint64(m.UserBytes)))
	}
	fmt.Fprintf(w, "total\t%d\t%s\n", st.Objects, humanize.IBytes(uint64(st.UserBytes)))
	overhead := "- (no data)"
	if st.UserBytes > 0 {
		overhead = fmt.Sprintf("%.2fx", st.Overhead)
	}
	fmt.Fprintf(w, "\ndevice bytes %s, storage overhead %s (device bytes / user bytes)\n", humanize.IBytes(uint64(st.DeviceBytes)), overhead)
	if st.Unreadable > 0 {
		fmt.Fprintf(w, "%d objects have no readable header\n", st.Unreadable)
	}
	return w.Flush()
}
