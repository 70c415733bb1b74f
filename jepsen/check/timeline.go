package check

import (
	"bufio"
	"fmt"
	"image/color"
	"math"
	"slices"
	"sort"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/cairnkv/cairn/jepsen/history"
)

// nemesisColors shades fault windows; unknown nemeses get grey.
var nemesisColors = map[string]color.NRGBA{
	"partition":  {R: 0xe4, G: 0x57, B: 0x56, A: 0x48},
	"kill":       {R: 0x8e, G: 0x44, B: 0xad, A: 0x48},
	"pause":      {R: 0xf3, G: 0x9c, B: 0x12, A: 0x48},
	"membership": {R: 0x27, G: 0xae, B: 0x60, A: 0x48},
	"restart":    {R: 0x29, G: 0x80, B: 0xb9, A: 0x48},
}

func nemesisColor(name string) color.NRGBA {
	if c, ok := nemesisColors[name]; ok {
		return c
	}
	return color.NRGBA{R: 0x80, G: 0x80, B: 0x80, A: 0x48}
}

func cssColor(name string) string {
	c := nemesisColor(name)
	return fmt.Sprintf("rgba(%d,%d,%d,0.35)", c.R, c.G, c.B)
}

// timeline is the per-second series of a history.
type timeline struct {
	seconds            int
	ok, fail, info     []float64 // operations completed (info: given up on) per second
	p50, p99           []float64 // latency of ok and fail operations completed in that second, ms; NaN when none
	maxLatencyMs, maxN float64
}

func buildTimeline(h *history.History) timeline {
	end := h.Duration
	for _, op := range h.Ops {
		end = max(end, op.Call)
		if op.Outcome != history.Info {
			end = max(end, op.Return)
		}
	}
	for _, f := range h.Faults {
		end = max(end, f.Start, f.End)
	}
	n := max(1, int(math.Ceil(end.Seconds())))
	t := timeline{seconds: n,
		ok: make([]float64, n), fail: make([]float64, n), info: make([]float64, n),
		p50: make([]float64, n), p99: make([]float64, n)}
	lat := make([][]time.Duration, n)
	sec := func(d time.Duration) int { return min(n-1, max(0, int(d/time.Second))) }
	for _, op := range h.Ops {
		switch op.Outcome {
		case history.Info:
			// When the client gave up, if recorded; else when it asked.
			at := op.Call
			if op.Return > op.Call {
				at = op.Return
			}
			t.info[sec(at)]++
			continue
		case history.OK:
			t.ok[sec(op.Return)]++
		default:
			t.fail[sec(op.Return)]++
		}
		lat[sec(op.Return)] = append(lat[sec(op.Return)], op.Return-op.Call)
	}
	for i, l := range lat {
		t.maxN = max(t.maxN, t.ok[i], t.fail[i], t.info[i])
		if len(l) == 0 {
			t.p50[i], t.p99[i] = math.NaN(), math.NaN()
			continue
		}
		slices.Sort(l)
		t.p50[i] = ms64(quantile(l, 0.50))
		t.p99[i] = ms64(quantile(l, 0.99))
		t.maxLatencyMs = max(t.maxLatencyMs, t.p99[i])
	}
	return t
}

func ms64(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// quantile of a sorted slice, nearest rank.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(len(sorted)-1, max(0, i))]
}

// series turns a per-second slice into line segments, breaking at NaN.
func series(ys []float64) []plotter.XYs {
	var out []plotter.XYs
	var cur plotter.XYs
	for i, y := range ys {
		if math.IsNaN(y) {
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = nil
			continue
		}
		cur = append(cur, plotter.XY{X: float64(i) + 0.5, Y: y})
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// faultShades draws every fault window as a translucent band over the whole
// height of the plot, labelled with the nemesis at the top.
type faultShades struct {
	faults []history.Fault
	end    time.Duration
	label  bool
}

func (f faultShades) Plot(c draw.Canvas, p *plot.Plot) {
	tx, _ := p.Transforms(&c)
	sty := p.X.Tick.Label
	sty.Font.Size = vg.Points(9)
	sty.XAlign = draw.XLeft
	sty.YAlign = draw.YTop
	for i, fl := range f.faults {
		end := fl.End
		if end == 0 || end < fl.Start {
			end = f.end
		}
		x0, x1 := tx(fl.Start.Seconds()), tx(end.Seconds())
		if x1-x0 < 1 {
			x1 = x0 + 1
		}
		pts := c.ClipPolygonXY([]vg.Point{{X: x0, Y: c.Min.Y}, {X: x1, Y: c.Min.Y}, {X: x1, Y: c.Max.Y}, {X: x0, Y: c.Max.Y}})
		c.FillPolygon(nemesisColor(fl.Nemesis), pts)
		if f.label && c.ContainsX(x0) {
			sty.Color = color.NRGBA{R: 0x30, G: 0x30, B: 0x30, A: 0xff}
			y := c.Max.Y - vg.Points(2) - vg.Points(10)*vg.Length(i%4)
			c.FillText(sty, vg.Point{X: x0 + vg.Points(1), Y: y}, fl.Nemesis)
		}
	}
}

func (f faultShades) DataRange() (xmin, xmax, ymin, ymax float64) {
	return 0, f.end.Seconds(), math.Inf(1), math.Inf(-1)
}

// shadeThumb is a legend entry for one nemesis.
type shadeThumb color.NRGBA

func (s shadeThumb) Thumbnail(c *draw.Canvas) {
	col := color.NRGBA(s)
	col.A = 0x90
	c.FillPolygon(col, []vg.Point{{X: c.Min.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Min.X, Y: c.Max.Y}})
}

func addLines(p *plot.Plot, name string, ys []float64, col color.Color, dashes []vg.Length) error {
	first := true
	for _, seg := range series(ys) {
		var th plot.Thumbnailer
		if len(seg) == 1 {
			s, err := plotter.NewScatter(seg)
			if err != nil {
				return err
			}
			s.GlyphStyle.Color = col
			s.GlyphStyle.Radius = vg.Points(1.5)
			p.Add(s)
			th = s
		} else {
			l, err := plotter.NewLine(seg)
			if err != nil {
				return err
			}
			l.LineStyle.Color = col
			l.LineStyle.Width = vg.Points(1.2)
			l.LineStyle.Dashes = dashes
			p.Add(l)
			th = l
		}
		if first {
			p.Legend.Add(name, th)
			first = false
		}
	}
	return nil
}

// writeTimeline draws throughput (top) and latency (bottom) per second with
// the fault windows shaded, as a PNG.
func writeTimeline(path string, h *history.History) error {
	t := buildTimeline(h)
	end := time.Duration(t.seconds) * time.Second
	shades := faultShades{faults: h.Faults, end: end}
	nemeses := map[string]bool{}
	for _, f := range h.Faults {
		nemeses[f.Nemesis] = true
	}
	names := make([]string, 0, len(nemeses))
	for n := range nemeses {
		names = append(names, n)
	}
	sort.Strings(names)

	tp := plot.New()
	tp.Title.Text = fmt.Sprintf("cairn jepsen %s, seed %d, %d nodes: throughput", h.Workload, h.Seed, h.Nodes)
	tp.Y.Label.Text = "operations / s"
	tp.X.Label.Text = "time (s)"
	tp.Y.Min, tp.Y.Max = 0, max(1, t.maxN*1.4)
	tp.X.Min, tp.X.Max = 0, end.Seconds()
	labelled := shades
	labelled.label = true
	tp.Add(labelled, plotter.NewGrid())
	tp.Legend.Top = true
	tp.Legend.TextStyle.Font.Size = vg.Points(9)
	if err := addLines(tp, "ok", t.ok, color.NRGBA{R: 0x1e, G: 0x84, B: 0x49, A: 0xff}, nil); err != nil {
		return err
	}
	if err := addLines(tp, "fail", t.fail, color.NRGBA{R: 0xc0, G: 0x39, B: 0x2b, A: 0xff}, nil); err != nil {
		return err
	}
	if err := addLines(tp, "info (indeterminate)", t.info, color.NRGBA{R: 0xd3, G: 0x84, B: 0x00, A: 0xff}, []vg.Length{vg.Points(3), vg.Points(2)}); err != nil {
		return err
	}
	for _, n := range names {
		tp.Legend.Add("fault: "+n, shadeThumb(nemesisColor(n)))
	}

	lp := plot.New()
	lp.Title.Text = "latency of completed operations (ok and fail)"
	lp.Y.Label.Text = "ms"
	lp.X.Label.Text = "time (s)"
	lp.Y.Min, lp.Y.Max = 0, max(1, t.maxLatencyMs*1.4)
	lp.X.Min, lp.X.Max = 0, end.Seconds()
	lp.Add(shades, plotter.NewGrid())
	lp.Legend.Top = true
	lp.Legend.TextStyle.Font.Size = vg.Points(9)
	if err := addLines(lp, "p50", t.p50, color.NRGBA{R: 0x29, G: 0x80, B: 0xb9, A: 0xff}, nil); err != nil {
		return err
	}
	if err := addLines(lp, "p99", t.p99, color.NRGBA{R: 0x8e, G: 0x44, B: 0xad, A: 0xff}, []vg.Length{vg.Points(4), vg.Points(2)}); err != nil {
		return err
	}

	img := vgimg.New(30*vg.Centimeter, 20*vg.Centimeter)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
	plots := [][]*plot.Plot{{tp}, {lp}}
	canvases := plot.Align(plots, tiles, dc)
	tp.Draw(canvases[0][0])
	lp.Draw(canvases[1][0])
	return writeFile(path, func(w *bufio.Writer) error {
		_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
		return err
	})
}
