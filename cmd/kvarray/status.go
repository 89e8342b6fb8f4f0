package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/kvarray/kvarray/array"
)

func (c *cli) statusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [--json]",
		Short: "Report devices, objects per mechanism and storage overhead",
		Long: `status reports every device (index, name, state, keys to resync, keys,
used bytes, and why it failed), the objects and user bytes per mechanism,
and the storage overhead: bytes on the devices per user byte. It reads every object's
header, so it takes a pass over the keys. --json prints the same as JSON.

A device's state is one of:
  healthy          serving, and holding everything that belongs on it
  failed           cannot be opened or read, or holds no array header
  degraded-behind  serving, but missed writes while it was failed: RESYNC
                   keys to bring up to date ('kvarray resync DEV')
  rebuilding       replaced by a new device, not yet rebuilt
                   ('kvarray rebuild DEV')`,
		Args: args(0, 0, "no arguments"),
		RunE: func(_ *cobra.Command, _ []string) error {
			return c.withArray(func(a *array.Array) error {
				st, err := a.Status(c.ctx)
				if err != nil {
					return err
				}
				if asJSON {
					enc := json.NewEncoder(c.stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(st)
				}
				return printStatus(c.stdout, st)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	return cmd
}

func printStatus(out io.Writer, st array.Status) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "array %s, mode %s, default mechanism %s\n\n", st.ID, st.Mode, st.Default)
	fmt.Fprintln(w, "DEVICE\tNAME\tSTATE\tRESYNC\tKEYS\tUSED\tREASON")
	for _, d := range st.Devices {
		keys, used := strconv.FormatInt(d.Keys, 10), humanize.IBytes(uint64(d.Used))
		if d.Capacity > 0 {
			used += " of " + humanize.IBytes(uint64(d.Capacity))
		}
		if d.State == "failed" && d.Keys == 0 && d.Used == 0 {
			keys, used = "-", "-"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%s\t%s", d.Index, d.Name, d.State, d.ResyncKeys, keys, used)
		if d.Reason != "" {
			// Only here, so that rows without a reason end unpadded.
			fmt.Fprintf(w, "\t%s", oneLine(d.Reason))
		}
		fmt.Fprintln(w)
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
