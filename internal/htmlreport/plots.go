package htmlreport

import (
	"bytes"
	"fmt"
	"html/template"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// palette: colour-blind-safe (Okabe–Ito).
var palette = []color.NRGBA{
	{0, 114, 178, 255}, {230, 159, 0, 255}, {0, 158, 115, 255}, {204, 121, 167, 255},
	{86, 180, 233, 255}, {213, 94, 0, 255}, {240, 228, 66, 255}, {0, 0, 0, 255},
}

func colorAt(i int) color.NRGBA { return palette[i%len(palette)] }

// svgOf renders p as an inline <svg> element (the XML prolog dropped),
// w×h for the plot itself. The legend is drawn beside it, to the right of
// the plotting area (top-aligned with it), never inside it, so it cannot
// cover a curve or a bar whatever the data; the picture grows by the
// legend's width, and in height when the legend is taller than the plot.
func svgOf(p *plot.Plot, w, h vg.Length) (template.HTML, error) {
	leg := p.Legend
	leg.Padding = vg.Points(3)
	p.Legend = plot.NewLegend() // nothing drawn inside the plot
	ext := leg.Rectangle(draw.Canvas{}).Size()
	total, height := w, h
	var dataTop vg.Length
	if ext.X > 0 {
		total = w + legendGap + ext.X
		// the data area's top when the plot fills w×h from the origin
		dataTop = p.DataCanvas(draw.Canvas{Rectangle: vg.Rectangle{Max: vg.Point{X: w, Y: h}}}).Max.Y
		if ext.Y > dataTop {
			height = h + ext.Y - dataTop
		}
	}
	c := vgsvg.New(total, height)
	dc := draw.New(c)
	pc := draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{Min: vg.Point{Y: height - h}, Max: vg.Point{X: w, Y: height}}}
	p.Draw(pc)
	if ext.X > 0 {
		leg.Top, leg.Left, leg.XOffs, leg.YOffs = true, true, 0, 0
		lc := draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: w + legendGap}, Max: vg.Point{X: total, Y: dataTop + height - h}}}
		leg.Draw(lc)
	}
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return "", fmt.Errorf("htmlreport: svg: %w", err)
	}
	s := b.Bytes()
	if i := bytes.Index(s, []byte("<svg")); i > 0 {
		s = s[i:]
	}
	// a class the page's self-check finds every plot by
	s = bytes.Replace(s, []byte("<svg"), []byte(`<svg class="plot"`), 1)
	return template.HTML(s), nil
}

// legendGap is the space between the plotting area and its legend.
const legendGap = 10

// maxLegendName bounds a legend entry (a class name comes from the input):
// longer names are cut, with an ellipsis (the page's data block and
// report.json keep them whole).
const maxLegendName = 40

func legendName(s string) string {
	if r := []rune(s); len(r) > maxLegendName {
		return string(r[:maxLegendName-1]) + "…"
	}
	return s
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Add(plotter.NewGrid())
	return p
}

// prPlot draws the curves at one IoU: precision at each recall threshold,
// one line per class (baseline dashed when comparing).
func prPlot(recall []float64, curves []Curve, iou float64, mapText string) (template.HTML, error) {
	title := fmt.Sprintf("PR curves at IoU %v", iou)
	if mapText != "" {
		title += fmt.Sprintf(" (%s %s)", mapKey(iou), mapText)
	}
	p := newPlot(title, "recall", "precision")
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, 1, 0, 1.02
	n := 0
	for _, c := range curves {
		if c.IoU != iou {
			continue
		}
		pts := make(plotter.XYs, len(c.Precision))
		for r, v := range c.Precision {
			pts[r] = plotter.XY{X: recall[r], Y: v}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return "", fmt.Errorf("htmlreport: %w", err)
		}
		l.Color = colorAt(int(c.LabelID))
		l.Width = vg.Points(1.6)
		name := legendName(c.Label)
		if c.Side == "baseline" {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			name += " (baseline)"
		} else if c.Side != "" {
			name += " (current)"
		}
		p.Add(l)
		p.Legend.Add(name, l)
		n++
	}
	if n == 0 {
		return "", nil
	}
	return svgOf(p, 5.2*vg.Inch, 3.6*vg.Inch)
}

// histogramPlot: true- and false-positive scores in 20 bins over [0, 1]
// (or the scores' range when outside), the score threshold a vertical line.
func histogramPlot(tp, fp []float64, thr float64) (template.HTML, error) {
	lo, hi := 0.0, 1.0
	for _, s := range [][]float64{tp, fp} {
		for _, v := range s {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	const nb = 20
	width := (hi - lo) / nb
	bins := func(vals []float64) []plotter.HistogramBin {
		b := make([]plotter.HistogramBin, nb)
		for k := range b {
			b[k].Min, b[k].Max = lo+float64(k)*width, lo+float64(k+1)*width
		}
		for _, v := range vals {
			k := min(int((v-lo)/width), nb-1)
			b[k].Weight++
		}
		return b
	}
	title := fmt.Sprintf("Detection scores: %d true positives, %d false positives", len(tp), len(fp))
	p := newPlot(title, "score", "detections")
	ymax := 1.0
	for i, s := range []struct {
		name string
		vals []float64
		c    color.NRGBA
	}{{"true positive", tp, color.NRGBA{0, 158, 115, 150}}, {"false positive", fp, color.NRGBA{213, 94, 0, 150}}} {
		h := &plotter.Histogram{Bins: bins(s.vals), Width: width, FillColor: s.c}
		h.LineStyle = draw.LineStyle{Color: color.NRGBA{60, 60, 60, 255}, Width: vg.Points(0.5)}
		for _, b := range h.Bins {
			ymax = math.Max(ymax, b.Weight)
		}
		p.Add(h)
		p.Legend.Add(s.name, h)
		_ = i
	}
	if !math.IsNaN(thr) {
		l, err := plotter.NewLine(plotter.XYs{{X: thr, Y: 0}, {X: thr, Y: ymax * 1.05}})
		if err != nil {
			return "", fmt.Errorf("htmlreport: %w", err)
		}
		l.Color = color.NRGBA{0, 0, 0, 255}
		l.Width = vg.Points(1.5)
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("score threshold %v", thr), l)
	}
	p.X.Min, p.X.Max = lo, hi
	p.Y.Min = 0
	return svgOf(p, 5.6*vg.Inch, 3.4*vg.Inch)
}

// sizePlot: recall and precision for small, medium and large boxes.
func sizePlot(rows []sizeRow) (template.HTML, error) {
	p := newPlot("Recall and precision by box size", "", "")
	p.Y.Min, p.Y.Max = 0, 1
	w := vg.Points(22)
	names := make([]string, len(rows))
	var rec, prec plotter.Values
	for k, r := range rows {
		names[k] = r.Name
		rec = append(rec, zeroNaN(r.recall))
		prec = append(prec, zeroNaN(r.precision))
	}
	for i, s := range []struct {
		name string
		v    plotter.Values
	}{{"recall (truth boxes found)", rec}, {"precision (detections that match)", prec}} {
		b, err := plotter.NewBarChart(s.v, w)
		if err != nil {
			return "", fmt.Errorf("htmlreport: %w", err)
		}
		b.Color = colorAt(i)
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(2*i-1) / 2
		p.Add(b)
		p.Legend.Add(s.name, b)
	}
	p.NominalX(names...)
	return svgOf(p, 5.2*vg.Inch, 3*vg.Inch)
}

func zeroNaN(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

// timelinePlot: every rank's stages as stacked horizontal bars on one time
// axis (seconds from the rank's start).
func timelinePlot(ranks []rankBars) (template.HTML, error) {
	if len(ranks) == 0 {
		return "", nil
	}
	p := newPlot("Per-rank timeline", "seconds", "")
	// rank 0 on top: nominal rows run bottom to top
	n := len(ranks)
	names := make([]string, n)
	longest := 0.0
	for i, r := range ranks {
		names[n-1-i] = fmt.Sprintf("rank %d (%s)", r.Rank, r.Host)
		longest = math.Max(longest, r.Total)
	}
	p.X.Max = math.Max(longest, 1e-3)
	w := vg.Points(14)
	var prev *plotter.BarChart
	for s := range ranks[0].Stages {
		vals := make(plotter.Values, n)
		for i, r := range ranks {
			if s < len(r.Stages) {
				vals[n-1-i] = r.Stages[s].Seconds
			}
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return "", fmt.Errorf("htmlreport: %w", err)
		}
		b.Horizontal = true
		b.Color = colorAt(s)
		b.LineStyle.Width = 0
		if prev != nil {
			b.StackOn(prev)
		}
		prev = b
		p.Add(b)
		p.Legend.Add(legendName(ranks[0].Stages[s].Name), b)
	}
	p.NominalY(names...)
	p.X.Min = 0
	h := vg.Length(1.3+0.3*float64(n)) * vg.Inch
	return svgOf(p, 7*vg.Inch, h)
}
