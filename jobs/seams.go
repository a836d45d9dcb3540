package jobs

import (
	"github.com/canopy-hpc/canopy/internal/parts"
)

// The test seams of jobs: functions a test of package jobs replaces
// (internal/testhook holds the environment hooks).

// createParts opens a rank's part file (a seam for the full-disk test).
var createParts = parts.Create

// rasterFault is a test seam: an error for a per-raster output file
// (its name under OUT/rasters), as a full disk gives while it is staged.
var rasterFault = func(name string) error { return nil }
