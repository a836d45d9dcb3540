package htmlreport

import (
	"image"
	"testing"

	"github.com/canopy-hpc/canopy/box"
)

// Points are drawn as markers where they are, polygons as their rings'
// outlines, scaled with the picture; the inside of a polygon stays as it
// was.
func TestGeoDrawsMarkersAndOutlines(t *testing.T) {
	sq := &box.Shape{Parts: []box.Polygon{{{{X: 20, Y: 20}, {X: 60, Y: 20}, {X: 60, Y: 60}, {X: 20, Y: 60}, {X: 20, Y: 20}}}}}
	g := &Geo{Truth: [][]box.Geo{{{Point: box.Point{X: 10, Y: 80}}}}, Preds: [][]box.Geo{{{Shape: sq}}}}
	dst := image.NewRGBA(image.Rect(0, 0, 50, 50))
	g.image(0).draw(dst, 0.5, 0.5)
	if dst.RGBAAt(5, 40) != truthColor {
		t.Errorf("point marker: %v", dst.RGBAAt(5, 40))
	}
	if dst.RGBAAt(20, 10) != predColor || dst.RGBAAt(10, 20) != predColor {
		t.Errorf("polygon outline: %v %v", dst.RGBAAt(20, 10), dst.RGBAAt(10, 20))
	}
	if dst.RGBAAt(20, 20) == predColor {
		t.Errorf("polygon filled at its centre")
	}
	var nilGeo *Geo
	if nilGeo.image(0) != nil {
		t.Error("boxes get a geometry overlay")
	}
}
