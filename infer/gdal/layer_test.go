//go:build !nogdal

package gdal

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hostileLayerPaths are image paths GDAL's GeoPackage driver refuses as
// layer names, or that clash there (issue 35): find's "./", names
// differing only in case, reserved prefixes, a leading '-', a control
// character, and an rtree_ name equal to another layer's spatial index.
var hostileLayerPaths = []string{"./x.tif", "x.tif", "X.TIF", "gpkg_a.tif", "sqlite_b.tif", "rtree_c.tif_geom", "c.tif",
	"-d.tif", "../e.tif", "f\x1b[2J.tif", "", ".", "x.tif_2", "ok name.tif", "g\xff.tif"}

// Every name LayerNames gives is one GDAL writes: the hostile paths all go
// into one GeoPackage (through WriteGPKG, as predict --tile writes it),
// unique ignoring case; valid paths keep their name; and the names are
// the same on every call.
func TestLayerNamesAlwaysWritable(t *testing.T) {
	names := LayerNames(hostileLayerPaths)
	seen := map[string]bool{}
	for i, n := range names {
		if seen[strings.ToLower(n)] {
			t.Fatalf("%q: layer name %q given twice (ignoring case)", hostileLayerPaths[i], n)
		}
		seen[strings.ToLower(n)] = true
	}
	for i, keep := range map[int]string{1: "x.tif", 6: "c.tif", 12: "x.tif_2", 13: "ok name.tif"} {
		if names[i] != keep {
			t.Errorf("the valid %q was renamed %q", hostileLayerPaths[i], names[i])
		}
	}
	if again := LayerNames(hostileLayerPaths); strings.Join(again, "\n") != strings.Join(names, "\n") {
		t.Fatalf("not deterministic: %q then %q", names, again)
	}
	t.Logf("%q", names)
	const wkt = `GEOGCS["WGS 84",DATUM["WGS_1984",SPHEROID["WGS 84",6378137,298.257223563]],PRIMEM["Greenwich",0],UNIT["degree",0.0174532925199433]]`
	var layers []Layer
	for i, n := range names {
		f := Feature{Ring: BoxRing([6]float64{10, 1, 0, 20, 0, -1}, 1, 1, 5, 5), ImagePath: hostileLayerPaths[i], Label: "Tree", Score: 0.5}
		layers = append(layers, Layer{Name: n, CRS: wkt, Features: []Feature{f}})
	}
	if err := WriteGPKG(filepath.Join(t.TempDir(), "p.gpkg"), layers); err != nil {
		t.Fatal(err)
	}
	for i := range layers { // the control: the paths themselves are refused
		layers[i].Name = hostileLayerPaths[i]
	}
	if err := WriteGPKG(filepath.Join(t.TempDir(), "raw.gpkg"), layers); err == nil {
		t.Fatal("GDAL wrote the hostile paths as layer names: this case proves nothing")
	}
}

// A geotransform that is not finite, or that overflows over the raster
// (1e308 in a .aux.xml), is refused at Open (ErrRaster, naming the file),
// before any window is read.
func TestOpenRefusesBadGeoTransform(t *testing.T) {
	dir := t.TempDir()
	for name, gt := range map[string]string{
		"overflow.png": "1e308, 1e308, 0, 0, 0, -1",
		"nan.png":      "nan, 1, 0, 0, 0, -1",
		"inf.png":      "0, 1, 0, 0, 0, -inf",
		"fine.png":     "404000, 0.1, 0, 3285000, 0, -0.1",
	} {
		p := writePNG(t, dir, name, 64, 48, false, false)
		os.WriteFile(p+".aux.xml", []byte("<PAMDataset><SRS>EPSG:32617</SRS><GeoTransform>"+gt+"</GeoTransform></PAMDataset>\n"), 0o644)
		r, err := Open(p)
		if name == "fine.png" {
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if in := r.Info(); !in.HasTransform || in.GeoTransform[1] != 0.1 {
				t.Fatalf("%s: the .aux.xml was not read: %+v", name, in)
			}
			r.Close()
			continue
		}
		if r != nil {
			r.Close()
		}
		if !errors.Is(err, ErrRaster) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "geotransform") {
			t.Errorf("%s: %v, want ErrRaster naming the file and its geotransform", name, err)
		}
	}
}

// WriteGPKG's point and polygon layers read back with each feature's
// image_path, label and geometry where they were written (one file per
// layer: ReadVector reads the first), crop columns on the polygons.
func TestWriteGPKGFeaturesReadBack(t *testing.T) {
	const wkt = `GEOGCS["WGS 84",DATUM["WGS_1984",SPHEROID["WGS 84",6378137,298.257223563]],PRIMEM["Greenwich",0],UNIT["degree",0.0174532925199433]]`
	gt := [6]float64{10, 1, 0, 20, 0, -1}
	pts := Layer{Name: "pts", CRS: wkt, Points: true, Features: []Feature{
		PointFeature(gt, 3, 4, "a.tif", "Tree", 0.9),
		PointFeature(gt, 7, 1, "b.tif", "Snag", 0.4),
	}}
	boxes := Layer{Name: "boxes", CRS: wkt, CropColumns: []string{"cropmodel_label", "cropmodel_score"}, Features: []Feature{
		{Ring: BoxRing(gt, 1, 1, 5, 6), ImagePath: "a.tif", Label: "Tree", Xmin: 1, Ymin: 1, Xmax: 5, Ymax: 6, Score: 0.5,
			CropLabels: []string{"Alive"}, CropScores: []float64{0.75}},
		{Ring: BoxRing(gt, 2, 3, 9, 8), ImagePath: "c.tif", Label: "Bird", Xmin: 2, Ymin: 3, Xmax: 9, Ymax: 8, Score: 0.25},
	}}
	for _, ly := range []Layer{pts, boxes} {
		path := filepath.Join(t.TempDir(), ly.Name+".gpkg")
		if err := WriteGPKG(path, []Layer{ly}); err != nil {
			t.Fatal(err)
		}
		v, err := ReadVector(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(v.Features) != len(ly.Features) {
			t.Fatalf("%s: %d features read, %d written", ly.Name, len(v.Features), len(ly.Features))
		}
		for i, f := range ly.Features {
			g := v.Features[i]
			lo, hi := f.Ring[0], f.Ring[0]
			for _, p := range f.Ring {
				if ly.Points {
					break
				}
				lo = [2]float64{min(lo[0], p[0]), min(lo[1], p[1])}
				hi = [2]float64{max(hi[0], p[0]), max(hi[1], p[1])}
			}
			if g.ImagePath != f.ImagePath || g.Label != f.Label || !g.HasImagePath || !g.HasLabel ||
				g.MinX != lo[0] || g.MinY != lo[1] || g.MaxX != hi[0] || g.MaxY != hi[1] {
				t.Errorf("%s feature %d read back as %+v; written %+v", ly.Name, i, g, f)
			}
		}
	}
}
