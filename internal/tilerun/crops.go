package tilerun

import (
	"fmt"

	"github.com/canopy-hpc/canopy/infer/crop"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/internal/errkind"
)

// rasterCrops reads crops from rasters by GDAL windowed reads (predict
// --tile, eval --tile), as DeepForest's rasterio windows.
type rasterCrops struct {
	rs      *rasterSet
	rasters []tileRaster
}

func (s *rasterCrops) Open(i int) (int, int, error) {
	return s.rasters[i].Width, s.rasters[i].Height, nil
}

func (s *rasterCrops) Read(i int, r crop.Rect) (imagefile.Image, error) {
	im, err := s.rs.read(i, tile.Window{X: r.X, Y: r.Y, W: r.W, H: r.H})
	if err != nil {
		return im, &errkind.Error{Code: errkind.ExitInput, Err: fmt.Errorf("jobs: crops: %w", err)}
	}
	return im, nil
}

func (s *rasterCrops) Release(int) {}
