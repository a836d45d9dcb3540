package jobs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/modelfile"
	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/infer/treeformer"
	"github.com/canopy-hpc/canopy/internal/confine"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/geotruth"
	"github.com/canopy-hpc/canopy/internal/limits"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/jobs/points"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/urfave/cli/v2"
)

// predict with a point model (DeepForest's TreeFormer, recognised by its
// state dict's keys): the job is jobs/points. --device, --precision
// (exact, kernel-tf32, fp32, tf32; fp32 the default on a GPU) and --cudnn
// place it as the box detectors; crop models, --plan, --exclusive-gpu,
// --layer-times and --raw-rows are the box detectors' alone.

// pointModel resolves --model and reports whether it is a point model.
func pointModel(c *cli.Context) (string, bool) {
	spec := c.String("model")
	if spec == "" {
		return "", false
	}
	dir, err := modelfile.Resolve(spec)
	if err != nil || !treeformer.Probe(dir) {
		return "", false
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return dir, true
}

func pointAction(c *cli.Context, code *int, newComm CommFactory, stdout, stderr io.Writer, model string) error {
	var mc ModelConfig
	if rm := c.String("rank-memory"); rm != "" {
		n, err := limits.ParseBytes(rm)
		if err != nil {
			return usageError(fmt.Errorf("predict: --rank-memory: %w", err))
		}
		mc.RankMemory = n
	}
	if c.IsSet("crop-model") {
		return usageError(fmt.Errorf("predict: --crop-model classifies boxes, and %s is a point model (TreeFormer): DeepForest's crop step reads each row's xmin..ymax box, which a point has not", model))
	}
	for _, f := range []string{"raw-rows", "plan", "exclusive-gpu", "layer-times"} {
		if c.IsSet(f) {
			return usageError(fmt.Errorf("predict: --%s is not yet available for a point model (%s is a TreeFormer)", f, model))
		}
	}
	if err := deviceFlags(c, &mc); err != nil {
		return usageError(err)
	}
	tiled := c.Bool("tile")
	if c.Bool("skip-empty") && !tiled {
		return usageError(errors.New("predict: --skip-empty is for --tile windows"))
	}
	csvPath, images, raster := c.String("csv"), c.String("images"), c.String("raster")
	n := 0
	for _, s := range []string{csvPath, images, raster} {
		if s != "" {
			n++
		}
	}
	if n != 1 || (raster != "" && !tiled) {
		return usageError(errors.New("predict: give exactly one of --csv and --images (or, with --tile, --raster)"))
	}
	root := c.String("root-dir")
	switch {
	case root != "":
	case csvPath != "":
		root = filepath.Dir(csvPath)
	case images != "":
		root = images
	default:
		root = filepath.Dir(raster)
	}
	given, err := pointLabelDict(c, "predict")
	if err != nil {
		return err
	}
	thr, err := pointScoreThresh(c, "predict")
	if err != nil {
		return err
	}
	cfg := points.Config{Model: model, RootDir: root, Out: c.String("out"), Force: c.Bool("force"), Tile: tiled,
		Resume: c.Bool("resume"), SkipEmpty: c.Bool("skip-empty"), ScoreThresh: thr,
		Settings:  tile.Settings{Patch: c.Int("patch-size"), Overlap: c.Float64("patch-overlap")},
		LabelDict: given, Command: os.Args, Version: output.Version,
		Device: pointDevice(mc),
		List: func() ([]string, error) {
			switch {
			case raster != "":
				return []string{filepath.Base(raster)}, nil
			case images != "":
				return dataset.ListImages(images)
			}
			data, err := confine.ReadNamedInput(csvPath)
			if err != nil {
				return nil, err
			}
			return dataset.ImagePaths(csvPath, data)
		}}
	command := "predict"
	if tiled {
		command = "predict --tile"
	}
	if cfg.RunConfig, err = pointRunConfig(c, command, &cfg); err != nil {
		return err
	}
	if tiled {
		if err := cfg.Settings.Check(); err != nil {
			return &Error{Code: ExitInput, Collective: true, Err: fmt.Errorf("predict: --patch-size/--patch-overlap: %w", err)}
		}
	}
	return runShardJob(c, code, newComm, stderr, cfg.Out, func(comm mpi.Comm, rank0 bool, _ time.Duration) error {
		if rank0 {
			cfg.Stdout = stdout
		}
		rankSettings(c, comm, mc, &cfg)
		return pointErr(points.Predict(c.Context, comm, cfg))
	})
}

// rankSettings are a point job's per-rank settings: its memory budget
// and its threads.
func rankSettings(c *cli.Context, comm mpi.Comm, mc ModelConfig, cfg *points.Config) {
	if b, from, ok := limits.RankBudget(mc, comm.LocalSize()); ok {
		cfg.Budget, cfg.BudgetFrom = b, from
	}
	cfg.Threads = c.Int("threads")
	if cfg.Threads <= 0 {
		cfg.Threads = modelsel.DefaultThreads(modelsel.StartProcs, runtime.NumCPU(), comm.LocalSize())
	}
}

// pointDevice is a point run's --device, --precision and --cudnn.
func pointDevice(mc ModelConfig) points.Device {
	return points.Device{Request: mc.Device, Precision: mc.Precision, PrecisionSet: mc.PrecisionSet, CUDNN: mc.CUDNN}
}

// pointScoreThresh is --score-thresh for a point model: peak_local_max's
// threshold_rel, in (0, 1] (0: not given, point.yaml's 0.3).
func pointScoreThresh(c *cli.Context, cmd string) (float32, error) {
	if !c.IsSet("score-thresh") {
		return 0, nil
	}
	v := c.Float64("score-thresh")
	if !(v > 0 && v <= 1) {
		return 0, usageError(fmt.Errorf("%s: --score-thresh %v: a point model's threshold (relative to the density map's maximum) is in (0, 1]", cmd, v))
	}
	return float32(v), nil
}

// pointLabelDict is --label-dict for a point model (nil: none).
func pointLabelDict(c *cli.Context, cmd string) (map[string]int, error) {
	ld := c.String("label-dict")
	if ld == "" {
		return nil, nil
	}
	data, err := confine.ReadNamedInput(ld)
	if err != nil {
		return nil, &Error{Code: ExitInput, Collective: true, Err: fmt.Errorf("%s: %w", cmd, err)}
	}
	m, err := dataset.ParseLabelDict(ld, data)
	if err != nil {
		return nil, &Error{Code: ExitInput, Collective: true, Err: err}
	}
	return modelsel.LabelDictOf(m), nil
}

// evalPointAction is eval --model with a point model: the truth CSV's
// images (image_path, in order of first appearance) go through
// points.Infer, as predict would give them, and eval scores the points
// with the point metrics (evaluate_geometry's point path), as eval
// --predictions of that predictions.csv would: the same bytes for any
// rank count. --resume, --tile, --config and --crop-model are refused.
func evalPointAction(c *cli.Context, code *int, newComm CommFactory, stdout, stderr io.Writer, model string) error {
	for _, f := range []string{"resume", "tile", "config", "crop-model"} {
		if c.IsSet(f) {
			return usageError(fmt.Errorf("eval: --%s is not yet available with a point model (%s is a TreeFormer)", f, model))
		}
	}
	cfg, err := evalConfig(c, stdout)
	if err != nil {
		return usageError(err)
	}
	if geotruth.IsVector(cfg.CSV) {
		return usageError(fmt.Errorf("eval: %s: with a point model, give the truth as a CSV (image_path,x,y,label)", cfg.CSV))
	}
	if present := output.Names.Present(cfg.Out); len(present) > 0 && !cfg.Force {
		return usageError(fmt.Errorf("eval: --out %s holds a previous run (%s); choose another --out or pass --force to replace it", cfg.Out, present[0]))
	}
	given, err := pointLabelDict(c, "eval")
	if err != nil {
		return err
	}
	thr, err := pointScoreThresh(c, "eval")
	if err != nil {
		return err
	}
	mc := cfg.Model
	cfg.Model = ModelConfig{} // the point job runs the model; eval replays its points
	cfg.Predictions = "the points of " + model
	root := cfg.RootDir
	if root == "" {
		root = filepath.Dir(cfg.CSV)
	}
	pcfg := points.Config{Model: model, RootDir: root, LabelDict: given, ScoreThresh: thr, Device: pointDevice(mc),
		List: func() ([]string, error) {
			data, err := confine.ReadNamedInput(cfg.CSV)
			if err != nil {
				return nil, err
			}
			return dataset.ImagePaths(cfg.CSV, data)
		}}
	return runShardJob(c, code, newComm, stderr, cfg.Out, func(comm mpi.Comm, rank0 bool, timeout time.Duration) error {
		rankSettings(c, comm, mc, &pcfg)
		csv, err := points.Infer(c.Context, comm, pcfg)
		if err != nil {
			return pointErr(err)
		}
		cfg.PredictionsData = csv
		if !rank0 {
			cfg.Stdout = nil
		} else {
			cfg.Warnings = stderr
		}
		cfg.CollectiveTimeout = timeout
		return Eval(c.Context, comm, cfg)
	})
}

// pointErr gives a point job's error its exit code.
func pointErr(err error) error {
	if err == nil {
		return nil
	}
	if e := (*Error)(nil); errors.As(err, &e) {
		return err // it carries its code already
	}
	var ce *points.CollectiveError
	coll := errors.As(err, &ce)
	code := ExitInternal
	switch {
	case errors.Is(err, dataset.ErrInput):
		code = ExitInput
	case errors.Is(err, infer.ErrModel):
		code = ExitModel
	}
	return &Error{Code: code, Collective: coll, Err: err}
}
