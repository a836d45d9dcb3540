package geoparquet

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/canopy-hpc/canopy/infer/gdal"
)

// A gdal.Feature converts to a Row (what predict --tile holds for
// predictions.gpkg is what it writes here).
var _ = Row(gdal.Feature{})

// projjson is a small PROJJSON object (what gdal.PROJJSON returns is
// checked against GDAL in infer/gdal).
const projjson = `{
  "type": "ProjectedCRS",
  "name": "WGS 84 / UTM zone 17N",
  "id": {"authority": "EPSG", "code": 32617}
}`

// rowsOf makes n rows of boxes on a north-up 10 cm grid (BoxRing's ring),
// with distinct values in every column.
func rowsOf(n int) []Row {
	gt := [6]float64{404211.37, 0.1, 0, 3285123.91, 0, -0.1}
	rows := make([]Row, n)
	for i := range rows {
		x0, y0 := float64(i%977), float64(i%613)
		x1, y1 := x0+float64(1+i%41), y0+float64(1+i%29)
		ring := gdal.BoxRing(gt, x0, y0, x1, y1)
		// The columns are the polygon's bounds, as stageGPKG makes them
		// (north-up: pixel ymin maps to the larger y).
		rows[i] = Row{Ring: ring, ImagePath: fmt.Sprintf("r%d.tif", i%3), Label: []string{"Tree", "Snag"}[i%2],
			Score: float64(i%1000) / 1000, Xmin: min(ring[0][0], ring[2][0]), Ymin: min(ring[0][1], ring[1][1]),
			Xmax: max(ring[0][0], ring[2][0]), Ymax: max(ring[0][1], ring[1][1])}
	}
	return rows
}

func write(t *testing.T, crs []byte, rows []Row) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, crs, rows); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// readBack opens the file with parquet-go and returns its records, its
// "geo" JSON and its metadata.
func readBack(t *testing.T, data []byte) ([]record, map[string]any, *parquet.File) {
	t.Helper()
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	geo, ok := f.Lookup("geo")
	if !ok {
		t.Fatal("no geo metadata")
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(geo), &m); err != nil {
		t.Fatalf("geo metadata: %v", err)
	}
	recs, err := parquet.Read[record](bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	return recs, m, f
}

func decodeWKB(t *testing.T, b []byte) [5][2]float64 {
	t.Helper()
	if len(b) != wkbLen || b[0] != 1 || binary.LittleEndian.Uint32(b[1:]) != 3 ||
		binary.LittleEndian.Uint32(b[5:]) != 1 || binary.LittleEndian.Uint32(b[9:]) != 5 {
		t.Fatalf("not a little-endian one-ring 5-point WKB polygon: % x", b[:min(len(b), 13)])
	}
	var ring [5][2]float64
	for i := range ring {
		ring[i][0] = math.Float64frombits(binary.LittleEndian.Uint64(b[13+16*i:]))
		ring[i][1] = math.Float64frombits(binary.LittleEndian.Uint64(b[21+16*i:]))
	}
	return ring
}

// TestRoundTrip writes rows over several conversion chunks and row groups
// and reads them back with parquet-go: every column, the WKB polygon, the
// bbox covering and the "geo" JSON.
func TestRoundTrip(t *testing.T) {
	rows := rowsOf(RowGroupRows + 2*chunk + 17)
	data := write(t, []byte(projjson), rows)
	recs, geo, f := readBack(t, data)
	if len(recs) != len(rows) {
		t.Fatalf("%d rows back, want %d", len(recs), len(rows))
	}
	if g := len(f.RowGroups()); g != 2 {
		t.Errorf("%d row groups, want 2 (at most %d rows each)", g, RowGroupRows)
	}
	want := [4]float64{math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1)}
	for i, r := range rows {
		g := recs[i]
		if g.ImagePath != r.ImagePath || g.Label != r.Label || g.Score != r.Score ||
			g.Xmin != r.Xmin || g.Ymin != r.Ymin || g.Xmax != r.Xmax || g.Ymax != r.Ymax {
			t.Fatalf("row %d: got %+v, want %+v", i, g, r)
		}
		if ring := decodeWKB(t, g.Geometry); ring != r.Ring {
			t.Fatalf("row %d: ring %v, want %v", i, ring, r.Ring)
		}
		// The ring is BoxRing's, north-up: its bounds are the columns.
		if (g.BBox != bbox{r.Xmin, r.Ymin, r.Xmax, r.Ymax}) {
			t.Fatalf("row %d: bbox %+v, want the ring's bounds %v", i, g.BBox, [4]float64{r.Xmin, r.Ymin, r.Xmax, r.Ymax})
		}
		want = [4]float64{min(want[0], r.Xmin), min(want[1], r.Ymin), max(want[2], r.Xmax), max(want[3], r.Ymax)}
	}
	wantGeo := map[string]any{
		"version": "1.1.0", "primary_column": "geometry",
		"columns": map[string]any{"geometry": map[string]any{
			"encoding": "WKB", "geometry_types": []any{"Polygon"},
			"crs":  map[string]any{"type": "ProjectedCRS", "name": "WGS 84 / UTM zone 17N", "id": map[string]any{"authority": "EPSG", "code": 32617.0}},
			"bbox": []any{want[0], want[1], want[2], want[3]},
			"covering": map[string]any{"bbox": map[string]any{
				"xmin": []any{"bbox", "xmin"}, "ymin": []any{"bbox", "ymin"}, "xmax": []any{"bbox", "xmax"}, "ymax": []any{"bbox", "ymax"}}},
		}},
	}
	a, _ := json.Marshal(geo)
	b, _ := json.Marshal(wantGeo)
	if !bytes.Equal(a, b) {
		t.Errorf("geo metadata\n got %s\nwant %s", a, b)
	}
	md := f.Metadata()
	if md.CreatedBy != CreatedBy {
		t.Errorf("created_by %q, want %q", md.CreatedBy, CreatedBy)
	}
	if len(md.KeyValueMetadata) != 1 {
		t.Errorf("key-value metadata %v: want geo alone", md.KeyValueMetadata)
	}
}

// TestSchema: the columns, their order, types and repetition, as
// GeoParquet 1.1 and predictions.csv want them.
func TestSchema(t *testing.T) {
	_, _, f := readBack(t, write(t, nil, rowsOf(3)))
	var got []string
	for _, c := range f.Schema().Fields() {
		s := c.Name() + ":"
		if c.Leaf() {
			s += c.Type().String()
		} else {
			var sub []string
			for _, k := range c.Fields() {
				sub = append(sub, k.Name()+":"+k.Type().String())
			}
			s += "{" + strings.Join(sub, ",") + "}"
		}
		if c.Optional() || c.Repeated() {
			s += " (not required)"
		}
		got = append(got, s)
	}
	want := []string{"image_path:STRING", "xmin:DOUBLE", "ymin:DOUBLE", "xmax:DOUBLE", "ymax:DOUBLE",
		"label:STRING", "score:DOUBLE", "geometry:BYTE_ARRAY", "bbox:{xmin:DOUBLE,ymin:DOUBLE,xmax:DOUBLE,ymax:DOUBLE}"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("schema\n got %v\nwant %v", got, want)
	}
}

// TestDeterministic: identical input gives identical bytes, whatever
// GOMAXPROCS, and the bytes change when a value does.
func TestDeterministic(t *testing.T) {
	rows := rowsOf(3*chunk + 5)
	a := write(t, []byte(projjson), rows)
	prev := runtime.GOMAXPROCS(1)
	b := write(t, []byte(projjson), rows)
	runtime.GOMAXPROCS(prev)
	c := write(t, []byte(projjson), rowsOf(3*chunk+5))
	if !bytes.Equal(a, b) || !bytes.Equal(a, c) {
		t.Fatal("the same rows gave different bytes")
	}
	rows[len(rows)-1].Score = math.Nextafter(rows[len(rows)-1].Score, 2)
	if bytes.Equal(a, write(t, []byte(projjson), rows)) {
		t.Fatal("a changed score gave the same bytes")
	}
	// No timestamp, host or build stamp: created_by is the constant.
	if !bytes.Contains(a, []byte(CreatedBy)) {
		t.Errorf("created_by %q not in the file", CreatedBy)
	}
}

// TestEmpty: no rows give a readable file with the schema, no rows, no
// file bbox, and "crs": null when there is no CRS.
func TestEmpty(t *testing.T) {
	for _, rows := range [][]Row{nil, {}} {
		data := write(t, nil, rows)
		recs, geo, f := readBack(t, data)
		if len(recs) != 0 || f.NumRows() != 0 {
			t.Fatalf("%d rows, want 0", len(recs))
		}
		col := geo["columns"].(map[string]any)["geometry"].(map[string]any)
		if _, ok := col["bbox"]; ok {
			t.Errorf("an empty file has a bbox: %v", col["bbox"])
		}
		if c, ok := col["crs"]; !ok || c != nil {
			t.Errorf("crs %v (present %v): want an explicit null", c, ok)
		}
		if len(f.Schema().Fields()) != 9 {
			t.Errorf("%d columns, want 9", len(f.Schema().Fields()))
		}
	}
}

// TestNoCRS: a nil CRS is written as "crs": null, never left out (which
// would mean longitude, latitude).
func TestNoCRS(t *testing.T) {
	geo, err := Metadata(nil, rowsOf(2))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(geo, []byte(`"crs":null`)) {
		t.Errorf("geo %s: want \"crs\":null", geo)
	}
}

// TestHugeCoordinates: values near the float64 limits and tiny ones
// survive the WKB, the bbox column and the JSON bbox exactly.
func TestHugeCoordinates(t *testing.T) {
	big := math.MaxFloat64
	ring := [5][2]float64{{big, -big}, {big, big / 3}, {-big, big / 3}, {-big, -big}, {big, -big}}
	rows := []Row{{Ring: ring, ImagePath: "huge.tif", Label: "Tree", Score: 1, Xmin: -big, Ymin: -big, Xmax: big, Ymax: big / 3},
		{Ring: [5][2]float64{{5e-324, 0}, {5e-324, 1e-300}, {0, 1e-300}, {0, 0}, {5e-324, 0}}, ImagePath: "tiny.tif", Label: "Tree"}}
	data := write(t, nil, rows)
	recs, geo, _ := readBack(t, data)
	for i, r := range rows {
		if decodeWKB(t, recs[i].Geometry) != r.Ring {
			t.Errorf("row %d: ring changed", i)
		}
	}
	if (recs[0].BBox != bbox{-big, -big, big, big / 3}) {
		t.Errorf("bbox %+v", recs[0].BBox)
	}
	got := geo["columns"].(map[string]any)["geometry"].(map[string]any)["bbox"].([]any)
	if got[0] != -big || got[1] != -big || got[2] != big || got[3] != big/3 {
		t.Errorf("file bbox %v", got)
	}
}

// TestRefused: what the file cannot hold is refused before any byte is
// written, naming the row.
func TestRefused(t *testing.T) {
	cases := map[string]func(r *Row){
		"score is NaN":       func(r *Row) { r.Score = math.NaN() },
		"score is +Inf":      func(r *Row) { r.Score = math.Inf(1) },
		"xmax is NaN":        func(r *Row) { r.Xmax = math.NaN() },
		"ymin is -Inf":       func(r *Row) { r.Ymin = math.Inf(-1) },
		"polygon point":      func(r *Row) { r.Ring[2][1] = math.NaN() },
		"ring is not closed": func(r *Row) { r.Ring[4][0]++ },
		"a string of":        func(r *Row) { r.ImagePath = strings.Repeat("a", MaxString+1) },
	}
	for name, plant := range cases {
		rows := rowsOf(5)
		plant(&rows[3])
		var b bytes.Buffer
		err := Write(&b, nil, rows)
		if !errors.Is(err, ErrRow) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err %v", name, err)
		}
		if !strings.Contains(err.Error(), "row 3") {
			t.Errorf("%s: %v does not name row 3", name, err)
		}
		if b.Len() != 0 {
			t.Errorf("%s: %d bytes written", name, b.Len())
		}
	}
	for _, crs := range []string{"", "EPSG:4326", "[1]", `{"a":`, "null"} {
		var b bytes.Buffer
		if err := Write(&b, []byte(crs), rowsOf(1)); !errors.Is(err, ErrRow) || b.Len() != 0 {
			t.Errorf("crs %q: err %v, %d bytes", crs, err, b.Len())
		}
	}
	if err := Write(&bytes.Buffer{}, bytes.Repeat([]byte(" "), MaxCRS+1), nil); !errors.Is(err, ErrRow) {
		t.Errorf("a CRS over MaxCRS: %v", err)
	}
	// At the limits: accepted.
	rows := rowsOf(1)
	rows[0].ImagePath = strings.Repeat("é", MaxString/2)
	if err := Write(&bytes.Buffer{}, nil, rows); err != nil {
		t.Errorf("a string of MaxString bytes: %v", err)
	}
}

// TestNotUTF8: a file name or label that is not UTF-8 (a raster named in
// Latin-1) is written with U+FFFD for its bad bytes, so that readers that
// check UTF-8 (pyarrow) read the file; valid names are untouched.
func TestNotUTF8(t *testing.T) {
	rows := rowsOf(3)
	rows[1].ImagePath, rows[1].Label = "for\xeat.tif", "\xff\xfeTree"
	rows[2].ImagePath = "forêt.tif"
	recs, _, _ := readBack(t, write(t, nil, rows))
	want := [][2]string{{rows[0].ImagePath, rows[0].Label}, {"for\uFFFDt.tif", "\uFFFDTree"}, {"forêt.tif", rows[2].Label}}
	for i, w := range want {
		if recs[i].ImagePath != w[0] || recs[i].Label != w[1] {
			t.Errorf("row %d: %q %q, want %q %q", i, recs[i].ImagePath, recs[i].Label, w[0], w[1])
		}
	}
}

// TestParquetGoVersion: created_by names the library version go.mod
// requires.
func TestParquetGoVersion(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*github\.com/parquet-go/parquet-go (\S+)`).FindSubmatch(mod)
	if m == nil || string(m[1]) != ParquetGoVersion {
		t.Errorf("go.mod requires parquet-go %q, ParquetGoVersion is %q", m, ParquetGoVersion)
	}
}

// TestGeopandasReads: geopandas reads the edge cases (no rows, no CRS, a
// name that is not UTF-8) with a real PROJJSON from GDAL
// (tools/geoparquet/read.py, the peers' venv); skipped without the venv
// or without GDAL, which the PROJJSON needs.
func TestGeopandasReads(t *testing.T) {
	const py = "/opt/canopy-peers/venv/bin/python"
	if _, err := os.Stat(py); err != nil {
		t.Skipf("the peers' venv (%s) is not installed", py)
	}
	if !gdal.Available {
		t.Skip("built with -tags nogdal: no PROJJSON")
	}
	dir := t.TempDir()
	png := filepath.Join(dir, "x.png")
	if err := os.WriteFile(png, onePixelPNG(t), 0o644); err != nil {
		t.Fatal(err)
	}
	tif := filepath.Join(dir, "x.tif")
	if out, err := exec.Command("gdal_translate", "-q", "-a_srs", "EPSG:32617", "-a_ullr", "0", "1", "1", "0", png, tif).CombinedOutput(); err != nil {
		t.Skipf("gdal_translate: %v %s", err, out)
	}
	r, err := gdal.Open(tif)
	if err != nil {
		t.Fatal(err)
	}
	crs, err := gdal.PROJJSON(r.Info().CRS)
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	bad := rowsOf(2)
	bad[0].ImagePath = "for\xeat.tif"
	files := map[string][]byte{
		"empty.parquet":       write(t, crs, nil),
		"empty-nocrs.parquet": write(t, nil, nil),
		"nocrs.parquet":       write(t, nil, rowsOf(4)),
		"utm.parquet":         write(t, crs, rowsOf(7)),
		"latin1-name.parquet": write(t, crs, bad),
	}
	var args []string
	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, p)
	}
	sort.Strings(args)
	out, err := exec.Command(py, append([]string{"../../tools/geoparquet/read.py"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("read.py: %v\n%s", err, out)
	}
	var got []struct {
		File    string
		Rows    int
		EPSG    *int
		Columns []string
		Bounds  []*float64
		First   *struct{ Image_path, Label, Geometry string }
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := map[string]struct {
		rows int
		epsg int // 0: none
	}{"empty.parquet": {0, 32617}, "empty-nocrs.parquet": {0, 0}, "nocrs.parquet": {4, 0}, "utm.parquet": {7, 32617}, "latin1-name.parquet": {2, 32617}}
	cols := "image_path xmin ymin xmax ymax label score geometry"
	for _, g := range got {
		w := want[filepath.Base(g.File)]
		epsg := 0
		if g.EPSG != nil {
			epsg = *g.EPSG
		}
		if g.Rows != w.rows || epsg != w.epsg || strings.Join(g.Columns, " ") != cols {
			t.Errorf("%s: %d rows, EPSG %d, columns %v; want %d rows, EPSG %d", filepath.Base(g.File), g.Rows, epsg, g.Columns, w.rows, w.epsg)
		}
		if (g.Rows == 0) != (g.First == nil) || (g.Rows == 0) != (g.Bounds[0] == nil) {
			t.Errorf("%s: first row %v, bounds %v", filepath.Base(g.File), g.First, g.Bounds)
		}
	}
	if len(got) != len(files) {
		t.Fatalf("%d files read, want %d", len(got), len(files))
	}
	for _, g := range got {
		if filepath.Base(g.File) == "latin1-name.parquet" && g.First.Image_path != "for\uFFFDt.tif" {
			t.Errorf("the Latin-1 name read as %q", g.First.Image_path)
		}
		if filepath.Base(g.File) == "utm.parquet" {
			r := rowsOf(1)[0]
			var pts []string
			for _, p := range r.Ring {
				pts = append(pts, strconv.FormatFloat(p[0], 'f', -1, 64)+" "+strconv.FormatFloat(p[1], 'f', -1, 64))
			}
			if w := "POLYGON ((" + strings.Join(pts, ", ") + "))"; g.First.Geometry != w {
				t.Errorf("first polygon %s, want %s", g.First.Geometry, w)
			}
		}
	}
}

// onePixelPNG is a 1×1 RGB PNG.
func onePixelPNG(t *testing.T) []byte {
	var b bytes.Buffer
	m := image.NewNRGBA(image.Rect(0, 0, 1, 1))
	m.Pix[3] = 255
	if err := png.Encode(&b, m); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestCropColumns (issue 42, item 6): WriteCrops puts the crop models'
// columns after score, before geometry and bbox, optional (null for a row
// the crop step left out), the other columns as Write's; no columns is
// Write's file byte for byte; cells that do not fit the columns and a
// non-finite crop score are refused before a byte is written.
func TestCropColumns(t *testing.T) {
	rows := rowsOf(5)
	cols := []string{"cropmodel_label_0", "cropmodel_score_0", "cropmodel_label_1", "cropmodel_score_1"}
	for i := range rows {
		if i == 2 {
			continue // left out: null cells
		}
		rows[i].CropLabels = []string{fmt.Sprintf("a%d", i), "b"}
		rows[i].CropScores = []float64{0.25 * float64(i), 1}
	}
	var b bytes.Buffer
	if err := WriteCrops(&b, []byte(projjson), rows, cols); err != nil {
		t.Fatal(err)
	}
	type got struct {
		Label  string   `parquet:"label"`
		Score  float64  `parquet:"score"`
		L0     *string  `parquet:"cropmodel_label_0,optional"`
		S0     *float64 `parquet:"cropmodel_score_0,optional"`
		L1     *string  `parquet:"cropmodel_label_1,optional"`
		S1     *float64 `parquet:"cropmodel_score_1,optional"`
		Geomet []byte   `parquet:"geometry"`
	}
	back, err := parquet.Read[got](bytes.NewReader(b.Bytes()), int64(b.Len()))
	if err != nil || len(back) != len(rows) {
		t.Fatalf("read back: %v, %d rows", err, len(back))
	}
	for i, r := range back {
		if r.Label != rows[i].Label || r.Score != rows[i].Score || len(r.Geomet) != wkbLen {
			t.Errorf("row %d: %+v", i, r)
		}
		if i == 2 {
			if r.L0 != nil || r.S0 != nil || r.L1 != nil || r.S1 != nil {
				t.Errorf("row 2: crop cells %v %v %v %v, want null", r.L0, r.S0, r.L1, r.S1)
			}
			continue
		}
		if r.L0 == nil || *r.L0 != rows[i].CropLabels[0] || r.S0 == nil || *r.S0 != rows[i].CropScores[0] || r.L1 == nil || *r.L1 != "b" || r.S1 == nil || *r.S1 != 1 {
			t.Errorf("row %d: crop cells %v %v %v %v", i, r.L0, r.S0, r.L1, r.S1)
		}
	}
	f, err := parquet.OpenFile(bytes.NewReader(b.Bytes()), int64(b.Len()))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range f.Schema().Fields() {
		names = append(names, c.Name())
	}
	want := "[image_path xmin ymin xmax ymax label score " + strings.Join(cols, " ") + " geometry bbox]"
	if fmt.Sprint(names) != want {
		t.Errorf("columns %v, want %s", names, want)
	}
	plain := rowsOf(5)
	var a, c bytes.Buffer
	if err := Write(&a, []byte(projjson), plain); err != nil {
		t.Fatal(err)
	}
	if err := WriteCrops(&c, []byte(projjson), plain, nil); err != nil || !bytes.Equal(a.Bytes(), c.Bytes()) {
		t.Errorf("WriteCrops without columns is not Write's file: %v", err)
	}
	bad := rowsOf(2)
	bad[0].CropLabels, bad[0].CropScores = []string{"a"}, []float64{0.5}
	for name, rs := range map[string][]Row{"cells for 1 model, columns for 2": bad} {
		var w bytes.Buffer
		if err := WriteCrops(&w, nil, rs, cols); !errors.Is(err, ErrRow) || w.Len() != 0 {
			t.Errorf("%s: %v, %d bytes written", name, err, w.Len())
		}
	}
	nan := rowsOf(1)
	nan[0].CropLabels, nan[0].CropScores = []string{"a"}, []float64{math.NaN()}
	var w bytes.Buffer
	if err := WriteCrops(&w, nil, nan, cols[:2]); !errors.Is(err, ErrRow) || w.Len() != 0 || !strings.Contains(err.Error(), "crop score 0 is NaN") {
		t.Errorf("a NaN crop score: %v, %d bytes written", err, w.Len())
	}
}
