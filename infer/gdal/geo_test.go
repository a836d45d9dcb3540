package gdal

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/canopy-hpc/canopy/box"
)

// TestBoxRingDeepForest: BoxRing gives the polygons of DeepForest's
// image_to_geo_coordinates (tools/tile/geo.py, rasterio's transform.xy at
// the pixel centre, shapely's box), within 1e-6 of the CRS unit, on north-up
// and rotated transforms.
func TestBoxRingDeepForest(t *testing.T) {
	b, err := os.ReadFile("testdata/geo.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Cases []struct {
			CRS          string
			GeoTransform [6]float64
			Boxes        [][4]float64
			Rings        [][5][2]float64
			Bounds       [][4]float64
		}
	}
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range fx.Cases {
		for k, bx := range c.Boxes {
			got := BoxRing(c.GeoTransform, bx[0], bx[1], bx[2], bx[3])
			for i := range got {
				for j := range 2 {
					if d := math.Abs(got[i][j] - c.Rings[k][i][j]); !(d <= 1e-6) {
						t.Fatalf("%s box %v: point %d is %v, DeepForest %v", c.CRS, bx, i, got[i], c.Rings[k][i])
					}
				}
			}
			// BoxFeature's columns: the polygon's bounds, as DeepForest sets them.
			f := BoxFeature(c.GeoTransform, box.Box{Xmin: bx[0], Ymin: bx[1], Xmax: bx[2], Ymax: bx[3]}, "r.tif", "Tree", 0.5)
			if f.Ring != got {
				t.Fatalf("%s box %v: BoxFeature's ring is not BoxRing's", c.CRS, bx)
			}
			for j, v := range [4]float64{f.Xmin, f.Ymin, f.Xmax, f.Ymax} {
				if d := math.Abs(v - c.Bounds[k][j]); !(d <= 1e-6) {
					t.Fatalf("%s box %v: bounds %v, DeepForest %v", c.CRS, bx, [4]float64{f.Xmin, f.Ymin, f.Xmax, f.Ymax}, c.Bounds[k])
				}
			}
			n++
		}
	}
	if n < 100 {
		t.Fatalf("%d boxes checked", n)
	}
}
