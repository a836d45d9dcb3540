//go:build !nogeos && !nogdal

package geos

/*
#cgo pkg-config: geos
#include <geos_c.h>
#include <stdio.h>
#include <stdlib.h>

static void canopy_geos_message(const char *msg, void *userdata) {
	snprintf((char *)userdata, 512, "%s", msg);
}

static GEOSContextHandle_t canopy_geos_init(char *buf) {
	GEOSContextHandle_t h = GEOS_init_r();
	if (h != NULL) {
		GEOSContext_setErrorMessageHandler_r(h, canopy_geos_message, buf);
	}
	return h;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/canopy-hpc/canopy/box"
)

// Available reports whether this build has GEOS.
const Available = true

// Version is the GEOS library's version string (GEOSversion).
func Version() string { return C.GoString(C.GEOSversion()) }

// Context is one GEOS context handle; use it from one goroutine at a time.
type Context struct {
	h   C.GEOSContextHandle_t
	msg *C.char // GEOS's last error message (512 bytes, C memory)
}

// Geom is a geometry owned by its Context.
type Geom struct{ g *C.GEOSGeometry }

// NewContext opens a context; Close frees it.
func NewContext() (*Context, error) {
	msg := (*C.char)(C.calloc(512, 1))
	h := C.canopy_geos_init(msg)
	if h == nil {
		C.free(unsafe.Pointer(msg))
		return nil, errors.New("geos: GEOS_init_r failed")
	}
	return &Context{h: h, msg: msg}, nil
}

// Close frees the context (its geometries must be freed first).
func (c *Context) Close() {
	if c.h != nil {
		C.GEOS_finish_r(c.h)
		C.free(unsafe.Pointer(c.msg))
		c.h = nil
	}
}

func (c *Context) err(what string) error {
	m := C.GoString(c.msg)
	*c.msg = 0
	if m == "" {
		m = "failed"
	}
	return fmt.Errorf("geos: %s: %s", what, m)
}

// Free releases g.
func (c *Context) Free(g *Geom) {
	if g != nil && g.g != nil {
		C.GEOSGeom_destroy_r(c.h, g.g)
		g.g = nil
	}
}

// Shape builds a Polygon or MultiPolygon from sh, coordinates as given (as
// shapely's WKT reader makes them from the same numbers). An empty shape
// is an empty polygon.
func (c *Context) Shape(sh *box.Shape) (*Geom, error) {
	if sh.Empty() {
		g := C.GEOSGeom_createEmptyPolygon_r(c.h)
		if g == nil {
			return nil, c.err("empty polygon")
		}
		return &Geom{g}, nil
	}
	parts := make([]*C.GEOSGeometry, 0, len(sh.Parts))
	fail := func(err error) (*Geom, error) {
		for _, p := range parts {
			C.GEOSGeom_destroy_r(c.h, p)
		}
		return nil, err
	}
	for _, p := range sh.Parts {
		g, err := c.polygon(p)
		if err != nil {
			return fail(err)
		}
		parts = append(parts, g)
	}
	if !sh.Multi {
		return &Geom{parts[0]}, nil
	}
	arr := (**C.GEOSGeometry)(C.malloc(C.size_t(len(parts)) * C.size_t(unsafe.Sizeof(uintptr(0)))))
	defer C.free(unsafe.Pointer(arr))
	copy(unsafe.Slice(arr, len(parts)), parts)
	g := C.GEOSGeom_createCollection_r(c.h, C.GEOS_MULTIPOLYGON, arr, C.uint(len(parts)))
	if g == nil {
		return fail(c.err("multipolygon"))
	}
	return &Geom{g}, nil
}

// polygon builds one polygon (shell, holes); the rings pass to it.
func (c *Context) polygon(p box.Polygon) (*C.GEOSGeometry, error) {
	rings := make([]*C.GEOSGeometry, 0, len(p))
	for k, r := range p {
		g, err := c.ring(r)
		if err != nil {
			for _, q := range rings {
				C.GEOSGeom_destroy_r(c.h, q)
			}
			return nil, fmt.Errorf("ring %d: %w", k+1, err)
		}
		rings = append(rings, g)
	}
	var holes **C.GEOSGeometry
	if n := len(rings) - 1; n > 0 {
		holes = (**C.GEOSGeometry)(C.malloc(C.size_t(n) * C.size_t(unsafe.Sizeof(uintptr(0)))))
		defer C.free(unsafe.Pointer(holes))
		copy(unsafe.Slice(holes, n), rings[1:])
	}
	g := C.GEOSGeom_createPolygon_r(c.h, rings[0], holes, C.uint(len(rings)-1))
	if g == nil {
		return nil, c.err("polygon")
	}
	return g, nil
}

func (c *Context) ring(r box.Ring) (*C.GEOSGeometry, error) {
	buf := (*C.double)(C.malloc(C.size_t(16 * len(r))))
	defer C.free(unsafe.Pointer(buf))
	xy := unsafe.Slice(buf, 2*len(r))
	for i, q := range r {
		xy[2*i], xy[2*i+1] = C.double(q.X), C.double(q.Y)
	}
	seq := C.GEOSCoordSeq_copyFromBuffer_r(c.h, buf, C.uint(len(r)), 0, 0)
	if seq == nil {
		return nil, c.err("coordinates")
	}
	g := C.GEOSGeom_createLinearRing_r(c.h, seq) // takes seq, even on failure
	if g == nil {
		return nil, c.err("linear ring")
	}
	return g, nil
}

// Valid reports whether g is valid (GEOSisValid) and, if not, why
// (GEOSisValidReason).
func (c *Context) Valid(g *Geom) (bool, string, error) {
	switch C.GEOSisValid_r(c.h, g.g) {
	case 1:
		return true, "", nil
	case 0:
		r := C.GEOSisValidReason_r(c.h, g.g)
		if r == nil {
			return false, "invalid", nil
		}
		defer C.GEOSFree_r(c.h, unsafe.Pointer(r))
		return false, C.GoString(r), nil
	}
	return false, "", c.err("is_valid")
}

// Intersects is GEOSIntersects (shapely's intersects predicate).
func (c *Context) Intersects(a, b *Geom) (bool, error) {
	switch C.GEOSIntersects_r(c.h, a.g, b.g) {
	case 1:
		return true, nil
	case 0:
		return false, nil
	}
	return false, c.err("intersects")
}

// Area is GEOSArea (shapely.area).
func (c *Context) Area(g *Geom) (float64, error) {
	var a C.double
	if C.GEOSArea_r(c.h, g.g, &a) == 0 {
		return 0, c.err("area")
	}
	return float64(a), nil
}

// IntersectionArea is shapely.area(shapely.intersection(a, b)).
func (c *Context) IntersectionArea(a, b *Geom) (float64, error) {
	return c.areaOf(C.GEOSIntersection_r(c.h, a.g, b.g), "intersection")
}

// UnionArea is shapely.area(shapely.union(a, b)).
func (c *Context) UnionArea(a, b *Geom) (float64, error) {
	return c.areaOf(C.GEOSUnion_r(c.h, a.g, b.g), "union")
}

func (c *Context) areaOf(g *C.GEOSGeometry, what string) (float64, error) {
	if g == nil {
		return 0, c.err(what)
	}
	defer C.GEOSGeom_destroy_r(c.h, g)
	return c.Area(&Geom{g})
}
