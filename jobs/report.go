package jobs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/report"
)

// Version is canopy's version, printed by `canopy version` and recorded in
// every report.
var Version = "0.1.0"

type reportRecord struct {
	metrics []byte
	sweep   []byte // metrics_by_iou_threshold (nil: no --iou-sweep)
	run     runInfo
	crops   *cropTable // the crop models' columns of predictions.csv
}

type runInfo struct {
	Canopy             string                 `json:"canopy"`
	Go                 string                 `json:"go"`
	MPI                string                 `json:"mpi"`
	Git                string                 `json:"git"`
	Command            []string               `json:"command"`
	Semantics          string                 `json:"semantics"`
	IoUThreshold       float64                `json:"iou_threshold"`
	Detector           string                 `json:"detector"`
	Ranks              int                    `json:"ranks"`
	Hosts              []string               `json:"hosts"`
	PerRank            []rankStats            `json:"per_rank"`
	Inputs             map[string]report.File `json:"inputs"`
	LabelMap           json.RawMessage        `json:"label_map"`
	Coverage           coverage               `json:"coverage"`
	IgnoredPredictions int                    `json:"ignored_predictions"`
	Resume             resumeInfo             `json:"resume"`
	Model              *modelInfo             `json:"model,omitempty"`
	// Outputs are the sha256 of the files published with this report, so a
	// reader can check that a predictions.csv or results.csv belongs to it.
	Outputs map[string]string `json:"outputs,omitempty"`
	// Warnings are the input warnings rank 0 printed (inputWarnings).
	Warnings []string `json:"warnings,omitempty"`
	// AllowOutsideRoot records --allow-outside-root when it opened images:
	// with --model, or for report.html.
	AllowOutsideRoot bool `json:"allow_outside_root,omitempty"`
	// Config is --config's file, Settings the resolved settings with
	// their sources, ConfigIgnored the config keys canopy did not use
	// (with --config or key=value overrides only).
	Config        string             `json:"config,omitempty"`
	Settings      map[string]setting `json:"settings,omitempty"`
	ConfigIgnored []string           `json:"config_ignored,omitempty"`
	// CropModels and Crops: the --crop-model stage, when given.
	CropModels []cropModelInfo `json:"crop_models,omitempty"`
	Crops      *cropStats      `json:"crops,omitempty"`
	// Geometry: "point" or "polygon" for those inputs (boxes: absent);
	// DistanceThreshold the points' match distance; GEOS the version of
	// the library that computed the polygon areas.
	Geometry          string  `json:"geometry,omitempty"`
	DistanceThreshold float64 `json:"distance_threshold,omitempty"`
	GEOS              string  `json:"geos,omitempty"`
}

// resumeInfo tells how much of the run came from part files of earlier
// attempts (attempt 0 is a fresh run).
type resumeInfo struct {
	Attempt        int `json:"attempt"`
	FromParts      int `json:"images_from_parts"`
	Computed       int `json:"images_computed"`
	RecordsDropped int `json:"part_records_dropped"`
}

type coverage struct {
	Images    int `json:"images"`
	Processed int `json:"processed"`
}

// MetricsJSON renders metric values as a flat JSON object in their order,
// null for NaN/None. It is also the byte string the agreement check hashes.
func MetricsJSON(vals []metrics.Value) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, v := range vals {
		if i > 0 {
			b.WriteString(", ")
		}
		k, _ := json.Marshal(v.Key)
		b.Write(k)
		b.WriteString(": ")
		b.WriteString(formatValue(v))
	}
	b.WriteByte('}')
	return b.Bytes()
}

// SweepJSON is report.json's metrics_by_iou_threshold: one entry per
// --iou-sweep threshold, in the order given, holding the threshold and the
// recall and iou families' values at it (MetricsJSON's form); nil without a
// sweep.
func SweepJSON(thresholds []float64, vals [][]metrics.Value) []byte {
	if len(thresholds) == 0 {
		return nil
	}
	var b bytes.Buffer
	b.WriteString("[")
	for k, thr := range thresholds {
		if k > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "\n  {\"iou_threshold\": %s, \"metrics\": %s}", formatValue(metrics.Value{V: thr}), bytes.TrimSpace(MetricsJSON(vals[k])))
	}
	b.WriteString("\n ]")
	return b.Bytes()
}

func formatValue(v metrics.Value) string {
	if v.Ints != nil {
		parts := make([]string, len(v.Ints))
		for i, x := range v.Ints {
			parts[i] = strconv.Itoa(x)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	if v.Array != nil {
		parts := make([]string, len(v.Array))
		for i, x := range v.Array {
			parts[i] = formatValue(metrics.Value{V: x})
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	if v.Null || math.IsNaN(v.V) || math.IsInf(v.V, 0) {
		return "null"
	}
	return report.FormatFloat(v.V)
}

func labelMapJSON(m box.LabelMap) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, n := range m.Names() {
		if i > 0 {
			b.WriteString(", ")
		}
		k, _ := json.Marshal(n)
		b.Write(k)
		fmt.Fprintf(&b, ": %d", i)
	}
	b.WriteByte('}')
	return b.Bytes()
}

func gitRevision() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if dirty {
				rev += "-dirty"
			}
			return rev
		}
	}
	return "unknown"
}

func buildRun(c mpi.Comm, cfg EvalConfig, in inputs, labels box.LabelMap, allStats []rankStats, nImages, ignored int, resumed resumeInfo, model *loadedModel) runInfo {
	r := runInfo{
		Canopy:             Version,
		Go:                 runtime.Version(),
		MPI:                c.Implementation(),
		Git:                gitRevision(),
		Command:            cfg.Command,
		Semantics:          cfg.Semantics.String(),
		IoUThreshold:       cfg.IoUThreshold,
		Detector:           "replay",
		Ranks:              c.Size(),
		Inputs:             map[string]report.File{"csv": {Path: cfg.CSV, SHA256: sha256Hex(in.csv)}, "predictions": {Path: cfg.Predictions, SHA256: sha256Hex(in.preds)}},
		LabelMap:           labelMapJSON(labels),
		IgnoredPredictions: ignored,
		Resume:             resumed,
	}
	if r.Command == nil {
		r.Command = []string{}
	}
	if model != nil {
		r.Detector = model.info.Detector
		info := model.info
		info.LossBatchNorm = batchNormNote
		r.Model = &info
		delete(r.Inputs, "predictions")
	}
	if cfg.LabelDict != "" {
		r.Inputs["label_dict"] = report.File{Path: cfg.LabelDict, SHA256: sha256Hex(in.labels)}
	}
	if rc := cfg.RunConfig; rc != nil {
		r.Config, r.ConfigIgnored = rc.File, rc.C.Ignored
		r.Settings = rc.finishSettings(r.Model)
	}
	for _, s := range allStats {
		r.PerRank = append(r.PerRank, s)
		r.Coverage.Processed += s.Images
	}
	r.Hosts = hostsOf(allStats)
	r.Coverage.Images = nImages
	r.Coverage.Processed += resumed.FromParts
	return r
}

// hostsOf lists the ranks' hosts once each, in rank order.
func hostsOf(stats []rankStats) []string {
	var hosts []string
	seen := map[string]bool{}
	for _, s := range stats {
		if !seen[s.Host] {
			seen[s.Host] = true
			hosts = append(hosts, s.Host)
		}
	}
	return hosts
}

// writeOutputs stages predictions.csv, results.csv, report.json (which
// records the other two's sha256) and what more stages from report.json's
// bytes (the COCO files, report.html; nil: nothing), and publishes them as
// one set, report.json last: a failure in any of them publishes nothing,
// and a kill before the publication leaves no new report.json.
func writeOutputs(cfg EvalConfig, rep reportRecord, images []box.Image, dets [][]box.Detection, labels box.LabelMap, res metrics.Result,
	more func(reportJSON []byte) ([]staged, error)) error {
	var set []staged
	fail := func(err error) error {
		for _, s := range set {
			os.Remove(filepath.Join(cfg.Out, s.Tmp))
		}
		return err
	}
	preds, err := stage(cfg.Out, "predictions.csv", func(w io.Writer) error {
		return writePredictionRows(w, images, dets, labels, rep.crops)
	})
	if err != nil {
		return err
	}
	set = append(set, preds)
	results, err := stage(cfg.Out, "results.csv", func(w io.Writer) error {
		return writeResults(w, images, dets, labels, res.Matches)
	})
	if err != nil {
		return fail(err)
	}
	set = append(set, results)
	rep.run.Outputs = map[string]string{preds.Name: preds.SHA256, results.Name: results.SHA256}
	run, err := json.MarshalIndent(rep.run, " ", " ")
	if err != nil {
		return fail(fmt.Errorf("jobs: write report.json: %w", err))
	}
	body := fmt.Appendf(nil, "{\"metrics\": %s,\n", rep.metrics)
	if rep.sweep != nil {
		body = fmt.Appendf(body, " \"metrics_by_iou_threshold\": %s,\n", rep.sweep)
	}
	body = fmt.Appendf(body, " \"run\": %s}\n", run)
	if more != nil {
		extra, err := more(body)
		set = append(set, extra...)
		if err != nil {
			return fail(err)
		}
	}
	rj, err := stage(cfg.Out, "report.json", func(w io.Writer) error {
		_, err := w.Write(body)
		return err
	})
	if err != nil {
		return fail(err)
	}
	return publish(cfg.Out, append(set, rj))
}

func csvField(s string) string {
	if strings.ContainsAny(s, ",\"\r\n") {
		return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
	}
	return s
}

// predictionsHeader is predictions.csv's first line: the columns, and
// the crop models' after score (cs nil: none).
func predictionsHeader(cs *cropSet) string {
	head := "image_path,xmin,ymin,xmax,ymax,label,score"
	if cs != nil {
		for _, c := range cs.columns() {
			head += "," + csvField(c)
		}
	}
	return head + "\n"
}

func writePredictions(w io.Writer, images []box.Image, dets [][]box.Detection, labels box.LabelMap) error {
	return writePredictionRows(w, images, dets, labels, nil)
}

// writePredictionRows writes predictions.csv with the crop models'
// columns after score (crops nil: none; a dropped box's cells empty).
func writePredictionRows(w io.Writer, images []box.Image, dets [][]box.Detection, labels box.LabelMap, crops *cropTable) error {
	var cs *cropSet
	if crops != nil {
		cs = crops.set
	}
	if _, err := io.WriteString(w, predictionsHeader(cs)); err != nil {
		return err
	}
	names := csvNames(labels)
	var line []byte
	for i, im := range images {
		p := csvField(im.Path)
		for j, d := range dets[i] {
			line = append(line[:0], p...)
			for _, v := range [4]float64{d.Box.Xmin, d.Box.Ymin, d.Box.Xmax, d.Box.Ymax} {
				line = report.AppendFloat(append(line, ','), v)
			}
			line = append(append(append(line, ','), names(d.Label)...), ',')
			line = report.AppendFloat(line, d.Score)
			if crops != nil {
				line = crops.appendCells(line, i, j)
			}
			line = append(line, '\n')
			if _, err := w.Write(line); err != nil {
				return err
			}
		}
	}
	return nil
}

// csvNames returns the CSV-quoted label names by id.
func csvNames(labels box.LabelMap) func(int32) string {
	names := labels.Names()
	for i := range names {
		names[i] = csvField(names[i])
	}
	return func(id int32) string {
		if id >= 0 && int(id) < len(names) {
			return names[id]
		}
		return csvField(labels.Name(id))
	}
}

func writeResults(w io.Writer, images []box.Image, dets [][]box.Detection, labels box.LabelMap, matches []metrics.Match) error {
	if _, err := io.WriteString(w, "image_path,truth_id,prediction_id,IoU,score,match,true_label,predicted_label\n"); err != nil {
		return err
	}
	names := csvNames(labels)
	var line []byte
	last, p := -1, ""
	for _, m := range matches {
		if m.Image != last {
			last, p = m.Image, csvField(images[m.Image].Path)
		}
		line = append(append(line[:0], p...), ',')
		line = append(strconv.AppendInt(line, int64(m.TruthID), 10), ',')
		if m.PredID >= 0 {
			line = strconv.AppendInt(line, int64(m.PredID), 10)
		}
		line = append(report.AppendFloat(append(line, ','), m.IoU), ',')
		if m.PredID >= 0 {
			line = report.AppendFloat(line, m.Score)
		}
		if m.Match {
			line = append(line, ",True,"...)
		} else {
			line = append(line, ",False,"...)
		}
		line = append(line, names(m.TrueLabel)...)
		line = append(line, ',')
		if m.PredID >= 0 {
			line = append(line, names(m.PredLabel)...)
		}
		line = append(line, '\n')
		if _, err := w.Write(line); err != nil {
			return err
		}
	}
	return nil
}

// printTable prints the metrics like Lightning's "Validate metric" table.
func printTable(w io.Writer, vals []metrics.Value) {
	kw, vw := len("Validate metric"), len("DataLoader 0")
	cells := make([]string, len(vals))
	keys := make([]string, len(vals))
	for i, v := range vals {
		cells[i] = formatValue(v)
		keys[i] = box.Printable(v.Key) // a label may hold terminal escapes
		kw = max(kw, utf8.RuneCountInString(keys[i]))
		vw = max(vw, len(cells[i]))
	}
	kw, vw = kw+6, vw+6
	center := func(s string, n int) string {
		pad := n - utf8.RuneCountInString(s)
		l := pad / 2
		return strings.Repeat(" ", l) + s + strings.Repeat(" ", pad-l)
	}
	line := func(l, m, r, f string) {
		fmt.Fprintln(w, l+strings.Repeat(f, kw)+m+strings.Repeat(f, vw)+r)
	}
	line("┏", "┳", "┓", "━")
	fmt.Fprintln(w, "┃"+center("Validate metric", kw)+"┃"+center("DataLoader 0", vw)+"┃")
	line("┡", "╇", "┩", "━")
	for i := range vals {
		fmt.Fprintln(w, "│"+center(keys[i], kw)+"│"+center(cells[i], vw)+"│")
	}
	line("└", "┴", "┘", "─")
}
