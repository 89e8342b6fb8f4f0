package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/config"
	"github.com/kvarray/kvarray/mechanism"
	"github.com/kvarray/kvarray/server"
)

// Health at a glance: status's first line and exit code, as mdadm
// --detail --test: 0 clean, 1 degraded (redundancy reduced, no data at
// risk), 2 data at risk (some value may be beyond its mechanism's
// tolerance) or error.
const (
	healthClean    = 0
	healthDegraded = 1
	healthAtRisk   = 2
)

// tolerance returns how many devices each mechanism the config makes
// available survives losing: hashing none, replication copies-1,
// splitting and packing r.
func tolerance(cfg *config.Config) map[string]int {
	t := map[string]int{"hashing": 0}
	if cfg.Replication != nil {
		t["replication"] = cfg.Replication.Copies - 1
	}
	if cfg.Splitting != nil {
		t["splitting"] = cfg.Splitting.R
	}
	if cfg.Packing != nil {
		t["packing"] = cfg.Packing.R
	}
	return t
}

// inUse returns the mechanisms whose tolerance bounds the array's: those
// holding objects, and those the config picks for new values.
func inUse(cfg *config.Config, st array.Status) []string {
	var names []string
	add := func(n string) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	for _, m := range st.Mechanisms {
		if m.Objects > 0 {
			add(m.Name)
		}
	}
	add(cfg.Default)
	if cfg.Mode == "hybrid" {
		for _, t := range cfg.Thresholds {
			add(t.RM)
		}
	}
	return names
}

// health returns status's headline and exit code. A device counts as lost
// while it is failed or rebuilding (it does not hold its data yet), and
// as reduced while full or slow (it misses every write) or degraded-behind
// (stale for the keys it missed).
func health(cfg *config.Config, st array.Status, tasks []server.Task) (string, int) {
	var failed, rebuilding, behind, full, slow []string
	for _, d := range st.Devices {
		switch d.State {
		case mechanism.Failed.String():
			failed = append(failed, strconv.Itoa(d.Index))
		case mechanism.Full.String():
			full = append(full, strconv.Itoa(d.Index))
		case mechanism.Slow.String():
			slow = append(slow, strconv.Itoa(d.Index))
		case mechanism.Rebuilding.String():
			rebuilding = append(rebuilding, strconv.Itoa(d.Index))
		case array.StateDegradedBehind:
			behind = append(behind, strconv.Itoa(d.Index))
		}
	}
	lost := len(failed) + len(rebuilding) + len(behind) + len(full) + len(slow)
	tol := tolerance(cfg)
	weakest, least := "", -1
	for _, m := range inUse(cfg, st) {
		if t, ok := tol[m]; ok && (least < 0 || t < least) {
			weakest, least = m, t
		}
	}
	var parts []string
	if len(failed) > 0 {
		parts = append(parts, devices(failed)+" failed")
	}
	if len(full) > 0 {
		parts = append(parts, devices(full)+" full (read-only: free space, then 'kvarray resync "+full[0]+"', or wait for the automatic resync)")
	}
	if len(slow) > 0 {
		parts = append(parts, devices(slow)+" slow (skipped: writes miss it until it answers as fast as its peers again)")
	}
	for _, t := range tasks {
		if t.Kind == "rebuild" || t.Kind == "resync" {
			i := slices.Index(rebuilding, strconv.Itoa(t.Dev))
			if i >= 0 {
				rebuilding = slices.Delete(rebuilding, i, i+1)
			}
			j := slices.Index(behind, strconv.Itoa(t.Dev))
			if j >= 0 {
				behind = slices.Delete(behind, j, j+1)
			}
			parts = append(parts, fmt.Sprintf("%s device %d: %s", map[string]string{"rebuild": "rebuilding", "resync": "resyncing"}[t.Kind], t.Dev, taskProgress(t)))
		}
	}
	if len(rebuilding) > 0 {
		parts = append(parts, devices(rebuilding)+" to rebuild ('kvarray rebuild "+rebuilding[0]+"')")
	}
	if len(behind) > 0 {
		parts = append(parts, devices(behind)+" behind ('kvarray resync "+behind[0]+"')")
	}
	switch {
	case lost > least || st.Unreadable > 0:
		why := fmt.Sprintf("%s tolerates %s", weakest, plural(least, "device"))
		if st.Unreadable > 0 {
			why = fmt.Sprintf("%d objects have no readable header", st.Unreadable)
		}
		return "data at risk: " + strings.Join(append(parts, why), ", "), healthAtRisk
	case lost == 0:
		return "clean", healthClean
	}
	if len(parts) == 1 && strings.HasPrefix(parts[0], "rebuilding ") {
		return parts[0], healthDegraded
	}
	return "degraded: " + strings.Join(parts, ", ") + ", tolerates " + plural(least-lost, "more device"), healthDegraded
}

// taskProgress is "43% ETA 1m20s", or "listing keys" before the total is
// known.
func taskProgress(t server.Task) string {
	if t.Total == 0 {
		return "listing keys"
	}
	s := fmt.Sprintf("%d%%", int(100*t.Fraction()))
	if eta := t.ETA(); eta > 0 {
		s += " ETA " + eta.Round(time.Second).String()
	}
	return s
}

func devices(ids []string) string {
	if len(ids) == 1 {
		return "device " + ids[0]
	}
	return "devices " + strings.Join(ids, ", ")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
