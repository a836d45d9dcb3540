package htmlreport

import (
	"image"
	"image/color"
	"math"

	"github.com/canopy-hpc/canopy/box"
	xdraw "golang.org/x/image/draw"
)

// Geo is a point or polygon eval's geometries, aligned with Eval.Images:
// each image's truth (the rows the metrics kept) and predictions.
type Geo struct {
	Truth, Preds [][]box.Geo
}

// geoImage is one image's geometries.
type geoImage struct{ truth, preds []box.Geo }

func (g *Geo) image(i int) *geoImage {
	if g == nil {
		return nil
	}
	return &geoImage{truth: g.Truth[i], preds: g.Preds[i]}
}

// draw puts the truth in cyan and the predictions in magenta over dst
// (image pixels scaled by sx, sy): a point as a 7-pixel cross, a polygon
// as the outline of every ring, two pixels wide.
func (g *geoImage) draw(dst *image.RGBA, sx, sy float64) {
	for _, side := range []struct {
		rows []box.Geo
		c    color.RGBA
	}{{g.truth, truthColor}, {g.preds, predColor}} {
		for _, r := range side.rows {
			if r.Shape == nil {
				x, y := int(math.Round(r.Point.X*sx)), int(math.Round(r.Point.Y*sy))
				dot(dst, image.Rect(x-3, y-1, x+4, y+1), side.c)
				dot(dst, image.Rect(x-1, y-3, x+1, y+4), side.c)
				continue
			}
			for _, p := range r.Shape.Parts {
				for _, ring := range p {
					for k := 1; k < len(ring); k++ {
						line(dst, ring[k-1].X*sx, ring[k-1].Y*sy, ring[k].X*sx, ring[k].Y*sy, side.c)
					}
				}
			}
		}
	}
}

func dot(dst *image.RGBA, r image.Rectangle, c color.RGBA) {
	xdraw.Draw(dst, r.Intersect(dst.Bounds()), image.NewUniform(c), image.Point{}, xdraw.Src)
}

// line draws a segment two pixels wide, one step per pixel along its
// longer axis (at most 1<<14 steps: a thumbnail is smaller).
func line(dst *image.RGBA, x0, y0, x1, y1 float64, c color.RGBA) {
	n := int(math.Min(math.Ceil(math.Max(math.Abs(x1-x0), math.Abs(y1-y0))), 1<<14))
	for k := 0; k <= n; k++ {
		f := 0.0
		if n > 0 {
			f = float64(k) / float64(n)
		}
		x, y := int(math.Floor(x0+f*(x1-x0))), int(math.Floor(y0+f*(y1-y0)))
		dot(dst, image.Rect(x, y, x+2, y+2), c)
	}
}
