// Package geos is canopy's thin binding to GEOS, the geometry engine under
// shapely: the polygon areas of DeepForest's evaluate_geometry (shapely's
// intersection, union, area and the STRtree's intersects predicate) come
// from the same library, so they agree with shapely's to the last bit when
// the GEOS versions agree, and within GEOS's own version-to-version
// differences otherwise. cgo lives only here (cgeos.go); the build tag
// nogeos (or nogdal, the tag of builds without geospatial C libraries)
// builds a stub whose every call fails with ErrUnavailable.
package geos

import "errors"

// ErrUnavailable is returned by every call of a build without GEOS.
var ErrUnavailable = errors.New("geos: this canopy was built without GEOS (-tags nogeos or nogdal): polygon metrics are unavailable")
