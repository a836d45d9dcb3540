package geotruth

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/gdal"
	"github.com/canopy-hpc/canopy/internal/dataset"
)

// GeometryCSV is eval's (no --tile) shapefile or GeoPackage truth: rank 0
// reads the first layer (ReadLayer's rules, Point layers included),
// converts every vertex to the pixels of the image its image_path names
// as DeepForest's read_file does (each image, under root, opened here by
// GDAL for its bounds and resolution; a layer without a CRS holds
// pixels), and hands on the CSV it equals: image_path,x,y,label for
// points, or image_path,geometry,label with the polygons as WKT (a layer
// of rectangles then reads as boxes, as DeepForest detects it). It
// returns the CSV and the warnings to print.
func GeometryCSV(name, root string) ([]byte, []string, error) {
	t, err := ReadLayer(name, "", true)
	if err != nil {
		return nil, nil, err
	}
	var rasters []Raster
	if t.Vector().CRS != "" {
		for _, p := range t.Paths() {
			file := filepath.Join(root, p)
			r, err := gdal.Open(file)
			if err != nil {
				return nil, nil, fmt.Errorf("jobs: %s: image %s, needed to convert the layer's coordinates to its pixels: %w: %w", name, file, err, dataset.ErrInput)
			}
			info := r.Info()
			r.Close()
			tr := Raster{Path: p, File: file, Width: info.Width, Height: info.Height, CRS: info.CRS}
			if info.HasTransform {
				gt := info.GeoTransform
				tr.GeoTransform = &gt
			}
			rasters = append(rasters, tr)
		}
	}
	frames, err := t.Frames(rasters)
	if err != nil {
		return nil, nil, err
	}
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	points := t.Geometry == "Point"
	if points {
		w.Write([]string{"image_path", "x", "y", "label"})
	} else {
		w.Write([]string{"image_path", "geometry", "label"})
	}
	g := func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
	for _, f := range t.Vector().Features {
		_, pt, sh, err := dataset.ParseWKB(f.WKB)
		if err != nil {
			return nil, nil, fmt.Errorf("jobs: %s: feature %d: %v: %w", name, f.FID, err, dataset.ErrInput)
		}
		var fr *gdal.PixelFrame
		if frames != nil {
			x, err := t.FrameOf(frames, f)
			if err != nil {
				return nil, nil, err
			}
			fr = &x
		}
		if points {
			if fr != nil {
				pt.X, pt.Y = fr.Pixel(pt.X, pt.Y)
			}
			w.Write([]string{f.ImagePath, g(pt.X), g(pt.Y), f.Label})
			continue
		}
		if fr != nil {
			toPixels(sh, *fr)
		}
		w.Write([]string{f.ImagePath, dataset.WKT(sh), f.Label})
	}
	w.Flush()
	return b.Bytes(), t.Warnings, w.Error()
}

// toPixels converts every vertex of sh in place.
func toPixels(sh *box.Shape, fr gdal.PixelFrame) {
	for _, p := range sh.Parts {
		for _, r := range p {
			for k := range r {
				r[k].X, r[k].Y = fr.Pixel(r[k].X, r[k].Y)
			}
		}
	}
}
