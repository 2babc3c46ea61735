package main

import (
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/fulfillplatform/fulfillment/rig/loadgen"
)

var (
	colBaseline = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	colIngest   = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	colNew      = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	colPaused   = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
)

// writeChart draws two panels side by side into a PNG: throughput against
// concurrency (baseline rows/s, ingest requests/s and new events/s) and p99
// latency against concurrency (baseline commit, ingest acknowledgement).
func writeChart(path string, r *Report) error {
	var ticks []plot.Tick
	for _, c := range r.Settings.Concurrencies {
		ticks = append(ticks, plot.Tick{Value: float64(c), Label: fmt.Sprint(c)})
	}
	xy := func(n int, f func(i int) (float64, float64)) plotter.XYs {
		pts := make(plotter.XYs, n)
		for i := range n {
			pts[i].X, pts[i].Y = f(i)
		}
		return pts
	}
	base, ing := r.Baseline, r.Ingest

	tp := newPanel("Throughput vs concurrency", "per second", ticks)
	addSeries(tp, "baseline: rows/s (INSERT, 1 commit/row)", colBaseline, 0,
		xy(len(base), func(i int) (float64, float64) { return float64(base[i].Concurrency), base[i].PerSecond }))
	if nn := r.BaselineNoNotify; len(nn) > 0 {
		addSeries(tp, "baseline, NOTIFY trigger disabled (info)", colBaseline, 1,
			xy(len(nn), func(i int) (float64, float64) { return float64(nn[i].Concurrency), nn[i].PerSecond }))
	}
	addSeries(tp, "ingest: accepted webhooks/s", colIngest, 0,
		xy(len(ing), func(i int) (float64, float64) { return float64(ing[i].Concurrency), ing[i].PerSecond }))
	addSeries(tp, "ingest: new events/s", colNew, 1,
		xy(len(ing), func(i int) (float64, float64) { return float64(ing[i].Concurrency), ing[i].NewPerSecond }))
	alone := r.IngestPaused
	if len(alone) > 0 {
		addSeries(tp, "ingest alone (processor paused): accepted webhooks/s", colPaused, 0,
			xy(len(alone), func(i int) (float64, float64) { return float64(alone[i].Concurrency), alone[i].PerSecond }))
	}
	tp.Y.Min = 0
	_, tpMax := yRange(tp)
	tp.Y.Max = tpMax * 1.45 // room for the legend above the lines

	lp := newPanel("p99 latency vs concurrency", "p99 (ms, log scale)", ticks)
	lp.Y.Scale = plot.LogScale{}
	lp.Y.Tick.Marker = ticks125{}
	p99 := func(s loadgen.Summary) float64 { return math.Max(loadgen.Ms(s.P99), 0.01) }
	addSeries(lp, "baseline: INSERT+commit p99", colBaseline, 0,
		xy(len(base), func(i int) (float64, float64) { return float64(base[i].Concurrency), p99(base[i].Latency) }))
	addSeries(lp, "ingest: webhook ack p99", colIngest, 0,
		xy(len(ing), func(i int) (float64, float64) { return float64(ing[i].Concurrency), p99(ing[i].Latency) }))
	if len(alone) > 0 {
		addSeries(lp, "ingest alone (processor paused): ack p99", colPaused, 0,
			xy(len(alone), func(i int) (float64, float64) { return float64(alone[i].Concurrency), p99(alone[i].Latency) }))
	}
	if nn := r.BaselineNoNotify; len(nn) > 0 {
		addSeries(lp, "baseline, NOTIFY trigger disabled (info)", colBaseline, 1,
			xy(len(nn), func(i int) (float64, float64) { return float64(nn[i].Concurrency), p99(nn[i].Latency) }))
	}
	if line, err := plotter.NewLine(plotter.XYs{{X: tickMin(ticks), Y: 25}, {X: tickMax(ticks), Y: 25}}); err == nil {
		line.Color = color.Gray{Y: 0x80}
		line.Dashes = []vg.Length{vg.Points(2), vg.Points(3)}
		lp.Add(line)
		lp.Legend.Add("goal: ack p99 25 ms (at ½ peak)", line)
	}

	lo, hi := yRange(lp)
	lo = math.Min(lo, 20)             // keep the goal line in view
	lp.Y.Min, lp.Y.Max = lo/1.5, hi*6 // room for the legend above the lines

	img := vgimg.New(13*vg.Inch, 5*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Inch / 3, PadTop: vg.Inch / 6, PadBottom: vg.Inch / 8,
		PadLeft: vg.Inch / 8, PadRight: vg.Inch / 6}
	canvases := plot.Align([][]*plot.Plot{{tp, lp}}, tiles, dc)
	tp.Draw(canvases[0][0])
	lp.Draw(canvases[0][1])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close() // the write error is the one to report
		return err
	}
	return f.Close()
}

// redrawChart draws the chart of the run saved in path (its JSON report)
// into the same name with .png.
func redrawChart(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return writeChart(strings.TrimSuffix(path, filepath.Ext(path))+".png", &r)
}

func newPanel(title, ylabel string, ticks []plot.Tick) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "concurrent clients (log scale)"
	p.Y.Label.Text = ylabel
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Min, p.X.Max = tickMin(ticks)*0.8, tickMax(ticks)*1.25
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	return p
}

func addSeries(p *plot.Plot, name string, c color.Color, dash int, pts plotter.XYs) {
	if len(pts) == 0 {
		return
	}
	r, ok := ranges[p]
	if !ok {
		r = [2]float64{math.Inf(1), math.Inf(-1)}
	}
	for _, pt := range pts {
		r[0], r[1] = math.Min(r[0], pt.Y), math.Max(r[1], pt.Y)
	}
	ranges[p] = r
	line, points, err := plotter.NewLinePoints(pts)
	if err != nil {
		return
	}
	line.Color, points.Color = c, c
	line.Width = vg.Points(1.5)
	if dash == 1 {
		line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	}
	points.Shape = draw.CircleGlyph{}
	points.Radius = vg.Points(3)
	p.Add(line, points)
	p.Legend.Add(name, line, points)
}

func tickMin(ts []plot.Tick) float64 {
	m := math.Inf(1)
	for _, t := range ts {
		m = math.Min(m, t.Value)
	}
	if math.IsInf(m, 1) {
		return 1
	}
	return m
}

func tickMax(ts []plot.Tick) float64 {
	m := math.Inf(-1)
	for _, t := range ts {
		m = math.Max(m, t.Value)
	}
	if math.IsInf(m, -1) {
		return 64
	}
	return m
}

// yRange is the range of y over the panel's series.
func yRange(p *plot.Plot) (lo, hi float64) {
	r, ok := ranges[p]
	if !ok {
		return 1, 10
	}
	return r[0], r[1]
}

// ranges remembers each panel's y range as series are added.
var ranges = map[*plot.Plot][2]float64{}

// ticks125 marks 1, 2, 5, 10, 20, 50, … on a log axis.
type ticks125 struct{}

func (ticks125) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(math.Log10(lo)) - 1; e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v < lo || v > hi {
				continue
			}
			ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
		}
	}
	return ts
}
