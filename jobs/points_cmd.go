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
	for _, f := range []string{"crop-model", "raw-rows", "config", "plan", "exclusive-gpu", "layer-times"} {
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
	var given map[string]int
	if ld := c.String("label-dict"); ld != "" {
		data, err := confine.ReadNamedInput(ld)
		if err != nil {
			return &Error{Code: ExitInput, Collective: true, Err: fmt.Errorf("predict: %w", err)}
		}
		m, err := dataset.ParseLabelDict(ld, data)
		if err != nil {
			return &Error{Code: ExitInput, Collective: true, Err: err}
		}
		given = modelsel.LabelDictOf(m)
	}
	cfg := points.Config{Model: model, RootDir: root, Out: c.String("out"), Force: c.Bool("force"), Tile: tiled,
		Resume: c.Bool("resume"), SkipEmpty: c.Bool("skip-empty"),
		Settings:  tile.Settings{Patch: c.Int("patch-size"), Overlap: c.Float64("patch-overlap")},
		LabelDict: given, Command: os.Args, Version: output.Version,
		Device: points.Device{Request: mc.Device, Precision: mc.Precision, PrecisionSet: mc.PrecisionSet, CUDNN: mc.CUDNN},
		List: func() ([]string, error) {
			switch {
			case raster != "":
				return []string{filepath.Base(raster)}, nil
			case images != "":
				return listImages(images)
			}
			data, err := confine.ReadNamedInput(csvPath)
			if err != nil {
				return nil, err
			}
			return dataset.ImagePaths(csvPath, data)
		}}
	if tiled {
		if err := cfg.Settings.Check(); err != nil {
			return &Error{Code: ExitInput, Collective: true, Err: fmt.Errorf("predict: --patch-size/--patch-overlap: %w", err)}
		}
	}
	return runShardJob(c, code, newComm, stderr, cfg.Out, func(comm mpi.Comm, rank0 bool, _ time.Duration) error {
		if rank0 {
			cfg.Stdout = stdout
		}
		if b, from, ok := limits.RankBudget(mc, comm.LocalSize()); ok {
			cfg.Budget, cfg.BudgetFrom = b, from
		}
		cfg.Threads = c.Int("threads")
		if cfg.Threads <= 0 {
			cfg.Threads = modelsel.DefaultThreads(modelsel.StartProcs, runtime.NumCPU(), comm.LocalSize())
		}
		return pointErr(points.Predict(c.Context, comm, cfg))
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
