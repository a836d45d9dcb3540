package dataset

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/canopy-hpc/canopy/box"
)

// Point and polygon CSVs. The geometry is found as DeepForest's
// utilities.determine_geometry_type finds it, with one difference:
//   - a WKT `geometry` column comes first: Points are points; Polygons that
//     all equal their envelopes are boxes, other Polygons polygons; a
//     MultiPolygon is a polygon (DeepForest classes it as a point, a bug);
//     a column that mixes points and polygons, or holds other types, is
//     refused;
//   - then xmin,ymin,xmax,ymax columns: boxes;
//   - then a WKT `polygon` column: polygons;
//   - then x,y columns: points.
// A Polygon "equals its envelope" when it has no holes and every edge is
// axis-parallel with every vertex on the envelope's boundary, which for the
// simple polygons canopy accepts is where GEOS's area equals the envelope's.

// GeoRow is one parsed point or polygon row: the geometry (Geo.Label is
// left 0; Label holds the string), and for predictions the score.
type GeoRow struct {
	Path  string
	Geo   box.Geo
	Label string
	Line  int
}

// CSVKind detects the geometry of an annotation or prediction CSV.
func CSVKind(name string, data []byte) (box.Kind, error) {
	r := csv.NewReader(bytes.NewReader(data))
	r.ReuseRecord = true
	head, err := r.Read()
	if err != nil {
		return box.KindBox, nil // the box reader says what is wrong
	}
	col := columns(head)
	has := func(names ...string) bool {
		for _, n := range names {
			if _, ok := col[n]; !ok {
				return false
			}
		}
		return true
	}
	switch {
	case has("geometry"):
		return wktColumnKind(name, r, col["geometry"])
	case has("xmin", "ymin", "xmax", "ymax"):
		return box.KindBox, nil
	case has("polygon"):
		return box.KindPolygon, nil
	case has("x", "y"):
		return box.KindPoint, nil
	}
	return box.KindBox, nil
}

// wktColumnKind reads every geometry cell of the rest of r.
func wktColumnKind(name string, r *csv.Reader, c int) (box.Kind, error) {
	kinds := map[box.Kind]int{}
	firstLine := map[box.Kind]int{}
	rect := true
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return box.KindBox, nil // the reader that follows reports it
		}
		line, _ := r.FieldPos(0)
		if c >= len(rec) {
			continue
		}
		k, _, sh, err := ParseWKT(rec[c])
		if err != nil {
			return 0, fmt.Errorf("dataset: %s:%d: column geometry: %v: %w", name, line, err, ErrInput)
		}
		if _, seen := kinds[k]; !seen {
			firstLine[k] = line
		}
		kinds[k]++
		if k == box.KindPolygon && !isRectangle(sh) {
			rect = false
		}
	}
	if len(kinds) > 1 {
		return 0, fmt.Errorf("dataset: %s: the geometry column mixes points (first at line %d) and polygons (first at line %d): %w",
			name, firstLine[box.KindPoint], firstLine[box.KindPolygon], ErrInput)
	}
	if kinds[box.KindPoint] > 0 {
		return box.KindPoint, nil
	}
	if rect {
		return box.KindBox, nil
	}
	return box.KindPolygon, nil
}

// isRectangle: one polygon without holes whose every edge is axis-parallel
// and every vertex lies on its envelope's boundary.
func isRectangle(sh *box.Shape) bool {
	if sh.Multi || len(sh.Parts) != 1 || len(sh.Parts[0]) != 1 {
		return sh.Empty()
	}
	b := sh.Bounds()
	ring := sh.Parts[0][0]
	for i, q := range ring {
		if q.X != b.Xmin && q.X != b.Xmax && q.Y != b.Ymin && q.Y != b.Ymax {
			return false
		}
		if i > 0 && q.X != ring[i-1].X && q.Y != ring[i-1].Y {
			return false
		}
	}
	return true
}

// WKT writes a shape as WKT with shortest round-trip coordinates (as
// shapely writes it), ParseWKT's inverse.
func WKT(sh *box.Shape) string {
	kind := "POLYGON"
	if sh.Multi {
		kind = "MULTIPOLYGON"
	}
	if sh.Empty() {
		return kind + " EMPTY"
	}
	var b []byte
	poly := func(p box.Polygon) {
		b = append(b, '(')
		for k, r := range p {
			if k > 0 {
				b = append(b, ", "...)
			}
			b = append(b, '(')
			for j, q := range r {
				if j > 0 {
					b = append(b, ", "...)
				}
				b = strconv.AppendFloat(b, q.X, 'g', -1, 64)
				b = append(b, ' ')
				b = strconv.AppendFloat(b, q.Y, 'g', -1, 64)
			}
			b = append(b, ')')
		}
		b = append(b, ')')
	}
	b = append(b, kind+" "...)
	if !sh.Multi {
		poly(sh.Parts[0])
		return string(b)
	}
	b = append(b, '(')
	for k, p := range sh.Parts {
		if k > 0 {
			b = append(b, ", "...)
		}
		poly(p)
	}
	return string(append(b, ')'))
}

// ParseWKT reads one WKT cell: POINT (x y), POLYGON ((...), ...),
// MULTIPOLYGON (((...)), ...), or POLYGON EMPTY / MULTIPOLYGON EMPTY (an
// empty polygon, which evaluate_geometry drops from the truth). Rings must
// be closed; coordinates are two finite decimal numbers (no Z or M).
func ParseWKT(s string) (box.Kind, box.Point, *box.Shape, error) {
	t := strings.TrimSpace(s)
	up := strings.ToUpper(t)
	var kind string
	for _, k := range []string{"MULTIPOLYGON", "POLYGON", "POINT"} {
		if strings.HasPrefix(up, k) {
			kind, t = k, strings.TrimSpace(t[len(k):])
			break
		}
	}
	if kind == "" {
		k, _, _ := strings.Cut(up, "(")
		return 0, box.Point{}, nil, fmt.Errorf("geometry %q: canopy reads POINT, POLYGON or MULTIPOLYGON, not %s", short(s), strings.TrimSpace(k))
	}
	if strings.ToUpper(t) == "EMPTY" {
		if kind == "POINT" {
			return 0, box.Point{}, nil, fmt.Errorf("geometry %q: an empty point has no coordinates", short(s))
		}
		return box.KindPolygon, box.Point{}, &box.Shape{Multi: kind == "MULTIPOLYGON"}, nil
	}
	if !strings.HasPrefix(t, "(") {
		return 0, box.Point{}, nil, fmt.Errorf("geometry %q: malformed %s", short(s), kind)
	}
	p := wktParser{s: t}
	var err error
	var pt box.Point
	sh := &box.Shape{Multi: kind == "MULTIPOLYGON"}
	switch kind {
	case "POINT":
		n := 0
		err = p.list(func() error {
			if n++; n > 1 {
				return errors.New("a POINT holds one x y pair")
			}
			xy, err := p.point()
			pt = box.Point{X: xy[0], Y: xy[1]}
			return err
		})
	case "POLYGON":
		var poly box.Polygon
		poly, err = p.rings()
		sh.Parts = []box.Polygon{poly}
	default:
		err = p.list(func() error {
			poly, err := p.rings()
			sh.Parts = append(sh.Parts, poly)
			return err
		})
	}
	if err == nil && strings.TrimSpace(p.s[p.i:]) != "" {
		err = fmt.Errorf("text after the geometry: %q", short(strings.TrimSpace(p.s[p.i:])))
	}
	if err != nil {
		return 0, box.Point{}, nil, fmt.Errorf("geometry %q: %v", short(s), err)
	}
	if kind == "POINT" {
		return box.KindPoint, pt, nil, nil
	}
	return box.KindPolygon, box.Point{}, sh, nil
}

// ParseGeoCSV reads a point or polygon CSV (kind from CSVKind or forced):
// image_path and label columns, the geometry (x,y columns for points, or
// the WKT geometry or polygon column), and for predictions (scored) a
// score or scores column. Errors name file and line and wrap ErrInput.
func ParseGeoCSV(name string, data []byte, kind box.Kind, scored bool, opt Options) ([]GeoRow, error) {
	r := csv.NewReader(bytes.NewReader(data))
	r.ReuseRecord = true
	head, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("dataset: %s: no header: %v: %w", name, err, ErrInput)
	}
	col := columns(head)
	if _, ok := col["score"]; !ok && scored {
		if i, ok := col["scores"]; ok {
			col["score"] = i
		}
	}
	want := []string{"image_path", "label"}
	wkt := ""
	switch {
	case kind == box.KindPoint && !hasCol(col, "geometry"):
		want = append(want, "x", "y")
	case hasCol(col, "geometry"):
		wkt = "geometry"
	default:
		wkt = "polygon"
	}
	if wkt != "" {
		want = append(want, wkt)
	}
	if scored {
		want = append(want, "score")
	}
	var missing []string
	for _, c := range want {
		if !hasCol(col, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("dataset: %s:1: missing column(s) %s for %s (header: %s): %w", name, strings.Join(missing, ","), kind.Plural(), strings.Join(head, ","), ErrInput)
	}
	var rows []GeoRow
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, csvError(name, err)
		}
		line, _ := r.FieldPos(0)
		row, err := geoRow(rec, col, kind, wkt, scored, opt)
		if err != nil {
			return nil, fmt.Errorf("dataset: %s:%d: %v: %w", name, line, err, ErrInput)
		}
		row.Line = line
		rows = append(rows, row)
	}
	if len(rows) == 0 && !scored {
		return nil, fmt.Errorf("dataset: %s: no rows after the header, nothing to score: %w", name, ErrInput)
	}
	return rows, nil
}

func hasCol(col map[string]int, c string) bool {
	_, ok := col[c]
	return ok
}

// geoRow reads one record's cells.
func geoRow(rec []string, col map[string]int, kind box.Kind, wkt string, scored bool, opt Options) (GeoRow, error) {
	var row GeoRow
	if row.Path = TrimPath(rec[col["image_path"]]); row.Path == "" {
		return row, errors.New("empty image_path")
	}
	if row.Label = rec[col["label"]]; row.Label == "" {
		return row, errors.New("empty label")
	}
	if wkt == "" {
		x, err := number(rec[col["x"]])
		if err != nil {
			return row, fmt.Errorf("column x: %v", err)
		}
		y, err := number(rec[col["y"]])
		if err != nil {
			return row, fmt.Errorf("column y: %v", err)
		}
		row.Geo.Point = box.Point{X: x, Y: y}
	} else {
		k, pt, sh, err := ParseWKT(rec[col[wkt]])
		if err != nil {
			return row, fmt.Errorf("column %s: %v", wkt, err)
		}
		if k != kind {
			return row, fmt.Errorf("column %s holds a %s where the file's rows are %s", wkt, k, kind.Plural())
		}
		row.Geo.Point, row.Geo.Shape = pt, sh
	}
	if why := geoRange(row.Geo); why != "" {
		return row, errors.New(why)
	}
	if scored {
		s, err := number(rec[col["score"]])
		if err != nil {
			return row, fmt.Errorf("column score: %v", err)
		}
		if !opt.AllowAnyScore && !(s >= 0 && s <= 1) {
			return row, fmt.Errorf("score %v is not in [0, 1] (--allow-any-score accepts it)", s)
		}
		row.Geo.Score = s
	}
	return row, nil
}

// geoRange refuses coordinates beyond float32's range (the validation
// tensors hold float32) and a polygon whose envelope's area overflows.
func geoRange(g box.Geo) string {
	if g.Shape == nil {
		return outOfRange(box.Box{Xmin: g.Point.X, Ymin: g.Point.Y, Xmax: g.Point.X, Ymax: g.Point.Y})
	}
	return outOfRange(g.Shape.Bounds())
}

// GeoTruth groups truth rows by image, in order of first appearance, and
// resolves their labels with m.
func GeoTruth(name string, rows []GeoRow, m box.LabelMap) ([]box.GeoImage, error) {
	index := map[string]int{}
	var out []box.GeoImage
	for _, r := range rows {
		i, ok := index[r.Path]
		if !ok {
			i = len(out)
			index[r.Path] = i
			out = append(out, box.GeoImage{Path: r.Path})
		}
		g := r.Geo
		id, ok := m.ID(r.Label)
		if !ok {
			return nil, fmt.Errorf("dataset: %s:%d: label %q is not in the label map: %w", name, r.Line, r.Label, ErrInput)
		}
		g.Label = id
		out[i].Truth = append(out[i].Truth, g)
	}
	return out, nil
}
