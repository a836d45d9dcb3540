package dataset

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/box"
)

func TestParseWKTGeometries(t *testing.T) {
	for _, c := range []struct {
		wkt   string
		kind  box.Kind
		parts int
		bad   string
	}{
		{wkt: "POINT (1.5 2)", kind: box.KindPoint},
		{wkt: "point(1 2)", kind: box.KindPoint},
		{wkt: "POLYGON ((0 0, 10 0, 10 10, 0 0))", kind: box.KindPolygon, parts: 1},
		{wkt: "MULTIPOLYGON (((0 0, 1 0, 1 1, 0 0)), ((5 5, 6 5, 6 6, 5 5), (5.1 5.1, 5.2 5.1, 5.2 5.2, 5.1 5.1)))", kind: box.KindPolygon, parts: 2},
		{wkt: "POLYGON EMPTY", kind: box.KindPolygon},
		{wkt: "POINT EMPTY", bad: "empty point"},
		{wkt: "POINT (1 2, 3 4)", bad: "one x y pair"},
		{wkt: "POINT (1 2 3)", bad: "not an x y pair"},
		{wkt: "POLYGON ((0 0, 10 0, 10 10, 0 1))", bad: "not closed"},
		{wkt: "POLYGON ((0 0, 10 0, 10 10, 0 0)) x", bad: "text after"},
		{wkt: "LINESTRING (0 0, 1 1)", bad: "not LINESTRING"},
		{wkt: "POINT (nan 1)", bad: "not a number"},
		{wkt: "POINT (1e999 1)", bad: "not a finite number"},
	} {
		k, _, sh, err := ParseWKT(c.wkt)
		if c.bad != "" {
			if err == nil || !strings.Contains(err.Error(), c.bad) {
				t.Errorf("%q: error %v, want %q", c.wkt, err, c.bad)
			}
			continue
		}
		if err != nil || k != c.kind || (sh != nil && len(sh.Parts) != c.parts) {
			t.Errorf("%q: kind %v shape %+v err %v", c.wkt, k, sh, err)
		}
	}
}

// The geometry is detected as DeepForest detects it, except that a
// MultiPolygon is a polygon; a rectangle-only WKT column stays a box.
func TestCSVKindAsDeepForest(t *testing.T) {
	for _, c := range []struct {
		csv  string
		want box.Kind
		bad  bool
	}{
		{csv: "image_path,x,y,label\na.png,1,2,Tree\n", want: box.KindPoint},
		{csv: "image_path,xmin,ymin,xmax,ymax,label,x,y\na.png,1,2,3,4,Tree,1,1\n", want: box.KindBox},
		{csv: "image_path,geometry,label\na.png,\"POLYGON ((0 0, 2 0, 2 2, 0 2, 0 0))\",Tree\n", want: box.KindBox},
		{csv: "image_path,geometry,label\na.png,\"POLYGON ((0 0, 2 0, 2 2, 0 0))\",Tree\n", want: box.KindPolygon},
		{csv: "image_path,geometry,label\na.png,\"MULTIPOLYGON (((0 0, 2 0, 2 2, 0 2, 0 0)))\",Tree\n", want: box.KindPolygon},
		{csv: "image_path,geometry,label\na.png,POINT (1 2),Tree\n", want: box.KindPoint},
		{csv: "image_path,polygon,label\na.png,\"POLYGON ((0 0, 2 0, 2 2, 0 0))\",Tree\n", want: box.KindPolygon},
		{csv: "image_path,geometry,label\na.png,POINT (1 2),Tree\na.png,\"POLYGON ((0 0, 2 0, 2 2, 0 0))\",Tree\n", bad: true},
	} {
		k, err := CSVKind("f.csv", []byte(c.csv))
		if c.bad {
			if err == nil || !errors.Is(err, ErrInput) {
				t.Errorf("%q: %v, want an input error", c.csv, err)
			}
			continue
		}
		if err != nil || k != c.want {
			t.Errorf("%q: %v %v, want %v", c.csv, k, err, c.want)
		}
	}
}

func TestParseGeoCSVRows(t *testing.T) {
	rows, err := ParseGeoCSV("p.csv", []byte("image_path,x,y,label,scores\n a.png ,1.5,-2,Tree,0.25\n"), box.KindPoint, true, Options{})
	if err != nil || len(rows) != 1 || rows[0].Path != "a.png" || rows[0].Geo.Point != (box.Point{X: 1.5, Y: -2}) || rows[0].Geo.Score != 0.25 {
		t.Fatalf("%+v %v", rows, err)
	}
	for _, bad := range []string{
		"image_path,x,y,label\na.png,1,NaN,Tree\n",
		"image_path,x,y,label\na.png,1,0x10,Tree\n",
		"image_path,x,y,label\na.png,1,1e39,Tree\n",
		"image_path,x,label\na.png,1,Tree\n",
		"image_path,x,y,label\n,1,1,Tree\n",
		"image_path,x,y,label\n",
	} {
		if _, err := ParseGeoCSV("t.csv", []byte(bad), box.KindPoint, false, Options{}); !errors.Is(err, ErrInput) {
			t.Errorf("%q: %v, want an input error", bad, err)
		}
	}
	if _, err := ParseGeoCSV("p.csv", []byte("image_path,x,y,label,score\na.png,1,1,Tree,1.5\n"), box.KindPoint, true, Options{}); !errors.Is(err, ErrInput) {
		t.Errorf("score 1.5 accepted: %v", err)
	}
}

func checkGeoRows(t *testing.T, rows []GeoRow, kind box.Kind) {
	t.Helper()
	for _, r := range rows {
		if r.Path == "" || r.Label == "" || r.Line < 2 {
			t.Fatalf("row %+v", r)
		}
		if kind == box.KindPolygon && r.Geo.Shape == nil {
			t.Fatalf("a polygon row without a shape: %+v", r)
		}
		b := box.Box{Xmin: r.Geo.Point.X, Ymin: r.Geo.Point.Y}
		if r.Geo.Shape != nil {
			b = r.Geo.Shape.Bounds()
		}
		for _, v := range [4]float64{b.Xmin, b.Ymin, b.Xmax, b.Ymax} {
			if math.IsNaN(v) || math.Abs(v) > math.MaxFloat32 {
				t.Fatalf("coordinate %v accepted", v)
			}
		}
	}
}

// FuzzParseGeoCSV: the x,y and WKT readers either refuse with ErrInput or
// give rows whose every coordinate is a finite float32-range number.
func FuzzParseGeoCSV(f *testing.F) {
	f.Add([]byte("image_path,x,y,label,score\na.png,1,2,Tree,0.5\nb.png,0,0,Tree,1\n"), false)
	f.Add([]byte("label,y,x,image_path\nTree,4,3,\" a.png\"\n"), false)
	f.Add([]byte("image_path,geometry,label,score\na.png,\"POLYGON ((0 0, 10 0, 10 10, 0 0), (1 1, 2 1, 2 2, 1 1))\",Tree,0.5\n"), true)
	f.Add([]byte("image_path,polygon,label\na.png,\"MULTIPOLYGON (((0 0, 1 0, 1 1, 0 0)), ((2 2, 3 2, 3 3, 2 2)))\",Tree\nb.png,POLYGON EMPTY,Tree\n"), true)
	f.Fuzz(func(t *testing.T, b []byte, polygons bool) {
		kind := box.KindPoint
		if polygons {
			kind = box.KindPolygon
		}
		for _, scored := range []bool{false, true} {
			rows, err := ParseGeoCSV("f.csv", b, kind, scored, Options{})
			if err != nil {
				if !errors.Is(err, ErrInput) {
					t.Fatalf("error without ErrInput: %v", err)
				}
				continue
			}
			checkGeoRows(t, rows, kind)
		}
		if _, err := CSVKind("f.csv", b); err != nil && !errors.Is(err, ErrInput) {
			t.Fatalf("CSVKind error without ErrInput: %v", err)
		}
	})
}

// FuzzParseWKT: a geometry read back from its cell is closed ring by ring
// and finite.
func FuzzParseWKT(f *testing.F) {
	for _, s := range []string{"POINT (1 2)", "POLYGON ((0 0, 10 0, 10 10, 0 0))", "MULTIPOLYGON (((0 0, 1 0, 1 1, 0 0)))", "POLYGON EMPTY", "POLYGON ((0 0, 1 0, 0 0)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, pt, sh, err := ParseWKT(s)
		if err == nil {
			checkGeometry(t, k, pt, sh)
		}
	})
}

// checkGeometry fails t unless a parsed geometry is a finite point or
// rings that are closed, of 3 or more vertices, with finite coordinates.
func checkGeometry(t *testing.T, k box.Kind, pt box.Point, sh *box.Shape) {
	t.Helper()
	finite := func(q box.Point) bool {
		return !math.IsNaN(q.X) && !math.IsInf(q.X, 0) && !math.IsNaN(q.Y) && !math.IsInf(q.Y, 0)
	}
	if k == box.KindPoint {
		if !finite(pt) {
			t.Fatalf("point %v", pt)
		}
		return
	}
	for _, p := range sh.Parts {
		for _, r := range p {
			if len(r) < 3 || r[0] != r[len(r)-1] {
				t.Fatalf("ring %v", r)
			}
			for _, q := range r {
				if !finite(q) {
					t.Fatalf("coordinate %v", q)
				}
			}
		}
	}
}

func wkbPolygon(rings ...[]float64) []byte {
	b := []byte{1, 3, 0, 0, 0}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(rings)))
	for _, r := range rings {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r)/2))
		for _, v := range r {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
		}
	}
	return b
}

func TestParseWKB(t *testing.T) {
	pt := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64([]byte{0, 0, 0, 0, 1}, math.Float64bits(1.5)), math.Float64bits(-2))
	k, p, _, err := ParseWKB(pt)
	if err != nil || k != box.KindPoint || p != (box.Point{X: 1.5, Y: -2}) {
		t.Fatalf("big-endian point: %v %v %v", k, p, err)
	}
	sq := wkbPolygon([]float64{0, 0, 1, 0, 1, 1, 0, 0})
	k, _, sh, err := ParseWKB(sq)
	if err != nil || k != box.KindPolygon || len(sh.Parts) != 1 || len(sh.Parts[0][0]) != 4 {
		t.Fatalf("polygon: %v %+v %v", k, sh, err)
	}
	multi := binary.LittleEndian.AppendUint32([]byte{1, 6, 0, 0, 0}, 2)
	multi = append(append(multi, sq...), sq...)
	if _, _, sh, err := ParseWKB(multi); err != nil || !sh.Multi || len(sh.Parts) != 2 {
		t.Fatalf("multipolygon: %+v %v", sh, err)
	}
	for _, bad := range [][]byte{
		wkbPolygon([]float64{0, 0, 1, 0, 1, 1, 0, 1}), // open ring
		append(sq, 0),                  // trailing byte
		sq[:len(sq)-1],                 // truncated
		{1, 0xE9, 3, 0, 0, 0, 0, 0, 0}, // Point Z (1001)
		binary.LittleEndian.AppendUint32([]byte{1, 3, 0, 0, 0}, 1<<30), // a count beyond the bytes
	} {
		if _, _, _, err := ParseWKB(bad); err == nil {
			t.Errorf("% x accepted", bad)
		}
	}
}

// FuzzParseWKB: layer geometries either refuse or give closed, finite rings.
func FuzzParseWKB(f *testing.F) {
	f.Add(wkbPolygon([]float64{0, 0, 1, 0, 1, 1, 0, 0}, []float64{0.1, 0.1, 0.2, 0.1, 0.2, 0.2, 0.1, 0.1}))
	f.Add(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64([]byte{1, 1, 0, 0, 0}, math.Float64bits(1)), math.Float64bits(2)))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, pt, sh, err := ParseWKB(b)
		if err == nil {
			checkGeometry(t, k, pt, sh)
		}
	})
}

// The WKB that shapely writes (testdata/wkb) reads back as its WKT.
func TestParseWKBFiles(t *testing.T) {
	for name, want := range map[string]string{
		"point.wkb":             "POINT (1.5 -2)",
		"polygon-hole.wkb":      "POLYGON ((70 70, 90 70, 90 90, 70 90, 70 70), (75 75, 80 75, 80 80, 75 80, 75 75))",
		"multipolygon.wkb":      "MULTIPOLYGON (((50 50, 55 50, 55 55, 50 55, 50 50)), ((60 50, 65 50, 65 55, 60 55, 60 50)))",
		"polygon-bigendian.wkb": "POLYGON ((0 0, 10 0, 10 10, 0 0))",
		"point-z.wkb":           "",
	} {
		b, err := os.ReadFile(filepath.Join("testdata", "wkb", name))
		if err != nil {
			t.Fatal(err)
		}
		k, pt, sh, err := ParseWKB(b)
		if want == "" {
			if err == nil {
				t.Errorf("%s accepted", name)
			}
			continue
		}
		wk, wpt, wsh, _ := ParseWKT(want)
		if err != nil || k != wk || pt != wpt || !reflect.DeepEqual(sh, wsh) {
			t.Errorf("%s: %v %v %+v %v, want %s", name, k, pt, sh, err, want)
		}
	}
}

// WKT as shapely writes it: shortest round-trip coordinates, holes after
// the shell, MULTIPOLYGON's parts in order, EMPTY for no parts.
func TestWKT(t *testing.T) {
	sq := func(x0, y0, s float64) box.Ring {
		return box.Ring{{X: x0, Y: y0}, {X: x0 + s, Y: y0}, {X: x0 + s, Y: y0 + s}, {X: x0, Y: y0 + s}, {X: x0, Y: y0}}
	}
	for _, c := range []struct {
		sh   box.Shape
		want string
	}{
		{box.Shape{Parts: []box.Polygon{{sq(0, 0, 0.1)}}}, "POLYGON ((0 0, 0.1 0, 0.1 0.1, 0 0.1, 0 0))"},
		{box.Shape{Parts: []box.Polygon{{sq(0, 0, 10), sq(1, 1, 2)}}}, "POLYGON ((0 0, 10 0, 10 10, 0 10, 0 0), (1 1, 3 1, 3 3, 1 3, 1 1))"},
		{box.Shape{Multi: true, Parts: []box.Polygon{{sq(0, 0, 1)}, {sq(5, 5, 1e-20)}}},
			"MULTIPOLYGON (((0 0, 1 0, 1 1, 0 1, 0 0)), ((5 5, 5 5, 5 5, 5 5, 5 5)))"},
		{box.Shape{}, "POLYGON EMPTY"},
		{box.Shape{Multi: true}, "MULTIPOLYGON EMPTY"},
	} {
		if got := WKT(&c.sh); got != c.want {
			t.Errorf("WKT\n got %s\nwant %s", got, c.want)
		}
	}
}
