package htmlreport

import (
	"encoding/xml"
	"fmt"
	"html/template"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"

	"github.com/canopy-hpc/canopy/metrics"
)

// svgRect is an axis-aligned box in the SVG's drawing frame (y up, points).
type svgRect struct{ x0, y0, x1, y1 float64 }

func (r svgRect) empty() bool { return r.x1 < r.x0 }

func (r svgRect) union(o svgRect) svgRect {
	if r.empty() {
		return o
	}
	return svgRect{math.Min(r.x0, o.x0), math.Min(r.y0, o.y0), math.Max(r.x1, o.x1), math.Max(r.y1, o.y1)}
}

func (r svgRect) overlaps(o svgRect) bool {
	return r.x0 < o.x1 && o.x0 < r.x1 && r.y0 < o.y1 && o.y0 < r.y1
}

func (r svgRect) contains(x, y float64) bool { return x >= r.x0 && x <= r.x1 && y >= r.y0 && y <= r.y1 }

// segmentMeets: does the segment (ax,ay)-(bx,by) touch r (Liang–Barsky)?
func (r svgRect) segmentMeets(ax, ay, bx, by float64) bool {
	t0, t1 := 0.0, 1.0
	dx, dy := bx-ax, by-ay
	for _, c := range [4][2]float64{{-dx, ax - r.x0}, {dx, r.x1 - ax}, {-dy, ay - r.y0}, {dy, r.y1 - ay}} {
		p, q := c[0], c[1]
		if p == 0 {
			if q < 0 {
				return false
			}
			continue
		}
		t := q / p
		if p < 0 {
			t0 = math.Max(t0, t)
		} else {
			t1 = math.Min(t1, t)
		}
		if t0 > t1 {
			return false
		}
	}
	return true
}

// svgElem is a <path> or <text> of a gonum SVG, in document order.
type svgElem struct {
	path    bool
	pts     [][2]float64 // path vertices
	closed  bool         // path ends with Z (a filled shape)
	style   string
	text    string
	x, y    float64 // text baseline start, y up
	size    float64 // font size
	rotated bool    // text inside a rotated group (the y axis' label)
}

func (e svgElem) bbox() svgRect {
	r := svgRect{1, 1, 0, 0}
	for _, p := range e.pts {
		r = r.union(svgRect{p[0], p[1], p[0], p[1]})
	}
	return r
}

var numRE = regexp.MustCompile(`-?[0-9.]+(?:e-?[0-9]+)?`)

// parseSVG reads the paths and texts of one inline SVG as vgsvg writes it:
// paths in the flipped group's frame (y up), texts with y negated.
func parseSVG(t *testing.T, svg string) []svgElem {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(svg))
	var out []svgElem
	var groups []bool // rotated?
	rot := func() bool {
		for _, g := range groups {
			if g {
				return true
			}
		}
		return false
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("svg does not parse: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			attr := map[string]string{}
			for _, a := range el.Attr {
				attr[a.Name.Local] = a.Value
			}
			switch el.Name.Local {
			case "g":
				groups = append(groups, strings.Contains(attr["transform"], "rotate"))
			case "path":
				e := svgElem{path: true, style: attr["style"]}
				d := strings.TrimSpace(attr["d"])
				for _, cmd := range regexp.MustCompile(`[A-Za-z][^A-Za-z]*`).FindAllString(d, -1) {
					switch cmd[0] {
					case 'M', 'L':
						n := numRE.FindAllString(cmd[1:], -1)
						if len(n) != 2 {
							t.Fatalf("path command %q", cmd)
						}
						x, _ := strconv.ParseFloat(n[0], 64)
						y, _ := strconv.ParseFloat(n[1], 64)
						e.pts = append(e.pts, [2]float64{x, y})
					case 'Z':
						e.closed = true
					default:
						t.Fatalf("path command %q not understood by the test", cmd)
					}
				}
				out = append(out, e)
			case "text":
				var body string
				if err := dec.DecodeElement(&body, &el); err != nil {
					t.Fatal(err)
				}
				x, _ := strconv.ParseFloat(attr["x"], 64)
				y, _ := strconv.ParseFloat(attr["y"], 64)
				e := svgElem{text: body, x: x, y: -y, rotated: rot()}
				if m := regexp.MustCompile(`font-size:([0-9.]+)px`).FindStringSubmatch(attr["style"]); m != nil {
					e.size, _ = strconv.ParseFloat(m[1], 64)
				}
				out = append(out, e)
			}
		case xml.EndElement:
			if el.Name.Local == "g" && len(groups) > 0 {
				groups = groups[:len(groups)-1]
			}
		}
	}
	return out
}

// textBox is where a text is drawn, measured with the plot's own font.
func textBox(e svgElem) svgRect {
	sty := text.Style{Font: font.From(plot.DefaultFont, vg.Points(e.size)), Handler: plot.DefaultTextHandler}
	r := sty.Rectangle(e.text)
	return svgRect{e.x, e.y - e.size*0.3, e.x + r.Max.X.Points(), e.y + e.size}
}

// frame: the plot's axes, ticks, grid and background, which a legend may
// lie over.
func frame(e svgElem) bool {
	s := e.style
	return strings.Contains(s, "fill:#FFFFFF") || strings.Contains(s, "stroke:#808080") ||
		(strings.Contains(s, "stroke:#000000") && strings.Contains(s, "stroke-width:0.5") && !strings.Contains(s, "dasharray"))
}

// legendAndMarks splits an SVG into its legend (each entry: the text and
// the thumbnail paths drawn just before it, beside it) and its data marks
// (every other coloured path: curves, bars, the threshold line).
func legendAndMarks(t *testing.T, svg string) (entries []svgRect, legend svgRect, marks []svgElem) {
	els := parseSVG(t, svg)
	thumb := map[int]bool{}
	legend = svgRect{1, 1, 0, 0}
	for i, e := range els {
		if e.path || e.rotated {
			continue
		}
		tb := textBox(e)
		box, n := tb, 0
		for j := i - 1; j >= 0 && els[j].path && !frame(els[j]); j-- {
			b := els[j].bbox()
			near := b.y0 >= tb.y0-e.size && b.y1 <= tb.y1+e.size && b.x1-b.x0 <= 21 &&
				(math.Abs(b.x1-tb.x0) <= 24 || math.Abs(b.x0-tb.x1) <= 24)
			if !near {
				break
			}
			thumb[j] = true
			box = box.union(b)
			n++
		}
		if n > 0 {
			entries = append(entries, box)
			legend = legend.union(box)
		}
	}
	for j, e := range els {
		if e.path && !thumb[j] && !frame(e) {
			marks = append(marks, e)
		}
	}
	return entries, legend, marks
}

// checkLegendClear fails when the legend's box meets a data mark: a curve's
// point or segment, or a filled bar.
func checkLegendClear(t *testing.T, name string, svg template.HTML, wantEntries int) {
	t.Helper()
	entries, legend, marks := legendAndMarks(t, string(svg))
	if len(entries) != wantEntries {
		t.Fatalf("%s: %d legend entries found in the SVG, want %d", name, len(entries), wantEntries)
	}
	if len(marks) == 0 {
		t.Fatalf("%s: no data marks found", name)
	}
	for _, m := range marks {
		if m.closed {
			if b := m.bbox(); b.x1 > b.x0 && b.y1 > b.y0 && b.overlaps(legend) {
				t.Errorf("%s: the legend %+v covers a bar %+v (%s)", name, legend, b, m.style)
				return
			}
			continue
		}
		for k, p := range m.pts {
			if legend.contains(p[0], p[1]) {
				t.Errorf("%s: the legend %+v covers the point (%v, %v) of a curve (%s)", name, legend, p[0], p[1], m.style)
				return
			}
			if k > 0 && legend.segmentMeets(m.pts[k-1][0], m.pts[k-1][1], p[0], p[1]) {
				t.Errorf("%s: a curve's segment (%v, %v)-(%v, %v) crosses the legend %+v", name, m.pts[k-1][0], m.pts[k-1][1], p[0], p[1], legend)
				return
			}
		}
	}
}

// TestLegendsCoverNoCurve parses each plot's SVG and fails when its legend
// lies over a curve's points or a bar: PR curves at every height (so no
// place inside the plotting area is free), long class names, a compare
// plot's 20 entries, the score histogram with the threshold line, the box
// size bars at 1.0, the timeline's longest bar.
func TestLegendsCoverNoCurve(t *testing.T) {
	rec := metrics.RecallThresholds()
	var curves []Curve
	for k := 0; k < 13; k++ {
		p := make([]float64, len(rec))
		for r := range p {
			p[r] = 0.02 + 0.08*float64(k)
		}
		curves = append(curves, Curve{Label: fmt.Sprintf("class%02d", k), LabelID: int32(k), IoU: 0.5, Precision: p})
	}
	svg, err := prPlot(rec, curves, 0.5, "0.5")
	if err != nil {
		t.Fatal(err)
	}
	checkLegendClear(t, "PR, flat curves", svg, 13)

	// a falling curve, a long name, both sides of a comparison
	var cmp []Curve
	for k := 0; k < 10; k++ {
		p := make([]float64, len(rec))
		for r, x := range rec {
			p[r] = math.Max(0, 1-x*x*float64(k+1)/4)
		}
		name := fmt.Sprintf("Tree%d", k)
		if k == 3 {
			name = strings.Repeat("a very long class name ", 8)
		}
		cmp = append(cmp, Curve{Label: name, LabelID: int32(k), IoU: 0.5, Precision: p, Side: "baseline"},
			Curve{Label: name, LabelID: int32(k), IoU: 0.5, Precision: p, Side: "current"})
	}
	if svg, err = prPlot(rec, cmp, 0.5, ""); err != nil {
		t.Fatal(err)
	}
	checkLegendClear(t, "PR, compare", svg, 20)

	var tp, fp []float64
	for k := 0; k < 400; k++ {
		tp = append(tp, 0.05+0.9*float64(k%97)/97)
		fp = append(fp, 0.01+0.2*float64(k%13)/13)
	}
	if svg, err = histogramPlot(tp, fp, 0.1); err != nil {
		t.Fatal(err)
	}
	checkLegendClear(t, "histogram", svg, 3)

	rows := []sizeRow{{Name: "small", recall: 1, precision: 1}, {Name: "medium", recall: 1, precision: 0.9}, {Name: "large", recall: 0.95, precision: 1}}
	if svg, err = sizePlot(rows); err != nil {
		t.Fatal(err)
	}
	checkLegendClear(t, "box sizes", svg, 2)

	tl := []rankBars{
		{Rank: 0, Host: "a", Stages: []stage{{"load", 1}, {"detect", 30}, {"gather", 0.5}, {"metrics", 2}, {"write", 1}}, Total: 34.5},
		{Rank: 1, Host: "a", Stages: []stage{{"load", 1}, {"detect", 20}, {"gather", 11}, {"metrics", 2}, {"write", 0}}, Total: 34},
	}
	if svg, err = timelinePlot(tl); err != nil {
		t.Fatal(err)
	}
	checkLegendClear(t, "timeline", svg, 5)
}

// TestEvalPageLegendsClear: every plot of an eval page (PR curves at both
// IoUs, scores, box sizes, timeline) has its legend clear of its data.
func TestEvalPageLegendsClear(t *testing.T) {
	e, _ := benchSet(t)
	e.ReportJSON = []byte(`{"metrics": {"box_recall": 0.5}, "run": {"ranks": 2, "model": {"thresholds": {"score_thresh": "0.3"}},
 "per_rank": [{"rank": 0, "host": "a", "seconds": {"load": 1, "detect": 20}}, {"rank": 1, "host": "a", "seconds": {"load": 1, "detect": 25, "gather": 0.5}}]}}`)
	var page strings.Builder
	if err := WriteEval(&page, e, Options{Worst: 0, Thumb: 64}); err != nil {
		t.Fatal(err)
	}
	svgs := regexp.MustCompile(`(?s)<svg class="plot".*?</svg>`).FindAllString(page.String(), -1)
	want := []int{1, 1, 3, 2, 5} // PR 0.5, PR 0.75, scores (with the threshold), sizes, timeline stages
	if len(svgs) != len(want) {
		t.Fatalf("%d plots, want %d", len(svgs), len(want))
	}
	for i, s := range svgs {
		checkLegendClear(t, fmt.Sprintf("plot %d", i), template.HTML(s), want[i])
	}
}
