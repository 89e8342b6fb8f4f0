package bench

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The chart is the paper's figure (Figures 9 to 11): one panel per
// workload, value sizes along the x axis, one bar per mechanism and mode
// with its ops/s on the left axis, and on each bar a lollipop (a red
// stick ending in a dot) at its percentage of None on the right axis.

// chart geometry
const (
	panelW      = 6.2 * vg.Inch
	panelH      = 3.4 * vg.Inch
	rightMargin = 0.55 * vg.Inch // for the right-hand axis
	legendRows  = 4
	legendRowH  = 0.19 * vg.Inch
)

var (
	lollipopColor = color.RGBA{R: 0xd6, G: 0x1f, B: 0x1f, A: 0xff}
	// Colours by mechanism; hybrid mode is a lighter shade of standalone.
	mechColors = map[string]color.RGBA{
		None:          {0x7f, 0x7f, 0x7f, 0xff},
		"hashing":     {0x1f, 0x77, 0xb4, 0xff},
		"replication": {0x2c, 0xa0, 0x2c, 0xff},
		"splitting":   {0x94, 0x67, 0xbd, 0xff},
		"packing":     {0xff, 0x7f, 0x0e, 0xff},
		Thresholds:    {0x8c, 0x56, 0x4b, 0xff},
		Tiny:          {0xe3, 0x77, 0xc2, 0xff},
	}
)

func targetColor(t target) color.Color {
	c, ok := mechColors[t.mech]
	if !ok {
		c = color.RGBA{0x17, 0xbe, 0xcf, 0xff}
	}
	if t.mode == ModeHybrid && t.mech != Thresholds {
		lighten := func(v uint8) uint8 { return uint8(int(v) + (255-int(v))*55/100) }
		c = color.RGBA{lighten(c.R), lighten(c.G), lighten(c.B), 0xff}
	}
	return c
}

func targetLabel(t target) string {
	switch {
	case t.mech == None:
		return "None (raw devices)"
	case t.mech == Thresholds:
		return "hybrid thresholds"
	}
	return t.mech + " " + t.mode
}

var workloadTitles = map[string]string{
	Store:         "Store",
	Retrieve:      "Retrieve",
	Update:        "Update",
	Delete:        "Delete",
	MixedStore:    "Store, mixed sizes",
	MixedRetrieve: "Retrieve, mixed sizes",
	RangeRead:     "Range read (GETRANGE)",
	RangeWrite:    "Range write (SETRANGE)",
}

// panel is one workload's data.
type panel struct {
	workload string
	groups   []string // size labels
	targets  []target
	ops, pct [][]float64 // [target][group]
}

func (rep *Report) panels() []*panel {
	var out []*panel
	byName := map[string]*panel{}
	for _, r := range rep.Results {
		p := byName[r.Workload]
		if p == nil {
			p = &panel{workload: r.Workload}
			byName[r.Workload] = p
			out = append(out, p)
		}
		if !slices.Contains(p.groups, r.SizeLabel) {
			p.groups = append(p.groups, r.SizeLabel)
		}
		if t := (target{r.Mechanism, r.Mode}); !slices.Contains(p.targets, t) {
			p.targets = append(p.targets, t)
		}
	}
	for _, p := range out {
		p.ops = make([][]float64, len(p.targets))
		p.pct = make([][]float64, len(p.targets))
		for i := range p.targets {
			p.ops[i] = make([]float64, len(p.groups))
			p.pct[i] = make([]float64, len(p.groups))
		}
	}
	for _, r := range rep.Results {
		p := byName[r.Workload]
		i := slices.Index(p.targets, target{r.Mechanism, r.Mode})
		g := slices.Index(p.groups, r.SizeLabel)
		p.ops[i][g], p.pct[i][g] = r.OpsPerSec, r.PctOfNone
	}
	return out
}

// WriteChart draws the chart into path; the extension picks the format
// (.svg, .png, .pdf, .eps).
func (rep *Report) WriteChart(path string) error {
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), ".")
	if format == "" {
		return fmt.Errorf("chart %s: no extension to tell the format (.svg, .png, .pdf)", path)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rep.Chart(f, format); err != nil {
		f.Close()
		return fmt.Errorf("chart %s: %w", path, err)
	}
	return f.Close()
}

// Chart draws the chart in format (svg, png, pdf, eps) to w.
func (rep *Report) Chart(w io.Writer, format string) error {
	panels := rep.panels()
	if len(panels) == 0 {
		return fmt.Errorf("no results to draw")
	}
	cols := min(2, len(panels))
	rows := (len(panels) + cols - 1) / cols
	var legend []target
	for _, p := range panels {
		for _, t := range p.targets {
			if !slices.Contains(legend, t) {
				legend = append(legend, t)
			}
		}
	}
	legendH := vg.Length(legendRows)*legendRowH + 0.45*vg.Inch
	width := vg.Length(cols) * panelW
	height := vg.Length(rows)*panelH + legendH
	cw, err := draw.NewFormattedCanvas(width, height, format)
	if err != nil {
		return err
	}
	dc := draw.New(cw)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())

	plots := make([][]*plot.Plot, rows)
	lollis := map[*plot.Plot]*lollipops{}
	bars := map[*plot.Plot][]*plotter.BarChart{}
	for r := range plots {
		plots[r] = make([]*plot.Plot, cols)
		for c := range plots[r] {
			i := r*cols + c
			if i >= len(panels) {
				continue
			}
			p, bs, l, err := panels[i].plot(rep)
			if err != nil {
				return err
			}
			plots[r][c], bars[p], lollis[p] = p, bs, l
		}
	}
	area := draw.Crop(dc, 0, 0, legendH, 0)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: rightMargin + 0.25*vg.Inch, PadY: 0.3 * vg.Inch,
		PadTop: 0.15 * vg.Inch, PadLeft: 0.1 * vg.Inch, PadRight: rightMargin + 0.1*vg.Inch}
	canvases := plot.Align(plots, tiles, area)
	for r := range plots {
		for c, p := range plots[r] {
			if p == nil {
				continue
			}
			// Bars fill 85% of each group's width.
			da := p.DataCanvas(canvases[r][c])
			group := (da.Max.X - da.Min.X) / vg.Length(len(panels[r*cols+c].groups))
			n := len(bars[p])
			bw := group * 0.85 / vg.Length(n)
			for j, b := range bars[p] {
				b.Width = bw
				b.Offset = (vg.Length(j) - vg.Length(n-1)/2) * bw
			}
			lollis[p].width = bw
			p.Draw(canvases[r][c])
		}
	}
	drawLegend(draw.Crop(dc, 0.4*vg.Inch, 0, 0, -(height-legendH)), legend, rep)
	_, err = cw.WriteTo(w)
	return err
}

// plot builds the panel's plot: the bars and the lollipops; their widths
// are set once the plots are aligned.
func (pn *panel) plot(rep *Report) (*plot.Plot, []*plotter.BarChart, *lollipops, error) {
	p := plot.New()
	title := workloadTitles[pn.workload]
	if title == "" {
		title = pn.workload
	}
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = 12
	p.Y.Label.Text = "ops/s (bars)"
	p.X.Label.Text = "value size"
	if pn.groups[0] == "mix" {
		var parts []string
		for _, m := range rep.Options.Mix {
			parts = append(parts, sizeLabel(m.Size))
		}
		var ws []string
		for _, m := range rep.Options.Mix {
			ws = append(ws, fmt.Sprint(m.Weight))
		}
		p.X.Label.Text = strings.Join(parts, ", ") + " at " + strings.Join(ws, ":")
	}
	p.NominalX(pn.groups...)
	p.X.Tick.Label.Font.Size = 10
	p.X.Label.TextStyle.Font.Size = 10
	p.Y.Label.TextStyle.Font.Size = 10
	p.Y.Tick.Label.Font.Size = 9
	p.Y.Tick.Marker = opsTicker{}
	grid := plotter.NewGrid()
	grid.Vertical.Color = nil
	p.Add(grid)
	var top float64
	var bs []*plotter.BarChart
	for j, t := range pn.targets {
		b, err := plotter.NewBarChart(plotter.Values(pn.ops[j]), 1)
		if err != nil {
			return nil, nil, nil, err
		}
		b.Color = targetColor(t)
		b.LineStyle.Width = 0
		p.Add(b)
		bs = append(bs, b)
		top = max(top, slices.Max(pn.ops[j]))
	}
	// The bars' widths are only known once the plots are aligned, so the
	// range is set rather than derived from their glyphs.
	p.X.Min, p.X.Max = -0.5, float64(len(pn.groups))-0.5
	p.Y.Min, p.Y.Max = 0, top*1.08
	if p.Y.Max == 0 {
		p.Y.Max = 1
	}
	pctMax := 100.0
	for _, row := range pn.pct {
		pctMax = max(pctMax, slices.Max(row))
	}
	pctMax = math.Ceil(pctMax/25) * 25
	l := &lollipops{pct: pn.pct, max: pctMax}
	p.Add(l)
	return p, bs, l, nil
}

// opsTicker labels the ops/s axis with k for thousands.
type opsTicker struct{}

func (opsTicker) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label == "" {
			continue
		}
		v := ticks[i].Value
		switch {
		case v >= 1000:
			ticks[i].Label = strings.TrimSuffix(fmt.Sprintf("%.1f", v/1000), ".0") + "k"
		default:
			ticks[i].Label = fmt.Sprintf("%g", v)
		}
	}
	return ticks
}

// lollipops draws each bar's percentage of None against a right-hand axis
// from 0 to max percent, and the axis itself.
type lollipops struct {
	pct   [][]float64 // [target][group]
	max   float64
	width vg.Length // of one bar
}

var _ plot.Plotter = (*lollipops)(nil)

func (l *lollipops) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	y0, y1 := trY(0), c.Max.Y
	at := func(pct float64) vg.Length { return y0 + (y1-y0)*vg.Length(pct/l.max) }
	stick := draw.LineStyle{Color: lollipopColor, Width: vg.Points(1.2)}
	dot := draw.GlyphStyle{Color: lollipopColor, Radius: vg.Points(2.6), Shape: draw.CircleGlyph{}}
	n := len(l.pct)
	for j, row := range l.pct {
		off := (vg.Length(j) - vg.Length(n-1)/2) * l.width
		for g, v := range row {
			if v <= 0 {
				continue
			}
			x := trX(float64(g)) + off
			y := at(v)
			c.StrokeLine2(stick, x, y0, x, y)
			c.DrawGlyph(dot, vg.Point{X: x, Y: y})
		}
	}
	// The right-hand axis.
	axis := draw.LineStyle{Color: color.Black, Width: vg.Points(0.5)}
	x := c.Max.X
	c.StrokeLine2(axis, x, y0, x, y1)
	lbl := text.Style{Color: color.Black, Font: font.From(plot.DefaultFont, 9), Handler: plot.DefaultTextHandler,
		XAlign: draw.XLeft, YAlign: draw.YCenter}
	step := 25.0
	if l.max > 200 {
		step = 50
	}
	for v := 0.0; v <= l.max+1e-9; v += step {
		y := at(v)
		c.StrokeLine2(axis, x, y, x+vg.Points(4), y)
		c.FillText(lbl, vg.Point{X: x + vg.Points(6), Y: y}, fmt.Sprintf("%.0f%%", v))
	}
	// 100%: None's level, dashed.
	ref := draw.LineStyle{Color: lollipopColor, Width: vg.Points(0.5), Dashes: []vg.Length{vg.Points(3), vg.Points(3)}}
	c.StrokeLine2(ref, c.Min.X, at(100), c.Max.X, at(100))
	title := lbl
	title.Rotation = -math.Pi / 2
	title.XAlign, title.YAlign = draw.XCenter, draw.YTop
	title.Color = lollipopColor
	c.FillText(title, vg.Point{X: x + rightMargin - vg.Points(2), Y: (y0 + y1) / 2}, "% of None (lollipops)")
}

// lollipopThumb is the legend's picture of a lollipop.
type lollipopThumb struct{}

func (lollipopThumb) Thumbnail(c *draw.Canvas) {
	x := (c.Min.X + c.Max.X) / 2
	c.StrokeLine2(draw.LineStyle{Color: lollipopColor, Width: vg.Points(1.2)}, x, c.Min.Y, x, c.Max.Y-vg.Points(2))
	c.DrawGlyph(draw.GlyphStyle{Color: lollipopColor, Radius: vg.Points(2.6), Shape: draw.CircleGlyph{}}, vg.Point{X: x, Y: c.Max.Y - vg.Points(2)})
}

type swatch struct{ c color.Color }

func (s swatch) Thumbnail(c *draw.Canvas) {
	c.SetColor(s.c)
	c.Fill(c.Rectangle.Path())
}

// drawLegend draws the targets and the lollipop in columns of legendRows
// entries, and a line on the devices under them.
func drawLegend(c draw.Canvas, targets []target, rep *Report) {
	type entry struct {
		name  string
		thumb plot.Thumbnailer
	}
	var es []entry
	for _, t := range targets {
		es = append(es, entry{targetLabel(t), swatch{targetColor(t)}})
	}
	es = append(es, entry{"% of None", lollipopThumb{}})
	colW := 2.2 * vg.Inch
	for i := 0; i < len(es); i += legendRows {
		l := plot.NewLegend()
		l.Left, l.Top = true, true
		l.TextStyle.Font.Size = 10
		l.ThumbnailWidth = vg.Points(14)
		l.Padding = vg.Points(3)
		for _, e := range es[i:min(i+legendRows, len(es))] {
			l.Add(e.name, e.thumb)
		}
		col := vg.Length(i/legendRows) * colW
		l.Draw(draw.Crop(c, col, 0, 0.25*vg.Inch, -0.05*vg.Inch))
	}
	note := text.Style{Color: color.Gray{0x40}, Font: font.From(plot.DefaultFont, 9), Handler: plot.DefaultTextHandler}
	c.FillText(note, vg.Point{X: c.Min.X, Y: c.Min.Y + vg.Points(4)},
		fmt.Sprintf("%s; %d threads × queue depth %d; %s", rep.Devices, rep.Options.Threads, rep.Options.QueueDepth, rep.Started.Format("2006-01-02 15:04 UTC")))
}
