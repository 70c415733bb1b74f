package analyze

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// WriteCSV writes the curve as CSV with a header line:
// size_bytes,policy,miss_ratio,accesses,misses.
func WriteCSV(w io.Writer, curve []Point) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"size_bytes", "policy", "miss_ratio", "accesses", "misses"}); err != nil {
		return err
	}
	for _, p := range curve {
		row := []string{
			strconv.FormatInt(p.Size, 10), string(p.Policy),
			strconv.FormatFloat(p.MissRatio(), 'f', 6, 64),
			strconv.FormatInt(p.Accesses, 10), strconv.FormatInt(p.Misses, 10),
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// PlotOptions add the live cache to a plot.
type PlotOptions struct {
	// Title of the plot (default "Miss-ratio curve").
	Title string
	// LiveSize, when > 0, is the live cache's configured size: a vertical
	// line marks it.
	LiveSize int64
	// LiveMissRatio, when >= 0 and LiveSize > 0, is the miss ratio the
	// live cache measured: a point marks it on the line.
	LiveMissRatio float64
}

// sizeTicks labels a log-scale axis of byte sizes at powers of two.
type sizeTicks struct{}

func (sizeTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	if lo <= 0 {
		lo = 1
	}
	step := 1.0
	// At most ~8 labels: label every k-th power of two.
	n := math.Log2(hi) - math.Log2(lo)
	if n > 8 {
		step = math.Ceil(n / 8)
	}
	for e := math.Floor(math.Log2(lo)); e <= math.Ceil(math.Log2(hi)); e++ {
		v := math.Exp2(e)
		if v < lo || v > hi {
			continue
		}
		label := ""
		if math.Mod(e, step) == 0 {
			label = FormatBytes(int64(v))
		}
		ts = append(ts, plot.Tick{Value: v, Label: label})
	}
	return ts
}

// WritePlot draws the curve, one line per policy, x = cache size (log
// scale), y = miss ratio, and writes it as PNG.
func WritePlot(w io.Writer, curve []Point, o PlotOptions) error {
	if len(curve) == 0 {
		return fmt.Errorf("analyze: no curve to plot (no cache sizes simulated)")
	}
	p := plot.New()
	p.Title.Text = o.Title
	if p.Title.Text == "" {
		p.Title.Text = "Miss-ratio curve"
	}
	p.X.Label.Text = "cache size"
	p.Y.Label.Text = "miss ratio"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = sizeTicks{}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = true
	p.Add(plotter.NewGrid())

	var pols []Policy
	for _, pt := range curve {
		if !slices.Contains(pols, pt.Policy) {
			pols = append(pols, pt.Policy)
		}
	}
	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymax := 0.0
	for i, pol := range pols {
		var xys plotter.XYs
		for _, pt := range curve {
			if pt.Policy == pol {
				xys = append(xys, plotter.XY{X: float64(pt.Size), Y: pt.MissRatio()})
				xmin, xmax = min(xmin, float64(pt.Size)), max(xmax, float64(pt.Size))
				ymax = max(ymax, pt.MissRatio())
			}
		}
		slices.SortFunc(xys, func(a, b plotter.XY) int { return int(math.Copysign(1, a.X-b.X)) })
		l, s, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		c := plotutil.Color(i)
		l.Color, l.Width = c, vg.Points(1.5)
		s.Color, s.Shape = c, plotutil.Shape(i)
		p.Add(l, s)
		p.Legend.Add(string(pol), l, s)
	}
	if o.LiveSize > 0 {
		x := float64(o.LiveSize)
		xmin, xmax = min(xmin, x), max(xmax, x)
		v, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: 1}})
		if err != nil {
			return err
		}
		v.Color = color.Gray{Y: 96}
		v.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(v)
		p.Legend.Add("live cache "+FormatBytes(o.LiveSize), v)
		if o.LiveMissRatio >= 0 {
			s, err := plotter.NewScatter(plotter.XYs{{X: x, Y: o.LiveMissRatio}})
			if err != nil {
				return err
			}
			s.Shape = draw.CrossGlyph{}
			s.Radius = vg.Points(5)
			s.Color = color.Black
			p.Add(s)
			p.Legend.Add(fmt.Sprintf("live measured %.1f%%", 100*o.LiveMissRatio), s)
		}
	}
	if xmin == xmax {
		xmin, xmax = xmin/2, xmax*2
	}
	p.X.Min, p.X.Max = xmin/1.2, xmax*1.2
	if ymax < 0.5 {
		p.Y.Max = math.Min(1, math.Ceil(ymax*1.15*10)/10)
	}
	wt, err := p.WriterTo(8*vg.Inch, 5*vg.Inch, "png")
	if err != nil {
		return err
	}
	_, err = wt.WriteTo(w)
	return err
}

// ParseSize parses a byte size: a number with an optional unit B, KiB,
// MiB, GiB, TiB (or K, M, G, T, KB, MB, GB, TB, all powers of 1024).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("size %q: want a number of bytes, e.g. 64MiB", s)
	}
	v, err := strconv.ParseFloat(t[:i], 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: want a number of bytes, e.g. 64MiB", s)
	}
	var mult float64
	switch strings.ToLower(strings.TrimSpace(t[i:])) {
	case "", "b":
		mult = 1
	case "k", "kb", "kib":
		mult = 1 << 10
	case "m", "mb", "mib":
		mult = 1 << 20
	case "g", "gb", "gib":
		mult = 1 << 30
	case "t", "tb", "tib":
		mult = 1 << 40
	default:
		return 0, fmt.Errorf("size %q: unknown unit %q (use B, KiB, MiB, GiB or TiB)", s, t[i:])
	}
	n := v * mult
	if n >= 1<<62 || n != n {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return int64(n), nil
}

// ParseSizes parses a comma-separated list of sizes (ParseSize), each
// positive.
func ParseSizes(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		if strings.TrimSpace(f) == "" {
			continue
		}
		n, err := ParseSize(f)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return nil, fmt.Errorf("size %q: must be positive", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no cache sizes given")
	}
	return out, nil
}
