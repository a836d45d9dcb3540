package dataset

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/canopy-hpc/canopy/box"
)

// ParseWKB reads one geometry as a shapefile or GeoPackage layer gives it
// (ISO WKB, either byte order): a Point, Polygon or MultiPolygon in two
// dimensions. Rings must be closed and hold at least 3 points;
// coordinates must be finite. Every count is checked against the bytes
// left before anything is allocated. Other types (and Z or M) are refused.
func ParseWKB(b []byte) (box.Kind, box.Point, *box.Shape, error) {
	r := wkbReader{b: b}
	typ, err := r.header()
	if err != nil {
		return 0, box.Point{}, nil, err
	}
	var pt box.Point
	sh := &box.Shape{}
	switch typ {
	case 1:
		if pt, err = r.point(); err == nil && (math.IsNaN(pt.X) || math.IsNaN(pt.Y)) {
			err = errors.New("an empty point")
		}
	case 3:
		var p box.Polygon
		if p, err = r.polygon(); err == nil && len(p) > 0 {
			sh.Parts = []box.Polygon{p}
		}
	case 6:
		sh.Multi = true
		var n int
		if n, err = r.count(9); err != nil {
			break
		}
		for k := 0; k < n && err == nil; k++ {
			var t uint32
			if t, err = r.header(); err == nil && t != 3 {
				err = fmt.Errorf("a MultiPolygon part of WKB type %d", t)
			}
			var p box.Polygon
			if err == nil {
				if p, err = r.polygon(); len(p) > 0 {
					sh.Parts = append(sh.Parts, p)
				}
			}
		}
	default:
		err = fmt.Errorf("WKB geometry type %d: canopy reads 2D Point, Polygon or MultiPolygon", typ)
	}
	if err == nil && r.i != len(b) {
		err = fmt.Errorf("%d bytes after the geometry", len(b)-r.i)
	}
	if err != nil {
		return 0, box.Point{}, nil, fmt.Errorf("geometry: %w", err)
	}
	if typ == 1 {
		return box.KindPoint, pt, nil, nil
	}
	return box.KindPolygon, box.Point{}, sh, nil
}

type wkbReader struct {
	b     []byte
	i     int
	order binary.ByteOrder
}

// header reads a byte order mark and a geometry type.
func (r *wkbReader) header() (uint32, error) {
	if len(r.b)-r.i < 5 {
		return 0, errors.New("truncated WKB")
	}
	switch r.b[r.i] {
	case 0:
		r.order = binary.BigEndian
	case 1:
		r.order = binary.LittleEndian
	default:
		return 0, fmt.Errorf("WKB byte order %d", r.b[r.i])
	}
	t := r.order.Uint32(r.b[r.i+1:])
	r.i += 5
	return t, nil
}

// count reads a count whose items take at least each bytes.
func (r *wkbReader) count(each int) (int, error) {
	if len(r.b)-r.i < 4 {
		return 0, errors.New("truncated WKB")
	}
	n := int(r.order.Uint32(r.b[r.i:]))
	r.i += 4
	if n > (len(r.b)-r.i)/each {
		return 0, fmt.Errorf("WKB count %d exceeds the %d bytes left", n, len(r.b)-r.i)
	}
	return n, nil
}

func (r *wkbReader) point() (box.Point, error) {
	if len(r.b)-r.i < 16 {
		return box.Point{}, errors.New("truncated WKB")
	}
	p := box.Point{X: math.Float64frombits(r.order.Uint64(r.b[r.i:])), Y: math.Float64frombits(r.order.Uint64(r.b[r.i+8:]))}
	r.i += 16
	if math.IsInf(p.X, 0) || math.IsInf(p.Y, 0) {
		return p, fmt.Errorf("coordinate %v %v is not finite", p.X, p.Y)
	}
	return p, nil
}

func (r *wkbReader) polygon() (box.Polygon, error) {
	n, err := r.count(4)
	if err != nil {
		return nil, err
	}
	var poly box.Polygon
	for k := 0; k < n; k++ {
		m, err := r.count(16)
		if err != nil {
			return nil, err
		}
		ring := make(box.Ring, m)
		for j := range ring {
			if ring[j], err = r.point(); err == nil && math.IsNaN(ring[j].X+ring[j].Y) {
				err = errors.New("a NaN coordinate")
			}
			if err != nil {
				return nil, err
			}
		}
		if m < 3 || ring[0] != ring[m-1] {
			return nil, fmt.Errorf("ring %d of %d points is not a closed ring", k+1, m)
		}
		poly = append(poly, ring)
	}
	return poly, nil
}
