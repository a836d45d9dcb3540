//go:build nogeos || nogdal

package geos

import "github.com/canopy-hpc/canopy/box"

// Available reports whether this build has GEOS.
const Available = false

// Version is empty without GEOS.
func Version() string { return "" }

// Context is the stub of a GEOS context.
type Context struct{}

// Geom is the stub of a geometry.
type Geom struct{}

// NewContext fails: this build has no GEOS.
func NewContext() (*Context, error) { return nil, ErrUnavailable }

// Close does nothing.
func (c *Context) Close() {}

// Free does nothing.
func (c *Context) Free(*Geom) {}

// Shape fails: this build has no GEOS.
func (c *Context) Shape(*box.Shape) (*Geom, error) { return nil, ErrUnavailable }

// Valid fails: this build has no GEOS.
func (c *Context) Valid(*Geom) (bool, string, error) { return false, "", ErrUnavailable }

// Intersects fails: this build has no GEOS.
func (c *Context) Intersects(a, b *Geom) (bool, error) { return false, ErrUnavailable }

// Area fails: this build has no GEOS.
func (c *Context) Area(*Geom) (float64, error) { return 0, ErrUnavailable }

// IntersectionArea fails: this build has no GEOS.
func (c *Context) IntersectionArea(a, b *Geom) (float64, error) { return 0, ErrUnavailable }

// UnionArea fails: this build has no GEOS.
func (c *Context) UnionArea(a, b *Geom) (float64, error) { return 0, ErrUnavailable }
