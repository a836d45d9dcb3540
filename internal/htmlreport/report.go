// Package htmlreport renders canopy's report.html: one self-contained page
// (styles, plots as inline SVG, thumbnails as data URIs, no network) with
// the metrics table, per-class precision–recall curves, score histograms,
// recall and precision by box size, the per-rank timeline, the worst
// images drawn and the run. It also renders `canopy compare --html`.
//
// The page carries its own numbers in a JSON block (id "canopy-data"): the
// PR curves exactly as metrics.PRCurve holds them, so tests and `canopy
// compare` read them back instead of parsing pixels.
package htmlreport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"image"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/jsonorder"
	"github.com/canopy-hpc/canopy/metrics"
)

// Options are the page's settings (--html-worst, --html-thumb).
type Options struct {
	Worst int // images drawn (0: none)
	Thumb int // longest side of a thumbnail in pixels
	// Open, when set, opens and decodes an image to draw (path as the CSV
	// gives it, root the folder it is relative to); an image it refuses is
	// drawn as its boxes on grey with the reason. canopy's commands refuse
	// there what their pre-flight refuses: a path that leaves the root, a
	// file that is not a regular one, an image over the pixel cap. Unset,
	// the file at root/path is decoded as it is.
	Open func(root, path string) (image.Image, error)
	// Read, when set, reads a file a report records (compare's side
	// files, the truth CSV a report.html names): only inside root, at most
	// limit bytes, never blocking past its timeout. A file it refuses is
	// a note on the page, never its content. Unset, files are read as
	// they are (up to limit).
	Read func(root, path string, limit int64) ([]byte, error)
}

// Caps of the files compare --html reads from a report's folder: a page
// canopy writes stays under 10 MB (MaxMetricRows, MaxCurveClasses), and a
// CSV is bounded by what one run may hold.
const (
	MaxPageBytes int64 = 64 << 20
	MaxCSVBytes  int64 = 4 << 30
)

// DefaultOptions are the flags' defaults.
var DefaultOptions = Options{Worst: 12, Thumb: 320}

// Eval is what the eval page is made of.
type Eval struct {
	// ReportJSON is OUT/report.json as written: the metrics (their order
	// kept) and the run.
	ReportJSON []byte
	Images     []box.Image
	Dets       [][]box.Detection
	Labels     box.LabelMap
	Matches    []metrics.Match
	PR         []metrics.PRCurve
	// RootDir is the folder image paths are relative to; a file that does
	// not open is drawn as its boxes on grey.
	RootDir string
	// CSV is the truth file (recorded for `canopy compare --html`).
	CSV string
	// WriteSeconds is rank 0's time writing the CSVs and report.json.
	WriteSeconds float64
	// Tile, for eval --tile: the images are rasters, and their worst
	// windows are drawn instead of whole images (nil: eval's page).
	Tile *Tile
	// Geo, for points and polygons: the geometries drawn in place of the
	// boxes (nil: boxes). Images and Dets then hold each geometry's
	// bounds, which the page's counts use.
	Geo *Geo
}

// Data is the JSON block every page carries.
type Data struct {
	Kind    string    `json:"kind"` // "eval" or "compare"
	CSV     string    `json:"csv,omitempty"`
	RootDir string    `json:"root_dir,omitempty"`
	Recall  []float64 `json:"recall_thresholds,omitempty"`
	PR      []Curve   `json:"pr,omitempty"`
	Images  int       `json:"images_drawn"`
}

// Curve is one PR curve as the page draws it.
type Curve struct {
	Label     string    `json:"label"`
	LabelID   int32     `json:"label_id"`
	IoU       float64   `json:"iou"`
	Precision []float64 `json:"precision"`
	Side      string    `json:"side,omitempty"` // compare: baseline or current
}

// WriteEval writes the eval page.
func WriteEval(w io.Writer, e Eval, opt Options) error {
	rep, err := parseReport(e.ReportJSON)
	if err != nil {
		return err
	}
	st := scoreImages(e.Images, e.Dets, e.Matches)
	pg := page{Title: "canopy eval report", Metrics: rep.metrics, Sweep: rep.sweep, Run: runView(rep), Notes: nil}
	data := Data{Kind: "eval", CSV: e.CSV, RootDir: e.RootDir, Recall: metrics.RecallThresholds()}
	truthCount := map[int32]int{}
	for _, im := range e.Images {
		for _, t := range im.Truth {
			truthCount[t.Label]++
		}
	}
	pr, left := topCurves(e.PR, truthCount, MaxCurveClasses)
	for _, c := range pr {
		data.PR = append(data.PR, Curve{Label: e.Labels.Name(c.Label), LabelID: c.Label, IoU: c.IoU, Precision: c.Precision})
	}
	if left > 0 {
		pg.Notes = append(pg.Notes, fmt.Sprintf("PR curves are drawn for the %d classes with the most truth boxes; the curves of the other %d classes are left out (their values are in report.json).", MaxCurveClasses, left))
	}
	if len(data.PR) > 0 {
		for _, iou := range []float64{0.5, 0.75} {
			svg, err := prPlot(data.Recall, data.PR, iou, rep.metricValue(mapKey(iou)))
			if err != nil {
				return err
			}
			pg.PR = append(pg.PR, svg)
		}
	} else {
		pg.Notes = append(pg.Notes, "No PR curves: the COCO family was not computed or no image has ground truth.")
	}
	thr := rep.scoreThreshold()
	tp, fp := splitScores(e.Dets, e.Matches)
	if pg.Hist, err = histogramPlot(tp, fp, thr); err != nil {
		return err
	}
	pg.Sizes = sizeBreakdown(e.Images, e.Dets, e.Matches)
	if pg.SizePlot, err = sizePlot(pg.Sizes); err != nil {
		return err
	}
	tl := timeline(rep.Run.PerRank, e.WriteSeconds)
	if pg.Timeline, err = timelinePlot(tl); err != nil {
		return err
	}
	pg.Stages = tl
	if e.Tile != nil {
		for _, s := range e.Tile.Settings {
			pg.Run = append(pg.Run, kv{s[0], s[1]})
		}
		pg.WorstTitle, pg.WorstRule = "Worst windows", fmt.Sprintf(worstWindowsRule, rep.Run.IoU, opt.Worst)
		for _, s := range worstWindows(e.Images, e.Dets, e.Matches, e.Tile.Windows, opt.Worst) {
			th, err := drawWindow(e.Images[s.raster], e.Dets[s.raster], s, e.Tile, opt)
			if err != nil {
				return err
			}
			pg.Worst = append(pg.Worst, th)
		}
	} else {
		for _, i := range worst(st, opt.Worst) {
			th, err := drawImage(e.RootDir, e.Images[i], e.Dets[i], st[i], opt, e.Geo.image(i))
			if err != nil {
				return err
			}
			pg.Worst = append(pg.Worst, th)
		}
	}
	data.Images = len(pg.Worst)
	return render(w, pg, data)
}

func mapKey(iou float64) string {
	if iou == 0.5 {
		return "map_50"
	}
	return "map_75"
}

// page is the template's input.
type page struct {
	Title    string
	Metrics  []metricRow
	Sweep    *sweepTable // --iou-sweep's metrics (nil: none)
	Compare  []CompareRow
	Sides    [2]string
	PR       []template.HTML
	Hist     template.HTML
	SizePlot template.HTML
	Sizes    []sizeRow
	Timeline template.HTML
	Stages   []rankBars
	Worst    []thumb
	Pairs    [][2]thumb
	Run      []kv
	RunJSON  string
	Notes    []string
	DataJSON template.JS

	// WorstTitle and WorstRule head the drawn images when they are not
	// eval's worst images (eval --tile's worst windows).
	WorstTitle, WorstRule string
}

type kv struct{ K, V string }

type metricRow struct{ Key, Value string }

// report is report.json: the metrics in order and the run's fields the
// page shows.
type report struct {
	metrics []metricRow
	sweep   *sweepTable
	raw     json.RawMessage
	Run     struct {
		Canopy    string   `json:"canopy"`
		Go        string   `json:"go"`
		MPI       string   `json:"mpi"`
		Git       string   `json:"git"`
		Command   []string `json:"command"`
		Semantics string   `json:"semantics"`
		IoU       float64  `json:"iou_threshold"`
		Detector  string   `json:"detector"`
		Ranks     int      `json:"ranks"`
		Hosts     []string `json:"hosts"`
		PerRank   []struct {
			Rank       int                `json:"rank"`
			Host       string             `json:"host"`
			Images     int                `json:"images"`
			Detections int                `json:"detections"`
			Seconds    map[string]float64 `json:"seconds"`
		} `json:"per_rank"`
		Inputs map[string]struct {
			Path   string `json:"path"`
			SHA256 string `json:"sha256"`
		} `json:"inputs"`
		Coverage struct {
			Images    int `json:"images"`
			Processed int `json:"processed"`
		} `json:"coverage"`
		Model *struct {
			Spec       string            `json:"spec"`
			SHA256     string            `json:"sha256"`
			Arch       string            `json:"arch"`
			Thresholds map[string]string `json:"thresholds"`
			Threads    int               `json:"threads"`
			Precision  string            `json:"precision"`
			Devices    []struct {
				Rank   int    `json:"rank"`
				Host   string `json:"host"`
				Device string `json:"device"`
				Name   string `json:"name"`
			} `json:"devices"`
		} `json:"model"`
	} `json:"run"`
}

// parseReport reads report.json, keeping the metrics' order and their
// text as written (the terminal table's cells).
func parseReport(b []byte) (*report, error) {
	var top struct {
		Metrics json.RawMessage `json:"metrics"`
		Sweep   []struct {
			IoU     float64         `json:"iou_threshold"`
			Metrics json.RawMessage `json:"metrics"`
		} `json:"metrics_by_iou_threshold"`
		Run json.RawMessage `json:"run"`
	}
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, fmt.Errorf("htmlreport: report.json: %w", err)
	}
	r := &report{raw: top.Run}
	if len(top.Run) > 0 {
		if err := json.Unmarshal(top.Run, &r.Run); err != nil {
			return nil, fmt.Errorf("htmlreport: report.json run: %w", err)
		}
	}
	rows, err := orderedObject(top.Metrics)
	if err != nil {
		return nil, fmt.Errorf("htmlreport: report.json metrics: %w", err)
	}
	r.metrics = rows
	if len(top.Sweep) > 0 {
		r.sweep = &sweepTable{}
		at := map[string]int{}
		for k, e := range top.Sweep {
			r.sweep.Thresholds = append(r.sweep.Thresholds, strconv.FormatFloat(e.IoU, 'g', -1, 64))
			rows, err := orderedObject(e.Metrics)
			if err != nil {
				return nil, fmt.Errorf("htmlreport: report.json metrics_by_iou_threshold: %w", err)
			}
			for _, m := range rows {
				i, ok := at[m.Key]
				if !ok {
					i, at[m.Key] = len(r.sweep.Rows), len(r.sweep.Rows)
					r.sweep.Rows = append(r.sweep.Rows, sweepRow{Key: m.Key, Values: make([]string, len(top.Sweep))})
				}
				r.sweep.Rows[i].Values[k] = m.Value
			}
		}
	}
	return r, nil
}

// sweepTable is metrics_by_iou_threshold as a table: a row per metric, a
// column per threshold (an empty cell where a threshold lacks the key).
type sweepTable struct {
	Thresholds []string
	Rows       []sweepRow
}

type sweepRow struct {
	Key    string
	Values []string
}

// orderedObject returns a JSON object's members in order, each value as
// compact JSON text with ", " between list items (as canopy writes them).
func orderedObject(b []byte) ([]metricRow, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, nil
	}
	members, err := jsonorder.Members(b)
	if err != nil {
		return nil, err
	}
	rows := make([]metricRow, 0, len(members))
	for _, m := range members {
		var c bytes.Buffer
		if err := json.Compact(&c, m.Value); err != nil {
			return nil, err
		}
		rows = append(rows, metricRow{Key: m.Key, Value: strings.ReplaceAll(c.String(), ",", ", ")})
	}
	return rows, nil
}

func (r *report) metricValue(key string) string {
	for _, m := range r.metrics {
		if m.Key == key {
			return m.Value
		}
	}
	return ""
}

// scoreThreshold is the model's score_thresh, NaN for replay.
func (r *report) scoreThreshold() float64 {
	if r.Run.Model != nil {
		var v float64
		if _, err := fmt.Sscan(r.Run.Model.Thresholds["score_thresh"], &v); err == nil {
			return v
		}
	}
	return math.NaN()
}

func runView(r *report) []kv {
	u := r.Run
	out := []kv{
		{"canopy", u.Canopy + " (git " + u.Git + ")"},
		{"Go, MPI", u.Go + ", " + u.MPI},
		{"command", strings.Join(u.Command, " ")},
		{"detector", u.Detector},
		{"ranks, hosts", fmt.Sprintf("%d on %s", u.Ranks, strings.Join(u.Hosts, ", "))},
		{"semantics, IoU threshold", fmt.Sprintf("%s, %v", u.Semantics, u.IoU)},
		{"images", fmt.Sprintf("%d (processed %d)", u.Coverage.Images, u.Coverage.Processed)},
	}
	keys := make([]string, 0, len(u.Inputs))
	for k := range u.Inputs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, kv{"input " + k, u.Inputs[k].Path + "  sha256 " + u.Inputs[k].SHA256})
	}
	if m := u.Model; m != nil {
		out = append(out, kv{"model", m.Spec + " (" + m.Arch + ")"}, kv{"model sha256", m.SHA256},
			kv{"threads, precision", fmt.Sprintf("%d, %s", m.Threads, m.Precision)})
		tk := make([]string, 0, len(m.Thresholds))
		for k, v := range m.Thresholds {
			tk = append(tk, k+"="+v)
		}
		sort.Strings(tk)
		out = append(out, kv{"model settings", strings.Join(tk, ", ")})
		var dev []string
		for _, d := range m.Devices {
			s := fmt.Sprintf("rank %d %s %s", d.Rank, d.Host, d.Device)
			if d.Name != "" {
				s += " (" + d.Name + ")"
			}
			dev = append(dev, s)
		}
		if len(dev) > 0 {
			out = append(out, kv{"devices", strings.Join(dev, "; ")})
		}
	}
	return out
}

// imageStat is one image's line in the worst-images ranking: DeepForest's
// matches (as in results.csv) and the detections no truth box took.
type imageStat struct {
	truth, tp, dets, fp int
	firstRow, lastRow   int // results.csv line numbers (header is line 1), 0 when none
	matchedPred         map[int]bool
}

func (s imageStat) recall() float64 {
	if s.truth == 0 {
		return math.NaN()
	}
	return float64(s.tp) / float64(s.truth)
}

func scoreImages(images []box.Image, dets [][]box.Detection, matches []metrics.Match) []imageStat {
	st := make([]imageStat, len(images))
	for i := range st {
		st[i].dets = len(dets[i])
	}
	for j, m := range matches {
		s := &st[m.Image]
		s.truth++
		if s.firstRow == 0 {
			s.firstRow = j + 2
		}
		s.lastRow = j + 2
		if m.Match {
			s.tp++
			if s.matchedPred == nil {
				s.matchedPred = map[int]bool{}
			}
			s.matchedPred[m.PredID] = true
		}
	}
	for i := range st {
		st[i].fp = st[i].dets - len(st[i].matchedPred)
	}
	return st
}

// worst picks n images: half by lowest recall (ties: more false
// positives, then dataset order), the rest by most false positives, then
// more by recall if still short.
func worst(st []imageStat, n int) []int {
	if n <= 0 {
		return nil
	}
	var byRecall, byFP []int
	for i, s := range st {
		if s.truth > 0 {
			byRecall = append(byRecall, i)
		}
		if s.fp > 0 {
			byFP = append(byFP, i)
		}
	}
	sort.SliceStable(byRecall, func(a, b int) bool {
		ra, rb := st[byRecall[a]].recall(), st[byRecall[b]].recall()
		if ra != rb {
			return ra < rb
		}
		return st[byRecall[a]].fp > st[byRecall[b]].fp
	})
	sort.SliceStable(byFP, func(a, b int) bool { return st[byFP[a]].fp > st[byFP[b]].fp })
	picked := map[int]bool{}
	var out []int
	take := func(list []int, upto int) {
		for _, i := range list {
			if len(out) >= upto {
				return
			}
			if !picked[i] {
				picked[i] = true
				out = append(out, i)
			}
		}
	}
	take(byRecall, (n+1)/2)
	take(byFP, n)
	take(byRecall, n)
	return out
}

// splitScores: a detection a truth box matched (IoU above the threshold)
// is a true positive, any other a false positive.
func splitScores(dets [][]box.Detection, matches []metrics.Match) (tp, fp []float64) {
	matched := map[[2]int]bool{}
	for _, m := range matches {
		if m.Match {
			matched[[2]int{m.Image, m.PredID}] = true
		}
	}
	for i, ds := range dets {
		for j, d := range ds {
			if matched[[2]int{i, j}] {
				tp = append(tp, d.Score)
			} else {
				fp = append(fp, d.Score)
			}
		}
	}
	return tp, fp
}

// sizeRow is recall (truth boxes) and precision (detections) for one COCO
// area range.
type sizeRow struct {
	Name                      string
	Truth, Found, Dets, Hits  int
	RecallText, PrecisionText string
	recall, precision         float64
}

var sizeNames = [3]string{"small (< 32²)", "medium (32²–96²)", "large (> 96²)"}

func sizeOf(b box.Box) int {
	a := b.Area()
	switch {
	case a < 32*32:
		return 0
	case a <= 96*96:
		return 1
	}
	return 2
}

func sizeBreakdown(images []box.Image, dets [][]box.Detection, matches []metrics.Match) []sizeRow {
	rows := make([]sizeRow, 3)
	for k := range rows {
		rows[k].Name = sizeNames[k]
	}
	matched := map[[2]int]bool{}
	for _, m := range matches {
		im := images[m.Image]
		if m.TruthID < len(im.Truth) {
			k := sizeOf(im.Truth[m.TruthID].Box)
			rows[k].Truth++
			if m.Match {
				rows[k].Found++
			}
		}
		if m.Match {
			matched[[2]int{m.Image, m.PredID}] = true
		}
	}
	for i, ds := range dets {
		for j, d := range ds {
			k := sizeOf(d.Box)
			rows[k].Dets++
			if matched[[2]int{i, j}] {
				rows[k].Hits++
			}
		}
	}
	for k := range rows {
		r := &rows[k]
		r.recall, r.precision = ratio(r.Found, r.Truth), ratio(r.Hits, r.Dets)
		r.RecallText, r.PrecisionText = pct(r.recall), pct(r.precision)
	}
	return rows
}

func ratio(a, b int) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

func pct(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.3f", v)
}

// rankBars is one rank's stages on the timeline, in order.
type rankBars struct {
	Rank   int
	Host   string
	Stages []stage
	Total  float64
}

type stage struct {
	Name    string
	Seconds float64
}

// timelineOrder: the stages in the order a rank runs them (preflight is
// inside detect); other keys follow by name, then rank 0's write.
var timelineOrder = []string{"load", "detect", "gather", "metrics"}

func timeline(per []struct {
	Rank       int                `json:"rank"`
	Host       string             `json:"host"`
	Images     int                `json:"images"`
	Detections int                `json:"detections"`
	Seconds    map[string]float64 `json:"seconds"`
}, write float64) []rankBars {
	names := append([]string(nil), timelineOrder...)
	known := map[string]bool{"preflight": true}
	for _, k := range timelineOrder {
		known[k] = true
	}
	var extra []string
	for _, r := range per {
		for k := range r.Seconds {
			if !known[k] {
				known[k] = true
				extra = append(extra, k)
			}
		}
	}
	sort.Strings(extra)
	names = append(append(names, extra...), "write")
	var out []rankBars
	for _, r := range per {
		b := rankBars{Rank: r.Rank, Host: r.Host}
		for _, k := range names {
			v := r.Seconds[k]
			if k == "write" && r.Rank == 0 {
				v = write
			}
			b.Stages = append(b.Stages, stage{k, v})
			b.Total += v
		}
		out = append(out, b)
	}
	return out
}

// The page's size does not grow with the class count: at most
// MaxCurveClasses classes' PR curves are drawn and carried in the data
// block, and at most MaxMetricRows rows of the metrics table are written
// (report.json holds them all; a note says what was left out).
const (
	MaxCurveClasses = 10
	MaxMetricRows   = 300
)

// topCurves keeps the curves of the n classes with the most truth boxes
// (ties: the lower label id) and says how many classes were left out.
func topCurves(curves []metrics.PRCurve, truth map[int32]int, n int) ([]metrics.PRCurve, int) {
	var labels []int32
	seen := map[int32]bool{}
	for _, c := range curves {
		if !seen[c.Label] {
			seen[c.Label] = true
			labels = append(labels, c.Label)
		}
	}
	if len(labels) <= n {
		return curves, 0
	}
	sort.Slice(labels, func(a, b int) bool {
		if ca, cb := truth[labels[a]], truth[labels[b]]; ca != cb {
			return ca > cb
		}
		return labels[a] < labels[b]
	})
	keep := map[int32]bool{}
	for _, l := range labels[:n] {
		keep[l] = true
	}
	var out []metrics.PRCurve
	for _, c := range curves {
		if keep[c.Label] {
			out = append(out, c)
		}
	}
	return out, len(labels) - n
}

// capRows bounds the metrics tables (MaxMetricRows): the compare table
// keeps the rows that changed first, in their order, then the others.
func capRows(pg *page) {
	if n := len(pg.Metrics); n > MaxMetricRows {
		pg.Metrics = pg.Metrics[:MaxMetricRows]
		pg.Notes = append(pg.Notes, fmt.Sprintf("The metrics table shows the first %d of %d values; the other %d (per-class values) are in report.json.", MaxMetricRows, n, n-MaxMetricRows))
	}
	if n := len(pg.Compare); n > MaxMetricRows {
		var kept []CompareRow
		for pass := 0; pass < 2 && len(kept) < MaxMetricRows; pass++ {
			for _, r := range pg.Compare {
				if changed := r.Regression || r.Verdict != "same"; changed == (pass == 0) && len(kept) < MaxMetricRows {
					kept = append(kept, r)
				}
			}
		}
		pg.Compare = kept
		pg.Notes = append(pg.Notes, fmt.Sprintf("The comparison table shows %d of %d metrics (those that changed first); canopy compare's text, markdown and JUnit outputs hold them all.", MaxMetricRows, n))
	}
}

func render(w io.Writer, pg page, data Data) error {
	capRows(&pg)
	dj, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("htmlreport: %w", err)
	}
	pg.DataJSON = template.JS(dj)
	if err := pageTmpl.Execute(w, pg); err != nil {
		return fmt.Errorf("htmlreport: %w", err)
	}
	return nil
}

// ReadData returns the JSON block of a page canopy wrote (nil when the
// page has none).
func ReadData(html []byte) (*Data, error) {
	const open = `<script type="application/json" id="canopy-data">`
	i := bytes.Index(html, []byte(open))
	if i < 0 {
		return nil, nil
	}
	rest := html[i+len(open):]
	j := bytes.Index(rest, []byte("</script>"))
	if j < 0 {
		return nil, fmt.Errorf("htmlreport: unterminated data block")
	}
	var d Data
	if err := json.Unmarshal(rest[:j], &d); err != nil {
		return nil, fmt.Errorf("htmlreport: data block: %w", err)
	}
	return &d, nil
}
