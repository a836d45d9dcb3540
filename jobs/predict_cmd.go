package jobs

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/canopy-hpc/canopy/internal/pipeline/predict"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/urfave/cli/v2"
)

// canopy predict: its flags and how they become a PredictConfig (the job is
// internal/pipeline/predict's; --tile's internal/tilerun's, a point model's
// jobs/points').

// PredictConfig is the configuration of one plain `canopy predict` run
// (internal/pipeline/predict).
type PredictConfig = predict.Config

func predictCommand(code *int, stdout, stderr io.Writer, newComm CommFactory) *cli.Command {
	return &cli.Command{
		Name:  "predict",
		Usage: "run the detector on unlabelled images on every rank and write their predictions",
		Description: "Each rank detects its shard of the images; the detections are gathered and rank 0\n" +
			"writes OUT/predictions.csv (image_path,xmin,ymin,xmax,ymax,label,score, image_path as\n" +
			"given in the CSV or relative to --images) and OUT/report.json. Whole images; each rank\n" +
			"appends its finished images to OUT/parts/, so a signal (exit 8) is continued by --resume\n" +
			"at any rank count. --tile cuts\n" +
			"large rasters into windows and merges them as DeepForest's predict_tile.\n" +
			"A point model (DeepForest's TreeFormer) as --model writes OUT/predictions.csv with\n" +
			"image_path,x,y,label,score, predict_image's points (--tile: predict_tile's), the same\n" +
			"bytes for any rank count; --resume, --crop-model, --config and --skip-empty are for box models.\n\n" + ExitTable,
		Flags: concatFlags([]cli.Flag{
			configFlag(),
			&cli.StringFlag{Name: "csv", Usage: "CSV whose image_path column lists the images (other columns ignored; each path once, in order of first appearance)"},
			&cli.StringFlag{Name: "images", Usage: "or: a folder whose .png .jpg .jpeg .tif .tiff files (any case, not recursive, sorted by name) are the images"},
			rootDirFlag(),
			&cli.StringFlag{Name: "out", Value: "canopy-predict", Usage: "output folder, on a filesystem every rank sees; each rank appends finished images to OUT/parts/ so an interrupted run (exit 8) can --resume; refused if it holds a previous run (predict's or eval's) unless --force or --resume, and (exit 2, naming the holder) while another run holds its lock"},
			&cli.BoolFlag{Name: "force", Usage: "replace the previous run in --out, predict's or eval's: it is set aside until the new run has saved its first images, and put back if the run fails before that"},
			&cli.BoolFlag{Name: "resume", Usage: "continue the interrupted run (exit 8) in --out, at any rank count. Whole images: images in its part files are not detected again; refused (exit 2, naming the difference or the changed image) unless the image list, model, its settings, label dict and root folder match its manifest and every saved image is unchanged. With --tile: rasters whose outputs are published are not read again, windows in its part files are not detected again; refused (exit 2, naming the difference) unless the rasters, model, window and merge settings and crop models (each one's weights sha256, labels, --crop-label-dict sha256 and transform) match its manifest. A raster is identified by its path, size, modification time and the sha256 of its first and last 64 KiB (an edit inside it that keeps its size and time is not seen), and with --resume-hash full also by the sha256 of the whole file. A point model's run (TreeFormer): images, or with --tile windows, in its part files are not computed again; refused unless the images (path, size, modification time, whole-file sha256), model, root folder, tile and peak settings, --skip-empty and labels match its manifest"},
			&cli.StringFlag{Name: "label-dict", Usage: "label,id CSV naming the model's classes: needed for a bare .pt state dict, which holds no labels (a .ckpt or a model folder carries its own, which this must then equal); with --tile as without"},
			&cli.BoolFlag{Name: "raw-rows", Usage: "write every detection as the detector gives it (float boxes, NMS per class only: DeepForest 2.1.0's predict_file rows) instead of predict_image's rows, which by default reduce an image whose detections carry more than one label by one class-agnostic NMS at nms_thresh with integer boxes (across_class_nms); report.json's \"rows\" says which. Not with --tile, whose merge is class-agnostic already"},
		}, shardJobFlags("longest wait for every rank to reach a collective, then exit 5 (ranks other than 0 wait twice this, so rank 0 reports first; a collective every rank reached that has not completed max(1m, 3 × this) later ends the job with exit 5 too; 0 disables both)"),
			modelFlags(), tileFlags()),
		Action: func(c *cli.Context) error {
			if model, ok := pointModel(c); ok {
				return pointAction(c, code, newComm, stdout, stderr, model)
			}
			if err := tileAction(c, code, newComm, stdout, stderr); err != nil || c.Bool("tile") {
				return err
			}
			if c.Bool("resume") && c.Bool("force") {
				return usageError(errors.New("predict: --force and --resume exclude each other"))
			}
			rc, err := noArgsRunConfig(c, "predict")
			if err != nil {
				return err
			}
			cfg := PredictConfig{CSV: c.String("csv"), Images: c.String("images"), RootDir: c.String("root-dir"),
				Out: c.String("out"), Force: c.Bool("force"), Resume: c.Bool("resume"), Command: os.Args, Stdout: stdout,
				AllowOutsideRoot: c.Bool("allow-outside-root"), LabelDict: c.String("label-dict"), RawRows: c.Bool("raw-rows")}
			mc, cc, err := modelConfig(c)
			if err != nil {
				return usageError(fmt.Errorf("predict: %w", err))
			}
			var bserr error
			cfg.BatchSize, bserr = batchSize(c)
			if rc != nil {
				cfg.RunConfig = rc.RunConfig
				rc.applyModel(c, &mc, false)
				rc.resolveInt(c, "batch-size", "batch_size", rc.C.BatchSize, &cfg.BatchSize)
				if cfg.LabelDictData = rc.labelCSV(c); cfg.LabelDictData != nil {
					cfg.LabelDict = rc.labelSource()
				}
			}
			cfg.Model, cfg.Crops = mc, cc
			switch {
			case mc.Spec == "":
				return usageError(errors.New("predict: --model is required"))
			case (cfg.CSV == "") == (cfg.Images == ""):
				return usageError(errors.New("predict: give exactly one of --csv and --images"))
			case bserr != nil:
				return usageError(fmt.Errorf("predict: %w", bserr))
			case cfg.Images != "" && cfg.RootDir != "":
				return usageError(errors.New("predict: --root-dir goes with --csv; --images paths are relative to that folder"))
			}
			return runRankedJob(c, code, newComm, stderr, cfg.Out, rankOutputs{&cfg.Stdout, &cfg.Progress, &cfg.CollectiveTimeout}, func(comm mpi.Comm) error {
				return predict.Run(c.Context, comm, cfg)
			})
		},
	}
}
