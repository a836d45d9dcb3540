package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/retinanet"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/mpi"
)

// CommFactory starts the communicator for a job and returns it with its
// finalizer. The default is the cgo MPI binding (see mpi.go); tests pass
// an in-process one.
type CommFactory func() (mpi.Comm, func() error, error)

// Main is canopy's command line: it parses args (args[0] is the program
// name), runs the command and returns the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return MainWith(ctx, args, stdout, stderr, WorldComm)
}

// MainWith is Main with a chosen communicator factory.
func MainWith(ctx context.Context, args []string, stdout, stderr io.Writer, newComm CommFactory) int {
	// Before MPI starts we do not know our rank from MPI; the launcher's
	// environment tells it, so a usage error is printed once, by rank 0.
	errw := stderr
	if launcherRank() > 0 {
		errw = io.Discard
	}
	if path := os.Getenv(ProfileEnv); path != "" {
		stop, err := startProfile(path)
		if err != nil {
			fmt.Fprintf(errw, "canopy: %v\n", err)
			return ExitUsage
		}
		defer stop()
	}
	code := ExitOK
	app := &cli.App{
		Name:  "canopy",
		Usage: "evaluate DeepForest detectors on many ranks with one-GPU metrics",
		Description: "Run under mpirun or srun; every rank scores the same merged detections, so the\n" +
			"metrics are bit-identical for any number of ranks.\n\n" + ExitTable,
		Writer:          stdout,
		ErrWriter:       errw,
		HideHelpCommand: true,
		ExitErrHandler:  func(*cli.Context, error) {},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return usageError(err)
		},
		Commands: []*cli.Command{
			evalCommand(&code, stdout, errw, stderr, newComm),
			predictCommand(&code, stdout, stderr, newComm),
			doctorCommand(&code, stdout, stderr, newComm),
			CompareCommand(&code, stdout, stderr),
			{
				Name:  "version",
				Usage: "print canopy's version and build",
				Action: func(c *cli.Context) error {
					if c.NArg() > 0 {
						return usageError(fmt.Errorf("version takes no arguments, got %q", c.Args().Slice()))
					}
					fmt.Fprintf(stdout, "canopy %s (%s, git %s)\n", Version, runtime.Version(), gitRevision())
					return nil
				},
			},
		},
	}
	app.CustomAppHelpTemplate = cli.AppHelpTemplate
	if err := app.RunContext(ctx, reorder(app, args)); err != nil {
		c := Code(err)
		if c == ExitInternal && isUsage(err) {
			c = ExitUsage
		}
		fmt.Fprintf(errw, "canopy: %v\n", err)
		if c == ExitUsage {
			fmt.Fprintln(errw, "run 'canopy --help' for usage")
		}
		return c
	}
	return code
}

func usageError(err error) error { return &Error{Code: ExitUsage, Collective: true, Err: err} }

// isUsage recognises urfave/cli's own parse errors.
func isUsage(err error) bool {
	s := err.Error()
	return strings.Contains(s, "flag provided but not defined") || strings.Contains(s, "Required flag") ||
		strings.Contains(s, "No help topic") || strings.Contains(s, "invalid value")
}

// launcherRank reads the rank the launcher put in the environment (Open
// MPI, MPICH/PMI, Slurm), -1 when there is none.
func launcherRank() int {
	for _, k := range []string{"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"} {
		if v, ok := os.LookupEnv(k); ok {
			if r, err := strconv.Atoi(v); err == nil {
				return r
			}
		}
	}
	return -1
}

// reorder moves a command's flags in front of its positional arguments:
// urfave/cli v2 stops reading flags at the first positional argument, and
// canopy accepts flags on both sides. "--" ends flag reading.
func reorder(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	var cmd *cli.Command
	ci := -1
	for i := 1; i < len(args); i++ {
		if !strings.HasPrefix(args[i], "-") {
			cmd = app.Command(args[i])
			ci = i
			break
		}
	}
	if cmd == nil {
		return args
	}
	takesValue := map[string]bool{}
	for _, f := range cmd.Flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			takesValue[n] = !isBool
		}
	}
	out := append([]string(nil), args[:ci+1]...)
	var pos []string
	rest := args[ci+1:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			pos = append(pos, rest[i+1:]...)
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			out = append(out, a)
			name := strings.TrimLeft(a, "-")
			if !strings.Contains(name, "=") && takesValue[name] && i+1 < len(rest) {
				i++
				out = append(out, rest[i])
			}
			continue
		}
		pos = append(pos, a)
	}
	if len(pos) > 0 {
		out = append(out, "--")
		out = append(out, pos...)
	}
	return out
}

func evalCommand(code *int, stdout, errw, stderr io.Writer, newComm CommFactory) *cli.Command {
	return &cli.Command{
		Name:      "eval",
		Usage:     "score detections against DeepForest ground truth on every rank",
		ArgsUsage: "[CSV]",
		Description: "Rank 0 reads the inputs and broadcasts them; each rank detects its shard of the\n" +
			"images; an MPI_Allgatherv gives every rank every detection; every rank computes\n" +
			"the same metrics; rank 0 writes report.json, predictions.csv and results.csv\n" +
			"into --out. The CSV may be given by --csv or as the one positional argument.\n" +
			"With --model the metrics also hold DeepForest's val_classification,\n" +
			"val_bbox_regression and val_loss: torchvision's train-mode losses per image,\n" +
			"averaged over the images (with the model's stored BatchNorm statistics).\n\n" + ExitTable,
		Flags: concatFlags([]cli.Flag{
			&cli.StringFlag{Name: "csv", Usage: "DeepForest annotation CSV (image_path,xmin,ymin,xmax,ymax,label; columns by header name), or a COCO dataset (.json: file_name is the image_path, bbox x,y,w,h, category names are the labels)"},
			&cli.StringFlag{Name: "root-dir", Usage: "folder the CSV's image_path values are relative to (default: the CSV's folder)"},
			&cli.StringFlag{Name: "predictions", Usage: "replay detector: DeepForest prediction CSV (image_path,xmin,ymin,xmax,ymax,label,score); rows join the truth by exact image_path"},
			&cli.BoolFlag{Name: "allow-any-score", Usage: "accept --predictions scores outside [0, 1] (they must still be finite numbers)"},
			&cli.BoolFlag{Name: "strict", Usage: "make the input warnings errors (exit 3): no prediction joins the truth, over 10% of the predictions name no truth image, exact duplicate rows"},
		}, modelFlags(), []cli.Flag{
			&cli.Float64Flag{Name: "iou-threshold", Value: 0.4, Usage: "a truth box is matched when IoU is strictly greater than this, in [0, 1]"},
			&cli.StringFlag{Name: "semantics", Value: "validation", Usage: "DeepForest definition of box recall/precision: validation (trainer.validate's RecallPrecision) or evaluate_boxes"},
			&cli.StringFlag{Name: "metrics", Value: "all", Usage: "metric families, comma-separated: recall (DeepForest box recall/precision), iou (torchmetrics IntersectionOverUnion), coco (COCO mAP/mAR), or all"},
			&cli.BoolFlag{Name: "class-metrics", Usage: "report map_per_class and mar_100_per_class as arrays by label id, and the ids as \"classes\" (else -1, as DeepForest logs them)"},
			&cli.StringFlag{Name: "label-dict", Usage: "label,id CSV (DeepForest classes.csv form); default: sorted unique labels of truth and joined predictions"},
			&cli.StringFlag{Name: "out", Value: "canopy-out", Usage: "output folder, on a filesystem every rank sees (checked at start); each rank appends finished images to OUT/parts/ so an interrupted run (exit 8) can --resume; refused if it holds a previous run unless --force or --resume, and (exit 2, naming the holder) while another run holds its lock"},
			&cli.BoolFlag{Name: "force", Usage: "replace a previous run in --out: it is set aside and removed only once the new run has passed every check and saved its first images; a new run that fails before that puts it back"},
			&cli.BoolFlag{Name: "resume", Usage: "continue the interrupted run in --out: images found in its part files are not recomputed; refused unless the inputs, detector and canopy version match its manifest"},
			&cli.IntFlag{Name: "batch-size", Value: 4, Usage: "images per detector call (results do not depend on it)"},
			&cli.BoolFlag{Name: "verbose", Usage: "every rank prints its own line when the job is interrupted or fails (default: one line per job, from rank 0 or the failing rank)"},
			&cli.DurationFlag{Name: "collective-timeout", Value: 10 * time.Minute, Usage: "longest wait for every rank to reach a collective (after detection: this plus twice the rank's own detection time, as the shards are equal work); then the waiting ranks name the ranks they wait for and the job aborts with exit 5 (0 disables)"},
		}, reportFlags()),
		Action: func(c *cli.Context) error {
			cfg, err := evalConfig(c, stdout)
			if err != nil {
				return usageError(err)
			}
			opt := jobOptions{collectiveTimeout: c.Duration("collective-timeout"), out: cfg.Out, verbose: c.Bool("verbose")}
			*code = runJob(c.Context, newComm, stderr, opt, func(comm mpi.Comm) error {
				if comm.Rank() != 0 {
					cfg.Stdout = nil
				} else {
					cfg.Warnings = stderr
					if cfg.Model.Spec != "" {
						cfg.Progress = stderr
					}
				}
				cfg.CollectiveTimeout = c.Duration("collective-timeout")
				return Eval(c.Context, comm, cfg)
			})
			return nil
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
		BatchSize:        c.Int("batch-size"),
		Strict:           c.Bool("strict"),
		AllowAnyScore:    c.Bool("allow-any-score"),
		AllowOutsideRoot: c.Bool("allow-outside-root"),
		Command:          os.Args,
		Stdout:           stdout,
	}
	switch {
	case c.NArg() > 1:
		return cfg, fmt.Errorf("eval takes at most one argument (the CSV), got %q", c.Args().Slice())
	case c.NArg() == 1 && cfg.CSV != "":
		return cfg, errors.New("eval: the CSV is given twice (--csv and an argument)")
	case c.NArg() == 1:
		cfg.CSV = c.Args().First()
	}
	if cfg.CSV == "" {
		return cfg, errors.New("eval: --csv is required")
	}
	if cfg.Force && cfg.Resume {
		return cfg, errors.New("eval: --force and --resume exclude each other")
	}
	mc, err := modelConfig(c)
	if err != nil {
		return cfg, fmt.Errorf("eval: %w", err)
	}
	cfg.Model = mc
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
	if cfg.BatchSize < 1 {
		return cfg, fmt.Errorf("eval: --batch-size %d must be at least 1", cfg.BatchSize)
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
	return cfg, nil
}

func predictCommand(code *int, stdout, stderr io.Writer, newComm CommFactory) *cli.Command {
	return &cli.Command{
		Name:  "predict",
		Usage: "run the detector on unlabelled images on every rank and write their predictions",
		Description: "Each rank detects its shard of the images; the detections are gathered and rank 0\n" +
			"writes OUT/predictions.csv (image_path,xmin,ymin,xmax,ymax,label,score, image_path as\n" +
			"given in the CSV or relative to --images) and OUT/report.json. Whole images, no tiling.\n\n" + ExitTable,
		Flags: concatFlags([]cli.Flag{
			&cli.StringFlag{Name: "csv", Usage: "CSV whose image_path column lists the images (other columns ignored; each path once, in order of first appearance)"},
			&cli.StringFlag{Name: "images", Usage: "or: a folder whose .png .jpg .jpeg .tif .tiff files (any case, not recursive, sorted by name) are the images"},
			&cli.StringFlag{Name: "root-dir", Usage: "folder the CSV's image_path values are relative to (default: the CSV's folder)"},
			&cli.StringFlag{Name: "out", Value: "canopy-predict", Usage: "output folder; refused if it holds predictions unless --force, and (exit 2, naming the holder) while another run holds its lock"},
			&cli.BoolFlag{Name: "force", Usage: "replace the predictions in --out (the previous ones stay until the new ones are written)"},
			&cli.IntFlag{Name: "batch-size", Value: 4, Usage: "images per detector call (results do not depend on it)"},
			&cli.BoolFlag{Name: "verbose", Usage: "every rank prints its own line when the job is interrupted or fails (default: one line per job, from rank 0 or the failing rank)"},
			&cli.DurationFlag{Name: "collective-timeout", Value: 10 * time.Minute, Usage: "longest wait for every rank to reach a collective, then exit 5 (0 disables)"},
		}, modelFlags()),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageError(fmt.Errorf("predict takes no arguments, got %q", c.Args().Slice()))
			}
			cfg := PredictConfig{CSV: c.String("csv"), Images: c.String("images"), RootDir: c.String("root-dir"),
				Out: c.String("out"), Force: c.Bool("force"), BatchSize: c.Int("batch-size"), Command: os.Args, Stdout: stdout,
				AllowOutsideRoot: c.Bool("allow-outside-root")}
			mc, err := modelConfig(c)
			if err != nil {
				return usageError(fmt.Errorf("predict: %w", err))
			}
			cfg.Model = mc
			switch {
			case mc.Spec == "":
				return usageError(errors.New("predict: --model is required"))
			case (cfg.CSV == "") == (cfg.Images == ""):
				return usageError(errors.New("predict: give exactly one of --csv and --images"))
			case cfg.BatchSize < 1:
				return usageError(fmt.Errorf("predict: --batch-size %d must be at least 1", cfg.BatchSize))
			case cfg.Images != "" && cfg.RootDir != "":
				return usageError(errors.New("predict: --root-dir goes with --csv; --images paths are relative to that folder"))
			}
			opt := jobOptions{collectiveTimeout: c.Duration("collective-timeout"), out: cfg.Out, verbose: c.Bool("verbose")}
			*code = runJob(c.Context, newComm, stderr, opt, func(comm mpi.Comm) error {
				if comm.Rank() != 0 {
					cfg.Stdout = nil
				} else {
					cfg.Progress = stderr
				}
				cfg.CollectiveTimeout = c.Duration("collective-timeout")
				return Predict(c.Context, comm, cfg)
			})
			return nil
		},
	}
}

// modelFlags are the detector flags of eval and predict.
func modelFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "model", Usage: "run the native RetinaNet: a DeepForest model folder (model.safetensors + config.json) or owner/name[@revision] in the local Hugging Face cache ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub; no network), e.g. weecology/deepforest-tree"},
		&cli.IntFlag{Name: "threads", Usage: "compute threads per rank (default: the cores this rank may use, which follows mpirun's --bind-to, but at most the node's cores divided by its ranks)"},
		&cli.Float64Flag{Name: "score-thresh", Value: -1, Usage: "keep detections scoring strictly above this (default: DeepForest's 0.1, which, as in DeepForest, beats the model's config.json)"},
		&cli.Float64Flag{Name: "nms-thresh", Value: -1, Usage: "per-class NMS IoU threshold (default: DeepForest's 0.05, which beats config.json likewise)"},
		&cli.StringFlag{Name: "device", Value: "auto", Usage: "where each rank runs the model: auto (a GPU when this is the cuda build and one is visible, else the CPU), cpu, cuda (node-local rank mod the visible GPUs: mpirun -np 4 on a 4-GPU node gives each rank its own; under srun --gpus-per-task=1 each rank sees its one GPU as 0) or cuda:N (every rank on visible device N)"},
		&cli.StringFlag{Name: "precision", Value: "fp32", Usage: "GPU convolution precision: fp32 (strict float32, as the CPU) or tf32 (tensor cores, operands rounded to TF32 as PyTorch's convolutions by default; detections differ from fp32 in the last digits)"},
		&cli.BoolFlag{Name: "exclusive-gpu", Usage: "fail (exit 5) when two ranks of a node would share a GPU, instead of warning"},
		&cli.StringFlag{Name: "resize", Value: "torchvision", Usage: "the transform's resize size rule: torchvision (torchvision >= 0.16 in eager mode, as DeepForest 2.x runs it: scale min(min_size/short side, max_size/long side) in float64) or torchvision-0.15 (torchvision <= 0.15, or a model under torch.jit.script/ONNX: the scale in float32; about half of all image sizes resize one pixel smaller in one dimension)"},
		&cli.StringFlag{Name: "blend", Value: "fma", Usage: "the bilinear resize's rounding, each bit for bit torch's on the CPU: fma (torch's AVX2 kernel with more than one thread, as the x86-64 wheels run it: fused multiply-adds), no-fma (torch with ATEN_CPU_CAPABILITY=default) or fma-1t (torch's AVX2 kernel on one thread); fma and no-fma differ by at most 2.4e-7 on a normalized pixel, fma-1t by up to 8.4e-5 where its source index moves a tap"},
		&cli.BoolFlag{Name: "layer-times", Usage: "print, on rank 0, where the model's time went, by layer group (stem, layer1-4, fpn, heads, transform, postprocess)"},
		&cli.Int64Flag{Name: "max-image-pixels", Value: DefaultMaxImagePixels, Usage: "refuse (exit 3, at pre-flight, from the image header) an image of more pixels than this; the default is where PIL refuses one (2 x Image.MAX_IMAGE_PIXELS); 0: no limit"},
		&cli.StringFlag{Name: "rank-memory", Usage: "memory one rank may use, such as 6G (default: the node's memory, or its cgroup limit, divided by the ranks on the node); before inference each rank estimates what its largest image needs and refuses (exit 3) when it exceeds this"},
		&cli.BoolFlag{Name: "allow-outside-root", Usage: "let image paths leave --root-dir: absolute paths, \"..\" elements and symlinks to files outside it (refused by default; the report records this flag)"},
	}
}

func concatFlags(fs ...[]cli.Flag) []cli.Flag {
	var out []cli.Flag
	for _, f := range fs {
		out = append(out, f...)
	}
	return out
}

// modelConfig reads and checks the detector flags.
func modelConfig(c *cli.Context) (ModelConfig, error) {
	mc := ModelConfig{Spec: c.String("model"), Threads: c.Int("threads"), ScoreThresh: c.Float64("score-thresh"),
		NMSThresh: c.Float64("nms-thresh"), Device: c.String("device"), LayerTimes: c.Bool("layer-times"),
		Precision: c.String("precision"), ExclusiveGPU: c.Bool("exclusive-gpu")}
	if mc.Spec == "" {
		for _, f := range []string{"threads", "score-thresh", "nms-thresh", "device", "precision", "exclusive-gpu", "layer-times", "max-image-pixels", "rank-memory", "resize", "blend"} {
			if c.IsSet(f) {
				return mc, fmt.Errorf("--%s needs --model", f)
			}
		}
		return mc, nil
	}
	rule, err := retinanet.ParseResizeRule(c.String("resize"))
	if err != nil {
		return mc, fmt.Errorf("--resize: %w", err)
	}
	mc.Resize = rule
	if mc.Blend, err = retinanet.ParseBlendRule(c.String("blend")); err != nil {
		return mc, fmt.Errorf("--blend: %w", err)
	}
	if mc.Threads < 0 {
		return mc, fmt.Errorf("--threads %d must be at least 1 (0: the rank's cores)", mc.Threads)
	}
	for _, f := range []string{"score-thresh", "nms-thresh"} {
		if v := c.Float64(f); c.IsSet(f) && !(v >= 0 && v <= 1) {
			return mc, fmt.Errorf("--%s %v is not in [0, 1]", f, v)
		}
	}
	if mc.MaxImagePixels = c.Int64("max-image-pixels"); mc.MaxImagePixels < 0 {
		return mc, fmt.Errorf("--max-image-pixels %d must be at least 0 (0: no limit)", mc.MaxImagePixels)
	}
	if v := c.String("rank-memory"); v != "" {
		n, err := parseBytes(v)
		if err != nil || n == 0 {
			return mc, fmt.Errorf("--rank-memory: %q is not a positive size such as 512M or 4GiB", v)
		}
		mc.RankMemory = n
	}
	req, err := cuda.ParseDevice(mc.Device)
	if err != nil {
		return mc, err
	}
	if req.Kind == "cuda" && !haveCUDA {
		return mc, fmt.Errorf("--device %s: %w", mc.Device, cuda.ErrNoCUDA)
	}
	if _, err := cuda.ParsePrecision(mc.Precision); err != nil {
		return mc, err
	}
	return mc, nil
}

// jobOptions are the settings runJob applies to every job.
type jobOptions struct {
	collectiveTimeout time.Duration
	// out is the job's output folder, where a failing rank leaves a fault
	// marker so the ranks the launcher then stops stay silent.
	out string
	// verbose prints every rank's line for an interrupt or a fault, not
	// one per job.
	verbose bool
}

// interruptGrace is how long a rank other than 0 keeps its interrupt line
// back: when the whole job was signalled, rank 0 speaks and aborts the job
// meanwhile, and this rank is stopped before it prints. A rank signalled
// alone prints after it.
var interruptGrace = 3 * time.Second

// runJob starts the communicator, checks the launcher, runs job and applies
// the error rule: a collective error is printed by rank 0 and every rank
// returns its code; a local error is printed by its rank with rank and
// host, then the job is aborted with the code so no peer waits.
func runJob(ctx context.Context, newComm CommFactory, stderr io.Writer, opt jobOptions, job func(mpi.Comm) error) int {
	comm, finalize, err := newComm()
	if err != nil {
		fmt.Fprintf(stderr, "canopy: %v\n", err)
		return ExitMPI
	}
	err = checkLauncher(comm)
	if err == nil && opt.collectiveTimeout > 0 {
		err = setTimeout(comm, opt.collectiveTimeout)
	}
	if err == nil {
		err = job(comm)
	}
	if err == nil {
		if ferr := finalize(); ferr != nil {
			printErr(stderr, comm, ferr)
			return ExitMPI
		}
		return ExitOK
	}
	code := Code(err)
	var e *Error
	if errors.As(err, &e) && e.Collective {
		// A launcher mismatch leaves every process rank 0 of its own
		// world: the launcher's rank decides who prints.
		if comm.Rank() == 0 && launcherRank() <= 0 {
			printErr(stderr, comm, err)
		}
		finalize()
		return code
	}
	reportLocal(stderr, comm, opt, code, err)
	comm.Abort(code)
	return code // reached only by implementations whose Abort returns
}

// reportLocal prints a local error once per job. A fault is printed by its
// rank, which first leaves a marker in the output folder: the launcher
// answers MPI_Abort by signalling the other ranks, which then see an
// interrupt, and the marker keeps them silent. An interrupt is printed by
// rank 0; another rank prints it only when nobody stopped it within
// interruptGrace (it alone was signalled). --verbose prints every line.
func reportLocal(stderr io.Writer, comm mpi.Comm, opt jobOptions, code int, err error) {
	if opt.verbose {
		printErr(stderr, comm, err)
		return
	}
	marker := ""
	if opt.out != "" {
		marker = filepath.Join(opt.out, fmt.Sprintf("%s-%d", faultPrefix, comm.Rank()))
	}
	if code != ExitResumable {
		if marker != "" {
			os.WriteFile(marker, []byte(err.Error()), 0o644)
		}
		printErr(stderr, comm, err)
		return
	}
	if comm.Rank() != 0 {
		time.Sleep(interruptGrace)
	}
	if opt.out != "" {
		if m, _ := filepath.Glob(filepath.Join(opt.out, faultPrefix+"-*")); len(m) > 0 {
			return // a peer's fault stopped this rank; that rank has said why
		}
	}
	printErr(stderr, comm, err)
}

// ProfileEnv names a file prefix: when set, every rank writes a CPU
// profile to PREFIX.rankN (N from the launcher's environment, 0 alone).
const ProfileEnv = "CANOPY_CPUPROFILE"

func startProfile(prefix string) (func(), error) {
	f, err := os.Create(fmt.Sprintf("%s.rank%d", prefix, max(launcherRank(), 0)))
	if err != nil {
		return nil, fmt.Errorf("jobs: %s: %w", ProfileEnv, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("jobs: %s: %w", ProfileEnv, err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
