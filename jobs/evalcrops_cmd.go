package jobs

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/canopy-hpc/canopy/internal/pipeline/evalcrops"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/urfave/cli/v2"
)

// canopy eval-crops: its flags and how they become an evalcrops.Config (the
// job is internal/pipeline/evalcrops).

func evalCropsCommand(code *int, stdout, stderr io.Writer, newComm CommFactory) *cli.Command {
	return &cli.Command{
		Name:      "eval-crops",
		Usage:     "validate a crop model (DeepForest's CropModel) on a folder of class sub-folders, on every rank",
		ArgsUsage: "FOLDER | --csv annotations.csv",
		Description: "FOLDER is what DeepForest's CropModel.load_from_disk takes as its val_dir: one sub-folder per class\n" +
			"(torchvision's ImageFolder: classes in name order; each class's tree walked, symlinks followed, folders\n" +
			"in sorted order of their paths, files in name order; .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp in\n" +
			"any case, other files skipped unread). As DeepForest's FixedClassImageFolder, an image is labelled by\n" +
			"its parent folder's name and left out when that names no class of the crop model. The crops are shared\n" +
			"over the ranks in equal blocks, classified, gathered, and every rank computes DeepForest's validation\n" +
			"table (val_loss, Class Accuracy_<label>, Micro-Average Accuracy, Micro-Average Precision, Macro-Average\n" +
			"Precision: torchmetrics' and Lightning's arithmetic, the same bits for any rank count); rank 0 writes\n" +
			"OUT/crops.csv (path,label,predicted_label,score), OUT/report.json (the table, the confusion matrix, the\n" +
			"crop model) and OUT/report.html (the confusion matrix).\n\n" +
			"With --csv instead of FOLDER, the crops are the truth boxes of an annotation CSV (image_path, xmin, ymin,\n" +
			"xmax, ymax, label; images under --root-dir), cut from their images as DeepForest's BoundingBoxDataset\n" +
			"cuts them (cropmodel.expand pixels of context), in the CSV's order; 0,0,0,0 rows and boxes of zero width\n" +
			"or height are left out (counted in report.json).\n\n" +
			"--device places each rank's crop model as predict and eval place their detector (auto, cpu, cuda,\n" +
			"cuda:N); on a GPU the crops are resized on the device and the ResNet runs on the GPU engine (--precision\n" +
			"exact: canopy's kernels; fp32, tf32, bf16: cuDNN's graphs, batches of 32 crops), with the CPU's checks:\n" +
			"a non-finite logit or probability is exit 4. report.json records device (rank 0's), devices (every\n" +
			"rank's) and crop_model.device.\n\n" + ExitTable,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "crop-model", Usage: "the crop model: a Lightning checkpoint (.ckpt, labels from its label_dict), a hub folder (config.json + model.safetensors) or a torch.save state dict (.pt, labels from --crop-label-dict)"},
			&cli.StringFlag{Name: "crop-label-dict", Usage: "label,id CSV naming the crop model's classes, for a file that holds none"},
			&cli.StringFlag{Name: "csv", Usage: "instead of FOLDER: an annotation CSV whose truth boxes are the crops (their labels the classes)"},
			&cli.StringFlag{Name: "root-dir", Usage: "folder the CSV's image_path values are relative to (default: the CSV's folder)"},
			&cli.StringFlag{Name: "out", Value: "canopy-eval-crops", Usage: "output folder; refused if it holds a previous run unless --force"},
			&cli.BoolFlag{Name: "force", Usage: "replace the previous run in --out (set aside until the new outputs are written, put back if the run fails before that)"},
			&cli.IntFlag{Name: "loss-batch-size", Usage: "DeepForest's cropmodel.batch_size (default: the crop model's stored config's, else DeepForest's 4): val_loss is Lightning's mean over batches of this many crops (each batch's mean weighted by its size), so it decides val_loss's last bits; the other metrics do not depend on it"},
			&cli.IntFlag{Name: "threads", Usage: "compute threads per rank (default: the cores this rank may use)"},
			flagNamed("device"),
			&cli.StringFlag{Name: "precision", Usage: "the crop model's convolutions on a GPU: exact (canopy's own strict-FP32 kernels: a crop's bytes never depend on the crops beside it or the rank count), fp32, tf32 (the default on a GPU) or bf16 (cuDNN's fused graphs, in batches of 32 crops, the last padded); on the CPU only exact"},
			flagNamed("cudnn"),
			&cli.Int64Flag{Name: "max-image-pixels", Value: 178956970, Usage: "refuse an image of more pixels (PIL's decompression-bomb limit; 0: no limit)"},
			&cli.BoolFlag{Name: "allow-outside-root", Usage: "follow symlinks that lead out of FOLDER (default: such a link is an input error)"},
			&cli.BoolFlag{Name: "html", Value: true, Usage: "rank 0 writes OUT/report.html: the table, the confusion matrix, the misclassified crops; --html=false turns it off"},
		}, shardJobFlags("longest wait for every rank to reach a collective, then exit 5; a collective every rank reached that has not completed max(1m, 3 × this) later ends the job with exit 5 too (0 disables both)")...),
		Action: func(c *cli.Context) error {
			if (c.NArg() == 1) == (c.String("csv") != "") || c.NArg() > 1 {
				return usageError(errors.New("eval-crops: give one FOLDER of class sub-folders, or --csv"))
			}
			if c.String("root-dir") != "" && c.String("csv") == "" {
				return usageError(errors.New("eval-crops: --root-dir goes with --csv"))
			}
			cfg := evalcrops.Config{Folder: c.Args().First(), CSV: c.String("csv"), RootDir: c.String("root-dir"), Out: c.String("out"), Force: c.Bool("force"),
				CropModel: c.String("crop-model"), CropLabelDict: c.String("crop-label-dict"), LossBatch: c.Int("loss-batch-size"),
				Threads: c.Int("threads"), MaxImagePixels: c.Int64("max-image-pixels"), AllowOutsideRoot: c.Bool("allow-outside-root"),
				HTML: c.Bool("html"), Command: os.Args, Stdout: stdout}
			if err := deviceFlags(c, &cfg.Device); err != nil {
				return usageError(fmt.Errorf("eval-crops: %w", err))
			}
			var err error
			if cfg.BatchSize, err = batchSize(c); err != nil {
				return usageError(fmt.Errorf("eval-crops: %w", err))
			}
			switch {
			case cfg.CropModel == "":
				return usageError(errors.New("eval-crops: --crop-model is required"))
			case c.IsSet("loss-batch-size") && cfg.LossBatch < 1:
				return usageError(fmt.Errorf("eval-crops: --loss-batch-size %d must be at least 1", cfg.LossBatch))
			case cfg.Threads < 0:
				return usageError(fmt.Errorf("eval-crops: --threads %d", cfg.Threads))
			}
			return runRankedJob(c, code, newComm, stderr, cfg.Out, rankOutputs{&cfg.Stdout, &cfg.Progress, &cfg.CollectiveTimeout}, func(comm mpi.Comm) error {
				return evalcrops.Run(c.Context, comm, cfg)
			})
		},
	}
}
