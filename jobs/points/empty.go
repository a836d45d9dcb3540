package points

import (
	"github.com/canopy-hpc/canopy/infer/gdal"
	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/infer/treeformer"
)

// --skip-empty for a point model: the window's 8-bit samples through
// tile.EmptyWindow, the rule of the box detectors' --skip-empty (all one
// colour, or every pixel the raster's nodata on bands 1–3). The image is
// read as predict reads it (infer/imagefile, whose alpha is already
// composed), so the nodata values come from GDAL's view of the file, and
// there is no alpha plane; a build without GDAL knows no nodata, and the
// rule is then "all one colour" alone.

// noData is path's nodata rule as GDAL reports it (none when GDAL cannot
// open it).
func noData(path string) tile.NoData {
	r, err := gdal.Open(path)
	if err != nil {
		return tile.NoData{}
	}
	defer r.Close()
	in := r.Info()
	return tile.NoData{Has: in.HasNoData, Value: in.NoData}
}

// emptyWindow reports whether window win of im is empty. im's values are
// float32(k/255) for the 8-bit sample k, a one-to-one map, so k is
// recovered exactly by rounding v·255.
func emptyWindow(im treeformer.Image, win tile.Window, nd tile.NoData) bool {
	n := win.W * win.H
	pix := make([]uint8, 3*n)
	for c := range 3 {
		plane := im.Pix[c*im.W*im.H:]
		for y := range win.H {
			row := plane[(win.Y+y)*im.W+win.X:]
			for x := range win.W {
				pix[c*n+y*win.W+x] = uint8(row[x]*255 + 0.5)
			}
		}
	}
	return tile.EmptyWindow(win.W, win.H, pix, nil, nd)
}
