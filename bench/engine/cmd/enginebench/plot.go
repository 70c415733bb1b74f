package main

import (
	"fmt"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plotRatios draws, per shape, cairn's median throughput over the best
// peer's for every benchmark (log2 scale: 0 is parity, +1 twice as fast).
func plotRatios(path string, s *saved) error {
	p := plot.New()
	p.Title.Text = "cairn / best peer, median ops/s (log2; >0: cairn faster)"
	p.Y.Label.Text = "log2(ratio)"
	var labels []string
	var bars []plot.Plotter
	lo, hi := -1.0, 1.0
	w := vg.Points(10)
	for si, sh := range s.Shapes {
		rows := throughputRows(benchNames(s, sh))
		var vals plotter.Values
		var ls []string
		for _, rw := range rows {
			if !rw.higherBetter {
				continue
			}
			meds := map[string]stat{}
			for _, e := range sh.Engines {
				var xs []float64
				for i := range s.Runs {
					r := &s.Runs[i]
					if r.Shape == sh.Name && r.Engine == e {
						if v, ok := rw.get(r); ok {
							xs = append(xs, v)
						}
					}
				}
				meds[e] = summarize(xs)
			}
			rat, _ := ratio(meds, sh.Engines, true)
			if rat <= 0 {
				rat = 1
			}
			l := math.Log2(rat)
			lo, hi = math.Min(lo, l), math.Max(hi, l)
			vals = append(vals, l)
			ls = append(ls, strings.TrimSuffix(rw.label, ", ops/s"))
		}
		if len(vals) == 0 {
			continue
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		b.Color = plotutil.Color(si)
		b.Offset = vg.Length(si-len(s.Shapes)/2) * w
		b.LineStyle.Width = 0
		p.Legend.Add(fmt.Sprintf("%s (%d B values)", sh.Name, sh.ValueSize), b)
		bars = append(bars, b)
		if len(ls) > len(labels) {
			labels = ls
		}
	}
	p.Add(bars...)
	p.Y.Min, p.Y.Max = math.Floor(lo)-0.5, math.Ceil(hi)+0.5 // room for the legend
	p.Add(plotter.NewGrid())
	p.NominalX(labels...)
	p.X.Tick.Label.Rotation = math.Pi / 3
	p.X.Tick.Label.XAlign = -1 // text.XRight
	p.X.Tick.Label.YAlign = -0.5
	p.Legend.Top = true
	return p.Save(vg.Length(len(labels)+4)*vg.Centimeter, 14*vg.Centimeter, path)
}
