package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/config"
	"github.com/canopy-hpc/canopy/internal/geotruth"
	"github.com/canopy-hpc/canopy/internal/pipeline/eval"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/urfave/cli/v2"
)

// canopy eval: its flags and how they become an EvalConfig; the job is
// internal/pipeline/eval's Run.

// EvalConfig is the configuration of one `canopy eval` run (the
// pipeline's, internal/pipeline/eval). Every rank passes the same values.
type EvalConfig = eval.Config

// Eval runs the eval job on this rank (eval.Run). It returns an *Error
// whose Collective flag says whether every rank returns the same error.
func Eval(ctx context.Context, c mpi.Comm, cfg EvalConfig) error { return eval.Run(ctx, c, cfg) }

func evalCommand(code *int, stdout, errw, stderr io.Writer, newComm CommFactory) *cli.Command {
	return &cli.Command{
		Name:      "eval",
		Usage:     "score detections against DeepForest ground truth on every rank",
		ArgsUsage: "[CSV] [key=value ...]",
		Description: "Rank 0 reads the inputs and broadcasts them; each rank detects its shard of the\n" +
			"images; an MPI_Allgatherv gives every rank every detection; every rank computes\n" +
			"the same metrics; rank 0 writes report.json, predictions.csv and results.csv\n" +
			"into --out. The CSV may be given by --csv or as the one positional argument.\n" +
			"With --model the metrics also hold DeepForest's val_classification,\n" +
			"val_bbox_regression and val_loss: torchvision's train-mode losses per image,\n" +
			"averaged over the images (with the model's stored BatchNorm statistics).\n\n" + ExitTable,
		Flags: concatFlags([]cli.Flag{
			configFlag(),
			&cli.StringFlag{Name: "csv", Usage: "DeepForest annotation CSV (image_path,xmin,ymin,xmax,ymax,label; columns by header name; or image_path,label with a WKT geometry column: rectangles are boxes, other POLYGONs and MULTIPOLYGONs polygons, POINTs points; or image_path,x,y,label: points; see --geometry), a Pascal VOC annotation (.xml) or a folder of them, or a COCO dataset (.json: file_name is the image_path, bbox x,y,w,h, category names are the labels); with --tile, or with --predictions of points or polygons, also a shapefile (.shp) or GeoPackage (.gpkg) whose features (with --tile, their polygons' bounds) are converted to pixels of the rasters or images its image_path column names, as DeepForest's read_file converts them (label column; first layer; no CRS: pixel coordinates; a geographic CRS is refused; a CRS other than the raster's is warned about, not reprojected)"},
			rootDirFlag(),
			&cli.StringFlag{Name: "predictions", Usage: "replay detector: DeepForest prediction CSV (image_path,xmin,ymin,xmax,ymax,label,score; or points: image_path,x,y,label,score; or polygons: image_path,geometry (WKT),label,score); rows join the truth by exact image_path; points and polygons need a truth of the same geometry (a CSV, or a shapefile or GeoPackage of Point, Polygon or MultiPolygon features converted to the images' pixels)"},
			&cli.BoolFlag{Name: "allow-any-score", Usage: "accept --predictions scores outside [0, 1] (they must still be finite numbers)"},
			&cli.BoolFlag{Name: "strict", Usage: "make the input warnings errors (exit 3): no prediction joins the truth, over 10% of the predictions name no truth image, exact duplicate rows"},
		}, modelFlags(), []cli.Flag{
			&cli.Float64Flag{Name: "iou-threshold", Value: 0.4, Usage: "a truth box is matched when IoU is strictly greater than this, in [0, 1]"},
			&cli.StringFlag{Name: "iou-sweep", Usage: "further IoU thresholds, comma-separated plain decimals in [0, 1] (e.g. 0.5,0.6,0.75; at most 64, none twice): the recall and iou families are also computed at each from the same matching, into report.json's metrics_by_iou_threshold; metrics, results.csv and the table stay at --iou-threshold; COCO has its own ten thresholds; a score threshold cannot be swept (it changes what is matched)"},
			&cli.StringFlag{Name: "semantics", Value: "validation", Usage: "DeepForest definition of box recall/precision: validation (trainer.validate's RecallPrecision) or evaluate_boxes; points follow the point model's validation (RecallPrecision(task=\"point\"), val_mae) or evaluate_geometry; polygons always follow evaluate_geometry"},
			&cli.StringFlag{Name: "geometry", Value: "auto", Usage: "the inputs' geometry: auto (detected as DeepForest's determine_geometry_type: a WKT geometry column of Points, of rectangles (boxes) or of other Polygons and MultiPolygons; xmin,ymin,xmax,ymax; a WKT polygon column; x,y columns), box, point or polygon; points and polygons are scored from --predictions"},
			&cli.Float64Flag{Name: "distance-threshold", Value: 10, Usage: "points: a truth point is matched when its distance to the assigned prediction is strictly below this, in pixels (DeepForest's point.distance_threshold)"},
			&cli.StringFlag{Name: "metrics", Value: "all", Usage: "metric families, comma-separated: recall (DeepForest box recall/precision), iou (torchmetrics IntersectionOverUnion), coco (COCO mAP/mAR), or all"},
			&cli.BoolFlag{Name: "class-metrics", Usage: "report map_per_class and mar_100_per_class as arrays by label id, and the ids as \"classes\" (else -1, as DeepForest logs them)"},
			&cli.StringFlag{Name: "label-dict", Usage: "label,id CSV (DeepForest classes.csv form); default: sorted unique labels of truth and joined predictions; with --model, the model's own labels, which this must equal, except for a bare .pt state dict, which holds none and takes these; with --tile as without"},
			&cli.StringFlag{Name: "out", Value: "canopy-out", Usage: "output folder, on a filesystem every rank sees (checked at start); each rank appends finished images to OUT/parts/ so an interrupted run (exit 8) can --resume; refused if it holds a previous run unless --force or --resume, and (exit 2, naming the holder) while another run holds its lock"},
			&cli.BoolFlag{Name: "force", Usage: "replace a previous run in --out: it is set aside and removed only once the new run has passed every check and saved its first images; a new run that fails before that puts it back"},
			&cli.BoolFlag{Name: "resume", Usage: "continue the interrupted run in --out: images found in its part files are not recomputed; refused unless the inputs, detector and canopy version match its manifest. With --tile, as predict --tile --resume: a raster is identified by its path, size, modification time and the sha256 of its first and last 64 KiB (an edit inside it that keeps its size and time is not seen), and with --resume-hash full also by the sha256 of the whole file"},
		}, shardJobFlags("longest wait for every rank to reach a collective (after detection: this plus twice the rank's own detection time, as the shards are equal work); then rank 0 names the ranks it waits for and the job aborts with exit 5 (ranks other than 0 wait twice this, so rank 0 reports first; a collective every rank reached that has not completed max(1m, 3 × this) later ends the job with exit 5 too; 0 disables both)"),
			reportFlags(), []cli.Flag{evalRasterFlag()}, tileWindowFlags("cut each raster of the truth (its image_path values, boxes in the raster's pixels) into windows, predict and merge them as predict --tile (DeepForest's predict_tile), and score the merged rows as eval does (needs --model)")),
		Action: func(c *cli.Context) error {
			if model, ok := pointModel(c); ok {
				return evalPointAction(c, code, newComm, stdout, stderr, model)
			}
			if c.Bool("tile") {
				return evalTileAction(c, code, newComm, stdout, stderr)
			}
			if err := tileFlagsNeedTile(c, "eval"); err != nil {
				return err
			}
			cfg, err := evalConfig(c, stdout)
			if err != nil {
				return usageError(err)
			}
			if geotruth.IsVector(cfg.CSV) && cfg.Predictions == "" {
				return usageError(fmt.Errorf("eval: %s: a shapefile or GeoPackage truth goes with --tile (it is converted to the pixels of the rasters it names), or with --predictions of points or polygons", cfg.CSV))
			}
			return runShardJob(c, code, newComm, stderr, cfg.Out, func(comm mpi.Comm, rank0 bool, timeout time.Duration) error {
				if !rank0 {
					cfg.Stdout = nil
				} else {
					cfg.Warnings = stderr
					if cfg.Model.Spec != "" {
						cfg.Progress = stderr
					}
				}
				cfg.CollectiveTimeout = timeout
				return Eval(c.Context, comm, cfg)
			})
		},
	}
}

func evalConfig(c *cli.Context, stdout io.Writer) (EvalConfig, error) {
	cfg := EvalConfig{
		CSV:              c.String("csv"),
		RootDir:          c.String("root-dir"),
		Predictions:      c.String("predictions"),
		LabelDict:        c.String("label-dict"),
		Out:              c.String("out"),
		Force:            c.Bool("force"),
		Resume:           c.Bool("resume"),
		IoUThreshold:     c.Float64("iou-threshold"),
		Strict:           c.Bool("strict"),
		AllowAnyScore:    c.Bool("allow-any-score"),
		AllowOutsideRoot: c.Bool("allow-outside-root"),
		Command:          os.Args,
		Stdout:           stdout,
	}
	command := "eval"
	if c.Bool("tile") {
		command = "eval --tile"
	}
	rc, pos, err := loadRunConfig(c, command, c.Args().Slice())
	if err != nil {
		return cfg, fmt.Errorf("eval: %w", err)
	}
	switch {
	case len(pos) > 1:
		return cfg, fmt.Errorf("eval takes at most one argument (the CSV) besides key=value overrides, got %q", pos)
	case len(pos) == 1 && cfg.CSV != "":
		return cfg, errors.New("eval: the CSV is given twice (--csv and an argument)")
	case len(pos) == 1:
		cfg.CSV = pos[0]
	}
	if rc != nil {
		cfg.RunConfig = rc.RunConfig
		csv := config.Str{V: cfg.CSV}
		if cfg.CSV != "" {
			csv.Src = config.Flag
		} else if rc.C.ValidationCSV.Src != "" {
			csv = rc.C.ValidationCSV
			cfg.CSV = csv.V
		}
		if csv.Src != "" {
			rc.Settings["validation.csv_file"] = setting{Value: csv.V, Source: csv.Src}
		}
		if c.IsSet("root-dir") {
			rc.Settings["validation.root_dir"] = setting{Value: cfg.RootDir, Source: config.Flag}
		} else if v := rc.C.ValidationRoot; v.Src != "" {
			cfg.RootDir = v.V
			rc.Settings["validation.root_dir"] = setting{Value: v.V, Source: v.Src}
		}
		rc.resolveFloat(c, "iou-threshold", "validation.iou_threshold", rc.C.IoUThreshold, &cfg.IoUThreshold, fstr(cfg.IoUThreshold))
	}
	if cfg.CSV == "" {
		return cfg, errors.New("eval: --csv is required")
	}
	if fi, err := os.Stat(cfg.CSV); err == nil && fi.IsDir() && cfg.RootDir == "" {
		cfg.RootDir = cfg.CSV // a folder of VOC files: the images beside them
	}
	if cfg.Force && cfg.Resume {
		return cfg, errors.New("eval: --force and --resume exclude each other")
	}
	mc, cc, err := modelConfig(c)
	if err != nil {
		return cfg, fmt.Errorf("eval: %w", err)
	}
	if rc != nil && cfg.Predictions != "" {
		rc.ignoreModelKeys() // replay: no model to apply them to
	} else if rc != nil {
		rc.applyModel(c, &mc, false)
		if cfg.LabelDictData = rc.labelCSV(c); cfg.LabelDictData != nil {
			cfg.LabelDict = rc.labelSource()
		}
	}
	cfg.Model, cfg.Crops = mc, cc
	switch {
	case cfg.Predictions == "" && mc.Spec == "":
		return cfg, errors.New("eval: give --model (run the detector) or --predictions (replay stored predictions)")
	case cfg.Predictions != "" && mc.Spec != "":
		return cfg, errors.New("eval: --model and --predictions exclude each other")
	case cfg.AllowAnyScore && cfg.Predictions == "":
		return cfg, errors.New("eval: --allow-any-score goes with --predictions")
	}
	if !(cfg.IoUThreshold >= 0 && cfg.IoUThreshold <= 1) {
		return cfg, fmt.Errorf("eval: --iou-threshold %v is not in [0, 1]", cfg.IoUThreshold)
	}
	if c.IsSet("iou-sweep") {
		if cfg.IoUSweep, err = metrics.ParseThresholds(c.String("iou-sweep")); err != nil {
			return cfg, fmt.Errorf("eval: --iou-sweep: %w", err)
		}
	}
	if cfg.BatchSize, err = batchSize(c); err != nil {
		return cfg, fmt.Errorf("eval: %w", err)
	}
	if rc != nil {
		rc.resolveInt(c, "batch-size", "batch_size", rc.C.BatchSize, &cfg.BatchSize)
	}
	fam, err := metrics.ParseFamilies(c.String("metrics"))
	if err != nil {
		return cfg, err
	}
	cfg.Families = fam
	cfg.ClassMetrics = c.Bool("class-metrics")
	sem, err := metrics.ParseSemantics(c.String("semantics"))
	if err != nil {
		return cfg, err
	}
	cfg.Semantics = sem
	if cfg.HTML, err = htmlOptions(c); err != nil {
		return cfg, fmt.Errorf("eval: %w", err)
	}
	cfg.COCOOut = c.Bool("coco-out")
	if g := c.String("geometry"); g != "auto" {
		k, err := box.ParseKind(g)
		if err != nil {
			return cfg, fmt.Errorf("eval: --geometry: %w", err)
		}
		cfg.Geometry = &k
	}
	cfg.DistanceThreshold = c.Float64("distance-threshold")
	if !(cfg.DistanceThreshold > 0) || math.IsInf(cfg.DistanceThreshold, 0) {
		return cfg, fmt.Errorf("eval: --distance-threshold %v is not a positive number", cfg.DistanceThreshold)
	}
	return cfg, nil
}
