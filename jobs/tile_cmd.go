package jobs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/internal/config"
	"github.com/canopy-hpc/canopy/internal/geotruth"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/tilerun"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/urfave/cli/v2"
)

// canopy predict --tile and eval --tile: their flags and how they become a
// tilerun.Config (the job is internal/tilerun's). predict_cmd.go adds tileFlags and hands over to
// tileAction when --tile is given.

func tileFlags() []cli.Flag {
	return append(tileWindowFlags("cut each raster into overlapping windows and merge their detections, as DeepForest's predict_tile (dataloader_strategy \"single\"/\"window\"): the windows of all rasters are shared out among the ranks, each rank reads only its windows (GDAL), and every rank merges the gathered detections; the rasters come from --raster, --images (a folder) or --csv (an image_path list)"),
		&cli.StringFlag{Name: "raster", Usage: "with --tile: one raster (GeoTIFF, COG, JPEG or PNG; RGB or RGBA, 8- or 16-bit); its image_path is its file name, as predict_tile writes it"})
}

// evalRasterFlag is eval --tile's --raster: read_file's image_path
// argument for a shapefile or GeoPackage truth.
func evalRasterFlag() cli.Flag {
	return &cli.StringFlag{Name: "raster", Usage: "with --tile and a shapefile or GeoPackage truth: the raster of every feature, as DeepForest's read_file(path, image_path=...) assigns it (an image_path column naming another is overridden, with a warning); its image_path is its file name"}
}

// tileWindowFlags are the flags predict --tile and eval --tile share.
func tileWindowFlags(tileUsage string) []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "tile", Usage: tileUsage},
		&cli.IntFlag{Name: "patch-size", Value: 400, Usage: "with --tile: window side in pixels, min(patch, raster side) on each axis (DeepForest's predict_tile patch_size; CLI: patch_size)"},
		&cli.Float64Flag{Name: "patch-overlap", Value: 0.05, Usage: "with --tile: fraction of a window shared with its neighbour, in [0, 1) (predict_tile's patch_overlap; CLI: patch_overlap)"},
		&cli.Float64Flag{Name: "tile-iou", Value: tile.DefaultIoU, Usage: "with --tile: IoU above which the merge (one class-agnostic NMS over the raster's shifted, integer boxes) drops the lower-scoring box (predict_tile's iou_threshold; DeepForest's CLI --mode tile passes nms_thresh, 0.05, here)"},
		&cli.IntFlag{Name: "gdal-cache", Value: 256, Usage: "with --tile: GDAL's block cache per rank, in MiB (bounds what a rank holds of a raster)"},
		&cli.BoolFlag{Name: "skip-empty", Usage: "with --tile: a window whose pixels are all nodata (the raster's nodata value on bands 1-3, or alpha 0) or all one value gets no detections without running the model (off by default: DeepForest's predict_tile runs every window); report.json counts them (per_rank skipped_windows, tile.skipped_windows). A point model (TreeFormer) takes it too: all one colour, or all the nodata GDAL reports, gives the window no points (report.json skipped_windows)"},
		&cli.StringFlag{Name: "resume-hash", Value: tilerun.ResumeHashEnds, Usage: "with --tile: what identifies a raster for --resume. " + tilerun.ResumeHashEnds + " (default): its size, its modification time and the sha256 of its first and last 64 KiB (a GeoTIFF's header and tile offsets), so an edit inside a raster that keeps its size and time is not seen; " + tilerun.ResumeHashFull + ": also the sha256 of the whole file, read once more by rank 0 at the start of the run and of each --resume (about 0.8 CPU s per GiB from the page cache, plus the read from disk; docs/benchmarks.md). Recorded in OUT/manifest.json: give it to the run and to every --resume"},
		&cli.IntFlag{Name: "round-windows", Usage: "with --tile: windows per round (the job detects a round, gathers it, and publishes the rasters it completes); default: 32 detector calls per rank (at least 64 windows), fewer when the rank's memory budget asks. Outputs do not depend on it"},
	}
}

// tileConfig parses the flags of predict --tile once.
func tileConfig(c *cli.Context, stdout io.Writer) (tilerun.Config, error) {
	cfg := tilerun.Config{Raster: c.String("raster"), CSV: c.String("csv"), Images: c.String("images"), RootDir: c.String("root-dir"),
		Out: c.String("out"), Names: output.Names, Force: c.Bool("force"), Command: os.Args, Stdout: stdout, AllowOutsideRoot: c.Bool("allow-outside-root"),
		Settings: tile.Settings{Patch: c.Int("patch-size"), Overlap: c.Float64("patch-overlap")}, IoU: c.Float64("tile-iou"),
		CacheMiB: c.Int("gdal-cache"), Resume: c.Bool("resume"), RoundWindows: c.Int("round-windows"), SkipEmpty: c.Bool("skip-empty")}
	mc, cc, err := modelConfig(c)
	if err != nil {
		return cfg, err
	}
	cfg.Model, cfg.Crops = mc, cc
	if cfg.BatchSize, err = batchSize(c); err != nil {
		return cfg, err
	}
	if cfg.FullHash, err = fullHashFlag(c); err != nil {
		return cfg, err
	}
	given := 0
	for _, s := range []string{cfg.Raster, cfg.CSV, cfg.Images} {
		if s != "" {
			given++
		}
	}
	switch {
	case mc.Spec == "":
		return cfg, errors.New("--model is required")
	case given != 1:
		return cfg, errors.New("--tile: give exactly one of --raster, --images and --csv")
	case cfg.RootDir != "" && cfg.CSV == "":
		return cfg, errors.New("--root-dir goes with --csv")
	case !(cfg.IoU >= 0 && cfg.IoU <= 1):
		return cfg, fmt.Errorf("--tile-iou %v is not in [0, 1]", cfg.IoU)
	case cfg.CacheMiB < 1:
		return cfg, fmt.Errorf("--gdal-cache %d must be at least 1 (MiB)", cfg.CacheMiB)
	case cfg.RoundWindows < 0:
		return cfg, fmt.Errorf("--round-windows %d must be at least 1 (0: from the memory budget)", cfg.RoundWindows)
	case cfg.Force && cfg.Resume:
		return cfg, errors.New("--force and --resume exclude each other")
	}
	return cfg, nil
}

// tileAction is predict's action under --tile.
func tileAction(c *cli.Context, code *int, newComm CommFactory, stdout, stderr io.Writer) error {
	if !c.Bool("tile") {
		return tileFlagsNeedTile(c, "predict")
	}
	if c.IsSet("raw-rows") {
		return usageError(errors.New("predict: --raw-rows goes without --tile: predict_tile's merge is one class-agnostic NMS already"))
	}
	rc, err := noArgsRunConfig(c, "predict --tile")
	if err != nil {
		return err
	}
	cfg, err := tileConfig(c, stdout)
	if err != nil {
		return usageError(fmt.Errorf("predict: %w", err))
	}
	cfg.LabelDict = c.String("label-dict")
	if rc != nil {
		rc.applyModel(c, &cfg.Model, false)
		rc.resolveInt(c, "batch-size", "batch_size", rc.C.BatchSize, &cfg.BatchSize)
		rc.applyTile(c, &cfg)
		if cfg.LabelDictData = rc.labelCSV(c); cfg.LabelDictData != nil {
			cfg.LabelDict = rc.labelSource()
		}
	}
	return runTileJob(c, code, newComm, stderr, "predict", cfg)
}

// runTileJob runs predict_tile's job on every rank, for predict --tile and
// eval --tile. Window settings that cut no windows are bad input (exit 3),
// as the table has them, not a usage error.
func runTileJob(c *cli.Context, code *int, newComm CommFactory, stderr io.Writer, cmd string, cfg tilerun.Config) error {
	if err := cfg.Settings.Check(); err != nil {
		return &Error{Code: ExitInput, Collective: true, Err: fmt.Errorf("%s: --patch-size/--patch-overlap: %w", cmd, err)}
	}
	return runRankedJob(c, code, newComm, stderr, cfg.Out, rankOutputs{&cfg.Stdout, &cfg.Progress, &cfg.CollectiveTimeout}, func(comm mpi.Comm) error {
		return tilerun.Run(c.Context, comm, cfg)
	})
}

// tileFlagsNeedTile refuses a tile flag given without --tile.
func tileFlagsNeedTile(c *cli.Context, cmd string) error {
	for _, f := range []string{"raster", "patch-size", "patch-overlap", "tile-iou", "gdal-cache", "round-windows", "skip-empty", "resume-hash"} {
		if c.IsSet(f) {
			return usageError(fmt.Errorf("%s: --%s needs --tile", cmd, f))
		}
	}
	return nil
}

// fullHashFlag parses --resume-hash: true for full.
func fullHashFlag(c *cli.Context) (bool, error) {
	switch h := c.String("resume-hash"); h {
	case tilerun.ResumeHashEnds:
		return false, nil
	case tilerun.ResumeHashFull:
		return true, nil
	default:
		return false, fmt.Errorf("--resume-hash %q: want %s (the sha256 of each raster's first and last 64 KiB) or %s (of the whole file)", h, tilerun.ResumeHashEnds, tilerun.ResumeHashFull)
	}
}

// evalTileAction is eval's action under --tile: the truth CSV names the
// rasters (image_path) and holds their boxes in pixels; the metrics are
// those of eval, on predict_tile's merged rows.
func evalTileAction(c *cli.Context, code *int, newComm CommFactory, stdout, stderr io.Writer) error {
	ec, err := evalConfig(c, stdout)
	if err != nil {
		return usageError(err)
	}
	switch {
	case ec.Predictions != "":
		return usageError(errors.New("eval: --tile runs the model (--model), not --predictions"))
	}
	if c.IsSet("raster") && !geotruth.IsVector(ec.CSV) {
		return usageError(errors.New("eval: --raster with --tile names the raster of a shapefile or GeoPackage truth (.shp, .gpkg); a CSV truth names its rasters in image_path"))
	}
	cfg := tilerun.Config{Raster: c.String("raster"), CSV: ec.CSV, RootDir: ec.RootDir, Out: ec.Out, Force: ec.Force, BatchSize: ec.BatchSize, Model: ec.Model, Crops: ec.Crops,
		AllowOutsideRoot: ec.AllowOutsideRoot, Command: os.Args, Stdout: stdout, LabelDict: ec.LabelDict, LabelDictData: ec.LabelDictData,
		Resume: ec.Resume, RoundWindows: c.Int("round-windows"), SkipEmpty: c.Bool("skip-empty"),
		Settings: tile.Settings{Patch: c.Int("patch-size"), Overlap: c.Float64("patch-overlap")}, IoU: c.Float64("tile-iou"),
		CacheMiB: c.Int("gdal-cache"), Names: output.Names,
		Eval: &tilerun.EvalConfig{IoUThreshold: ec.IoUThreshold, Semantics: ec.Semantics, Families: ec.Families, ClassMetrics: ec.ClassMetrics, IoUSweep: ec.IoUSweep, HTML: ec.HTML}}
	if ec.RunConfig != nil {
		(&runConfig{RunConfig: ec.RunConfig}).applyTile(c, &cfg)
	}
	if cfg.FullHash, err = fullHashFlag(c); err != nil {
		return usageError(fmt.Errorf("eval: %w", err))
	}
	switch {
	case !(cfg.IoU >= 0 && cfg.IoU <= 1):
		return usageError(fmt.Errorf("eval: --tile-iou %v is not in [0, 1]", cfg.IoU))
	case cfg.CacheMiB < 1:
		return usageError(fmt.Errorf("eval: --gdal-cache %d must be at least 1 (MiB)", cfg.CacheMiB))
	}
	return runTileJob(c, code, newComm, stderr, "eval", cfg)
}

// applyTile applies the config's window settings as DeepForest's CLI
// --mode tile does (scripts/predict.py: predict_tile(patch_size=
// config.patch_size, patch_overlap=config.patch_overlap, iou_threshold=
// config.nms_thresh)): flag > override > config > canopy's default, each
// recorded with its source (report.json run settings: patch_size,
// patch_overlap, and tile_iou for the merge IoU); report.json records the
// config and the settings (cfg.RunConfig).
func (rc *runConfig) applyTile(c *cli.Context, cfg *tilerun.Config) {
	cfg.RunConfig = rc.RunConfig
	cf := rc.C
	switch {
	case c.IsSet("patch-size"):
		rc.Settings["patch_size"] = setting{Value: strconv.Itoa(cfg.Settings.Patch), Source: config.Flag}
	case cf.PatchSize.Src != "":
		cfg.Settings.Patch = cf.PatchSize.V
		rc.Settings["patch_size"] = setting{Value: strconv.Itoa(cf.PatchSize.V), Source: cf.PatchSize.Src}
	default:
		rc.Settings["patch_size"] = setting{Value: strconv.Itoa(cfg.Settings.Patch), Source: config.Default}
	}
	rc.resolveFloat(c, "patch-overlap", "patch_overlap", cf.PatchOverlap, &cfg.Settings.Overlap, fstr(cfg.Settings.Overlap))
	rc.resolveFloat(c, "tile-iou", "tile_iou", cf.NMSThresh, &cfg.IoU, fstr(cfg.IoU))
}
