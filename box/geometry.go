package box

import "fmt"

// Kind is the geometry of an input's rows: boxes, points or polygons.
type Kind int

const (
	// KindBox: xmin,ymin,xmax,ymax columns, or a WKT column of rectangles.
	KindBox Kind = iota
	// KindPoint: x,y columns or Point geometries.
	KindPoint
	// KindPolygon: WKT Polygon or MultiPolygon geometries that are not all
	// rectangles.
	KindPolygon
)

func (k Kind) String() string {
	switch k {
	case KindPoint:
		return "point"
	case KindPolygon:
		return "polygon"
	}
	return "box"
}

// Plural names the kind's rows: "boxes", "points", "polygons".
func (k Kind) Plural() string {
	if k == KindBox {
		return "boxes"
	}
	return k.String() + "s"
}

// ParseKind maps a --geometry value ("box", "point", "polygon").
func ParseKind(s string) (Kind, error) {
	switch s {
	case "box":
		return KindBox, nil
	case "point":
		return KindPoint, nil
	case "polygon":
		return KindPolygon, nil
	}
	return 0, fmt.Errorf("box: unknown geometry %q (want box, point or polygon)", s)
}

// Point is a point in pixel coordinates.
type Point struct{ X, Y float64 }

// Ring is a closed ring of a polygon: its first point equals its last.
type Ring []Point

// Polygon is a shell and its holes.
type Polygon []Ring

// Shape is one polygon, or the parts of a MultiPolygon.
type Shape struct {
	Parts []Polygon
	Multi bool
}

// Empty reports a shape with no parts (WKT "POLYGON EMPTY").
func (s Shape) Empty() bool { return len(s.Parts) == 0 }

// Bounds is the envelope of every ring's points (the zero box when empty).
func (s Shape) Bounds() Box {
	first := true
	var b Box
	for _, p := range s.Parts {
		for _, r := range p {
			for _, q := range r {
				if first {
					b = Box{q.X, q.Y, q.X, q.Y}
					first = false
					continue
				}
				b.Xmin, b.Ymin = min(b.Xmin, q.X), min(b.Ymin, q.Y)
				b.Xmax, b.Ymax = max(b.Xmax, q.X), max(b.Ymax, q.Y)
			}
		}
	}
	return b
}

// Geo is one point or polygon row of truth or predictions: its geometry,
// label id and (predictions) score.
type Geo struct {
	Point Point
	Shape *Shape // polygons; nil for points
	Label int32
	Score float64
}

// GeoImage is one validation image of a point or polygon dataset: its
// path as written in the truth, every truth row in file order (the empty
// markers, 0,0 points and EMPTY polygons, included: each semantics drops
// them by its own rule), and its size in pixels when canopy could read it
// (0 when unknown).
type GeoImage struct {
	Path          string
	Truth         []Geo
	Width, Height int
}
