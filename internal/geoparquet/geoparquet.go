// Package geoparquet writes a tile run's prediction rows as a GeoParquet
// 1.1.0 file: the columns of predictions.csv and predictions.gpkg
// (image_path, xmin, ymin, xmax, ymax, label, score), the box polygon as
// WKB in the column geometry, and the bbox covering column of GeoParquet
// 1.1 (a struct of xmin, ymin, xmax, ymax per row), described by the file's
// "geo" metadata.
//
// The Parquet encoding is github.com/parquet-go/parquet-go's (no encoder of
// canopy's own); this package only builds the rows and the metadata, and
// fixes every option that could vary, so the same rows and CRS always give
// the same bytes: created_by is a constant naming canopy and the library's
// version (never the build's), the key-value metadata is the single "geo"
// entry, compression is Snappy, row groups hold at most RowGroupRows rows.
//
// Schema (every column required, in this order):
//
//	image_path  BYTE_ARRAY (String), dictionary-encoded
//	xmin, ymin, xmax, ymax  DOUBLE
//	label       BYTE_ARRAY (String), dictionary-encoded
//	score       DOUBLE
//	(WriteCrops: a crop model's cropmodel_label BYTE_ARRAY (String,
//	dictionary-encoded) and cropmodel_score DOUBLE, or _<i> for several,
//	each optional: null for a box the crop step left out)
//	geometry    BYTE_ARRAY: WKB Polygon, little-endian, one closed ring of 5 points
//	bbox        group { xmin, ymin, xmax, ymax DOUBLE }: the ring's bounds
//
// The "geo" metadata (GeoParquet v1.1.0, opengeospatial/geoparquet
// 8399f80, format-specs/geoparquet.md):
//
//	{"version":"1.1.0","primary_column":"geometry","columns":{"geometry":{
//	  "encoding":"WKB","geometry_types":["Polygon"],"crs":<PROJJSON|null>,
//	  "bbox":[xmin,ymin,xmax,ymax],"covering":{"bbox":{"xmin":["bbox","xmin"],…}}}}}
//
// A nil CRS is written as "crs": null, which GeoParquet defines as "no CRS
// assigned (undefined or unknown)"; the key is never left out, since a
// missing crs means OGC:CRS84 (longitude, latitude). The file's "bbox" is
// left out when there are no rows (it is optional; an empty file has no
// extent).
package geoparquet

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
)

// Version is the GeoParquet version written in the "geo" metadata.
const Version = "1.1.0"

// ParquetGoVersion is the version of github.com/parquet-go/parquet-go that
// go.mod requires; it is part of created_by (a test keeps the two equal).
const ParquetGoVersion = "v0.32.1"

// CreatedBy is the file's created_by: fixed, so that no build detail (a
// module hash, a VCS stamp) reaches the bytes.
const CreatedBy = "canopy (github.com/parquet-go/parquet-go " + ParquetGoVersion + ")"

// RowGroupRows bounds a row group: the library holds at most one row
// group's columns in memory, whatever the number of rows.
const RowGroupRows = 1 << 16

// MaxString bounds image_path and label, in bytes.
const MaxString = 1 << 16

// MaxCRS bounds the PROJJSON text (a CRS's PROJJSON is a few kilobytes).
const MaxCRS = 1 << 20

// ErrRow marks a row or CRS the file cannot hold: a NaN or infinite value,
// an open ring, a string over MaxString, a CRS that is not a JSON object.
var ErrRow = errors.New("geoparquet: bad row")

// Row is one box: the columns of a predictions row and its polygon, a
// closed ring of 5 points in the raster's CRS. Its fields are those of
// infer/gdal's Feature, in the same order, so a Feature converts with
// Row(f).
type Row struct {
	Ring                          [5][2]float64
	ImagePath, Label              string
	Xmin, Ymin, Xmax, Ymax, Score float64
	// CropLabels and CropScores are the crop models' cells, one per model
	// in the order of WriteCrops' columns; nil for a box the crop step
	// left out (eval's zero-size boxes): null cells.
	CropLabels []string
	CropScores []float64
}

// bbox is the covering column's group; its fields in the order the
// specification requires.
type bbox struct {
	Xmin float64 `parquet:"xmin"`
	Ymin float64 `parquet:"ymin"`
	Xmax float64 `parquet:"xmax"`
	Ymax float64 `parquet:"ymax"`
}

// record is one Parquet row.
type record struct {
	ImagePath string  `parquet:"image_path,dict"`
	Xmin      float64 `parquet:"xmin"`
	Ymin      float64 `parquet:"ymin"`
	Xmax      float64 `parquet:"xmax"`
	Ymax      float64 `parquet:"ymax"`
	Label     string  `parquet:"label,dict"`
	Score     float64 `parquet:"score"`
	Geometry  []byte  `parquet:"geometry"`
	BBox      bbox    `parquet:"bbox"`
}

// wkbLen is the size of a one-ring, 5-point polygon in WKB.
const wkbLen = 1 + 4 + 4 + 4 + 5*16

// appendWKB appends ring as a little-endian WKB Polygon.
func appendWKB(b []byte, ring *[5][2]float64) []byte {
	b = append(b, 1) // little-endian
	b = binary.LittleEndian.AppendUint32(b, 3)
	b = binary.LittleEndian.AppendUint32(b, 1)
	b = binary.LittleEndian.AppendUint32(b, 5)
	for _, p := range ring {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p[0]))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p[1]))
	}
	return b
}

func ringBounds(ring *[5][2]float64) bbox {
	b := bbox{Xmin: ring[0][0], Ymin: ring[0][1], Xmax: ring[0][0], Ymax: ring[0][1]}
	for _, p := range ring[1:] {
		b.Xmin, b.Xmax = min(b.Xmin, p[0]), max(b.Xmax, p[0])
		b.Ymin, b.Ymax = min(b.Ymin, p[1]), max(b.Ymax, p[1])
	}
	return b
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// check refuses what the file cannot hold; i is the row's index.
func (r *Row) check(i int) error {
	for k, v := range [5]float64{r.Xmin, r.Ymin, r.Xmax, r.Ymax, r.Score} {
		if !finite(v) {
			name := [5]string{"xmin", "ymin", "xmax", "ymax", "score"}[k]
			return fmt.Errorf("%w: row %d (%s): %s is %v", ErrRow, i, r.ImagePath, name, v)
		}
	}
	for _, p := range r.Ring {
		if !finite(p[0]) || !finite(p[1]) {
			return fmt.Errorf("%w: row %d (%s): polygon point (%v, %v) is not finite", ErrRow, i, r.ImagePath, p[0], p[1])
		}
	}
	if r.Ring[0] != r.Ring[4] {
		return fmt.Errorf("%w: row %d (%s): the ring is not closed (%v ≠ %v)", ErrRow, i, r.ImagePath, r.Ring[0], r.Ring[4])
	}
	for _, s := range append([]string{r.ImagePath, r.Label}, r.CropLabels...) {
		if len(s) > MaxString {
			return fmt.Errorf("%w: row %d: a string of %d bytes (at most %d)", ErrRow, i, len(s), MaxString)
		}
	}
	for k, v := range r.CropScores {
		if !finite(v) {
			return fmt.Errorf("%w: row %d (%s): crop score %d is %v", ErrRow, i, r.ImagePath, k, v)
		}
	}
	return nil
}

// checkCrops refuses a row whose crop cells do not fit the columns (models
// crop models: none, or one label and one score each).
func (r *Row) checkCrops(i, models int) error {
	if len(r.CropLabels) != len(r.CropScores) || len(r.CropLabels) != 0 && len(r.CropLabels) != models {
		return fmt.Errorf("%w: row %d (%s): %d crop labels and %d crop scores for %d crop models", ErrRow, i, r.ImagePath, len(r.CropLabels), len(r.CropScores), models)
	}
	return nil
}

// utf8Of is s with each run of bytes that is not UTF-8 replaced by U+FFFD:
// Parquet strings are UTF-8 (pyarrow refuses a file holding others), and a
// raster's file name need not be; predictions.csv keeps the name's bytes.
func utf8Of(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// geoMeta is the "geo" metadata; fields in the written order.
type geoMeta struct {
	Version       string                `json:"version"`
	PrimaryColumn string                `json:"primary_column"`
	Columns       map[string]columnMeta `json:"columns"`
}

type columnMeta struct {
	Encoding      string          `json:"encoding"`
	GeometryTypes []string        `json:"geometry_types"`
	CRS           json.RawMessage `json:"crs"`
	BBox          []float64       `json:"bbox,omitempty"`
	Covering      covering        `json:"covering"`
}

type covering struct {
	BBox struct {
		Xmin [2]string `json:"xmin"`
		Ymin [2]string `json:"ymin"`
		Xmax [2]string `json:"xmax"`
		Ymax [2]string `json:"ymax"`
	} `json:"bbox"`
}

// Metadata is the "geo" JSON for rows in crs (nil: "crs": null), as Write
// stores it. It checks the rows and the CRS as Write does.
func Metadata(crs []byte, rows []Row) ([]byte, error) {
	c := json.RawMessage("null")
	if crs != nil {
		if len(crs) > MaxCRS {
			return nil, fmt.Errorf("%w: a CRS of %d bytes (at most %d)", ErrRow, len(crs), MaxCRS)
		}
		t := bytes.TrimSpace(crs)
		if len(t) == 0 || t[0] != '{' || !json.Valid(t) {
			return nil, fmt.Errorf("%w: the CRS is not a PROJJSON object", ErrRow)
		}
		c = t
	}
	col := columnMeta{Encoding: "WKB", GeometryTypes: []string{"Polygon"}, CRS: c}
	col.Covering.BBox.Xmin = [2]string{"bbox", "xmin"}
	col.Covering.BBox.Ymin = [2]string{"bbox", "ymin"}
	col.Covering.BBox.Xmax = [2]string{"bbox", "xmax"}
	col.Covering.BBox.Ymax = [2]string{"bbox", "ymax"}
	for i := range rows {
		if err := rows[i].check(i); err != nil {
			return nil, err
		}
		b := ringBounds(&rows[i].Ring)
		if i == 0 {
			col.BBox = []float64{b.Xmin, b.Ymin, b.Xmax, b.Ymax}
			continue
		}
		col.BBox[0], col.BBox[1] = min(col.BBox[0], b.Xmin), min(col.BBox[1], b.Ymin)
		col.BBox[2], col.BBox[3] = max(col.BBox[2], b.Xmax), max(col.BBox[3], b.Ymax)
	}
	// encoding/json writes a map's keys sorted and compacts the RawMessage:
	// the same input gives the same bytes.
	return json.Marshal(geoMeta{Version: Version, PrimaryColumn: "geometry", Columns: map[string]columnMeta{"geometry": col}})
}

// chunk is how many rows are converted at a time.
const chunk = 4096

// Write writes rows, in their order, as one GeoParquet file to w. crs is
// the raster's CRS as PROJJSON (gdal.PROJJSON), nil when it has none. Rows
// and CRS are checked before a byte is written: a NaN or infinite value
// (score included), an open ring, a string over MaxString, or a CRS that
// is not a JSON object is an error wrapping ErrRow. Bytes of image_path or
// label that are not UTF-8 are written as U+FFFD. No rows give a valid
// file with the schema and no row groups.
func Write(w io.Writer, crs []byte, rows []Row) error {
	return WriteCrops(w, crs, rows, nil)
}

// WriteCrops is Write with the crop models' columns after score (before
// geometry and bbox), as in predictions.csv: cols
// names them, a label (String, dictionary-encoded) and a score (DOUBLE)
// per model (cropmodel_label, cropmodel_score; or _<i> for several), each
// optional (null where the row's cells are nil). No cols is Write's file,
// byte for byte.
func WriteCrops(w io.Writer, crs []byte, rows []Row, cols []string) error {
	if len(cols)%2 != 0 {
		return fmt.Errorf("geoparquet: %d crop columns, want a label and a score per model", len(cols))
	}
	for i := range rows {
		if err := rows[i].checkCrops(i, len(cols)/2); err != nil {
			return err
		}
	}
	if len(cols) > 0 {
		return writeCrops(w, crs, rows, cols)
	}
	geo, err := Metadata(crs, rows)
	if err != nil {
		return err
	}
	pw := parquet.NewGenericWriter[record](w,
		&parquet.WriterConfig{CreatedBy: CreatedBy},
		parquet.KeyValueMetadata("geo", string(geo)),
		parquet.Compression(&parquet.Snappy),
		parquet.DataPageVersion(1),
		parquet.MaxRowsPerRowGroup(RowGroupRows),
	)
	buf := make([]record, 0, min(chunk, len(rows)))
	wkb := make([]byte, 0, min(chunk, len(rows))*wkbLen)
	for start := 0; start < len(rows); start += chunk {
		buf, wkb = buf[:0], wkb[:0]
		for i := start; i < min(start+chunk, len(rows)); i++ {
			r := &rows[i]
			n := len(wkb)
			wkb = appendWKB(wkb, &r.Ring)
			buf = append(buf, record{ImagePath: utf8Of(r.ImagePath), Xmin: r.Xmin, Ymin: r.Ymin, Xmax: r.Xmax, Ymax: r.Ymax,
				Label: utf8Of(r.Label), Score: r.Score, Geometry: wkb[n:len(wkb):len(wkb)], BBox: ringBounds(&r.Ring)})
		}
		if _, err := pw.Write(buf); err != nil {
			return fmt.Errorf("geoparquet: %w", err)
		}
	}
	if err := pw.Close(); err != nil {
		return fmt.Errorf("geoparquet: %w", err)
	}
	return nil
}

// cropFirst is the index of the first crop column: after score, as in
// predictions.csv (geometry and bbox follow them).
const cropFirst = 7

// cropRecord is the type of one Parquet row with crop columns: record's
// fields to score, then a *string label and a *float64 score per model
// (optional columns, nil for null), then geometry and bbox, built with
// reflect.StructOf so the columns keep this order.
func cropRecord(cols []string) reflect.Type {
	rt := reflect.TypeOf(record{})
	fields := make([]reflect.StructField, 0, rt.NumField()+len(cols))
	for i := 0; i < cropFirst; i++ {
		fields = append(fields, rt.Field(i))
	}
	for k, c := range cols {
		f := reflect.StructField{Name: fmt.Sprintf("Crop%d", k), Type: reflect.TypeOf((*float64)(nil)),
			Tag: reflect.StructTag(fmt.Sprintf(`parquet:"%s,optional"`, c))}
		if k%2 == 0 {
			f.Type, f.Tag = reflect.TypeOf((*string)(nil)), reflect.StructTag(fmt.Sprintf(`parquet:"%s,optional,dict"`, c))
		}
		fields = append(fields, f)
	}
	for i := cropFirst; i < rt.NumField(); i++ {
		fields = append(fields, rt.Field(i))
	}
	return reflect.StructOf(fields)
}

// writeCrops is WriteCrops with crop columns: the rows as cropRecord
// values, through the schema of that type.
func writeCrops(w io.Writer, crs []byte, rows []Row, cols []string) error {
	for _, c := range cols {
		if c == "" || strings.ContainsAny(c, ",\"`") {
			return fmt.Errorf("geoparquet: crop column name %q", c)
		}
	}
	geo, err := Metadata(crs, rows)
	if err != nil {
		return err
	}
	rt := cropRecord(cols)
	pw := parquet.NewWriter(w, parquet.SchemaOf(reflect.New(rt).Elem().Interface()),
		&parquet.WriterConfig{CreatedBy: CreatedBy},
		parquet.KeyValueMetadata("geo", string(geo)),
		parquet.Compression(&parquet.Snappy),
		parquet.DataPageVersion(1),
		parquet.MaxRowsPerRowGroup(RowGroupRows),
	)
	base := reflect.TypeOf(record{}).NumField()
	for i := range rows {
		r := &rows[i]
		v := reflect.New(rt).Elem()
		rec := record{ImagePath: utf8Of(r.ImagePath), Xmin: r.Xmin, Ymin: r.Ymin, Xmax: r.Xmax, Ymax: r.Ymax,
			Label: utf8Of(r.Label), Score: r.Score, Geometry: appendWKB(nil, &r.Ring), BBox: ringBounds(&r.Ring)}
		rv := reflect.ValueOf(rec)
		for f := 0; f < base; f++ {
			to := f
			if f >= cropFirst {
				to += len(cols)
			}
			v.Field(to).Set(rv.Field(f))
		}
		for k := range r.CropLabels {
			label, score := utf8Of(r.CropLabels[k]), r.CropScores[k]
			v.Field(cropFirst + 2*k).Set(reflect.ValueOf(&label))
			v.Field(cropFirst + 2*k + 1).Set(reflect.ValueOf(&score))
		}
		if err := pw.Write(v.Addr().Interface()); err != nil {
			return fmt.Errorf("geoparquet: %w", err)
		}
	}
	if err := pw.Close(); err != nil {
		return fmt.Errorf("geoparquet: %w", err)
	}
	return nil
}
