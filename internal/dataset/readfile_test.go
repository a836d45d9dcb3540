package dataset

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadFileAsDeepForest: canopy's rows for a folder of Pascal VOC files
// and a CSV with WKT geometry equal DeepForest's utilities.read_file's
// (expected.json, tools/deepforest/read_file.py), float coordinates rounded
// half to even and the image path the base name of <filename>.
func TestReadFileAsDeepForest(t *testing.T) {
	b, err := os.ReadFile("testdata/readfile/expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var exp struct {
		Files map[string]json.RawMessage `json:"files"`
	}
	if err := json.Unmarshal(b, &exp); err != nil {
		t.Fatal(err)
	}
	for name, raw := range exp.Files {
		p := filepath.Join("testdata/readfile", name)
		var truth *Truth
		var err error
		switch {
		case strings.HasSuffix(name, ".csv"):
			data, _ := os.ReadFile(p)
			truth, err = ParseTruthFile(p, data)
		case strings.HasSuffix(name, ".xml"):
			data, _ := os.ReadFile(p)
			truth, err = ParseTruthFile(p, data)
		default:
			var data []byte
			if data, err = ReadVOCFolder(p); err == nil {
				truth, err = ParseTruthFile(p, data)
			}
		}
		var want [][]any
		if json.Unmarshal(raw, &want) != nil {
			// DeepForest refused it
			if err == nil || !errors.Is(err, ErrInput) {
				t.Errorf("%s: DeepForest refuses it (%s), canopy: %v", name, raw, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got [][]any
		for _, im := range truth.Images {
			if im.Empty {
				got = append(got, []any{im.Path, 0.0, 0.0, 0.0, 0.0, im.Labels[0]})
			}
			for _, r := range im.Rows {
				got = append(got, []any{r.Path, r.Box.Xmin, r.Box.Ymin, r.Box.Xmax, r.Box.Ymax, r.Label})
			}
		}
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if string(g) != string(w) {
			t.Errorf("%s:\ncanopy     %s\nDeepForest %s", name, g, w)
		}
	}
}

// TestVOCErrors: each missing field, a file without objects, bad numbers
// and malformed WKT are input errors naming the file.
func TestVOCErrors(t *testing.T) {
	obj := func(inner string) string {
		return "<annotation><filename>a.png</filename><object>" + inner + "</object></annotation>"
	}
	bb := "<bndbox><xmin>1</xmin><ymin>1</ymin><xmax>5</xmax><ymax>5</ymax></bndbox>"
	for doc, want := range map[string]string{
		obj("<name>Tree</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>5</xmax></bndbox>"): "no <ymax>",
		obj(bb):                  "no <name>",
		obj("<name>Tree</name>"): "no <bndbox>",
		"<annotation><object><name>T</name>" + bb + "</object></annotation>":                             "no <filename>",
		"<annotation><filename>a.png</filename></annotation>":                                            "no <object>",
		obj("<name>T</name><bndbox><xmin>x</xmin><ymin>1</ymin><xmax>5</xmax><ymax>5</ymax></bndbox>"):   "not a number",
		obj("<name>T</name><bndbox><xmin>nan</xmin><ymin>1</ymin><xmax>5</xmax><ymax>5</ymax></bndbox>"): "not a number",
		obj("<name>T</name><bndbox><xmin>9</xmin><ymin>1</ymin><xmax>5</xmax><ymax>5</ymax></bndbox>"):   "max < min",
		"<annotation":                            "not a Pascal VOC annotation",
		obj("<name>T</name>" + bb + bb):          "object 1 has 2 <bndbox> elements",
		obj("<name>T</name><name>U</name>" + bb): "object 1 has 2 <name> elements",
		obj("<name>T</name><bndbox><xmin>1</xmin><xmin>2</xmin><ymin>1</ymin><xmax>5</xmax><ymax>5</ymax></bndbox>"):             "<bndbox> has 2 <xmin> elements",
		"<annotation><filename>a.png</filename><filename>b.png</filename><object><name>T</name>" + bb + "</object></annotation>": "has 2 <filename> elements",
	} {
		_, err := ParseVOC("v.xml", []byte(doc))
		if err == nil || !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "v.xml") {
			t.Errorf("%s: %v, want an ErrInput naming v.xml with %q", doc, err, want)
		}
	}
	for cell, want := range map[string]string{
		"POINT (1 2)":                        "not POINT",
		"POLYGON EMPTY":                      "empty or malformed",
		"POLYGON ((0 0, 1 0, 1 1))":          "ring 1 is not closed",
		"POLYGON ((0 0, 0 0))":               "at least 3",
		"POLYGON ((0 0, 1 0, 1 1, 0 0)":      "unbalanced",
		"POLYGON ((0 0, 1 0, 1 1, 0 0)) x":   "text after",
		"POLYGON ((0 0, 1 x, 1 1, 0 0))":     "not a number",
		"POLYGON ((0 0 0, 1 0, 1 1, 0 0))":   "x y pair",
		"POLYGON ((0 0, 1e999 0, 1 1, 0 0))": "finite",
	} {
		csv := "image_path,label,geometry\na.png,Tree,\"" + cell + "\"\n"
		_, err := ParseTruth("w.csv", []byte(csv))
		if err == nil || !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "w.csv:2") {
			t.Errorf("%s: %v, want an ErrInput at w.csv:2 with %q", cell, err, want)
		}
	}
	x0, y0, x1, y1, err := wktBounds("MULTIPOLYGON (((0 0, 2 0, 2 2, 0 0)), ((5 -1, 6 -1, 6 3, 5 -1)))")
	if err != nil || x0 != 0 || y0 != -1 || x1 != 6 || y1 != 3 {
		t.Errorf("multipolygon bounds %v %v %v %v %v", x0, y0, x1, y1, err)
	}
}

// TestWKTAsShapely: every WKT cell of shapely_wkt.json (made by
// tools/shapely/wkt_bounds.py from geopandas' from_wkt and shapely's
// .bounds, as DeepForest's read_file takes a geometry) is refused where
// shapely raises and gives shapely's bounds where it does not: an
// unclosed ring is an error, a polygon's interior rings do not widen its
// bounds. The forms canopy refuses although shapely reads them are listed
// with their reason.
func TestWKTAsShapely(t *testing.T) {
	b, err := os.ReadFile("testdata/shapely_wkt.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Cases []struct {
			WKT    string `json:"wkt"`
			Bounds []any  `json:"bounds"`
			Error  string `json:"error"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	stricter := map[string]string{
		"POLYGON EMPTY":         "empty or malformed", // shapely: NaN bounds
		"POINT (1 2)":           "not POINT",          // a box needs a polygon
		"LINESTRING (0 0, 1 1)": "not LINESTRING",     // likewise
		"POLYGON ((0 0 5, 10 0 5, 10 10 5, 0 0 5))":       "x y pair",     // Z coordinates
		"MULTIPOLYGON (((0 0, 10 0, 10 10, 0 0)), EMPTY)": "expected",     // an EMPTY member
		"POLYGON ((0 0, 1e400 0, 1 1, 0 0))":              "not a finite", // shapely: an infinite bound
		"POLYGON ((0 0, nan 0, 1 1, 0 0))":                "not a number", // shapely skips the NaN
	}
	seen := 0
	for _, c := range fx.Cases {
		x0, y0, x1, y1, err := wktBounds(c.WKT)
		if want, ok := stricter[c.WKT]; ok {
			seen++
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want an error with %q (canopy is stricter than shapely here)", c.WKT, err, want)
			}
			continue
		}
		if c.Error != "" {
			if err == nil {
				t.Errorf("%s: bounds %v %v %v %v, shapely raises %s", c.WKT, x0, y0, x1, y1, c.Error)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v, shapely's bounds %v", c.WKT, err, c.Bounds)
			continue
		}
		got := []any{x0, y0, x1, y1}
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(c.Bounds)
		if string(g) != string(w) {
			t.Errorf("%s: bounds %s, shapely %s", c.WKT, g, w)
		}
	}
	if seen != len(stricter) || len(fx.Cases) < 30 {
		t.Errorf("%d cases, %d of the %d stricter forms found", len(fx.Cases), seen, len(stricter))
	}
}

// FuzzParseVOC: ParseVOC never panics; it refuses with ErrInput or returns
// at least one row, each with a label, a base-name path and max >= min.
func FuzzParseVOC(f *testing.F) {
	for _, n := range []string{"a.xml", "b.xml", "c.xml"} {
		b, err := os.ReadFile(filepath.Join("testdata/readfile/three-voc", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rows, err := ParseVOC("f.xml", b)
		if err != nil {
			if !errors.Is(err, ErrInput) {
				t.Fatalf("error without ErrInput: %v", err)
			}
			return
		}
		if len(rows) == 0 {
			t.Fatal("no rows and no error")
		}
		for _, r := range rows {
			if r.Label == "" || strings.Contains(r.Path, "/") || r.Box.Xmax < r.Box.Xmin || r.Box.Ymax < r.Box.Ymin {
				t.Fatalf("row %+v", r)
			}
		}
	})
}

// TestCOCOSegmentation: an annotation without bbox takes its polygons'
// bounds (polygons under 3 points skipped); one with neither is an error.
func TestCOCOSegmentation(t *testing.T) {
	data, err := os.ReadFile("testdata/readfile/three-coco-seg.json")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := ParseTruthFile("s.json", data)
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.Images[0].Rows[1].Box; got.Xmin != 20 || got.Ymin != 20 || got.Xmax != 30 || got.Ymax != 30 {
		t.Fatalf("bounds %+v", got)
	}
	if !tr.Images[1].Empty || tr.Images[2].Rows[0].Box.Xmax != 50 {
		t.Fatalf("images %+v", tr.Images)
	}
	for doc, want := range map[string]string{
		`{"images":[{"id":1,"file_name":"a.png"}],"categories":[{"id":1,"name":"T"}],"annotations":[{"id":7,"image_id":1,"category_id":1}]}`:                               "annotation 7 has no bbox and no polygon segmentation",
		`{"images":[{"id":1,"file_name":"a.png"}],"categories":[{"id":1,"name":"T"}],"annotations":[{"id":7,"image_id":1,"category_id":1,"segmentation":[[1,2,3,4]]}]}`:    "no polygon of at least 3 points",
		`{"images":[{"id":1,"file_name":"a.png"}],"categories":[{"id":1,"name":"T"}],"annotations":[{"id":7,"image_id":1,"category_id":1,"segmentation":{"counts":"x"}}]}`: "no polygon segmentation",
		`{"images":[{"id":1,"file_name":"a.png"}],"categories":[{"id":1,"name":"T"}],"annotations":[{"id":7,"image_id":1,"category_id":1,"segmentation":[[1,2,3,4,5]]}]}`:  "x, y pairs",
	} {
		_, err := ParseTruthFile("s.json", []byte(doc))
		if err == nil || !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", doc, err, want)
		}
	}
}
