package points

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/canopy-hpc/canopy/infer/gdal"
	"github.com/canopy-hpc/canopy/infer/treeformer"
	"github.com/canopy-hpc/canopy/internal/outdir"
)

// gpkgFile holds a point run's points of georeferenced images as Point
// geometries: one layer per image whose file GDAL reads with a CRS and a
// geotransform, named by the file name without its extension, each point
// mapped as DeepForest's image_to_geo_coordinates maps it
// (gdal.PointFeature); its x and y columns stay the pixels of
// predictions.csv. Written with GDAL's GPKG driver, as the box runs'
// predictions.gpkg (fixed dates: the same rows give the same bytes).
const gpkgFile = "predictions.gpkg"

// stageGPKG stages gpkgFile in dir for the images (full paths, names as
// predictions.csv writes them) that have a CRS; nil and a note when none
// has (or GDAL is not built in).
func stageGPKG(dir string, full, names []string, rows [][]treeformer.Point, label string) (*outdir.Staged, string, error) {
	var layers []gdal.Layer
	seen := map[string]int{}
	for i, p := range full {
		r, err := gdal.Open(p)
		if err != nil {
			continue
		}
		in := r.Info()
		r.Close()
		if in.CRS == "" || !in.HasTransform {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(p), filepath.Ext(p))
		if seen[name]++; seen[name] > 1 {
			name = fmt.Sprintf("%s_%d", name, seen[name]-1)
		}
		ly := gdal.Layer{Name: name, CRS: in.CRS, Points: true}
		for _, pt := range rows[i] {
			ly.Features = append(ly.Features, gdal.PointFeature(in.GeoTransform, pt.X, pt.Y, names[i], label, float64(pt.Score)))
		}
		layers = append(layers, ly)
	}
	if len(layers) == 0 {
		return nil, "no image has a CRS (or GDAL is not built in): no " + gpkgFile + " is written", nil
	}
	f, err := os.CreateTemp(dir, "."+gpkgFile+".tmp-gdal*")
	if err != nil {
		return nil, "", fmt.Errorf("points: %w", err)
	}
	tmp := f.Name()
	f.Close()
	os.Remove(tmp) // GDAL creates it
	defer os.Remove(tmp)
	if err := gdal.WriteGPKG(tmp, layers); err != nil {
		return nil, "", fmt.Errorf("points: %w", err)
	}
	src, err := os.Open(tmp)
	if err != nil {
		return nil, "", fmt.Errorf("points: %w", err)
	}
	defer src.Close()
	s, err := outdir.Stage(dir, gpkgFile, func(w io.Writer) error {
		_, err := io.Copy(w, src)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return &s, "", nil
}
