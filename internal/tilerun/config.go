// Package tilerun is the tile engine of predict --tile and eval --tile:
// DeepForest's predict_tile over many rasters on many ranks (Run). Rank 0
// opens the rasters and prepares the output folder; the global window list
// is walked in rounds, each rank detecting its share; a raster whose
// windows are all in is merged and published by the rank that owns it; at
// the end rank 0 builds the combined outputs (and eval --tile's metrics
// and page). The command (jobs) parses the flags into a Config and maps
// the errors, which carry their exit codes (internal/errkind).
package tilerun

import (
	"io"
	"time"

	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/internal/cropstage"
	"github.com/canopy-hpc/canopy/internal/geotruth"
	"github.com/canopy-hpc/canopy/internal/htmlreport"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/metrics"
)

// Config is the configuration of one predict --tile or eval --tile run,
// as the command built it from its flags.
type Config struct {
	Raster, CSV, Images, RootDir string
	Out                          string
	// Names are the entries of OUT the commands declare (any report of
	// theirs marks a previous run; outdir.Open).
	Names         outdir.Names
	Force, Resume bool
	// FullHash is --resume-hash full: a raster's identity for --resume
	// holds the sha256 of the whole file (else of its first and last
	// 64 KiB, with its size and modification time).
	FullHash  bool
	BatchSize int
	// SkipEmpty: a window whose pixels are all nodata, alpha 0 or one
	// value gives no detections without running the model.
	SkipEmpty bool
	// RoundWindows: windows per round (0: from the rank's memory).
	RoundWindows     int
	Settings         tile.Settings
	IoU              float64
	CacheMiB         int
	AllowOutsideRoot bool
	Model            modelsel.ModelConfig
	// Crops are --crop-model and --crop-label-dict.
	Crops             cropstage.CropConfig
	Command           []string
	Stdout            io.Writer
	Progress          io.Writer
	CollectiveTimeout time.Duration
	// LabelDict is --label-dict (or "CONFIG: label_dict"): the labels of a
	// bare .pt state dict, which a model folder's or .ckpt's own must
	// equal; LabelDictData, when set, is the config's label_dict as
	// label,id CSV, read instead of the file. Rank 0 reads it and
	// broadcasts the bytes; every rank parses the same map.
	LabelDict     string
	LabelDictData []byte
	// RunConfig: what report.json records of --config and its overrides
	// (nil without them).
	RunConfig *output.RunConfig
	// Eval, for eval --tile (nil: predict --tile): the metric settings; the
	// truth is CSV (its image_path values are the rasters, its boxes in
	// their pixels, or a shapefile or GeoPackage converted to them), and
	// the metrics are computed on the merged predictions.
	Eval *EvalConfig
	// vector: eval --tile's shapefile or GeoPackage truth, read by rank 0
	// (its image_path values are the rasters).
	vector *geotruth.Truth
}

// EvalConfig is what eval --tile takes of eval's settings: how the merged
// rows are matched and scored, and the page.
type EvalConfig struct {
	IoUThreshold float64
	Semantics    metrics.Semantics
	// Families: the metric families (0: all); ClassMetrics: per-class
	// values; IoUSweep: further IoU thresholds (--iou-sweep).
	Families     metrics.Family
	ClassMetrics bool
	IoUSweep     []float64
	// HTML: rank 0 writes OUT/report.html with these options (nil: not).
	HTML *htmlreport.Options
}

// The values of --resume-hash.
const (
	ResumeHashEnds = "ends"
	ResumeHashFull = "full"
)

// rasterFault is a test seam: an error for a per-raster output file (its
// name under OUT/rasters), as a full disk gives while it is staged
// (FaultRasterForTest).
var rasterFault = func(name string) error { return nil }

// FaultRasterForTest makes staging the per-raster output named name (under
// OUT/rasters) fail with err, until the returned function restores it.
// Tests only.
func FaultRasterForTest(name string, err error) (restore func()) {
	old := rasterFault
	rasterFault = func(n string) error {
		if n == name {
			return err
		}
		return nil
	}
	return func() { rasterFault = old }
}
