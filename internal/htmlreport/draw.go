package htmlreport

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"image"
	"image/color"
	"image/jpeg"
	_ "image/png" // decoders of the images drawn
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"

	xdraw "golang.org/x/image/draw"
	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
	_ "golang.org/x/image/tiff"

	"github.com/canopy-hpc/canopy/box"
)

var (
	truthColor = color.RGBA{0, 230, 255, 255} // cyan
	predColor  = color.RGBA{255, 0, 200, 255} // magenta
)

// thumb is one drawn image with its caption.
type thumb struct {
	Path    string
	Alt     string // the img's alt text: the path, or the raster and window
	Src     template.URL
	W, H    int
	Caption string
	Rows    string // "results.csv lines a–b"
	Note    string
}

// maxScoresPrinted bounds the score labels on one thumbnail (the highest).
const maxScoresPrinted = 40

// drawImage draws the image downscaled so its longer side is at most size
// pixels, truth boxes in cyan, predictions in magenta with their scores,
// and returns it as a JPEG data URI. An image that opt.Open (or, unset,
// openImage) does not give is drawn as its boxes on grey, and says so.
//
// geo, when not nil, holds the image's points or polygons: they are drawn
// (points as markers, polygons as outlines) in place of the boxes.
func drawImage(root string, im box.Image, dets []box.Detection, st imageStat, opt Options, geo *geoImage) (thumb, error) {
	t := thumb{Path: im.Path, Alt: im.Path, Caption: caption(st)}
	if st.firstRow > 0 {
		t.Rows = fmt.Sprintf("results.csv lines %d–%d", st.firstRow, st.lastRow)
	}
	open := opt.Open
	if open == nil {
		open = openImage
	}
	src, err := open(root, im.Path)
	if err != nil {
		why := err.Error()
		if errors.Is(err, fs.ErrNotExist) {
			why = "not found"
		}
		t.Note = "image not drawn (" + why + "): boxes drawn on grey"
		src = blank(im, dets)
	}
	return drawBoxes(t, src, im.Truth, dets, opt.Thumb, geo)
}

// drawBoxes draws src scaled so its longer side is at most size pixels,
// with the truth boxes and detections (src's pixels) over it, into t.
func drawBoxes(t thumb, src image.Image, truth []box.Truth, dets []box.Detection, size int, geo *geoImage) (thumb, error) {
	dst := scaled(src, size)
	sx := float64(dst.Bounds().Dx()) / float64(src.Bounds().Dx())
	sy := float64(dst.Bounds().Dy()) / float64(src.Bounds().Dy())
	if geo != nil {
		geo.draw(dst, sx, sy)
	} else {
		for _, tr := range truth {
			rect(dst, tr.Box, sx, sy, truthColor)
		}
		for _, d := range dets {
			rect(dst, d.Box, sx, sy, predColor)
		}
	}
	order := make([]int, len(dets))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return dets[order[a]].Score > dets[order[b]].Score })
	if len(order) > maxScoresPrinted {
		order = order[:maxScoresPrinted]
	}
	for _, i := range order {
		d := dets[i]
		label(dst, int(d.Box.Xmin*sx), int(d.Box.Ymin*sy), fmt.Sprintf("%.2f", d.Score))
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, dst, &jpeg.Options{Quality: 82}); err != nil {
		return t, fmt.Errorf("htmlreport: encode %s: %w", t.Alt, err)
	}
	t.Src = template.URL("data:image/jpeg;base64," + base64.StdEncoding.EncodeToString(b.Bytes()))
	t.W, t.H = dst.Bounds().Dx(), dst.Bounds().Dy()
	return t, nil
}

func caption(st imageStat) string {
	if st.truth == 0 {
		return fmt.Sprintf("no truth boxes; %d detections, all false positives", st.dets)
	}
	return fmt.Sprintf("recall %.3f (%d of %d truth boxes); %d detections, %d false positives",
		st.recall(), st.tp, st.truth, st.dets, st.fp)
}

// openImage decodes the file at root/path (path when absolute): the page's
// reader when Options.Open is unset.
func openImage(root, path string) (image.Image, error) {
	if !filepath.IsAbs(path) {
		path = filepath.Join(root, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, _, err := image.Decode(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if m.Bounds().Dx() == 0 || m.Bounds().Dy() == 0 {
		return nil, fmt.Errorf("%s: empty image", path)
	}
	return m, nil
}

// blank is a grey canvas covering every box of the image.
func blank(im box.Image, dets []box.Detection) image.Image {
	w, h := 64.0, 64.0
	for _, t := range im.Truth {
		w, h = math.Max(w, t.Box.Xmax), math.Max(h, t.Box.Ymax)
	}
	for _, d := range dets {
		w, h = math.Max(w, d.Box.Xmax), math.Max(h, d.Box.Ymax)
	}
	w, h = math.Min(w+8, 1<<14), math.Min(h+8, 1<<14)
	return canvas{greyUniform, image.Rect(0, 0, int(w), int(h))}
}

// greyUniform is the colour of an image that is not drawn.
var greyUniform = image.NewUniform(color.Gray{90})

// canvas is a uniform colour with bounds (never allocated at full size).
type canvas struct {
	*image.Uniform
	r image.Rectangle
}

func (c canvas) Bounds() image.Rectangle { return c.r }

// scaled returns an RGBA copy of src whose longer side is at most size.
func scaled(src image.Image, size int) *image.RGBA {
	b := src.Bounds()
	f := math.Min(1, float64(size)/float64(max(b.Dx(), b.Dy())))
	w, h := max(1, int(math.Round(float64(b.Dx())*f))), max(1, int(math.Round(float64(b.Dy())*f)))
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	if u, ok := src.(canvas); ok {
		xdraw.Draw(dst, dst.Bounds(), u.Uniform, image.Point{}, xdraw.Src)
		return dst
	}
	xdraw.ApproxBiLinear.Scale(dst, dst.Bounds(), src, b, xdraw.Src, nil)
	return dst
}

// rect outlines b (image pixels, scaled by sx, sy) two pixels wide.
func rect(dst *image.RGBA, b box.Box, sx, sy float64, c color.RGBA) {
	x0, y0 := int(math.Floor(b.Xmin*sx)), int(math.Floor(b.Ymin*sy))
	x1, y1 := int(math.Ceil(b.Xmax*sx)), int(math.Ceil(b.Ymax*sy))
	fill := func(r image.Rectangle) {
		xdraw.Draw(dst, r.Intersect(dst.Bounds()), image.NewUniform(c), image.Point{}, xdraw.Src)
	}
	fill(image.Rect(x0, y0, x1, y0+2))
	fill(image.Rect(x0, y1-2, x1, y1))
	fill(image.Rect(x0, y0, x0+2, y1))
	fill(image.Rect(x1-2, y0, x1, y1))
}

// label prints s in white on magenta just inside the box's top-left corner.
func label(dst *image.RGBA, x, y int, s string) {
	x, y = max(x, 0), max(y, 0) // a box that starts left of or above the picture
	face := basicfont.Face7x13
	w := font.MeasureString(face, s).Ceil()
	bg := image.Rect(x, y, x+w+2, y+12).Intersect(dst.Bounds())
	xdraw.Draw(dst, bg, image.NewUniform(predColor), image.Point{}, xdraw.Src)
	d := font.Drawer{Dst: dst, Src: image.White, Face: face, Dot: fixed.P(x+1, y+10)}
	d.DrawString(s)
}
