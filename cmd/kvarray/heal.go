package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/config"
	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
)

// Healing commands: replace, rebuild, resync, scrub.

// ticking calls fn every interval on a goroutine of its own until the
// function it returns is called, which waits for that goroutine to end.
func ticking(interval time.Duration, fn func()) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				fn()
			}
		}
	}()
	return func() { close(quit); <-done }
}

// progressEvery is how often the progress line is redrawn (a variable for
// tests).
var progressEvery = 200 * time.Millisecond

// terminal reports whether w is a terminal, and its width: the progress
// line is drawn only there. A variable for tests.
var terminal = func(w io.Writer) (width int, ok bool) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0, false
	}
	width = 80
	if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 0 {
		width = w
	}
	return width, true
}

func (c *cli) replaceCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "replace DEV [NEWSPEC] [--force]",
		Short: "Swap a new, empty device in at position DEV (then run rebuild)",
		Long: `replace puts a new, empty device at position DEV of the array: it opens
NEWSPEC (pebble:DIR, mem:NAME or redis://HOST:PORT/DB), creating a pebble
directory that does not exist, writes the array header on it marked as
being rebuilt, and sets devices[DEV] in the config file to NEWSPEC (the
rest of the file is kept). Without NEWSPEC the device at DEV is replaced by
a new one under the same spec: for pebble, its directory must be missing or
empty (remove the failed device's directory first).

The new device must be empty: one that holds an array header (of this
array or another) or any key is refused. Replacing a device that is still
healthy discards its contents, which the rebuild restores from the other
devices' redundancy (values stored with hashing on it are lost): it needs
--force. Run 'kvarray rebuild DEV' next.`,
		Args: args(1, 2, "DEV [NEWSPEC]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			dev, err := parseDev(cmd, args[0])
			if err != nil {
				return err
			}
			spec := ""
			if len(args) == 2 {
				spec = args[1]
			}
			return c.replace(dev, spec, force)
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "replace a device that is still healthy")
	return cmd
}

func (c *cli) rebuildCmd() *cobra.Command {
	return c.healDevCmd("rebuild", "Restore everything that belongs on a replaced device", `rebuild restores the data of device DEV, which 'kvarray replace' swapped in:
it lists the keys that can have a piece on DEV from the devices next to it
and repairs them, --workers at a time. On a terminal a progress line on
stderr shows keys done of the total, bytes, rates, elapsed time and time
left. At the end it prints a report (or, with --json, the report as JSON)
and the device is healthy.

The rebuild checkpoints its progress on the device: interrupted (^C), it
stops cleanly and a rerun resumes where it stopped. Keys that could not be
repaired make it exit 2 after the report.`,
		func(a *array.Array, dev int, opts []array.HealOption) (array.RebuildReport, error) {
			return a.Rebuild(c.ctx, dev, opts...)
		})
}

func (c *cli) resyncCmd() *cobra.Command {
	return c.healDevCmd("resync", "Bring a device that was unreachable and came back up to date", `resync re-admits device DEV, which was failed (unreachable) and is back with
its data, and repairs exactly the keys whose writes it missed, as listed by
the resync record the other devices kept ('kvarray status' shows it as
degraded-behind with the number of keys). Until then the device never
serves those keys' old values. Progress and report as for rebuild; an
interrupted resync is finished by running it again. A device that lost its
data needs replace and rebuild instead.`,
		func(a *array.Array, dev int, opts []array.HealOption) (array.RebuildReport, error) {
			return a.Resync(c.ctx, dev, opts...)
		})
}

// healDevCmd is a command that heals one device: rebuild or resync.
func (c *cli) healDevCmd(name, short, long string, run func(a *array.Array, dev int, opts []array.HealOption) (array.RebuildReport, error)) *cobra.Command {
	var (
		workers int
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   name + " DEV [--workers N] [--json]",
		Short: short,
		Long:  long,
		Args:  args(1, 1, "DEV"),
		RunE: func(cmd *cobra.Command, args []string) error {
			dev, err := parseDev(cmd, args[0])
			if err != nil {
				return err
			}
			if workers < 1 {
				return usageError{cmd, fmt.Errorf("--workers %d: want at least 1", workers)}
			}
			return c.heal(name, dev, workers, asJSON, func(a *array.Array, opts []array.HealOption) (array.RebuildReport, error) {
				return run(a, dev, opts)
			})
		},
	}
	cmd.Flags().IntVar(&workers, "workers", 16, "keys repaired at once")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func (c *cli) scrubCmd() *cobra.Command {
	var (
		repair  bool
		workers int
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "scrub [--repair] [--workers N] [--json]",
		Short: "Verify every value and redundant piece; repair with --repair",
		Long: `scrub reads every value and every redundant piece on the devices that
answer, verifies checksums and that each value is recoverable, and reports
per mechanism the keys checked, the bad pieces (missing, corrupt or stale
copies, shards, members and parities) and the unrecoverable keys, and the
orphaned pieces (of keys that do not exist). Without --repair it changes
nothing; with it, it rewrites what is bad and removes orphans. Progress on a
terminal as for rebuild; --json prints the report as JSON.

Exit status: 0 when nothing was found, or everything found was repaired;
1 when problems were found and not repaired (no --repair); 2 on error or
when keys are unrecoverable.`,
		Args: args(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if workers < 1 {
				return usageError{cmd, fmt.Errorf("--workers %d: want at least 1", workers)}
			}
			return c.scrub(repair, workers, asJSON)
		},
	}
	cmd.Flags().BoolVar(&repair, "repair", false, "repair what is found")
	cmd.Flags().IntVar(&workers, "workers", 16, "keys checked at once")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// parseDev parses a device index argument.
func parseDev(cmd *cobra.Command, s string) (int, error) {
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 {
		return 0, usageError{cmd, fmt.Errorf("DEV %q: want a device index (0, 1, ... as in 'kvarray status')", s)}
	}
	return i, nil
}

// loadConfig loads the config file, saying how to make one when there is
// none (as withArray does).
func (c *cli) loadConfig() (*config.Config, error) {
	cfg, err := config.Load(c.configPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("config file %s does not exist (create one with 'kvarray init', or pass --config FILE)", c.configPath)
	}
	return cfg, err
}

// ---- replace ----

// replace swaps a new device in at position dev; spec "" means the same
// spec as now. While kvarray serve holds the array, the server does it.
func (c *cli) replace(dev int, spec string, force bool) error {
	cl, err := c.online()
	if err != nil {
		return err
	}
	if cl != nil {
		defer cl.Close()
		args := []any{"kvarray.replace", dev}
		if spec != "" {
			args = append(args, spec)
		}
		if force {
			args = append(args, "FORCE")
		}
		msg, err := cl.Do(c.ctx, args...).Text()
		if err != nil {
			return remoteError(err)
		}
		fmt.Fprint(c.stdout, msg)
		return nil
	}
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
	msg, err := replaceDevice(c.ctx, c.configPath, cfg, nil, dev, spec, force, nil, nil)
	fmt.Fprint(c.stdout, msg)
	return err
}

// replaceDevice swaps a new device in at position dev of the array of cfg
// (the config file at configPath): of live, the array kvarray serve
// holds, or else of the array opened for it. adopt, when not nil, hands
// the new device to the live array (adoptInSlot); else the array's
// ReplaceDevice does. closeOld, when not nil, closes the live array's
// device at dev (left failed): a new device at the same path opens only
// once the failed one's engine is closed (Pebble's lock). It returns what
// to tell the user.
func replaceDevice(ctx context.Context, configPath string, cfg *config.Config, live *array.Array, dev int, spec string, force bool, adopt func(device.Device) error, closeOld func()) (_ string, err error) {
	n := len(cfg.Devices)
	if dev >= n {
		return "", fmt.Errorf("replace: device %d: the array has devices 0..%d", dev, n-1)
	}
	if !slices.ContainsFunc(cfg.Devices, func(s string) bool { return !strings.HasPrefix(s, "mem:") }) {
		return "", errors.New("replace: the config lists mem devices only: such an array lives for one process, there is nothing to replace")
	}
	oldName, err := cfg.DeviceName(dev)
	if err != nil {
		return "", err
	}
	newCfg := *cfg
	newCfg.Devices = append([]string(nil), cfg.Devices...)
	if spec == "" {
		spec = cfg.Devices[dev]
	} else if err := newCfg.SetDevice(dev, spec); err != nil {
		return "", fmt.Errorf("replace device %d by %q: %w", dev, spec, err)
	}
	newName, err := newCfg.DeviceName(dev)
	if err != nil {
		return "", err
	}
	same := newName == oldName

	if same && live != nil && closeOld != nil {
		if live.ProbeDevice(ctx, dev) == mechanism.Healthy {
			return "", fmt.Errorf("replace device %d: %s is healthy and in use: replace it by a new path, or fail it first ('kvarray fail %d')", dev, oldName, dev)
		}
		closeOld()
	}
	// The new device first, checked empty: when it is the same device as
	// now, it is never opened twice.
	nd, undo, err := openNewDevice(&newCfg, dev, same)
	if err != nil {
		return "", fmt.Errorf("replace device %d: %w", dev, err)
	}
	adopted := false
	defer func() {
		if !adopted {
			_ = nd.Close()
			undo()
		}
	}()

	a := live
	if a == nil {
		if a, err = openArrayWithout(ctx, cfg, dev, same); err != nil {
			return "", err
		}
		defer func() {
			if cerr := a.Close(); err == nil && cerr != nil {
				err = cerr
			}
		}()
	}
	if err := checkNotMember(ctx, nd, newName, a.ID()); err != nil {
		return "", fmt.Errorf("replace device %d: %w", dev, err)
	}
	// Judged as status shows it: probed, not as it was last seen.
	if !same && a.ProbeDevice(ctx, dev) == mechanism.Healthy && !force {
		return "", fmt.Errorf("replace device %d: %s is healthy: replacing it discards its contents, which rebuild restores from the other devices (values stored with hashing on it are lost); pass --force to replace it anyway", dev, oldName)
	}
	adopted = true // from here on the array owns it, and closes it
	if adopt == nil {
		adopt = func(nd device.Device) error { return a.ReplaceDevice(ctx, dev, nd) }
	}
	if err := adopt(nd); err != nil {
		return "", err
	}
	if !same {
		if err := config.SaveDevice(configPath, dev, spec); err != nil {
			return "", fmt.Errorf("device %d replaced by %s, but the config file was not updated (set devices[%d] to %q in it by hand): %w", dev, newName, dev, spec, err)
		}
	}
	msg := fmt.Sprintf("device %d is now %s: new and empty, marked rebuilding", dev, newName)
	if !same {
		msg += fmt.Sprintf(" (was %s; %s updated)", oldName, configPath)
	}
	return msg + fmt.Sprintf("\nrun 'kvarray rebuild %d' to restore its data\n", dev), nil
}

// openNewDevice opens devices[dev] of cfg as a new device, creating it: a
// pebble directory must be missing or empty, or hold a pebble database
// (which checkNotMember then checks). undo removes what opening created,
// for when the replacement does not happen.
func openNewDevice(cfg *config.Config, dev int, same bool) (device.Device, func(), error) {
	undo := func() {}
	create := true
	if dir, ok := cfg.DeviceDir(dev); ok {
		ents, err := os.ReadDir(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			undo = func() { _ = os.RemoveAll(dir) }
		case err != nil:
			return nil, nil, err
		case len(ents) == 0:
			undo = func() { emptyDir(dir) }
		default:
			// Not created over: an existing database is opened to be
			// judged, and anything else is refused.
			create = false
		}
		d, err := cfg.OpenDevice(dev, create)
		if err != nil {
			if !create {
				hint := "name a missing or empty directory"
				if same {
					hint = "remove the failed device's directory first, or name a new one"
				}
				return nil, nil, fmt.Errorf("directory %s is not empty and holds no pebble database that opens (%v): %s", dir, err, hint)
			}
			undo()
			return nil, nil, err
		}
		return d, undo, nil
	}
	d, err := cfg.OpenDevice(dev, true)
	if err != nil {
		return nil, nil, err
	}
	return d, undo, nil
}

// emptyDir removes what dir holds, leaving it empty.
func emptyDir(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

// openArrayWithout opens the array of cfg; when skip is set, device dev is
// not opened (its spec names the replacement, already open) and stands
// in as failed.
func openArrayWithout(ctx context.Context, cfg *config.Config, dev int, skip bool) (*array.Array, error) {
	if !skip {
		return config.OpenConfig(ctx, cfg)
	}
	devs := make([]device.Device, len(cfg.Devices))
	for i := range devs {
		name, _ := cfg.DeviceName(i)
		if i == dev {
			devs[i] = device.Unavailable(name, errors.New("being replaced"))
			continue
		}
		d, err := cfg.OpenDevice(i, false)
		if err != nil {
			d = device.Unavailable(name, err)
		}
		devs[i] = d
	}
	a, err := array.Open(ctx, devs, cfg.Options()...)
	if err != nil {
		for _, d := range devs {
			_ = d.Close()
		}
		return nil, err
	}
	return a, nil
}

// arrayHeaderKey is where every member device holds the array header
// (array/header.go): a format value whose payload starts with the 16-byte
// array id, then the device count and the position (2 bytes each, little
// endian).
var arrayHeaderKey = format.Key([]byte("kvarray"), 0, format.KindArray)

var errStop = errors.New("stop")

// checkNotMember refuses a device that holds an array header or any key:
// a replacement must be empty, and a device of this or another array must
// never be taken over.
func checkNotMember(ctx context.Context, d device.Device, name string, id array.ID) error {
	b, err := d.Retrieve(ctx, arrayHeaderKey)
	switch {
	case err == nil:
		v, derr := format.Decode(b)
		if derr != nil || len(v.Payload) < 20 {
			return fmt.Errorf("%s holds a damaged array header: it is not an empty device (wipe it, or name another)", name)
		}
		pos := int(binary.LittleEndian.Uint16(v.Payload[18:]))
		if bytes.Equal(v.Payload[:16], id[:]) {
			return fmt.Errorf("%s holds this array's header for position %d: it is a member of the array, not a new device (if it only came back after an outage, run 'kvarray resync'; to replace it by an empty device, wipe it first: for pebble, remove its directory)", name, pos)
		}
		return fmt.Errorf("%s holds the header of another array (%s, position %d): a device of another array is never taken over (wipe it, or name another)", name, hex.EncodeToString(v.Payload[:16]), pos)
	case !errors.Is(err, device.ErrNotFound):
		return fmt.Errorf("%s: reading it: %w", name, err)
	}
	found := false
	err = d.Iterate(ctx, nil, func([]byte) error { found = true; return errStop })
	if err != nil && !errors.Is(err, errStop) {
		return fmt.Errorf("%s: listing its keys: %w", name, err)
	}
	if found {
		return fmt.Errorf("%s is not empty: a replacement must be an empty device (wipe it, or name another)", name)
	}
	return nil
}

// ---- rebuild and resync ----

// heal runs a rebuild or resync of device dev and reports it: in the
// kvarray serve that holds the array when one runs, else on the devices.
func (c *cli) heal(what string, dev, workers int, asJSON bool, run func(*array.Array, []array.HealOption) (array.RebuildReport, error)) error {
	cl, err := c.online()
	if err != nil {
		return err
	}
	if cl != nil {
		defer cl.Close()
		bar := c.newProgress(fmt.Sprintf("%s %d", what, dev), true)
		var rep array.RebuildReport
		err := remoteHeal(c.ctx, cl, bar, what, dev, &rep, "kvarray."+what, dev, "WORKERS", workers)
		bar.finish()
		if err != nil {
			return err
		}
		st, serr := remoteStatus(c.ctx, cl, false)
		state := "?"
		if serr == nil && dev < len(st.Devices) {
			state = st.Devices[dev].State
		}
		return c.reportHeal(what, dev, asJSON, rep, nil, false, state)
	}
	tuneGC(healMemoryLimit)
	return c.withArray(func(a *array.Array) error {
		if dev >= a.N() {
			return fmt.Errorf("%s: device %d: the array has devices 0..%d", what, dev, a.N()-1)
		}
		bar := c.newProgress(fmt.Sprintf("%s %d", what, dev), true)
		if what == "rebuild" {
			bar.note(fmt.Sprintf("rebuild %d: listing the keys of device %d on its neighbours...", dev, dev))
		}
		rep, err := run(a, append(bar.options(), array.WithWorkers(workers)))
		bar.finish()
		interrupted := err != nil && c.ctx.Err() != nil
		return c.reportHeal(what, dev, asJSON, rep, err, interrupted, a.DeviceState(dev).String())
	})
}

// reportHeal prints a rebuild's or resync's report and returns the error
// the command ends with.
func (c *cli) reportHeal(what string, dev int, asJSON bool, rep array.RebuildReport, err error, interrupted bool, state string) error {
	if err == nil || rep.Elapsed > 0 {
		if asJSON {
			if jerr := writeJSON(c.stdout, rep); jerr != nil {
				return jerr
			}
		} else {
			printHeal(c.stdout, what, rep, err, interrupted, state)
		}
	}
	switch {
	case interrupted && what == "rebuild":
		return fmt.Errorf("rebuild of device %d interrupted after %d keys: its progress is checkpointed on the device; run 'kvarray rebuild %d' again to resume", dev, rep.Keys, dev)
	case interrupted:
		return fmt.Errorf("resync of device %d interrupted after %d keys: the keys left are still recorded; run 'kvarray resync %d' again to finish", dev, rep.Keys, dev)
	case err != nil:
		return err
	case rep.Failed > 0:
		return fmt.Errorf("%s of device %d finished, but %d keys could not be repaired: they are lost (first: %s)", what, dev, rep.Failed, firstOr(rep.Errors, "?"))
	case state != mechanism.Healthy.String() && state != "?":
		// Done with its keys, and still not back (it failed again, or
		// cannot take writes): not a success to script on.
		return fmt.Errorf("%s of device %d finished, but the device is %s, not healthy: see 'kvarray status'", what, dev, state)
	}
	return nil
}

func firstOr(s []string, def string) string {
	if len(s) > 0 {
		return s[0]
	}
	return def
}

func printHeal(out io.Writer, what string, r array.RebuildReport, err error, interrupted bool, st string) {
	switch {
	case interrupted:
		fmt.Fprintf(out, "%s of device %d (%s) interrupted; run it again to %s\n", what, r.Dev, r.Name, map[bool]string{true: "resume", false: "finish"}[what == "rebuild"])
	case err != nil:
		fmt.Fprintf(out, "%s of device %d (%s) failed; the device is %s\n", what, r.Dev, r.Name, st)
	default:
		fmt.Fprintf(out, "%s of device %d (%s) complete; the device is %s\n", what, r.Dev, r.Name, st)
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	secs := r.Elapsed.Seconds()
	mbps := 0.0
	if secs > 0 {
		mbps = float64(r.Bytes) / 1e6 / secs
	}
	fmt.Fprintf(w, "  keys\t%s\n", humanize.Comma(r.Keys))
	fmt.Fprintf(w, "  bytes\t%s\n", humanize.IBytes(uint64(r.Bytes)))
	fmt.Fprintf(w, "  pieces repaired\t%s\n", humanize.Comma(r.Repaired))
	failedNote := ""
	if interrupted && r.Failed > 0 {
		failedNote = " (in flight when interrupted: the rerun redoes them)"
	}
	fmt.Fprintf(w, "  keys failed\t%s%s\n", humanize.Comma(r.Failed), failedNote)
	if what == "rebuild" {
		fmt.Fprintf(w, "  keys skipped\t%s (done by an interrupted run)\n", humanize.Comma(r.Skipped))
	}
	fmt.Fprintf(w, "  time\t%s\n", r.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "  rate\t%s keys/s, %.1f MB/s\n", humanize.Comma(int64(r.KeysPerSec())), mbps)
	_ = w.Flush()
	if interrupted {
		return // the errors are the cancelled keys'
	}
	for _, e := range r.Errors {
		fmt.Fprintf(out, "  error: %s\n", oneLine(e))
	}
}

// ---- scrub ----

func (c *cli) scrub(repair bool, workers int, asJSON bool) error {
	cl, err := c.online()
	if err != nil {
		return err
	}
	if cl != nil {
		defer cl.Close()
		bar := c.newProgress("scrub", false)
		args := []any{"kvarray.scrub", "WORKERS", workers}
		if repair {
			args = append(args, "REPAIR")
		}
		var rep array.ScrubReport
		err := remoteHeal(c.ctx, cl, bar, "scrub", -1, &rep, args...)
		bar.finish()
		if err != nil {
			return fmt.Errorf("scrub: %w", err)
		}
		var skipped []string
		if st, err := remoteStatus(c.ctx, cl, false); err == nil {
			for _, d := range st.Devices {
				if d.State == mechanism.Failed.String() {
					skipped = append(skipped, strconv.Itoa(d.Index))
				}
			}
		}
		return c.reportScrub(rep, nil, false, repair, asJSON, skipped)
	}
	tuneGC(healMemoryLimit)
	return c.withArray(func(a *array.Array) error {
		bar := c.newProgress("scrub", false)
		rep, err := a.Scrub(c.ctx, repair, append(bar.options(), array.WithWorkers(workers))...)
		bar.finish()
		interrupted := err != nil && c.ctx.Err() != nil
		var skipped []string
		for i := 0; i < a.N(); i++ {
			if a.DeviceState(i) == mechanism.Failed {
				skipped = append(skipped, strconv.Itoa(i))
			}
		}
		return c.reportScrub(rep, err, interrupted, repair, asJSON, skipped)
	})
}

// reportScrub prints a scrub's report and sets or returns how the command
// ends.
func (c *cli) reportScrub(rep array.ScrubReport, err error, interrupted, repair, asJSON bool, skipped []string) error {
	var unrecoverable int64
	for _, m := range rep.Mechanisms {
		unrecoverable += m.Unrecoverable
	}
	if err == nil || rep.Elapsed > 0 {
		if asJSON {
			if jerr := writeJSON(c.stdout, rep); jerr != nil {
				return jerr
			}
		} else {
			printScrub(c.stdout, rep, interrupted, skipped)
		}
	}
	switch {
	case interrupted:
		return fmt.Errorf("scrub interrupted after %d keys", rep.Keys)
	case err != nil:
		return fmt.Errorf("scrub: %w", err)
	case unrecoverable > 0:
		return fmt.Errorf("scrub: %d keys are unrecoverable (first: %s)", unrecoverable, firstOr(rep.Errors, "?"))
	case rep.Problems() > 0 && !repair, rep.Waiting() > 0:
		c.exit = exitNo
	}
	return nil
}

func printScrub(out io.Writer, r array.ScrubReport, interrupted bool, skipped []string) {
	mode := "check only"
	if r.Repair {
		mode = "repair"
	}
	verb := "scrubbed"
	if interrupted {
		verb = "scrub interrupted after"
	}
	fmt.Fprintf(out, "%s %s keys in %s (%s)\n\n", verb, humanize.Comma(r.Keys), r.Elapsed.Round(time.Millisecond), mode)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "MECHANISM\tKEYS\tBAD PIECES\tUNRECOVERABLE KEYS")
	for _, m := range r.Mechanisms {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\n", m.Mechanism, m.Keys, m.BadPieces, m.Unrecoverable)
	}
	_ = w.Flush()
	fmt.Fprintf(out, "\norphaned pieces: %d\n", r.Orphans)
	for _, e := range r.Errors {
		fmt.Fprintf(out, "error: %s\n", oneLine(e))
	}
	if len(skipped) > 0 {
		fmt.Fprintf(out, "not checked: failed devices %s\n", strings.Join(skipped, ", "))
	}
	if n := r.Waiting(); n > 0 {
		fmt.Fprintf(out, "waiting: %d keys need a device that is down; they are checked once it is back or rebuilt\n", n)
	}
	p := r.Problems()
	switch {
	case p == 0:
		fmt.Fprintln(out, "no problems found")
	case r.Repair:
		fmt.Fprintf(out, "%d problems found, repaired\n", p)
	default:
		fmt.Fprintf(out, "%d problems found, not repaired: run 'kvarray scrub --repair' to repair them\n", p)
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// ---- progress line ----

// progress draws a one-line progress display on a terminal. A nil
// *progress draws nothing: every method may be called on it.
type progress struct {
	mu     sync.Mutex
	w      io.Writer
	width  int
	label  string
	bytes  bool // show bytes and MB/s
	drawn  bool
	closed bool
}

// newProgress returns a progress line on stderr when it is a terminal,
// else nil.
func (c *cli) newProgress(label string, bytes bool) *progress {
	width, ok := terminal(c.stderr)
	if !ok {
		return nil
	}
	return &progress{w: c.stderr, width: width, label: label, bytes: bytes}
}

// options returns the heal options that feed p.
func (p *progress) options() []array.HealOption {
	if p == nil {
		return nil
	}
	return []array.HealOption{array.WithProgress(p.update, progressEvery)}
}

// note shows a message until the first update.
func (p *progress) note(s string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draw(s)
}

func (p *progress) update(pr array.Progress) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draw(renderProgress(p.label, pr, p.bytes, p.width))
}

// draw replaces the line; p.mu is held.
func (p *progress) draw(line string) {
	if p.closed {
		return // a late tick after the end
	}
	if len(line) > p.width-1 {
		line = line[:max(0, p.width-1)]
	}
	fmt.Fprintf(p.w, "\r\x1b[K%s", line)
	p.drawn = true
}

// finish clears the line; later updates draw nothing.
func (p *progress) finish() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
	p.closed = true
}

// renderProgress is the progress line for pr, at most width-1 columns:
// label, a bar when there is room, percent, keys done/total, bytes, rates,
// elapsed time and time left.
func renderProgress(label string, pr array.Progress, withBytes bool, width int) string {
	secs := pr.Elapsed.Seconds()
	var kps, mbps float64
	if secs > 0 {
		kps = float64(pr.Keys) / secs
		mbps = float64(pr.Bytes) / 1e6 / secs
	}
	frac := 1.0
	if pr.Total > 0 {
		frac = min(1, float64(pr.Keys)/float64(pr.Total))
	}
	left := "--:--"
	switch {
	case pr.Completed || (pr.Total > 0 && pr.Keys >= pr.Total):
		left = clock(0)
	case pr.Keys > 0:
		left = clock(time.Duration(float64(pr.Elapsed) * float64(pr.Total-pr.Keys) / float64(pr.Keys)))
	}
	var b strings.Builder
	fmt.Fprintf(&b, " %5.1f%%  %s/%s keys", 100*frac, humanize.Comma(pr.Keys), humanize.Comma(pr.Total))
	if withBytes {
		fmt.Fprintf(&b, "  %s", humanize.IBytes(uint64(pr.Bytes)))
	}
	fmt.Fprintf(&b, "  %s keys/s", humanize.Comma(int64(kps)))
	if withBytes {
		fmt.Fprintf(&b, "  %.1f MB/s", mbps)
	}
	fmt.Fprintf(&b, "  %s elapsed  %s left", clock(pr.Elapsed), left)
	if pr.Failed > 0 {
		fmt.Fprintf(&b, "  %d failed", pr.Failed)
	}
	tail := b.String()
	head := label + " "
	bar := ""
	if room := width - 1 - len(head) - len(tail) - 2; room >= 10 {
		n := min(room, 40)
		done := int(frac * float64(n))
		bar = "[" + strings.Repeat("=", done)
		if done < n {
			bar += ">" + strings.Repeat(" ", n-done-1)
		}
		bar += "]"
	}
	line := head + bar + tail
	if width > 1 && len(line) > width-1 {
		line = line[:width-1]
	}
	return line
}

// clock formats d as m:ss or h:mm:ss.
func clock(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
