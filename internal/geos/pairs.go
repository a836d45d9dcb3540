package geos

import (
	"fmt"

	"github.com/canopy-hpc/canopy/box"
)

// Pairs holds one image's truth and predicted polygons as GEOS geometries.
type Pairs struct {
	c            *Context
	truth, preds []*Geom
}

// NewPairs builds the geometries of truth and preds in a fresh context;
// the returned func frees them.
func NewPairs(truth, preds []box.Geo) (*Pairs, func(), error) {
	c, err := NewContext()
	if err != nil {
		return nil, nil, err
	}
	p := &Pairs{c: c}
	done := func() {
		for _, g := range append(p.truth, p.preds...) {
			c.Free(g)
		}
		c.Close()
	}
	for _, side := range []struct {
		rows []box.Geo
		out  *[]*Geom
	}{{truth, &p.truth}, {preds, &p.preds}} {
		for i, r := range side.rows {
			g, err := c.Shape(r.Shape)
			if err != nil {
				done()
				return nil, nil, fmt.Errorf("polygon %d: %w", i, err)
			}
			*side.out = append(*side.out, g)
		}
	}
	return p, done, nil
}

// Overlap: whether truth t and prediction p intersect and, if so, the
// areas of their intersection and union.
func (p *Pairs) Overlap(t, q int) (inter, union float64, ok bool, err error) {
	a, b := p.truth[t], p.preds[q]
	if ok, err = p.c.Intersects(a, b); err != nil || !ok {
		return 0, 0, false, err
	}
	if inter, err = p.c.IntersectionArea(a, b); err != nil {
		return 0, 0, false, err
	}
	if union, err = p.c.UnionArea(a, b); err != nil {
		return 0, 0, false, err
	}
	return inter, union, true, nil
}

// Check builds sh and refuses it unless GEOS finds it valid (an empty
// shape is valid), saying why.
func (c *Context) Check(sh *box.Shape) error {
	g, err := c.Shape(sh)
	if err != nil {
		return err
	}
	defer c.Free(g)
	ok, why, err := c.Valid(g)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("invalid polygon: %s", why)
	}
	return nil
}
