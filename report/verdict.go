package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Verdicts of canopy compare, one per metric row. A metric is undefined
// when it is absent, null or -1 (DeepForest's and torchmetrics' "no value").
const (
	VerdictSame     = "same"     // both undefined, or |current-baseline| <= tolerance
	VerdictBetter   = "better"   // beyond tolerance in the metric's good direction
	VerdictWorse    = "worse"    // beyond tolerance in the metric's bad direction
	VerdictChanged  = "changed"  // beyond tolerance, the metric has no known direction
	VerdictAppeared = "appeared" // undefined in the baseline, defined now: a change, not worse
	VerdictVanished = "vanished" // defined in the baseline, undefined now: worse
)

// verdictOrder is the order verdicts are counted in the summary line.
var verdictOrder = []string{VerdictSame, VerdictBetter, VerdictWorse, VerdictChanged, VerdictAppeared, VerdictVanished}

// Fail-on modes: which verdicts make canopy compare exit 7.
const (
	FailOnWorse  = "worse"  // worse or vanished
	FailOnChange = "change" // anything but same
)

// DefaultTolerance is the absolute tolerance of every metric unless
// --tolerance says otherwise.
const DefaultTolerance = 1e-9

// The loss metrics whose names do not say "loss", and the point model's
// count error: lower is better.
const (
	KeyValClassification = "val_classification"
	KeyValBoxRegression  = "val_bbox_regression"
	KeyValMAE            = "val_mae"
)

// Row is one compared metric.
type Row struct {
	Key        string
	Base, Cur  Cell
	Delta      float64 // Cur.V - Base.V when HasDelta
	HasDelta   bool    // both sides defined
	Tol        float64
	Verdict    string
	Regression bool // a regression under the fail-on mode
}

// RunDiff is a run field that differs between the reports.
type RunDiff struct{ Field, Base, Cur string }

// Result is a whole comparison.
type Result struct {
	Base, Cur    *Report
	TruthDiffers bool
	Diffs        []RunDiff
	Rows         []Row
	FailOn       string
	Counts       map[string]int
	Regressions  []string      // the keys of the regression rows
	Elapsed      time.Duration // set by the caller; the JUnit suite's time
	exitCode     int           // the exit code of a regression, for the summary
}

// Options are a comparison's settings, parsed.
type Options struct {
	Tolerances          map[string]float64 // per metric or per array key (ParseTolerances)
	Default             float64            // every other metric's tolerance
	FailOn              string             // FailOnWorse or FailOnChange
	AllowDifferentTruth bool               // compare reports on different truth CSVs
	Warn                io.Writer          // warnings; nil discards them
	RegressionExit      int                // the exit code a regression gives, named in the summary
}

// Compare checks that base and cur score the same truth CSV (unless
// o.AllowDifferentTruth, which warns instead) and compares them metric by
// metric. The only error is the refusal of different truths.
func Compare(base, cur *Report, o Options) (*Result, error) {
	warn := o.Warn
	if warn == nil {
		warn = io.Discard
	}
	res := &Result{Base: base, Cur: cur, FailOn: o.FailOn, exitCode: o.RegressionExit}
	bt, ct := base.Inputs["csv"], cur.Inputs["csv"]
	if bt.SHA256 == "" || ct.SHA256 == "" || bt.SHA256 != ct.SHA256 {
		res.TruthDiffers = true
		if !o.AllowDifferentTruth {
			why := "the reports score different truth CSVs"
			if bt.SHA256 == "" || ct.SHA256 == "" {
				why = "a report does not record its truth CSV's sha256 (run.inputs.csv.sha256), so the truth cannot be checked"
			}
			return nil, fmt.Errorf(
				"%s (baseline %s, current %s): their metrics are not comparable; pass --allow-different-truth to compare anyway",
				why, DescribeInput(bt), DescribeInput(ct))
		}
		fmt.Fprintf(warn, "canopy: compare: warning: the truth CSVs differ (baseline %s, current %s); compared anyway (--allow-different-truth)\n", DescribeInput(bt), DescribeInput(ct))
	}
	res.Diffs = runDiffs(base, cur)
	res.Rows = compareRows(base.metrics, cur.metrics, o.Tolerances, o.Default, o.FailOn)
	known := map[string]bool{}
	for _, r := range res.Rows {
		known[r.Key] = true
		known[baseKey(r.Key)] = true
	}
	for _, k := range sortedKeys(o.Tolerances) {
		if !known[k] {
			fmt.Fprintf(warn, "canopy: compare: warning: --tolerance %s: no such metric in either report\n", k)
		}
	}
	res.Counts = map[string]int{}
	for _, r := range res.Rows {
		res.Counts[r.Verdict]++
		if r.Regression {
			res.Regressions = append(res.Regressions, r.Key)
		}
	}
	return res, nil
}

// ParseTolerances reads "metric=abs" specs, each possibly a comma list.
func ParseTolerances(specs []string) (map[string]float64, float64, error) {
	tols := map[string]float64{}
	def := DefaultTolerance
	for _, spec := range specs {
		for _, s := range strings.Split(spec, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			name, val, ok := strings.Cut(s, "=")
			name = strings.TrimSpace(name)
			if !ok || name == "" {
				return nil, 0, fmt.Errorf("--tolerance %q: want metric=abs (or default=abs)", s)
			}
			f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
			if err != nil {
				return nil, 0, fmt.Errorf("--tolerance %q: %w", s, err)
			}
			if !(f >= 0) || math.IsInf(f, 0) {
				return nil, 0, fmt.Errorf("--tolerance %q: the tolerance must be a finite number >= 0", s)
			}
			if name == "default" {
				def = f
			} else {
				tols[name] = f
			}
		}
	}
	return tols, def, nil
}

// Metric directions.
const (
	dirNone = iota
	dirHigher
	dirLower
)

// baseKey is the metric key of a row (map_per_class for map_per_class[3],
// box_recall for a sweep threshold's @0.5/box_recall).
func baseKey(row string) string {
	if strings.HasPrefix(row, "@") {
		if i := strings.IndexByte(row, '/'); i > 0 {
			row = row[i+1:]
		}
	}
	if i := strings.IndexByte(row, '['); i > 0 && strings.HasSuffix(row, "]") {
		return row[:i]
	}
	return row
}

// metricDirection tells whether a higher or a lower value of the metric is
// better: lower for losses (val_classification and val_bbox_regression
// too) and val_mae, higher for recall, precision (point_ and polygon_
// too), accuracy, iou,
// map and mar keys, none for others.
func metricDirection(row string) int {
	k := baseKey(row)
	l := strings.ToLower(k)
	switch {
	case strings.Contains(l, "loss"), k == KeyValClassification, k == KeyValBoxRegression, k == KeyValMAE:
		return dirLower
	case strings.HasSuffix(l, "recall"), strings.HasSuffix(l, "precision"), strings.HasSuffix(l, "accuracy"),
		k == "iou", strings.HasPrefix(k, "iou/"),
		k == "map", strings.HasPrefix(k, "map_"), k == "mar", strings.HasPrefix(k, "mar_"):
		return dirHigher
	}
	return dirNone
}

// compareRows compares every row of either report: the baseline's rows in
// its order, then rows only the current report has.
func compareRows(base, cur Metrics, tols map[string]float64, def float64, failOn string) []Row {
	// A scalar placeholder (-1 or null) for a key the other report holds
	// as an array is left out: its element rows tell the change.
	skip := func(k string, own Metrics, other Metrics) bool {
		return !own.arrays[k] && !own.cells[k].defined() && other.arrays[k]
	}
	var keys []string
	seen := map[string]bool{}
	for _, k := range base.order {
		if !skip(k, base, cur) {
			keys, seen[k] = append(keys, k), true
		}
	}
	for _, k := range cur.order {
		if !seen[k] && !skip(k, cur, base) {
			keys, seen[k] = append(keys, k), true
		}
	}
	rows := make([]Row, 0, len(keys))
	for _, k := range keys {
		r := Row{Key: k, Base: base.cells[k], Cur: cur.cells[k], Tol: def}
		if t, ok := tols[k]; ok {
			r.Tol = t
		} else if t, ok := tols[baseKey(k)]; ok {
			r.Tol = t
		}
		bd, cd := r.Base.defined(), r.Cur.defined()
		switch {
		case !bd && !cd:
			r.Verdict = VerdictSame
		case bd && !cd:
			r.Verdict = VerdictVanished
		case !bd && cd:
			r.Verdict = VerdictAppeared
		default:
			r.Delta, r.HasDelta = r.Cur.V-r.Base.V, true
			switch dir := metricDirection(k); {
			case math.Abs(r.Delta) <= r.Tol:
				r.Verdict = VerdictSame
			case dir == dirNone:
				r.Verdict = VerdictChanged
			case (dir == dirHigher) == (r.Delta > 0):
				r.Verdict = VerdictBetter
			default:
				r.Verdict = VerdictWorse
			}
		}
		if failOn == FailOnChange {
			r.Regression = r.Verdict != VerdictSame
		} else {
			r.Regression = r.Verdict == VerdictWorse || r.Verdict == VerdictVanished
		}
		rows = append(rows, r)
	}
	return rows
}

// runDiffs lists the run fields that differ (the truth CSV is reported
// separately).
func runDiffs(base, cur *Report) []RunDiff {
	var out []RunDiff
	for _, f := range []string{"canopy", "git", "detector", "semantics", "iou_threshold", "ranks", "label_map", "coverage"} {
		b, c := compactJSON(base.run[f]), compactJSON(cur.run[f])
		if b != c {
			out = append(out, RunDiff{f, b, c})
		}
	}
	names := map[string]bool{}
	for n := range base.Inputs {
		names[n] = true
	}
	for n := range cur.Inputs {
		names[n] = true
	}
	for _, n := range sortedKeys(names) {
		if n == "csv" {
			continue
		}
		b, bok := base.Inputs[n]
		c, cok := cur.Inputs[n]
		if bok != cok || b.SHA256 != c.SHA256 {
			out = append(out, RunDiff{"inputs." + n + ".sha256", describeInputOK(b, bok), describeInputOK(c, cok)})
		}
	}
	return out
}

func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "absent"
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	s := b.String()
	if u, err := strconv.Unquote(s); err == nil && strings.HasPrefix(s, `"`) {
		return u
	}
	return s
}

func shortSHA(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return s
}

func DescribeInput(f File) string {
	sha := "unknown"
	if f.SHA256 != "" {
		sha = shortSHA(f.SHA256)
	}
	if f.Path == "" {
		return "sha256 " + sha
	}
	return f.Path + " sha256 " + sha
}

func describeInputOK(f File, ok bool) string {
	if !ok {
		return "absent"
	}
	return DescribeInput(f)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// summary is the one-line summary of the comparison.
func (res *Result) Summary() string {
	var parts []string
	for _, v := range verdictOrder {
		parts = append(parts, fmt.Sprintf("%d %s", res.Counts[v], v))
	}
	s := fmt.Sprintf("%d metrics: %s; --fail-on %s: ", len(res.Rows), strings.Join(parts, ", "), res.FailOn)
	switch n := len(res.Regressions); n {
	case 0:
		return s + "no regression (exit 0)"
	default:
		names := res.Regressions
		more := ""
		if len(names) > 5 {
			names, more = names[:5], fmt.Sprintf(" and %d more", n-5)
		}
		plural := "s"
		if n == 1 {
			plural = ""
		}
		return s + fmt.Sprintf("%d regression%s: %s%s (exit %d)", n, plural, strings.Join(names, ", "), more, res.exitCode)
	}
}
