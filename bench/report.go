package bench

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// ReportVersion is the version of the JSON report's layout.
const ReportVersion = 1

// Report is the outcome of a run; `kvarray bench --json` prints it.
type Report struct {
	Version int       `json:"version"`
	Started time.Time `json:"started"`
	Host    Host      `json:"host"`
	Backend string    `json:"backend"`
	// Devices describes the devices and their performance model.
	Devices string  `json:"devices"`
	Options Options `json:"options"`
	// LoadBefore and LoadAfter are the host's load averages (1, 5 and 15
	// minutes, from /proc/loadavg where there is one) before and after
	// the run: a loaded host makes CPU-bound configurations look slower.
	LoadBefore string          `json:"load_before,omitempty"`
	LoadAfter  string          `json:"load_after,omitempty"`
	Results    []Result        `json:"results"`
	Rebuild    []RebuildResult `json:"rebuild,omitempty"`
}

// Host describes the machine a run was made on.
type Host struct {
	GOOS      string `json:"goos"`
	GOARCH    string `json:"goarch"`
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"go_version"`
}

// Result is one measured phase: one workload, value size, mechanism and
// mode.
type Result struct {
	Workload  string `json:"workload"`
	Size      int    `json:"size"` // value bytes; 0 for the mixed sizes
	SizeLabel string `json:"size_label"`
	Mechanism string `json:"mechanism"` // a mechanism, None or Thresholds
	Mode      string `json:"mode"`      // raw, standalone or hybrid

	Ops       int64   `json:"ops"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	// MiBPerSec is user value bytes per second (0 for deletes).
	MiBPerSec float64 `json:"mib_per_sec"`
	// PctOfNone is OpsPerSec as a percentage of the None baseline's for
	// the same workload and size.
	PctOfNone float64 `json:"pct_of_none"`
	Latency   Latency `json:"latency"`
	UserBytes int64   `json:"user_bytes"`

	// Device are the device operations and value bytes of the phase,
	// summed over the devices; PerOp divides them by Ops.
	Device Counts `json:"device"`
	PerOp  PerOp  `json:"per_op"`
	// WriteAmp is device value bytes written per user byte stored (stores
	// and updates); ReadAmp device value bytes read per user byte
	// retrieved (retrieves). 0 where it does not apply.
	WriteAmp float64 `json:"write_amplification,omitempty"`
	ReadAmp  float64 `json:"read_amplification,omitempty"`
	// HostStallMs is the longest the host kept the bench from running
	// during the phase (how late a 5ms ticker fired, at worst): CPU
	// starvation by other processes or a paused VM. Results with stalls
	// longer than 5% of the phase are marked in the table.
	HostStallMs float64 `json:"host_stall_ms"`
	// StorageOverhead is the devices' bytes (keys and values, headers
	// included) per user byte (keys and values) after the phase (before
	// it, for deletes).
	StorageOverhead float64 `json:"storage_overhead"`
}

// Latency of the operations, in microseconds.
type Latency struct {
	P50  float64 `json:"p50_us"`
	P99  float64 `json:"p99_us"`
	P999 float64 `json:"p999_us"`
	Mean float64 `json:"mean_us"`
	Max  float64 `json:"max_us"`
}

// PerOp are device operations and bytes per user operation.
type PerOp struct {
	Writes       float64 `json:"writes"`
	Reads        float64 `json:"reads"`
	Deletes      float64 `json:"deletes"`
	Exists       float64 `json:"exists"`
	BytesWritten float64 `json:"bytes_written"`
	BytesRead    float64 `json:"bytes_read"`
}

// loadAvg returns the first three fields of /proc/loadavg, or "".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// fill derives the rates, latencies and ratios from the counts.
func (res *Result) fill(h *hist) {
	if res.Seconds > 0 {
		res.OpsPerSec = float64(res.Ops) / res.Seconds
		res.MiBPerSec = float64(res.UserBytes) / res.Seconds / (1 << 20)
	}
	res.Latency = Latency{P50: us(h.quantile(0.5)), P99: us(h.quantile(0.99)), P999: us(h.quantile(0.999)),
		Mean: us(h.mean()), Max: us(h.max)}
	if res.Ops > 0 {
		n := float64(res.Ops)
		d := res.Device
		res.PerOp = PerOp{Writes: float64(d.Stores) / n, Reads: float64(d.Retrieves) / n, Deletes: float64(d.Deletes) / n,
			Exists: float64(d.Exists) / n, BytesWritten: float64(d.BytesWritten) / n, BytesRead: float64(d.BytesRead) / n}
	}
	if res.UserBytes > 0 {
		switch res.Workload {
		case Store, Update, MixedStore:
			res.WriteAmp = float64(res.Device.BytesWritten) / float64(res.UserBytes)
		case Retrieve, MixedRetrieve, RangeRead:
			res.ReadAmp = float64(res.Device.BytesRead) / float64(res.UserBytes)
		case RangeWrite:
			// A range write reads too: both matter.
			res.WriteAmp = float64(res.Device.BytesWritten) / float64(res.UserBytes)
			res.ReadAmp = float64(res.Device.BytesRead) / float64(res.UserBytes)
		}
	}
}

func newReport(o Options) *Report {
	return &Report{Version: ReportVersion, Started: time.Now().UTC().Truncate(time.Second), Host: hostInfo(),
		Backend: o.Backend.Name(), Devices: o.Backend.Describe(), Options: o, LoadBefore: loadAvg()}
}

// finish orders the results by workload (in the order of a run's
// phases), then value size, keeping the order of the targets, and fills
// in the percentages of None.
func (rep *Report) finish() {
	rep.LoadAfter = loadAvg()
	order := map[string]int{Store: 0, Retrieve: 1, Update: 2, Delete: 3, MixedStore: 4, MixedRetrieve: 5, RangeRead: 6, RangeWrite: 7}
	sizes := map[int]int{}
	for i, s := range rep.Options.Sizes {
		sizes[s] = i
	}
	sizes[0] = len(sizes)
	slices.SortStableFunc(rep.Results, func(a, b Result) int {
		if c := cmp.Compare(order[a.Workload], order[b.Workload]); c != 0 {
			return c
		}
		return cmp.Compare(sizes[a.Size], sizes[b.Size])
	})
	base := map[[2]string]float64{}
	for _, r := range rep.Results {
		if r.Mechanism == None {
			base[[2]string{r.Workload, r.SizeLabel}] = r.OpsPerSec
		}
	}
	for i := range rep.Results {
		r := &rep.Results[i]
		if b := base[[2]string{r.Workload, r.SizeLabel}]; b > 0 {
			r.PctOfNone = 100 * r.OpsPerSec / b
		}
	}
}

// stalled reports whether the host kept the bench from running for more
// than 5% of the phase.
func (res *Result) stalled() bool { return res.HostStallMs/1000 > 0.05*res.Seconds }

// Lookup returns the result for a workload, size label, mechanism and
// mode.
func (rep *Report) Lookup(workload, size, mech, mode string) (Result, bool) {
	for _, r := range rep.Results {
		if r.Workload == workload && r.SizeLabel == size && r.Mechanism == mech && r.Mode == mode {
			return r, true
		}
	}
	return Result{}, false
}

func latency(v float64) string {
	switch {
	case v < 1000:
		return fmt.Sprintf("%.0fµs", v)
	case v < 10000:
		return fmt.Sprintf("%.2fms", v/1000)
	case v < 1e6:
		return fmt.Sprintf("%.1fms", v/1000)
	}
	return fmt.Sprintf("%.2fs", v/1e6)
}

func ratio(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

func count(v float64) string {
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%.2f", v)
}

// WriteTable prints the results as a table, one block per workload, and
// the rebuild results.
func (rep *Report) WriteTable(out io.Writer) error {
	fmt.Fprintf(out, "%s; %d threads × queue depth %d", rep.Devices, rep.Options.Threads, rep.Options.QueueDepth)
	if rep.LoadBefore != "" {
		fmt.Fprintf(out, "; host load %s before, %s after (%d CPUs)", rep.LoadBefore, rep.LoadAfter, rep.Host.CPUs)
	}
	fmt.Fprint(out, "\n\n")
	t := table{left: 4}
	t.row("WORKLOAD", "SIZE", "MECHANISM", "MODE", "OPS/S", "%NONE", "MiB/S", "P50", "P99", "P99.9", "DEV W/OP", "R/OP", "DEL/OP", "WAMP", "RAMP", "SPACE")
	prev := ""
	flagged := false
	for _, r := range rep.Results {
		if prev != "" && r.Workload != prev {
			t.row()
		}
		prev = r.Workload
		mib := fmt.Sprintf("%.1f", r.MiBPerSec)
		if r.Workload == Delete {
			mib = "-"
		}
		ops, pct := fmt.Sprintf("%.0f", r.OpsPerSec), fmt.Sprintf("%.0f%%", r.PctOfNone)
		if r.stalled() {
			ops += "!"
			flagged = true
		}
		if none, ok := rep.Lookup(r.Workload, r.SizeLabel, None, ModeRaw); r.stalled() || (ok && none.stalled()) {
			pct += "!"
			flagged = true
		}
		t.row(r.Workload, r.SizeLabel, r.Mechanism, r.Mode, ops, pct, mib,
			latency(r.Latency.P50), latency(r.Latency.P99), latency(r.Latency.P999),
			count(r.PerOp.Writes), count(r.PerOp.Reads), count(r.PerOp.Deletes),
			ratio(r.WriteAmp), ratio(r.ReadAmp), ratio(r.StorageOverhead))
	}
	if len(rep.Results) > 0 {
		if err := t.write(out); err != nil {
			return err
		}
		fmt.Fprintln(out, "\n%NONE: ops/s as a percentage of raw device operations (None) for the same workload and size.\n"+
			"DEV W/OP, R/OP, DEL/OP: device writes, reads and deletes per user operation. WAMP, RAMP: device bytes\n"+
			"written (read) per user byte written (read). SPACE: device bytes per user byte stored (keys and values).")
		if flagged {
			fmt.Fprintln(out, "!: the host stalled the bench for more than 5% of this phase or of None's (host_stall_ms in --json):\n"+
				"the number says more about the host's load than about the array; rerun on a quieter host.")
		}
	}
	if len(rep.Rebuild) > 0 {
		if len(rep.Results) > 0 {
			fmt.Fprintln(out)
		}
		t := table{left: 1}
		t.row("REBUILD", "KEYS", "SIZE", "REBUILT", "TIME", "KEYS/S", "MiB/S")
		for _, r := range rep.Rebuild {
			t.row(r.Mechanism, fmt.Sprint(r.Keys), sizeLabel(r.Size), fmt.Sprint(r.Rebuilt), fmt.Sprintf("%.2fs", r.Seconds),
				fmt.Sprintf("%.0f", r.KeysPerSec), fmt.Sprintf("%.1f", r.MiBPerSec))
		}
		if err := t.write(out); err != nil {
			return err
		}
	}
	return nil
}

// table aligns columns: the first left ones to the left, the others
// (numbers) to the right. An empty row is a blank line.
type table struct {
	left int
	rows [][]string
}

func (t *table) row(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(out io.Writer) error {
	var width []int
	for _, r := range t.rows {
		for i, c := range r {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, r := range t.rows {
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i > 0 {
				b.WriteString("  ")
			}
			if i < t.left {
				b.WriteString(c)
				if i < len(r)-1 {
					b.WriteString(pad)
				}
			} else {
				b.WriteString(pad + c)
			}
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(out, b.String())
	return err
}
