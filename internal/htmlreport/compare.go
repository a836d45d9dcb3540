package htmlreport

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/dataset"
)

// Side is one report of a comparison.
type Side struct {
	Name string // as given on the command line
	// Dir is the eval's --out folder: its report.html gives the PR curves,
	// its results.csv and predictions.csv the images. Empty when only a
	// report.json file was given.
	Dir string
}

// Compare is what the compare page is made of: compare's rows as it
// prints them, and the two runs' folders.
type Compare struct {
	Rows              []CompareRow
	Summary           string
	Baseline, Current Side
	Options           Options // Worst: images whose recall changed most
}

// CompareRow is one metric of `canopy compare`, as it prints it.
type CompareRow struct {
	Metric, Baseline, Current, Delta, Verdict string
	Regression                                bool
}

// sideData is what a run folder gives.
type sideData struct {
	data   *Data
	recall map[string]imageStat // by image_path, from results.csv
	preds  map[string][]box.Detection
	truth  map[string][]box.Truth // from the truth CSV report.html names
}

// WriteCompare writes the compare page: every metric with its verdict, the
// two runs' PR curves overlaid (baseline dashed) and the images whose
// recall changed most, drawn for both runs. What a side lacks (no
// report.html, no results.csv, a truth CSV no longer where it was) is said
// on the page.
func WriteCompare(w io.Writer, c Compare) error {
	pg := page{Title: "canopy compare: " + c.Baseline.Name + " → " + c.Current.Name, Compare: c.Rows,
		Sides: [2]string{"baseline", "current"}}
	if c.Summary != "" {
		pg.Notes = append(pg.Notes, c.Summary)
	}
	sides := [2]*sideData{}
	for k, s := range [2]Side{c.Baseline, c.Current} {
		sd, notes := readSide(s, c.Options.Read)
		sides[k] = sd
		for _, n := range notes {
			pg.Notes = append(pg.Notes, pg.Sides[k]+" ("+s.Name+"): "+n)
		}
	}
	data := Data{Kind: "compare"}
	if sides[0].data != nil && sides[1].data != nil && len(sides[0].data.PR) > 0 && len(sides[1].data.PR) > 0 {
		data.Recall = sides[1].data.Recall
		// the classes of the current side's first curves (a page canopy
		// wrote carries at most MaxCurveClasses)
		keep := map[int32]bool{}
		for _, cv := range sides[1].data.PR {
			if len(keep) < MaxCurveClasses {
				keep[cv.LabelID] = true
			}
		}
		for k, side := range pg.Sides {
			for _, cv := range sides[k].data.PR {
				if !keep[cv.LabelID] {
					continue
				}
				cv.Side = side
				data.PR = append(data.PR, cv)
			}
		}
		for _, iou := range []float64{0.5, 0.75} {
			svg, err := prPlot(data.Recall, data.PR, iou, "")
			if err != nil {
				return err
			}
			if svg != "" {
				pg.PR = append(pg.PR, svg)
			}
		}
	} else {
		pg.Notes = append(pg.Notes, "No PR curves: both sides need the report.html that canopy eval writes (an --out folder with the COCO family).")
	}
	if sides[0].recall != nil && sides[1].recall != nil {
		for _, p := range changed(sides[0].recall, sides[1].recall, c.Options.Worst) {
			var pair [2]thumb
			for k := range sides {
				sd := sides[k]
				im := box.Image{Path: p, Truth: sd.truth[p]}
				root := ""
				if sd.data != nil {
					root = sd.data.RootDir
				}
				th, err := drawImage(root, im, sd.preds[p], sd.recall[p], c.Options, nil)
				if err != nil {
					return err
				}
				th.Path = pg.Sides[k] + ": " + p
				pair[k] = th
			}
			pg.Pairs = append(pg.Pairs, pair)
		}
		data.Images = 2 * len(pg.Pairs)
	}
	return render(w, pg, data)
}

// readSide reads a run folder; notes say what it lacks. Every file goes
// through read (Options.Read): the folder's own files inside the folder,
// the truth CSV its report.html names inside the root that page records.
// A file that is refused, or does not parse, is named in a note; its
// content never reaches the page.
func readSide(s Side, read func(root, path string, limit int64) ([]byte, error)) (*sideData, []string) {
	if read == nil {
		read = readPlain
	}
	sd := &sideData{}
	if s.Dir == "" {
		return sd, []string{"a report.json was given, not its --out folder: no curves or images"}
	}
	var notes []string
	if b, err := read(s.Dir, filepath.Join(s.Dir, "report.html"), MaxPageBytes); err != nil {
		notes = append(notes, "no report.html (run with --html): no PR curves, images drawn on grey ("+err.Error()+")")
	} else if sd.data, err = ReadData(b); err != nil || sd.data == nil {
		notes = append(notes, "report.html has no canopy data block")
	}
	b, err := read(s.Dir, filepath.Join(s.Dir, "results.csv"), MaxCSVBytes)
	if err != nil {
		return sd, append(notes, "no per-image recall: "+err.Error())
	}
	st, err := readResults("results.csv", b)
	if err != nil {
		return sd, append(notes, "no per-image recall: results.csv does not parse")
	}
	sd.recall = st
	if b, err := read(s.Dir, filepath.Join(s.Dir, "predictions.csv"), MaxCSVBytes); err != nil {
		notes = append(notes, "no predictions.csv: predictions not drawn ("+err.Error()+")")
	} else if rows, err := dataset.ParsePredictions("predictions.csv", b, dataset.Options{AllowAnyScore: true}); err != nil {
		notes = append(notes, "predictions not drawn: predictions.csv does not parse")
	} else {
		sd.preds = map[string][]box.Detection{}
		for _, r := range rows {
			sd.preds[r.Path] = append(sd.preds[r.Path], box.Detection{Box: r.Box, Score: r.Score})
		}
		for p, ds := range sd.preds {
			s := sd.recall[p]
			s.dets = len(ds)
			s.fp = s.dets - s.tp
			sd.recall[p] = s
		}
	}
	if sd.data != nil && sd.data.CSV != "" {
		if b, err := read(sd.data.RootDir, sd.data.CSV, MaxCSVBytes); err != nil {
			notes = append(notes, "truth boxes not drawn: "+err.Error())
		} else if t, err := dataset.ParseTruthFile(sd.data.CSV, b); err != nil {
			notes = append(notes, fmt.Sprintf("truth boxes not drawn: %q does not parse as a truth file", sd.data.CSV))
		} else {
			sd.truth = map[string][]box.Truth{}
			for _, im := range t.Images {
				for _, r := range im.Rows {
					sd.truth[im.Path] = append(sd.truth[im.Path], box.Truth{Box: r.Box})
				}
			}
		}
	}
	return sd, notes
}

// readPlain reads path as it is, up to limit bytes (no Options.Read).
func readPlain(_, path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("%s is over %d bytes", path, limit)
	}
	return b, err
}

// readResults counts each image's truth boxes and matches in results.csv
// (its bytes b).
func readResults(path string, b []byte) (map[string]imageStat, error) {
	r := csv.NewReader(bytes.NewReader(b))
	head, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[h] = i
	}
	ip, okP := col["image_path"]
	mc, okM := col["match"]
	if !okP || !okM {
		return nil, fmt.Errorf("%s: no image_path and match columns", path)
	}
	out := map[string]imageStat{}
	for line := 2; ; line++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		s := out[rec[ip]]
		s.truth++
		if rec[mc] == "True" {
			s.tp++
		}
		if s.firstRow == 0 {
			s.firstRow = line
		}
		s.lastRow = line
		out[rec[ip]] = s
	}
}

// changed returns up to n images scored on both sides, by the largest
// change of recall (ties: the larger change of false positives, then
// path).
func changed(base, cur map[string]imageStat, n int) []string {
	type d struct {
		path   string
		dr, df float64
	}
	var ds []d
	for p, b := range base {
		c, ok := cur[p]
		if !ok || b.truth == 0 || c.truth == 0 {
			continue
		}
		dr := math.Abs(c.recall() - b.recall())
		df := math.Abs(float64(c.fp - b.fp))
		if dr == 0 && df == 0 {
			continue
		}
		ds = append(ds, d{p, dr, df})
	}
	sort.Slice(ds, func(i, j int) bool {
		if ds[i].dr != ds[j].dr {
			return ds[i].dr > ds[j].dr
		}
		if ds[i].df != ds[j].df {
			return ds[i].df > ds[j].df
		}
		return ds[i].path < ds[j].path
	})
	out := make([]string, 0, n)
	for _, x := range ds {
		if len(out) == n {
			break
		}
		out = append(out, x.path)
	}
	return out
}
