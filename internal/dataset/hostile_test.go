package dataset

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/box"
)

// Every number spelling pandas was asked about (tools/pandas/csv_numbers.py,
// real pandas) is read as pandas reads it: a finite float with the same
// value, or refused (NaN and ±inf as "not a finite number", text as "not a
// number").
func TestNumbersAsPandasReadsThem(t *testing.T) {
	b, err := os.ReadFile("testdata/pandas_numbers.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Meta  map[string]any
		Cases []struct {
			Text  string
			Kind  string
			Value *string
		}
	}
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.Cases) < 50 || fx.Meta["pandas"] == nil {
		t.Fatalf("fixture too small or without pandas' version: %d cases", len(fx.Cases))
	}
	for _, c := range fx.Cases {
		got, err := number(c.Text)
		switch c.Kind {
		case "finite":
			want, perr := strconv.ParseFloat(*c.Value, 64)
			if perr != nil || err != nil || got != want {
				t.Errorf("%q: pandas reads %s, canopy %v (%v)", c.Text, *c.Value, got, err)
			}
		case "nan", "inf":
			if err == nil || !strings.Contains(err.Error(), "not a finite number") {
				t.Errorf("%q: pandas reads %s, canopy: %v, %v", c.Text, c.Kind, got, err)
			}
		default:
			if err == nil || !strings.Contains(err.Error(), "not a number") {
				t.Errorf("%q: pandas leaves it text, canopy: %v, %v", c.Text, got, err)
			}
		}
	}
}

func TestHostileCSVs(t *testing.T) {
	head := "image_path,xmin,ymin,xmax,ymax,label\n"
	phead := "image_path,xmin,ymin,xmax,ymax,label,score\n"
	for _, c := range []struct{ name, csv, want string }{
		{"header only", head, "t.csv: no rows after the header"},
		{"hex float", head + "a.png,0x1p4,2,30,40,Tree\n", `t.csv:2: column xmin: not a number: "0x1p4"`},
		{"underscore", head + "a.png,1_0,2,30,40,Tree\n", `t.csv:2: column xmin: not a number: "1_0"`},
		{"blank path", head + "  ,1,2,3,4,Tree\n", "t.csv:2: empty image_path"},
	} {
		_, err := ParseTruth("t.csv", []byte(c.csv))
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInput) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
	for _, s := range []string{"1.5", "-3", "1e300", "-0.0001"} {
		_, err := ParsePredictions("p.csv", []byte(phead+"a.png,1,2,3,4,Tree,"+s+"\n"), Options{})
		if err == nil || !strings.Contains(err.Error(), "p.csv:2: score") || !strings.Contains(err.Error(), "not in [0, 1]") {
			t.Errorf("score %s: %v", s, err)
		}
		rows, err := ParsePredictions("p.csv", []byte(phead+"a.png,1,2,3,4,Tree,"+s+"\n"), Options{AllowAnyScore: true})
		if want, _ := strconv.ParseFloat(s, 64); err != nil || rows[0].Score != want {
			t.Errorf("score %s with AllowAnyScore: %v %v", s, rows, err)
		}
	}
	for _, s := range []string{"nan", "inf", "-Infinity", "1e400"} {
		_, err := ParsePredictions("p.csv", []byte(phead+"a.png,1,2,3,4,Tree,"+s+"\n"), Options{AllowAnyScore: true})
		if err == nil || !strings.Contains(err.Error(), "not a finite number") {
			t.Errorf("score %s with AllowAnyScore: %v", s, err)
		}
	}
}

func TestPathsTrimmedAndDuplicatesCounted(t *testing.T) {
	body := " a.png ,1,2,3,4,Tree\n\ta.png,5,6,7,8,Tree\nb.png,0,0,0,0,Tree\n"
	tr, err := ParseTruth("t.csv", []byte("image_path,xmin,ymin,xmax,ymax,label\n"+body+body))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Images) != 2 || tr.Images[0].Path != "a.png" || len(tr.Images[0].Rows) != 4 {
		t.Fatalf("paths not trimmed into one image: %+v", tr.Images)
	}
	if tr.Duplicates != 2 { // the two a.png rows; b.png's empty-frame rows do not count
		t.Fatalf("duplicates %d, want 2", tr.Duplicates)
	}
	rows, err := ParsePredictions("p.csv", []byte("image_path,xmin,ymin,xmax,ymax,label,score\na.png,1,2,3,4,Tree,0.5\na.png,1,2,3,4,Tree,0.5\na.png,1,2,3,4,Tree,0.6\n"), Options{})
	if err != nil || Duplicates(rows) != 1 {
		t.Fatalf("%v, duplicates %d, want 1", err, Duplicates(rows))
	}
}

// checkRows is the fuzz invariant of a parsed row: a non-empty trimmed
// path and label, finite coordinates, no inverted box, and for
// predictions a finite score in [0, 1].
func checkRows(t *testing.T, rows []Row, scored bool) {
	t.Helper()
	for _, r := range rows {
		b := r.Box
		for _, v := range []float64{b.Xmin, b.Ymin, b.Xmax, b.Ymax, r.Score} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("line %d: non-finite value accepted: %+v", r.Line, r)
			}
		}
		if b.Xmax < b.Xmin || b.Ymax < b.Ymin {
			t.Fatalf("line %d: inverted box accepted: %+v", r.Line, b)
		}
		if r.Path == "" || strings.Trim(r.Path, blanks) != r.Path || r.Label == "" {
			t.Fatalf("line %d: bad path or label accepted: %q %q", r.Line, r.Path, r.Label)
		}
		if scored && !(r.Score >= 0 && r.Score <= 1) {
			t.Fatalf("line %d: score %v accepted", r.Line, r.Score)
		}
	}
}

// writeRows writes rows back as a prediction CSV (every number in Go's
// shortest form, which pandas' syntax covers).
func writeRows(rows []Row) []byte {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	w.Write([]string{"image_path", "xmin", "ymin", "xmax", "ymax", "label", "score"})
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	for _, r := range rows {
		w.Write([]string{r.Path, f(r.Box.Xmin), f(r.Box.Ymin), f(r.Box.Xmax), f(r.Box.Ymax), r.Label, f(r.Score)})
	}
	w.Flush()
	return buf.Bytes()
}

func sameRows(t *testing.T, a, b []Row) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("round trip: %d rows, then %d", len(a), len(b))
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Path != y.Path || x.Label != y.Label || x.Box != y.Box || x.Score != y.Score {
			t.Fatalf("round trip changed row %d: %+v then %+v", i, x, y)
		}
	}
}

func FuzzParseTruth(f *testing.F) {
	f.Add([]byte("image_path,xmin,ymin,xmax,ymax,label\na.png,1,2,3,4,Tree\nb.png,0,0,0,0,Tree\n"))
	f.Add([]byte("label,ymax,xmax,ymin,xmin,image_path,x\nTree,4,3,2,1,\" a.png\",q\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := ParseTruth("f.csv", b)
		if err != nil {
			if !errors.Is(err, ErrInput) {
				t.Fatalf("error without ErrInput: %v", err)
			}
			return
		}
		if len(tr.Images) == 0 {
			t.Fatal("a truth without images accepted")
		}
		var all []Row
		for i, im := range tr.Images {
			if j, ok := tr.Index(im.Path); !ok || j != i {
				t.Fatalf("Index(%q) = %d, %v; want %d", im.Path, j, ok, i)
			}
			checkRows(t, im.Rows, false)
			all = append(all, im.Rows...)
		}
		back, err := ParsePredictions("back.csv", writeRows(all), Options{})
		if err != nil {
			t.Fatalf("the rows read back fail: %v", err)
		}
		sameRows(t, all, back)
	})
}

func FuzzParsePredictions(f *testing.F) {
	f.Add([]byte("image_path,xmin,ymin,xmax,ymax,label,score\na.png,1,2,3,4,Tree,0.5\n"), false)
	f.Add([]byte("image_path,xmin,ymin,xmax,ymax,label,scores\na.png,1,2,3,4,Tree,1e-3\na.png,1,2,3,4,Tree,1e-3\n"), true)
	f.Fuzz(func(t *testing.T, b []byte, anyScore bool) {
		rows, err := ParsePredictions("f.csv", b, Options{AllowAnyScore: anyScore})
		if err != nil {
			if !errors.Is(err, ErrInput) {
				t.Fatalf("error without ErrInput: %v", err)
			}
			return
		}
		checkRows(t, rows, !anyScore)
		if d := Duplicates(rows); d < 0 || d >= max(len(rows), 1) {
			t.Fatalf("%d duplicates among %d rows", d, len(rows))
		}
		back, err := ParsePredictions("back.csv", writeRows(rows), Options{AllowAnyScore: anyScore})
		if err != nil {
			t.Fatalf("the rows read back fail: %v", err)
		}
		sameRows(t, rows, back)
	})
}

func FuzzParseLabelDict(f *testing.F) {
	f.Add([]byte("label,id\nAlive,1\nDead,0\n"))
	f.Add([]byte("Tree,0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseLabelDict("f.csv", b)
		if err != nil {
			if !errors.Is(err, ErrInput) {
				t.Fatalf("error without ErrInput: %v", err)
			}
			return
		}
		names := m.Names()
		for id, n := range names {
			if got, ok := m.ID(n); !ok || int(got) != id {
				t.Fatalf("label %q: id %d, %v; want %d", n, got, ok, id)
			}
		}
		var buf bytes.Buffer
		w := csv.NewWriter(&buf)
		w.Write([]string{"label", "id"})
		for id, n := range names {
			w.Write([]string{n, strconv.Itoa(id)})
		}
		w.Flush()
		back, err := ParseLabelDict("back.csv", buf.Bytes())
		if err != nil || strings.Join(back.Names(), "\x00") != strings.Join(names, "\x00") {
			t.Fatalf("round trip: %v then %v (%v)", names, back.Names(), err)
		}
	})
}

// A COCO annotation's bbox is checked before it becomes a box: missing,
// short, long, with infinite corners or area, beyond float32's range, or a
// negative size, and iscrowd other than 0 or 1, are each an input error
// naming the file and the annotation id (a missing or short bbox silently
// became an empty frame). A CSV box whose area overflows, or a coordinate
// beyond float32, is refused the same way, naming the line.
func TestCOCOAnnotationChecked(t *testing.T) {
	doc := func(ann string) []byte {
		return []byte(`{"images": [{"id": 1, "file_name": "a.png"}], "categories": [{"id": 1, "name": "Tree"}],
 "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 5, 5]}, ` + ann + `]}`)
	}
	for ann, want := range map[string]string{
		`{"id": 77, "image_id": 1, "category_id": 1}`:                                     "no bbox",
		`{"id": 77, "image_id": 1, "category_id": 1, "bbox": null}`:                       "no bbox",
		`{"id": 77, "image_id": 1, "category_id": 1, "bbox": [10, 10, 40]}`:               "has 3 numbers",
		`{"id": 77, "image_id": 1, "category_id": 1, "bbox": [10, 10, 40, 4, 5]}`:         "has 5 numbers",
		`{"id": 77, "image_id": 1, "category_id": 1, "bbox": [1e308, 0, 1e308, 10]}`:      "not finite",
		`{"id": 77, "image_id": 1, "category_id": 1, "bbox": [0, 0, 1e308, 1e308]}`:       "beyond float32",
		`{"id": 77, "image_id": 1, "category_id": 1, "bbox": [0, 0, 1e200, 1e200]}`:       "beyond float32",
		`{"id": 77, "image_id": 1, "category_id": 1, "bbox": [0, 0, -3, 4]}`:              "negative width",
		`{"id": 77, "image_id": 1, "category_id": 1, "bbox": [0, 0, 3, 4], "iscrowd": 2}`: "iscrowd 2",
	} {
		_, err := ParseCOCOTruth("t.json", doc(ann))
		if err == nil || !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "t.json: annotation 77") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", ann, err, want)
		}
	}
	if tr, err := ParseCOCOTruth("t.json", doc(`{"id": 2, "image_id": 1, "category_id": 1, "bbox": [0, 0, 3, 4], "iscrowd": 1}`)); err != nil || len(tr.Images) != 1 {
		t.Fatalf("a good file: %v", err)
	}
	for _, row := range []string{"a.png,0,0,1e308,1e308,Tree", "a.png,-1e308,0,1e308,5,Tree", "a.png,0,0,4e38,5,Tree"} {
		_, err := ParseTruth("t.csv", []byte("image_path,xmin,ymin,xmax,ymax,label\n"+row+"\n"))
		if err == nil || !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "t.csv:2") {
			t.Errorf("%s: %v", row, err)
		}
	}
}

// A truth CSV's optional iscrowd column (0, 1 or empty) marks crowd
// regions, which Resolve carries to the boxes; anything else is refused
// naming the line. Predictions have none.
func TestIsCrowdColumn(t *testing.T) {
	tr, err := ParseTruth("t.csv", []byte("image_path,xmin,ymin,xmax,ymax,label,iscrowd\na.png,0,0,5,5,Tree,1\na.png,1,1,6,6,Tree,0\na.png,2,2,7,7,Tree,\n"))
	if err != nil {
		t.Fatal(err)
	}
	ims, err := tr.Resolve("t.csv", box.SortedLabelMap([]string{"Tree"}))
	if err != nil || len(ims) != 1 || !ims[0].Truth[0].Crowd || ims[0].Truth[1].Crowd || ims[0].Truth[2].Crowd {
		t.Fatalf("%+v %v", ims, err)
	}
	if _, err := ParseTruth("t.csv", []byte("image_path,xmin,ymin,xmax,ymax,label,iscrowd\na.png,0,0,5,5,Tree,2\n")); err == nil || !strings.Contains(err.Error(), "t.csv:2: iscrowd") {
		t.Fatalf("iscrowd 2: %v", err)
	}
	rows, err := ParsePredictions("p.csv", []byte("image_path,xmin,ymin,xmax,ymax,label,score,iscrowd\na.png,0,0,5,5,Tree,0.5,1\n"), Options{})
	if err != nil || rows[0].Crowd {
		t.Fatalf("predictions: %+v %v", rows, err)
	}
}

// A folder of VOC files holding a FIFO (or a device link) named .xml: the
// file is refused as not regular, at once; the open never blocks.
func TestVOCFolderRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.xml"), []byte(`<annotation><filename>a.png</filename><object><name>Tree</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>5</xmax><ymax>5</ymax></bndbox></object></annotation>`), 0o644)
	if err := syscall.Mkfifo(filepath.Join(dir, "b.xml"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := ReadVOCFolder(dir); done <- err }()
	select {
	case err := <-done:
		if err == nil || !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "b.xml: not a regular file") {
			t.Fatalf("%v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ReadVOCFolder blocked on a FIFO")
	}
	os.Remove(filepath.Join(dir, "b.xml"))
	os.Symlink("/dev/zero", filepath.Join(dir, "c.xml"))
	if _, err := ReadVOCFolder(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("/dev/zero: %v", err)
	}
}

// TestCOCOEmptyFrameLabelAndQuoting: an image without annotations takes
// the label of the lowest category id, whatever the order categories are
// listed in; labels holding commas and quotes survive the CSV the truth is
// converted to. (Mutation survivors of coco.go, issue 35.)
func TestCOCOEmptyFrameLabelAndQuoting(t *testing.T) {
	doc := `{"images": [{"id": 1, "file_name": "a.png"}, {"id": 2, "file_name": "b.png"}],
 "categories": [{"id": 9, "name": "Z, \"dead\""}, {"id": 3, "name": "Alive"}, {"id": 5, "name": "M"}],
 "annotations": [{"id": 1, "image_id": 2, "category_id": 9, "bbox": [1, 1, 5, 5]}]}`
	tr, err := ParseCOCOTruth("t.json", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Images) != 2 || !tr.Images[0].Empty || tr.Images[0].Labels[0] != "Alive" {
		t.Fatalf("empty frame %+v, want the label of category 3", tr.Images[0])
	}
	if r := tr.Images[1].Rows; len(r) != 1 || r[0].Label != `Z, "dead"` {
		t.Fatalf("rows %+v", r)
	}
}

// TestVOCNegativeIntegers: a negative integer coordinate is Python's
// int(), not its magnitude (a box may start left of the image).
func TestVOCNegativeIntegers(t *testing.T) {
	rows, err := ParseVOC("v.xml", []byte("<annotation><filename>a.png</filename><object><name>T</name><bndbox><xmin>-5</xmin><ymin>-1_0</ymin><xmax>+7</xmax><ymax>8</ymax></bndbox></object></annotation>"))
	if err != nil {
		t.Fatal(err)
	}
	if b := rows[0].Box; b.Xmin != -5 || b.Ymin != -10 || b.Xmax != 7 || b.Ymax != 8 {
		t.Fatalf("box %+v, want -5,-10,7,8", b)
	}
}
