package crop

import (
	"errors"
	"fmt"
	"math"

	"github.com/canopy-hpc/canopy/infer/imagefile"
)

// ErrBox marks a box that gives no crop: not finite, or entirely outside
// its image (bad input).
var ErrBox = errors.New("bad crop box")

// Rect is a pixel window: columns [X, X+W), rows [Y, Y+H).
type Rect struct{ X, Y, W, H int }

// Window is the window DeepForest's BoundingBoxDataset reads for the box
// (xmin, ymin, xmax, ymax) of a w×h image: the box grown by expand pixels
// on every side and clamped to the image (only when expand > 0, as
// DeepForest does), then rasterio's Window(int(xmin), int(ymin),
// int(max(1, xmax−xmin)), int(max(1, ymax−ymin))) (Python's int truncates
// toward zero), which rasterio's read clips to the image. A box whose
// window misses the image entirely, or with a coordinate that is not
// finite, is an error wrapping ErrBox (rasterio reads an empty array and
// the transform fails).
func Window(xmin, ymin, xmax, ymax float64, expand, w, h int) (Rect, error) {
	for _, v := range []float64{xmin, ymin, xmax, ymax} {
		if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > 1<<40 {
			return Rect{}, fmt.Errorf("%w: (%g, %g, %g, %g) is not a finite box", ErrBox, xmin, ymin, xmax, ymax)
		}
	}
	if expand > 0 {
		e := float64(expand)
		xmin = math.Max(0, xmin-e)
		ymin = math.Max(0, ymin-e)
		xmax = math.Min(float64(w), xmax+e)
		ymax = math.Min(float64(h), ymax+e)
	}
	x0, y0 := int(xmin), int(ymin)
	x1 := x0 + int(math.Max(1, xmax-xmin))
	y1 := y0 + int(math.Max(1, ymax-ymin))
	x0, y0 = max(x0, 0), max(y0, 0)
	x1, y1 = min(x1, w), min(y1, h)
	if x1 <= x0 || y1 <= y0 {
		return Rect{}, fmt.Errorf("%w: (%g, %g, %g, %g) lies outside the %d×%d image", ErrBox, xmin, ymin, xmax, ymax, w, h)
	}
	return Rect{X: x0, Y: y0, W: x1 - x0, H: y1 - y0}, nil
}

// ZeroSize reports whether DeepForest's _predict_crop_model_ drops the
// box before classifying (xmin == xmax or ymin == ymax): such rows leave
// the results of a predict with crop models.
func ZeroSize(xmin, ymin, xmax, ymax float64) bool { return xmin == xmax || ymin == ymax }

// Cut copies the window r of img (imagefile's planes), as rasterio's
// windowed read gives it.
func Cut(img imagefile.Image, r Rect) imagefile.Image {
	out := imagefile.Image{W: r.W, H: r.H, Pix: make([]float32, 3*r.W*r.H)}
	for c := 0; c < 3; c++ {
		for y := 0; y < r.H; y++ {
			src := img.Pix[c*img.W*img.H+(r.Y+y)*img.W+r.X:]
			copy(out.Pix[c*r.W*r.H+y*r.W:c*r.W*r.H+(y+1)*r.W], src[:r.W])
		}
	}
	return out
}

// in reports whether r is a window of im (len(im.Pix) its 3 planes).
func (r Rect) in(im imagefile.Image) bool {
	return len(im.Pix) == 3*im.W*im.H && r.W >= 1 && r.H >= 1 && r.W <= MaxSide && r.H <= MaxSide &&
		r.X >= 0 && r.Y >= 0 && r.X+r.W <= im.W && r.Y+r.H <= im.H
}
