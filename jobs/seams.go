package jobs

// The test seams of jobs: functions a test of package jobs replaces
// (internal/testhook holds the environment hooks).

// rasterFault is a test seam: an error for a per-raster output file
// (its name under OUT/rasters), as a full disk gives while it is staged.
var rasterFault = func(name string) error { return nil }
