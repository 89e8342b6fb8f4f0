package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kvarray/kvarray/bench"
	"github.com/kvarray/kvarray/reliability"
)

const hoursPerYear = 365.25 * 24

// mttdlInputs are the model's inputs as given on the command line.
type mttdlInputs struct {
	MTTFHours     float64 `json:"mttf_hours"`
	Devices       int     `json:"devices"`
	CapacityBytes float64 `json:"device_capacity_bytes"`
	Fill          float64 `json:"fill"`
	ObjectBytes   float64 `json:"object_bytes"`
	MetadataBytes float64 `json:"metadata_bytes"`
	// Scope is "object" (μ is the repair rate of one object, the paper's
	// model) or "device" (a lost object waits for the rebuild of its whole
	// device: MTTR = objects on a device / repair rate).
	Scope string `json:"scope"`
	// RepairSource says where the repair rate came from.
	RepairSource string `json:"repair_source"`
}

// mttdlRow is one mechanism's answer.
type mttdlRow struct {
	reliability.Result
	RepairPerSec   float64 `json:"repair_objects_per_sec"`
	MuPerHour      float64 `json:"mu_per_hour"`
	MTTRHours      float64 `json:"mttr_hours"`
	MTTDLYears     float64 `json:"mttdl_years"`
	MTTDLApproxYrs float64 `json:"mttdl_approx_years"`
}

type mttdlReport struct {
	Inputs  mttdlInputs         `json:"inputs"`
	Results []mttdlRow          `json:"results"`
	Costs   []reliability.Costs `json:"costs"`
}

func (c *cli) mttdlCmd() *cobra.Command {
	var (
		in                    mttdlInputs
		capacity, object, md  string
		rate                  float64
		speed, fromBench      string
		copies, k, r, devices int
		asJSON                bool
	)
	cmd := &cobra.Command{
		Use:   "mttdl [--mttf HOURS] [--repair-rate OBJ/S | --rebuild-speed SIZE | --from-bench FILE.json] [--json]",
		Short: "Model each mechanism's mean time to data loss, space overhead and I/O costs",
		Long: `mttdl evaluates the KVMD paper's reliability model for every mechanism:
the MTTDL of one reliability set from the Markov chain of its lost objects
(failure rate (n−i)λ in state i, λ = 1/MTTF, serial repair at rate μ, data
lost at f losses; solved exactly, and by equation 2's closed form), divided
by the number of sets that fill the devices (equation 1: N_RS = C/(nO) for
replication, C/(n·O/k) for splitting, C/(n(O+M)) for packing, C the bytes
stored on all devices). It also prints the space overhead and the paper's
Table 4: device operations per user operation and what they leave of the
devices' aggregate throughput.

The repair rate μ is --repair-rate (objects repaired per second),
--rebuild-speed (bytes per second, divided by --object), or per mechanism
the keys/s of a rebuild measured by 'kvarray bench --rebuild --json'
(--from-bench FILE). --scope object (the paper's) takes μ as the repair
rate of one lost object; --scope device makes a lost object wait for its
device's whole rebuild (MTTR = objects on a device / repair rate), a far
more conservative reading.`,
		Args: args(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var perr error
			size := func(flag, s string) float64 {
				n, err := humanize.ParseBytes(s)
				if err != nil {
					perr = errors.Join(perr, fmt.Errorf("--%s: %q is not a size (e.g. 4KiB, 3.84TB)", flag, s))
				}
				return float64(n)
			}
			in.CapacityBytes = size("capacity", capacity)
			in.ObjectBytes = size("object", object)
			in.MetadataBytes = size("metadata", md)
			in.Devices = devices
			f := cmd.Flags()
			given := 0
			for _, n := range []string{"repair-rate", "rebuild-speed", "from-bench"} {
				if f.Changed(n) {
					given++
				}
			}
			switch {
			case given > 1:
				perr = errors.Join(perr, errors.New("give one of --repair-rate, --rebuild-speed, --from-bench"))
			case in.Scope != "object" && in.Scope != "device":
				perr = errors.Join(perr, fmt.Errorf("--scope %q: want object or device", in.Scope))
			case !(in.MTTFHours > 0):
				perr = errors.Join(perr, fmt.Errorf("--mttf %v: want a positive number of hours", in.MTTFHours))
			case !(in.Fill > 0 && in.Fill <= 1):
				perr = errors.Join(perr, fmt.Errorf("--fill %v: want a fraction in (0, 1]", in.Fill))
			case in.CapacityBytes <= 0 || in.ObjectBytes <= 0:
				perr = errors.Join(perr, errors.New("--capacity and --object must be positive"))
			}
			if perr != nil {
				return usageError{cmd, perr}
			}
			mechs := []reliability.Mechanism{reliability.NewHashing(), reliability.NewReplication(copies),
				reliability.NewSplitting(k, r), reliability.NewPacking(k, r)}
			rates := map[string]float64{}
			switch {
			case f.Changed("from-bench"):
				rs, err := rebuildRates(fromBench)
				if err != nil {
					return err
				}
				rates = rs
				in.RepairSource = "rebuild keys/s measured in " + fromBench
			case f.Changed("rebuild-speed"):
				bps := size("rebuild-speed", speed)
				if perr != nil || bps <= 0 {
					return usageError{cmd, fmt.Errorf("--rebuild-speed %q: want a positive size per second", speed)}
				}
				rate = bps / in.ObjectBytes
				in.RepairSource = fmt.Sprintf("%s/s over %s objects", speed, humanize.IBytes(uint64(in.ObjectBytes)))
			default:
				if !(rate > 0) {
					return usageError{cmd, fmt.Errorf("--repair-rate %v: want a positive number of objects per second", rate)}
				}
				in.RepairSource = fmt.Sprintf("%g objects/s", rate)
			}
			rep := mttdlReport{Inputs: in}
			for _, m := range mechs {
				row, err := evaluate(m, in, rates, rate)
				if err != nil {
					return err
				}
				rep.Results = append(rep.Results, row)
				cost, err := m.Costs(devices)
				if err != nil {
					return err
				}
				rep.Costs = append(rep.Costs, cost)
			}
			if asJSON {
				enc := json.NewEncoder(c.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return printMTTDL(c.stdout, rep)
		},
	}
	fl := cmd.Flags()
	modelFlags(fl, &in, &rate, &capacity)
	fl.StringVar(&speed, "rebuild-speed", "", "rebuild speed in bytes per second (e.g. 200MiB), instead of --repair-rate")
	fl.StringVar(&fromBench, "from-bench", "", "repair rates from a rebuild measured by 'kvarray bench --rebuild --json' (`FILE`)")
	fl.StringVar(&in.Scope, "scope", "object", "what μ repairs: object (the paper's model) or device")
	fl.StringVar(&object, "object", "4KiB", "mean user object size O")
	fl.StringVar(&md, "metadata", "0", "packing metadata per object M")
	fl.IntVar(&devices, "devices", 6, "number of devices N")
	fl.IntVar(&copies, "copies", 3, "replication copies")
	fl.IntVar(&k, "k", 4, "splitting and packing data objects")
	fl.IntVar(&r, "r", 2, "splitting and packing parity objects")
	fl.BoolVar(&asJSON, "json", false, "print the results as JSON")
	return cmd
}

// modelFlags registers the reliability model's inputs that mttdl and tune
// share: device MTTF, repair rate, device capacity and fill.
func modelFlags(fl *pflag.FlagSet, in *mttdlInputs, rate *float64, capacity *string) {
	fl.Float64Var(&in.MTTFHours, "mttf", 2_000_000, "device mean time to failure, hours (a Samsung PM983's datasheet MTBF)")
	fl.Float64Var(rate, "repair-rate", 10000, "objects repaired per second")
	fl.StringVar(capacity, "capacity", "3.84TB", "capacity of one device")
	fl.Float64Var(&in.Fill, "fill", 1, "fraction of the capacity holding data")
}

// rebuildRates reads the rebuild keys/s per mechanism from a bench report.
func rebuildRates(path string) (map[string]float64, error) {
	rep, err := readReport(path)
	if err != nil {
		return nil, err
	}
	if len(rep.Rebuild) == 0 {
		return nil, fmt.Errorf("%s holds no rebuild results (run 'kvarray bench --rebuild --json')", path)
	}
	return reportRates(rep), nil
}

// reportRates are the rebuild keys/s per mechanism of a bench report.
func reportRates(rep *bench.Report) map[string]float64 {
	rates := map[string]float64{}
	for _, r := range rep.Rebuild {
		if r.KeysPerSec > 0 {
			rates[r.Mechanism] = r.KeysPerSec
		}
	}
	return rates
}

// evaluate runs the model for m with the repair rate from rates (by
// mechanism name) or else rate.
func evaluate(m reliability.Mechanism, in mttdlInputs, rates map[string]float64, rate float64) (mttdlRow, error) {
	perSec := rate
	if len(rates) > 0 {
		v, ok := rates[m.Name]
		switch {
		case ok:
			perSec = v
		case m.LossAt() == 1:
			perSec = 0 // nothing to repair from: μ plays no part
		default:
			return mttdlRow{}, fmt.Errorf("the bench report has no rebuild result for %s", m.Name)
		}
	}
	mu := perSec * 3600 // per hour
	if in.Scope == "device" && mu > 0 {
		pieces := in.CapacityBytes * in.Fill / m.PieceSize(in.ObjectBytes, in.MetadataBytes)
		mu /= pieces
	}
	res, err := reliability.Evaluate(m, reliability.System{
		MTTF:     in.MTTFHours,
		Mu:       mu,
		Capacity: float64(in.Devices) * in.CapacityBytes * in.Fill,
		Object:   in.ObjectBytes,
		Metadata: in.MetadataBytes,
	})
	if err != nil {
		return mttdlRow{}, err
	}
	row := mttdlRow{Result: res, RepairPerSec: perSec, MuPerHour: mu,
		MTTDLYears: res.MTTDL / hoursPerYear, MTTDLApproxYrs: res.MTTDLApprox / hoursPerYear}
	if mu > 0 && m.LossAt() > 1 {
		row.MTTRHours = 1 / mu // a set of f = 1 has nothing to repair from
	}
	return row, nil
}

func duration(hours float64) string {
	s := hours * 3600
	switch {
	case hours == 0:
		return "-"
	case s < 1e-3:
		return fmt.Sprintf("%.3gµs", s*1e6)
	case s < 1:
		return fmt.Sprintf("%.3gms", s*1e3)
	case s < 120:
		return fmt.Sprintf("%.3gs", s)
	case hours < 2:
		return fmt.Sprintf("%.3gmin", s/60)
	}
	return fmt.Sprintf("%.3gh", hours)
}

func printMTTDL(out io.Writer, rep mttdlReport) error {
	in := rep.Inputs
	fmt.Fprintf(out, "%d devices of %s, %.0f%% full; objects of %s; device MTTF %.3g hours (λ = %.3g/h)\n",
		in.Devices, humanize.Bytes(uint64(in.CapacityBytes)), in.Fill*100, humanize.IBytes(uint64(in.ObjectBytes)), in.MTTFHours, 1/in.MTTFHours)
	fmt.Fprintf(out, "repair: %s, scope %s\n\n", in.RepairSource, in.Scope)
	var b strings.Builder
	w := newCols(&b)
	w.row("MECHANISM", "n", "f", "MTTR", "SETS (N_RS)", "MTTDL (years)", "EQ. 2 (years)", "SPACE")
	for _, r := range rep.Results {
		w.row(r.Mechanism.String(), fmt.Sprint(r.SetSize), fmt.Sprint(r.LossAt), duration(r.MTTRHours),
			fmt.Sprintf("%.3g", r.Sets), fmt.Sprintf("%.3g", r.MTTDLYears), fmt.Sprintf("%.3g", r.MTTDLApproxYrs),
			fmt.Sprintf("%.2fx", r.SpaceOverhead))
	}
	w.flush()
	b.WriteString("\nTable 4: device operations per user operation (standalone; hybrid mode adds one read per store)\n")
	b.WriteString("and user operations per second in units of one device's operations per second\n\n")
	w = newCols(&b)
	w.row("MECHANISM", "STORE WRITES", "UPDATE WRITES", "RETRIEVE READS", "WRITE TPUT", "READ TPUT", "SPACE UTIL")
	for _, c := range rep.Costs {
		w.row(c.Mechanism.String(), c.StoreWrites.String(), c.UpdateWrites.String(), c.RetrieveReads.String(),
			c.WriteThroughput.String(), c.ReadThroughput.String(), fmt.Sprintf("%.0f%%", 100*c.SpaceUtilization))
	}
	w.flush()
	_, err := io.WriteString(out, b.String())
	return err
}

// cols is a minimal column aligner: the first left columns (at least
// one) to the left, the others right.
type cols struct {
	out  *strings.Builder
	rows [][]string
	left int // columns aligned to the left (at least the first)
}

func newCols(out *strings.Builder) *cols { return &cols{out: out, left: 1} }

func (c *cols) row(cells ...string) { c.rows = append(c.rows, cells) }

func (c *cols) flush() {
	width := make([]int, len(c.rows[0]))
	for _, r := range c.rows {
		for i, s := range r {
			width[i] = max(width[i], len([]rune(s)))
		}
	}
	for _, r := range c.rows {
		var line strings.Builder
		for i, s := range r {
			pad := strings.Repeat(" ", width[i]-len([]rune(s)))
			switch {
			case i == 0:
				line.WriteString(s + pad)
			case i < c.left:
				line.WriteString("  " + s + pad)
			default:
				line.WriteString("  " + pad + s)
			}
		}
		c.out.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
}
