// Package dataset reads DeepForest annotation and prediction CSVs into
// canopy's vocabulary, validating every row. Columns are found by header
// name, in any order; other columns are ignored. Errors name file and line
// and wrap ErrInput.
package dataset

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/canopy-hpc/canopy/box"
)

// ErrInput marks an error in the user's input data (exit code 3).
var ErrInput = errors.New("bad input data")

// Row is one parsed CSV row: a box with its label string and, for
// predictions, its score.
type Row struct {
	Path  string
	Box   box.Box
	Label string
	Score float64
	Line  int
	// Crowd: the truth row's optional iscrowd column is 1 (a COCO crowd
	// region); predictions have none.
	Crowd bool
}

// Truth is a parsed annotation CSV: images in order of first appearance.
type Truth struct {
	Images []TruthImage
	// Dropped counts 0,0,0,0 rows dropped beside real rows.
	Dropped int
	// Duplicates counts rows equal to an earlier row (Duplicates).
	Duplicates int
	// NumericLabels: a CSV whose every label (0,0,0,0 rows included) pandas
	// types as a number (PandasNumber), as DeepForest's read_file reads it.
	// Never set for VOC or COCO truth, whose labels DeepForest keeps as text.
	NumericLabels bool
	index         map[string]int
}

// TruthImage is one image's rows, zero rows removed; Empty when all of its
// rows were 0,0,0,0.
type TruthImage struct {
	Path   string
	Rows   []Row
	Empty  bool
	Labels []string // labels of every row, zero rows included (for the label map)
}

// Index returns the position of path in Images.
func (t *Truth) Index(path string) (int, bool) {
	i, ok := t.index[path]
	return i, ok
}

var truthCols = []string{"image_path", "xmin", "ymin", "xmax", "ymax", "label"}

// ParseTruth parses an annotation CSV held in data; name is used in errors.
// A file with a header but no rows is an error (there is nothing to score).
func ParseTruth(name string, data []byte) (*Truth, error) {
	rows, err := parse(name, data, false, Options{})
	if err != nil {
		return nil, err
	}
	t, err := truthFromRows(name, rows)
	if err != nil {
		return nil, err
	}
	t.NumericLabels = NumericLabels(rows)
	return t, nil
}

// truthFromRows groups parsed rows by image.
func truthFromRows(name string, rows []Row) (*Truth, error) {
	if len(rows) == 0 {
		return nil, fmt.Errorf("dataset: %s: no rows after the header, nothing to score: %w", name, ErrInput)
	}
	t := &Truth{index: make(map[string]int), Duplicates: Duplicates(rows)}
	for _, r := range rows {
		i, ok := t.index[r.Path]
		if !ok {
			i = len(t.Images)
			t.index[r.Path] = i
			t.Images = append(t.Images, TruthImage{Path: r.Path})
		}
		t.Images[i].Rows = append(t.Images[i].Rows, r)
		t.Images[i].Labels = append(t.Images[i].Labels, r.Label)
	}
	for i := range t.Images {
		im := &t.Images[i]
		kept := im.Rows[:0]
		for _, r := range im.Rows {
			if !r.Box.IsZero() {
				kept = append(kept, r)
			}
		}
		if len(kept) == 0 {
			im.Empty = true
		} else {
			t.Dropped += len(im.Rows) - len(kept)
		}
		im.Rows = kept
	}
	return t, nil
}

// Options are the checks a caller may relax.
type Options struct {
	// AllowAnyScore accepts any finite score; by default a score outside
	// [0, 1] is an error.
	AllowAnyScore bool
}

// ParsePredictions parses a DeepForest prediction CSV (score column `score`,
// or `scores` as older versions wrote it). Scores must be finite and, unless
// opt.AllowAnyScore, in [0, 1].
func ParsePredictions(name string, data []byte, opt Options) ([]Row, error) {
	return parse(name, data, true, opt)
}

// Duplicates counts the rows equal in image_path, box, label and score to an
// earlier row (a CSV appended to itself), leaving out 0,0,0,0 rows, which
// mark empty images and change no metric when repeated.
func Duplicates(rows []Row) int {
	type key struct {
		path, label string
		b           box.Box
		score       float64
	}
	seen := make(map[key]bool, len(rows))
	n := 0
	for _, r := range rows {
		if r.Box.IsZero() {
			continue
		}
		k := key{r.Path, r.Label, r.Box, r.Score}
		if seen[k] {
			n++
		}
		seen[k] = true
	}
	return n
}

// columns maps each header cell, trimmed of blanks and a leading UTF-8 BOM,
// to the first column that holds it.
func columns(header []string) map[string]int {
	col := make(map[string]int, len(header))
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		if _, dup := col[h]; !dup {
			col[h] = i
		}
	}
	return col
}

// ImagePaths reads the image list of a CSV that names images in an
// image_path column (canopy predict --csv): the unique paths, trimmed as
// TrimPath trims them, in order of first appearance. The column is found
// as ParseTruth finds it; other columns are ignored and rows may differ in
// length. A row without a path, or a CSV that lists no image, is an error.
func ImagePaths(name string, data []byte) ([]string, error) {
	r := csv.NewReader(bytes.NewReader(data))
	r.FieldsPerRecord = -1
	head, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("dataset: %s: no header: %v: %w", name, err, ErrInput)
	}
	col, ok := columns(head)["image_path"]
	if !ok {
		return nil, fmt.Errorf("dataset: %s: no image_path column in %q: %w", name, head, ErrInput)
	}
	seen := map[string]bool{}
	var out []string
	for line := 2; ; line++ {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("dataset: %s: %v: %w", name, err, ErrInput)
		}
		var p string
		if col < len(rec) {
			p = TrimPath(rec[col])
		}
		if p == "" {
			return nil, fmt.Errorf("dataset: %s:%d: empty image_path: %w", name, line, ErrInput)
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("dataset: %s lists no images: %w", name, ErrInput)
	}
	return out, nil
}

func parse(name string, data []byte, scored bool, opt Options) ([]Row, error) {
	r := csv.NewReader(bytes.NewReader(data))
	r.ReuseRecord = true
	header, err := r.Read()
	if err == io.EOF {
		return nil, fmt.Errorf("dataset: %s: empty file, expected a header with %s: %w", name, strings.Join(truthCols, ","), ErrInput)
	}
	if err != nil {
		return nil, fmt.Errorf("dataset: %s: %v: %w", name, err, ErrInput)
	}
	col := columns(header)
	want := truthCols
	if scored {
		want = append(append([]string(nil), truthCols...), "score")
		if _, ok := col["score"]; !ok {
			if i, ok := col["scores"]; ok {
				col["score"] = i
			}
		}
	}
	// A truth CSV with a WKT geometry column (DeepForest's read_file
	// takes one) gives each row its geometry's bounds, as DeepForest's
	// BoxDataset does, box columns or not.
	geo, hasGeo := col["geometry"]
	hasGeo = hasGeo && !scored
	idx := make([]int, len(want))
	var missing []string
	for k, c := range want {
		i, ok := col[c]
		if !ok && !(hasGeo && k >= 1 && k <= 4) {
			missing = append(missing, c)
		}
		idx[k] = i
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("dataset: %s:1: missing column(s) %s (header: %s): %w", name, strings.Join(missing, ","), strings.Join(header, ","), ErrInput)
	}
	rows := make([]Row, 0, bytes.Count(data, []byte{'\n'}))
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, csvError(name, err)
		}
		line, _ := r.FieldPos(0)
		row := Row{Line: line}
		row.Path = TrimPath(rec[idx[0]])
		if row.Path == "" {
			return nil, fmt.Errorf("dataset: %s:%d: empty image_path: %w", name, line, ErrInput)
		}
		var v [5]float64
		if hasGeo {
			if v[1], v[2], v[3], v[4], err = wktBounds(rec[geo]); err != nil {
				return nil, fmt.Errorf("dataset: %s:%d: column geometry: %v: %w", name, line, err, ErrInput)
			}
		}
		for k := 1; k <= 4 && !hasGeo; k++ {
			v[k], err = number(rec[idx[k]])
			if err != nil {
				return nil, fmt.Errorf("dataset: %s:%d: column %s: %v: %w", name, line, want[k], err, ErrInput)
			}
		}
		row.Box = box.Box{Xmin: v[1], Ymin: v[2], Xmax: v[3], Ymax: v[4]}
		if row.Box.Xmax < row.Box.Xmin {
			return nil, fmt.Errorf("dataset: %s:%d: xmax %v < xmin %v: %w", name, line, row.Box.Xmax, row.Box.Xmin, ErrInput)
		}
		if row.Box.Ymax < row.Box.Ymin {
			return nil, fmt.Errorf("dataset: %s:%d: ymax %v < ymin %v: %w", name, line, row.Box.Ymax, row.Box.Ymin, ErrInput)
		}
		if why := outOfRange(row.Box); why != "" {
			return nil, fmt.Errorf("dataset: %s:%d: %s: %w", name, line, why, ErrInput)
		}
		if ci, ok := col["iscrowd"]; ok && !scored {
			switch strings.TrimSpace(rec[ci]) {
			case "0", "":
			case "1":
				row.Crowd = true
			default:
				return nil, fmt.Errorf("dataset: %s:%d: iscrowd %q, want 0 or 1: %w", name, line, rec[ci], ErrInput)
			}
		}
		row.Label = rec[idx[5]]
		if row.Label == "" {
			return nil, fmt.Errorf("dataset: %s:%d: empty label: %w", name, line, ErrInput)
		}
		if scored {
			row.Score, err = number(rec[idx[6]])
			if err != nil {
				return nil, fmt.Errorf("dataset: %s:%d: column score: %v: %w", name, line, err, ErrInput)
			}
			if !opt.AllowAnyScore && !(row.Score >= 0 && row.Score <= 1) {
				return nil, fmt.Errorf("dataset: %s:%d: score %v is not in [0, 1] (--allow-any-score accepts it): %w", name, line, row.Score, ErrInput)
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// number reads a CSV number cell as pandas.read_csv (DeepForest's reader)
// does: surrounding ASCII blanks, an optional sign, decimal digits with an
// optional point and exponent. Go literal syntax that strconv.ParseFloat
// would also take (0x1p4, 1_0) is refused, and so is every cell pandas
// reads as NaN or ±inf (tools/pandas/csv_numbers.py records its rule).
func number(s string) (float64, error) {
	t := strings.Trim(s, blanks)
	if !isDecimal(t) {
		if nonFinite(s) {
			return 0, fmt.Errorf("not a finite number: %q", s)
		}
		return 0, fmt.Errorf("not a number: %q", s)
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, fmt.Errorf("not a finite number: %q", s)
	}
	return f, nil
}

// TrimPath trims an image_path cell as the numbers are trimmed (pandas
// keeps the blanks, but a path with blanks around it names no file anyone
// meant).
func TrimPath(s string) string { return strings.Trim(s, blanks) }

// blanks are the characters pandas' C parser skips around a number.
const blanks = " \t\r\n\v\f"

// isDecimal is pandas' number syntax: [+-] digits [. [digits]] or
// [+-] . digits, then optionally [eE] [+-] digits.
func isDecimal(s string) bool {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	n := digits()
	if i < len(s) && s[i] == '.' {
		i++
		n += digits()
	}
	if n == 0 {
		return false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

// naValues are pandas' default missing-value spellings (read as NaN).
var naValues = map[string]bool{"": true, "#N/A": true, "#N/A N/A": true, "#NA": true, "-1.#IND": true, "-1.#QNAN": true,
	"-NaN": true, "-nan": true, "1.#IND": true, "1.#QNAN": true, "<NA>": true, "N/A": true, "NA": true, "NULL": true,
	"NaN": true, "None": true, "n/a": true, "nan": true, "null": true}

// nonFinite reports a cell pandas reads as NaN or ±inf (spelled exactly,
// without blanks around it).
func nonFinite(t string) bool {
	if naValues[t] {
		return true
	}
	v := strings.TrimLeft(t, "+-")
	u := strings.ToLower(v)
	return len(t)-len(v) <= 1 && (u == "inf" || u == "infinity")
}

// ParseLabelDict parses DeepForest's classes.csv form (`label,id` with a
// header, or without one): ids must be 0..n-1, each once.
func ParseLabelDict(name string, data []byte) (box.LabelMap, error) {
	r := csv.NewReader(bytes.NewReader(data))
	recs, err := r.ReadAll()
	if err != nil {
		return box.LabelMap{}, fmt.Errorf("dataset: %s: %v: %w", name, err, ErrInput)
	}
	byID := map[int]string{}
	for i, rec := range recs {
		if len(rec) < 2 {
			return box.LabelMap{}, fmt.Errorf("dataset: %s:%d: want label,id: %w", name, i+1, ErrInput)
		}
		id, err := strconv.Atoi(strings.TrimSpace(rec[1]))
		if err != nil {
			if i == 0 {
				continue // header
			}
			return box.LabelMap{}, fmt.Errorf("dataset: %s:%d: id %q is not an integer: %w", name, i+1, rec[1], ErrInput)
		}
		if _, dup := byID[id]; dup {
			return box.LabelMap{}, fmt.Errorf("dataset: %s:%d: id %d listed twice: %w", name, i+1, id, ErrInput)
		}
		byID[id] = rec[0]
	}
	names := make([]string, len(byID))
	for id, n := range byID {
		if id < 0 || id >= len(names) {
			return box.LabelMap{}, fmt.Errorf("dataset: %s: ids must be 0..%d, got %d: %w", name, len(names)-1, id, ErrInput)
		}
		names[id] = n
	}
	m, err := box.NewLabelMap(names)
	if err != nil {
		return box.LabelMap{}, fmt.Errorf("dataset: %s: %v: %w", name, err, ErrInput)
	}
	return m, nil
}

// Resolve turns the truth into box.Images with label ids from m; a label
// missing from m is an input error.
func (t *Truth) Resolve(name string, m box.LabelMap) ([]box.Image, error) {
	out := make([]box.Image, len(t.Images))
	for i, im := range t.Images {
		out[i] = box.Image{Path: im.Path, Empty: im.Empty}
		if len(im.Rows) > 0 {
			out[i].Truth = make([]box.Truth, len(im.Rows))
		}
		for k, r := range im.Rows {
			id, ok := m.ID(r.Label)
			if !ok {
				return nil, fmt.Errorf("dataset: %s:%d: label %q is not in the label map: %w", name, r.Line, r.Label, ErrInput)
			}
			out[i].Truth[k] = box.Truth{Box: r.Box, Label: id, Crowd: r.Crowd}
		}
	}
	return out, nil
}

// outOfRange says why a box's numbers, each finite, still cannot be
// scored: a coordinate beyond float32's range (DeepForest's and
// torchmetrics' tensors hold float32, where it becomes infinite), or a
// width, height or area that is not a finite number. "" when none.
func outOfRange(b box.Box) string {
	for _, v := range [4]float64{b.Xmin, b.Ymin, b.Xmax, b.Ymax} {
		if math.Abs(v) > math.MaxFloat32 {
			return fmt.Sprintf("coordinate %v is beyond float32's range (%g), where the metrics' tensors hold it", v, math.MaxFloat32)
		}
	}
	w, h := b.Xmax-b.Xmin, b.Ymax-b.Ymin
	if math.IsInf(w, 0) || math.IsInf(h, 0) || math.IsInf(w*h, 0) {
		return fmt.Sprintf("box %v,%v,%v,%v: its width, height or area is not a finite number", b.Xmin, b.Ymin, b.Xmax, b.Ymax)
	}
	return ""
}

// csvError is a CSV reader's error as an input error naming the file and,
// for a malformed record, the line it starts on.
func csvError(name string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return fmt.Errorf("dataset: %s:%d: %v: %w", name, pe.StartLine, pe.Err, ErrInput)
	}
	return fmt.Errorf("dataset: %s: %v: %w", name, err, ErrInput)
}
