package jobs

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
)

// Verdicts of canopy compare, one per metric row. A metric is undefined
// when it is absent, null or -1 (DeepForest's and torchmetrics' "no value").
const (
	verdictSame     = "same"     // both undefined, or |current-baseline| <= tolerance
	verdictBetter   = "better"   // beyond tolerance in the metric's good direction
	verdictWorse    = "worse"    // beyond tolerance in the metric's bad direction
	verdictChanged  = "changed"  // beyond tolerance, the metric has no known direction
	verdictAppeared = "appeared" // undefined in the baseline, defined now: a change, not worse
	verdictVanished = "vanished" // defined in the baseline, undefined now: worse
)

// verdictOrder is the order verdicts are counted in the summary line.
var verdictOrder = []string{verdictSame, verdictBetter, verdictWorse, verdictChanged, verdictAppeared, verdictVanished}

// Fail-on modes: which verdicts make canopy compare exit 7.
const (
	FailOnWorse  = "worse"  // worse or vanished
	FailOnChange = "change" // anything but same
)

// DefaultCompareTolerance is the absolute tolerance of every metric unless
// --tolerance says otherwise.
const DefaultCompareTolerance = 1e-9

// CompareOptions are canopy compare's settings.
type CompareOptions struct {
	Baseline string // report.json, or a folder holding one
	Current  string // report.json, or a folder holding one
	// Tolerance holds "metric=abs" specs (comma lists allowed);
	// "default=abs" sets the tolerance of every other metric. A per-class
	// row such as map_per_class[3] takes its own tolerance if given, else
	// that of map_per_class.
	Tolerance           []string
	FailOn              string // FailOnWorse (when empty) or FailOnChange
	AllowDifferentTruth bool   // compare reports on different truth CSVs
	JUnit               string // JUnit XML file to write, "" for none
	Markdown            string // GitHub markdown file to write, "-" for stdout instead of the text table
	HTML                string // self-contained HTML page to write, "" for none
	Stderr              io.Writer
}

// CompareCommand is the `canopy compare BASELINE CURRENT` command: it sets
// *code to ExitOK or ExitRegression; the errors it returns carry their exit
// code (*Error) for MainWith to print.
func CompareCommand(code *int, stdout, stderr io.Writer) *cli.Command {
	return &cli.Command{
		Name:      "compare",
		Usage:     "compare two canopy reports metric by metric; exit 7 on a regression",
		ArgsUsage: "BASELINE CURRENT",
		Description: "BASELINE and CURRENT are report.json files written by canopy eval, or folders\n" +
			"holding one. Each metric is compared with an absolute tolerance; higher is better\n" +
			"for recall, precision, accuracy, iou, map and mar keys, lower for keys containing\n" +
			"\"loss\" and for val_classification and val_bbox_regression, other keys have no direction. Per-class arrays are compared by class id\n" +
			"(rows such as map_per_class[2]). A metric is undefined when absent, null or -1.\n\n" +
			"VERDICTS:\n" +
			"   same      both undefined, or the difference is within tolerance\n" +
			"   better    beyond tolerance in the good direction\n" +
			"   worse     beyond tolerance in the bad direction\n" +
			"   changed   beyond tolerance, no known direction\n" +
			"   appeared  undefined in the baseline, defined now (a change, not worse)\n" +
			"   vanished  defined in the baseline, undefined now (worse)\n\n" +
			"--fail-on worse exits 7 on worse or vanished; --fail-on change on anything but same.\n" +
			"Reports on different truth CSVs (sha256) are refused (exit 3) unless\n" +
			"--allow-different-truth; other run differences are listed above the table.\n\n" + ExitTable,
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "tolerance", Usage: "metric=abs absolute tolerance, repeatable or comma-separated; default=abs sets the default (1e-9); map_per_class=abs covers every map_per_class[id] row"},
			&cli.StringFlag{Name: "fail-on", Value: FailOnWorse, Usage: "worse (exit 7 when a metric is worse or vanished) or change (exit 7 when any metric is not same)"},
			&cli.BoolFlag{Name: "allow-different-truth", Usage: "compare reports whose truth CSVs differ (sha256) instead of refusing with exit 3"},
			&cli.StringFlag{Name: "junit", Usage: "write a JUnit XML file: testsuite canopy.compare, one testcase per metric, a failure per regression"},
			&cli.StringFlag{Name: "markdown", Usage: "write a GitHub markdown table and summary to this file; - prints it on stdout instead of the text table"},
			compareHTMLFlag,
		},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return &Error{Code: ExitUsage, Collective: true, Err: fmt.Errorf("jobs: compare: %w", err)}
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 2 {
				return &Error{Code: ExitUsage, Collective: true, Err: fmt.Errorf("jobs: compare: want two paths, BASELINE and CURRENT, got %d: %q", c.NArg(), c.Args().Slice())}
			}
			n, err := runCompare(CompareOptions{
				Baseline:            c.Args().Get(0),
				Current:             c.Args().Get(1),
				Tolerance:           c.StringSlice("tolerance"),
				FailOn:              c.String("fail-on"),
				AllowDifferentTruth: c.Bool("allow-different-truth"),
				JUnit:               c.String("junit"),
				Markdown:            c.String("markdown"),
				HTML:                c.String("html"),
				Stderr:              stderr,
			}, stdout)
			if err != nil {
				return err
			}
			*code = n
			return nil
		},
	}
}

// cmpCell is one side of a metric row.
type cmpCell struct {
	present bool
	null    bool
	v       float64
}

func (c cmpCell) defined() bool { return c.present && !c.null && c.v != -1 }

func (c cmpCell) String() string {
	switch {
	case !c.present:
		return "absent"
	case c.null:
		return "null"
	}
	return formatFloat(c.v)
}

// cmpMetrics are a report's metrics flattened into rows: scalars under
// their key, array elements as key[id].
type cmpMetrics struct {
	order  []string
	cells  map[string]cmpCell
	arrays map[string]bool // keys that hold arrays
}

// cmpReport is what compare reads of a report.json.
type cmpReport struct {
	path    string
	metrics cmpMetrics
	run     map[string]json.RawMessage
	inputs  map[string]file
}

// cmpRow is one compared metric.
type cmpRow struct {
	key        string
	base, cur  cmpCell
	delta      float64
	hasDelta   bool
	tol        float64
	verdict    string
	regression bool
}

// cmpRunDiff is a run field that differs between the reports.
type cmpRunDiff struct{ field, base, cur string }

// cmpResult is a whole comparison.
type cmpResult struct {
	base, cur    *cmpReport
	truthDiffers bool
	diffs        []cmpRunDiff
	rows         []cmpRow
	failOn       string
	counts       map[string]int
	regressions  []string
	elapsed      time.Duration
}

// runCompare compares opts.Baseline with opts.Current, prints the table
// (or the markdown, with Markdown "-") on stdout, writes the JUnit and
// markdown files, and returns ExitOK or ExitRegression; an error carries
// its exit code.
func runCompare(opts CompareOptions, stdout io.Writer) (int, error) {
	start := time.Now()
	for _, o := range [][2]string{{"--junit", opts.JUnit}, {"--markdown", opts.Markdown}} {
		if p := o[1]; p != "" && p != "-" {
			if err := checkOutputPath(p); err != nil {
				return ExitUsage, &Error{Code: ExitUsage, Collective: true, Err: fmt.Errorf("jobs: compare: %s %s: %w", o[0], p, err)}
			}
		}
	}
	res, err := compareReports(opts)
	if err != nil {
		return Code(err), err
	}
	res.elapsed = time.Since(start)
	if opts.Markdown == "-" {
		if err := writeCompareMarkdown(stdout, res); err != nil {
			return ExitInternal, &Error{Code: ExitInternal, Collective: true, Err: fmt.Errorf("jobs: compare: stdout: %w", err)}
		}
	} else {
		if err := writeCompareText(stdout, res); err != nil {
			return ExitInternal, &Error{Code: ExitInternal, Collective: true, Err: fmt.Errorf("jobs: compare: stdout: %w", err)}
		}
		if opts.Markdown != "" {
			if err := writeFileAtomic(opts.Markdown, func(w io.Writer) error { return writeCompareMarkdown(w, res) }); err != nil {
				return ExitInternal, &Error{Code: ExitInternal, Collective: true, Err: fmt.Errorf("jobs: compare: --markdown: %w", err)}
			}
		}
	}
	if opts.JUnit != "" {
		if err := writeFileAtomic(opts.JUnit, func(w io.Writer) error { return writeCompareJUnit(w, res) }); err != nil {
			return ExitInternal, &Error{Code: ExitInternal, Collective: true, Err: fmt.Errorf("jobs: compare: --junit: %w", err)}
		}
	}
	if opts.HTML != "" {
		if err := writeFileAtomic(opts.HTML, func(w io.Writer) error { return writeCompareHTML(w, res) }); err != nil {
			return ExitInternal, &Error{Code: ExitInternal, Collective: true, Err: fmt.Errorf("jobs: compare: --html: %w", err)}
		}
	}
	if len(res.regressions) > 0 {
		return ExitRegression, nil
	}
	return ExitOK, nil
}

// compareReports reads both reports, checks their truth and compares them
// metric by metric; it writes nothing but warnings on opts.Stderr.
func compareReports(opts CompareOptions) (*cmpResult, error) {
	stderr := opts.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	failOn := opts.FailOn
	if failOn == "" {
		failOn = FailOnWorse
	}
	if failOn != FailOnWorse && failOn != FailOnChange {
		return nil, &Error{Code: ExitUsage, Collective: true, Err: fmt.Errorf("jobs: compare: --fail-on %q: want %s or %s", opts.FailOn, FailOnWorse, FailOnChange)}
	}
	if opts.Baseline == "" || opts.Current == "" {
		return nil, &Error{Code: ExitUsage, Collective: true, Err: errors.New("jobs: compare: want two paths, BASELINE and CURRENT")}
	}
	tols, def, err := parseTolerances(opts.Tolerance)
	if err != nil {
		return nil, &Error{Code: ExitUsage, Collective: true, Err: fmt.Errorf("jobs: compare: %w", err)}
	}
	base, err := readCompareReport(opts.Baseline)
	if err != nil {
		return nil, &Error{Code: ExitInput, Collective: true, Err: fmt.Errorf("jobs: compare: baseline: %w", err)}
	}
	cur, err := readCompareReport(opts.Current)
	if err != nil {
		return nil, &Error{Code: ExitInput, Collective: true, Err: fmt.Errorf("jobs: compare: current: %w", err)}
	}
	res := &cmpResult{base: base, cur: cur, failOn: failOn}
	bt, ct := base.inputs["csv"], cur.inputs["csv"]
	if bt.SHA256 == "" || ct.SHA256 == "" || bt.SHA256 != ct.SHA256 {
		res.truthDiffers = true
		if !opts.AllowDifferentTruth {
			why := "the reports score different truth CSVs"
			if bt.SHA256 == "" || ct.SHA256 == "" {
				why = "a report does not record its truth CSV's sha256 (run.inputs.csv.sha256), so the truth cannot be checked"
			}
			return nil, &Error{Code: ExitInput, Collective: true, Err: fmt.Errorf(
				"jobs: compare: %s (baseline %s, current %s): their metrics are not comparable; pass --allow-different-truth to compare anyway",
				why, describeInput(bt), describeInput(ct))}
		}
		fmt.Fprintf(stderr, "canopy: compare: warning: the truth CSVs differ (baseline %s, current %s); compared anyway (--allow-different-truth)\n", describeInput(bt), describeInput(ct))
	}
	res.diffs = runDiffs(base, cur)
	res.rows = compareRows(base.metrics, cur.metrics, tols, def, failOn)
	known := map[string]bool{}
	for _, r := range res.rows {
		known[r.key] = true
		known[baseKey(r.key)] = true
	}
	for _, k := range sortedKeys(tols) {
		if !known[k] {
			fmt.Fprintf(stderr, "canopy: compare: warning: --tolerance %s: no such metric in either report\n", k)
		}
	}
	res.counts = map[string]int{}
	for _, r := range res.rows {
		res.counts[r.verdict]++
		if r.regression {
			res.regressions = append(res.regressions, r.key)
		}
	}
	return res, nil
}

// parseTolerances reads "metric=abs" specs, each possibly a comma list.
func parseTolerances(specs []string) (map[string]float64, float64, error) {
	tols := map[string]float64{}
	def := DefaultCompareTolerance
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

// readCompareReport reads path, a report.json or a folder holding one.
func readCompareReport(path string) (*cmpReport, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "report.json")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseCompareReport(path, b)
}

// parseCompareReport parses the bytes b of the report at path.
func parseCompareReport(path string, b []byte) (*cmpReport, error) {
	var top struct {
		Metrics json.RawMessage            `json:"metrics"`
		Run     map[string]json.RawMessage `json:"run"`
	}
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, fmt.Errorf("%s: not a canopy report: %w", path, err)
	}
	if len(top.Metrics) == 0 || bytes.Equal(bytes.TrimSpace(top.Metrics), []byte("null")) {
		return nil, fmt.Errorf("%s: not a canopy report: no \"metrics\" object", path)
	}
	m, err := parseCompareMetrics(top.Metrics)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r := &cmpReport{path: path, metrics: m, run: top.Run, inputs: map[string]file{}}
	if raw, ok := top.Run["inputs"]; ok {
		if err := json.Unmarshal(raw, &r.inputs); err != nil {
			return nil, fmt.Errorf("%s: run.inputs: %w", path, err)
		}
	}
	return r, nil
}

// parseCompareMetrics flattens the "metrics" object in its key order.
func parseCompareMetrics(raw json.RawMessage) (cmpMetrics, error) {
	m := cmpMetrics{cells: map[string]cmpCell{}, arrays: map[string]bool{}}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return m, errors.New("\"metrics\" is not an object")
	}
	type entry struct {
		key string
		val json.RawMessage
	}
	var entries []entry
	var classes []float64
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return m, fmt.Errorf("metrics: %w", err)
		}
		key := tok.(string) // object keys are strings
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return m, fmt.Errorf("metrics: %s: %w", key, err)
		}
		if key == "classes" {
			if err := json.Unmarshal(v, &classes); err != nil {
				return m, fmt.Errorf("metrics: classes: want an array of class ids: %w", err)
			}
			continue
		}
		entries = append(entries, entry{key, v})
	}
	ids := make([]int, len(classes))
	seen := map[int]bool{}
	for i, c := range classes {
		if c != math.Trunc(c) || math.Abs(c) > 1<<31 {
			return m, fmt.Errorf("metrics: classes: %v is not a class id", c)
		}
		ids[i] = int(c)
		if seen[ids[i]] {
			return m, fmt.Errorf("metrics: classes: id %d appears twice", ids[i])
		}
		seen[ids[i]] = true
	}
	add := func(k string, c cmpCell) {
		if _, dup := m.cells[k]; !dup {
			m.order = append(m.order, k)
		}
		m.cells[k] = c
	}
	for _, e := range entries {
		v := bytes.TrimSpace(e.val)
		switch {
		case bytes.Equal(v, []byte("null")):
			add(e.key, cmpCell{present: true, null: true})
		case len(v) > 0 && v[0] == '[':
			var arr []*float64
			if err := json.Unmarshal(v, &arr); err != nil {
				return m, fmt.Errorf("metrics: %s: want an array of numbers or null: %w", e.key, err)
			}
			if classes != nil && len(classes) != len(arr) {
				return m, fmt.Errorf("metrics: %s has %d values but classes has %d ids", e.key, len(arr), len(classes))
			}
			m.arrays[e.key] = true
			for i, x := range arr {
				id := i
				if classes != nil {
					id = ids[i]
				}
				c := cmpCell{present: true, null: x == nil}
				if x != nil {
					c.v = *x
				}
				add(fmt.Sprintf("%s[%d]", e.key, id), c)
			}
		default:
			var f float64
			if err := json.Unmarshal(v, &f); err != nil {
				return m, fmt.Errorf("metrics: %s: want a number, null or an array: %w", e.key, err)
			}
			add(e.key, cmpCell{present: true, v: f})
		}
	}
	return m, nil
}

// Metric directions.
const (
	dirNone = iota
	dirHigher
	dirLower
)

// baseKey is the metric key of a row (map_per_class for map_per_class[3]).
func baseKey(row string) string {
	if i := strings.IndexByte(row, '['); i > 0 && strings.HasSuffix(row, "]") {
		return row[:i]
	}
	return row
}

// metricDirection tells whether a higher or a lower value of the metric is
// better: lower for losses (val_classification and val_bbox_regression
// too), higher for recall, precision, accuracy, iou,
// map and mar keys, none for others.
func metricDirection(row string) int {
	k := baseKey(row)
	l := strings.ToLower(k)
	switch {
	case strings.Contains(l, "loss"), k == keyValClassification, k == keyValBoxRegression:
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
func compareRows(base, cur cmpMetrics, tols map[string]float64, def float64, failOn string) []cmpRow {
	// A scalar placeholder (-1 or null) for a key the other report holds
	// as an array is left out: its element rows tell the change.
	skip := func(k string, own cmpMetrics, other cmpMetrics) bool {
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
	rows := make([]cmpRow, 0, len(keys))
	for _, k := range keys {
		r := cmpRow{key: k, base: base.cells[k], cur: cur.cells[k], tol: def}
		if t, ok := tols[k]; ok {
			r.tol = t
		} else if t, ok := tols[baseKey(k)]; ok {
			r.tol = t
		}
		bd, cd := r.base.defined(), r.cur.defined()
		switch {
		case !bd && !cd:
			r.verdict = verdictSame
		case bd && !cd:
			r.verdict = verdictVanished
		case !bd && cd:
			r.verdict = verdictAppeared
		default:
			r.delta, r.hasDelta = r.cur.v-r.base.v, true
			switch dir := metricDirection(k); {
			case math.Abs(r.delta) <= r.tol:
				r.verdict = verdictSame
			case dir == dirNone:
				r.verdict = verdictChanged
			case (dir == dirHigher) == (r.delta > 0):
				r.verdict = verdictBetter
			default:
				r.verdict = verdictWorse
			}
		}
		if failOn == FailOnChange {
			r.regression = r.verdict != verdictSame
		} else {
			r.regression = r.verdict == verdictWorse || r.verdict == verdictVanished
		}
		rows = append(rows, r)
	}
	return rows
}

// runDiffs lists the run fields that differ (the truth CSV is reported
// separately).
func runDiffs(base, cur *cmpReport) []cmpRunDiff {
	var out []cmpRunDiff
	for _, f := range []string{"canopy", "git", "detector", "semantics", "iou_threshold", "ranks", "label_map", "coverage"} {
		b, c := compactJSON(base.run[f]), compactJSON(cur.run[f])
		if b != c {
			out = append(out, cmpRunDiff{f, b, c})
		}
	}
	names := map[string]bool{}
	for n := range base.inputs {
		names[n] = true
	}
	for n := range cur.inputs {
		names[n] = true
	}
	for _, n := range sortedKeys(names) {
		if n == "csv" {
			continue
		}
		b, bok := base.inputs[n]
		c, cok := cur.inputs[n]
		if bok != cok || b.SHA256 != c.SHA256 {
			out = append(out, cmpRunDiff{"inputs." + n + ".sha256", describeInputOK(b, bok), describeInputOK(c, cok)})
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

func describeInput(f file) string {
	sha := "unknown"
	if f.SHA256 != "" {
		sha = shortSHA(f.SHA256)
	}
	if f.Path == "" {
		return "sha256 " + sha
	}
	return f.Path + " sha256 " + sha
}

func describeInputOK(f file, ok bool) string {
	if !ok {
		return "absent"
	}
	return describeInput(f)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func (r cmpRow) deltaString() string {
	if !r.hasDelta {
		return ""
	}
	return strconv.FormatFloat(r.delta, 'g', 6, 64)
}

func (r cmpRow) deltaSigned() string {
	d := r.deltaString()
	if d != "" && !strings.HasPrefix(d, "-") {
		d = "+" + d
	}
	return d
}

// summary is the one-line summary of the comparison.
func (res *cmpResult) summary() string {
	var parts []string
	for _, v := range verdictOrder {
		parts = append(parts, fmt.Sprintf("%d %s", res.counts[v], v))
	}
	s := fmt.Sprintf("%d metrics: %s; --fail-on %s: ", len(res.rows), strings.Join(parts, ", "), res.failOn)
	switch n := len(res.regressions); n {
	case 0:
		return s + "no regression (exit 0)"
	default:
		names := res.regressions
		more := ""
		if len(names) > 5 {
			names, more = names[:5], fmt.Sprintf(" and %d more", n-5)
		}
		plural := "s"
		if n == 1 {
			plural = ""
		}
		return s + fmt.Sprintf("%d regression%s: %s%s (exit %d)", n, plural, strings.Join(names, ", "), more, ExitRegression)
	}
}

// writeCompareText prints the header block, the table and the summary.
func writeCompareText(w io.Writer, res *cmpResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "baseline\t%s\n", res.base.path)
	fmt.Fprintf(tw, "current\t%s\n", res.cur.path)
	truth := describeInput(res.base.inputs["csv"]) + " (same)"
	if res.truthDiffers {
		truth = describeInput(res.base.inputs["csv"]) + " → " + describeInput(res.cur.inputs["csv"]) + " (differs, allowed by --allow-different-truth)"
	}
	fmt.Fprintf(tw, "truth\t%s\n", truth)
	for _, d := range res.diffs {
		fmt.Fprintf(tw, "%s\t%s → %s (differs)\n", d.field, d.base, d.cur)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "metric\tbaseline\tcurrent\tdelta\tverdict")
	for _, r := range res.rows {
		v := r.verdict
		if r.regression {
			v += " !"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.key, r.base, r.cur, r.deltaSigned(), v)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%s\n", res.summary())
	return err
}

func mdCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// writeCompareMarkdown writes a GitHub-flavoured markdown table (one row
// per metric), a summary line and the run differences.
func writeCompareMarkdown(w io.Writer, res *cmpResult) error {
	var b strings.Builder
	b.WriteString("| metric | baseline | current | delta | verdict |\n")
	b.WriteString("|:---|---:|---:|---:|:---|\n")
	for _, r := range res.rows {
		v := r.verdict
		if r.regression {
			v = "**" + v + "**"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", mdCell(r.key), r.base, r.cur, r.deltaSigned(), v)
	}
	fmt.Fprintf(&b, "\n**canopy compare:** %s\n", mdCell(res.summary()))
	if res.truthDiffers || len(res.diffs) > 0 {
		b.WriteString("\nRun differences:\n\n")
		if res.truthDiffers {
			fmt.Fprintf(&b, "- truth: %s → %s (allowed by --allow-different-truth)\n", describeInput(res.base.inputs["csv"]), describeInput(res.cur.inputs["csv"]))
		}
		for _, d := range res.diffs {
			fmt.Fprintf(&b, "- %s: `%s` → `%s`\n", d.field, d.base, d.cur)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// JUnit XML, the subset canopy emits (jobs/testdata/compare/junit.xsd).
type junitSuite struct {
	XMLName  xml.Name    `xml:"testsuite"`
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Classname string        `xml:"classname,attr"`
	Name      string        `xml:"name,attr"`
	Failure   *junitFailure `xml:"failure"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// writeCompareJUnit writes one testsuite, canopy.compare, with a testcase
// per metric and a failure on each regression.
func writeCompareJUnit(w io.Writer, res *cmpResult) error {
	s := junitSuite{Name: "canopy.compare", Tests: len(res.rows), Time: fmt.Sprintf("%.3f", res.elapsed.Seconds())}
	for _, r := range res.rows {
		c := junitCase{Classname: "metrics", Name: r.key}
		if r.regression {
			s.Failures++
			msg := fmt.Sprintf("%s %s: baseline %s, current %s", r.key, r.verdict, r.base, r.cur)
			if r.hasDelta {
				msg += fmt.Sprintf(", delta %s (tolerance %s)", r.deltaSigned(), strconv.FormatFloat(r.tol, 'g', -1, 64))
			}
			c.Failure = &junitFailure{Message: msg, Type: "regression",
				Text: fmt.Sprintf("%s (--fail-on %s)\nbaseline: %s\ncurrent:  %s", msg, res.failOn, res.base.path, res.cur.path)}
		}
		s.Cases = append(s.Cases, c)
	}
	b, err := xml.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// writeFileAtomic writes path through a temporary file in its folder,
// renamed into place (writeAtomic).
func writeFileAtomic(path string, fill func(io.Writer) error) error {
	return writeAtomic(filepath.Dir(path), filepath.Base(path), fill)
}

// checkOutputPath refuses, before any work, an output file path that
// cannot be written: a directory, or one whose folder is missing or not
// writable (a usage error, exit 2; a write that fails later is exit 1).
func checkOutputPath(p string) error {
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		return errors.New("is a directory")
	}
	dir := filepath.Dir(p)
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("its folder: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("its folder %s is not a directory", dir)
	}
	if err := syscall.Access(dir, 2); err != nil { // W_OK
		return fmt.Errorf("its folder %s is not writable: %w", dir, err)
	}
	return nil
}
