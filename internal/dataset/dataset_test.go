package dataset

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/internal/testsupport/shareddata"
)

func TestBadRowsNameFileAndLine(t *testing.T) {
	head := "image_path,xmin,ymin,xmax,ymax,label\n"
	ok := "a.png,1,2,3,4,Tree\n"
	cases := []struct{ name, csv, want string }{
		{"missing column", "image_path,xmin,ymin,xmax,label\n" + ok, "t.csv:1: missing column(s) ymax"},
		{"short row", head + ok + "a.png,1,2,3,4\n", "t.csv:3: wrong number of fields"},
		{"not a number", head + ok + ok + "a.png,1,x,3,4,Tree\n", `t.csv:4: column ymin: not a number: "x"`},
		{"NaN", head + "a.png,NaN,2,3,4,Tree\n", "t.csv:2: column xmin: not a finite number"},
		{"Inf", head + "a.png,1,2,Inf,4,Tree\n", "t.csv:2: column xmax: not a finite number"},
		{"xmax < xmin", head + "a.png,5,2,3,4,Tree\n", "t.csv:2: xmax 3 < xmin 5"},
		{"ymax < ymin", head + "a.png,1,5,3,4,Tree\n", "t.csv:2: ymax 4 < ymin 5"},
		{"empty label", head + "a.png,1,2,3,4,\n", "t.csv:2: empty label"},
		{"empty file", "", "t.csv: empty file"},
		{"quoted newline keeps line", head + "\"a\nb.png\",1,2,3,4,Tree\na.png,1,2,x,4,Tree\n", "t.csv:4: column xmax"},
	}
	for _, c := range cases {
		_, err := ParseTruth("t.csv", []byte(c.csv))
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInput) {
			t.Errorf("%s: got %v, want it to contain %q and wrap ErrInput", c.name, err, c.want)
		}
	}
}

func TestColumnsByHeaderAndEmptyFrames(t *testing.T) {
	csv := "label,ymax,xmax,site,ymin,xmin,image_path\n" +
		"Tree,40,30,x,20,10,b.png\n" +
		"Tree,0,0,x,0,0,e.png\n" +
		"Tree,0,0,x,0,0,b.png\n" + // beside real rows: dropped
		"Bird,4,3,x,2,1,a.png\n" +
		"0,5,5,x,1,1,b.png\n"
	tr, err := ParseTruth("t.csv", []byte(csv))
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, im := range tr.Images {
		paths = append(paths, im.Path)
	}
	if strings.Join(paths, " ") != "b.png e.png a.png" {
		t.Fatalf("order of first appearance: %v", paths)
	}
	b := tr.Images[0]
	if b.Empty || len(b.Rows) != 2 || b.Rows[0].Box.Xmin != 10 || b.Rows[0].Box.Ymax != 40 || b.Rows[1].Label != "0" {
		t.Fatalf("b.png: %+v", b)
	}
	if !tr.Images[1].Empty || len(tr.Images[1].Rows) != 0 {
		t.Fatalf("e.png should be an empty frame: %+v", tr.Images[1])
	}
	if tr.Dropped != 1 {
		t.Fatalf("dropped %d zero rows, want 1", tr.Dropped)
	}
}

func TestPredictionsScoreColumn(t *testing.T) {
	for _, col := range []string{"score", "scores"} {
		rows, err := ParsePredictions("p.csv", []byte("image_path,xmin,ymin,xmax,ymax,label,"+col+"\na.png,1,2,3,4,Tree,0.25\n"), Options{})
		if err != nil || len(rows) != 1 || rows[0].Score != 0.25 {
			t.Fatalf("%s: %v %v", col, rows, err)
		}
	}
	if _, err := ParsePredictions("p.csv", []byte("image_path,xmin,ymin,xmax,ymax,label\na.png,1,2,3,4,Tree\n"), Options{}); err == nil {
		t.Fatal("predictions without a score column accepted")
	}
}

func TestLabelDict(t *testing.T) {
	m, err := ParseLabelDict("c.csv", []byte("label,id\nAlive,1\nDead,0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := m.ID("Dead"); id != 0 || m.Name(1) != "Alive" {
		t.Fatalf("%v", m.Names())
	}
	for _, bad := range []string{"label,id\nA,0\nB,0\n", "label,id\nA,0\nB,2\n", "label,id\nA,x\n"} {
		if _, err := ParseLabelDict("c.csv", []byte(bad)); !errors.Is(err, ErrInput) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// DeepForest's own SJER truth file has its columns as xmin,xmax,ymin,ymax.
func TestSJERTruth(t *testing.T) {
	const f = "../../../shared/data/deepforest/2018_SJER_3_252000_4107000_image_477_truth.csv"
	shareddata.Need(t, f, "DeepForest's SJER truth file")
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := ParseTruth(f, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Images) != 1 || len(tr.Images[0].Rows) == 0 {
		t.Fatalf("%+v", tr.Images)
	}
	for _, r := range tr.Images[0].Rows {
		if r.Box.Xmax <= r.Box.Xmin || r.Box.Ymax <= r.Box.Ymin {
			t.Fatalf("line %d: %+v", r.Line, r.Box)
		}
	}
}

// ImagePaths (predict --csv) finds image_path as ParseTruth does (BOM and
// blanks trimmed, the first of two such columns), trims each path as eval
// does, keeps the first appearance of each, and refuses a CSV without the
// column, a row without a path, or no image at all.
func TestImagePaths(t *testing.T) {
	got, err := ImagePaths("p.csv", []byte("\ufeff image_path ,x,image_path\n a.png ,1,z.png\na.png,2\n\"\tb.png\",3,y.png\nc.png\n"))
	if err != nil || strings.Join(got, "|") != "a.png|b.png|c.png" {
		t.Fatalf("%q, %v", got, err)
	}
	bad := []struct{ name, csv, want string }{
		{"empty file", "", "dataset: p.csv: no header"},
		{"no column", "path,x\na.png,1\n", "dataset: p.csv: no image_path column"},
		{"blank path", "image_path,x\na.png,1\n  ,2\n", "dataset: p.csv:3: empty image_path"},
		{"short row", "x,image_path\na,a.png\nb\n", "dataset: p.csv:3: empty image_path"},
		{"header only", "image_path\n", "dataset: p.csv lists no images"},
		{"bad quote", "image_path\n\"a.png\n", "dataset: p.csv: parse error on line 2"},
	}
	for _, c := range bad {
		_, err := ImagePaths("p.csv", []byte(c.csv))
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInput) {
			t.Errorf("%s: %v, want %q wrapping ErrInput", c.name, err, c.want)
		}
	}
}
