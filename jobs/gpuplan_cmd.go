package jobs

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/cudnn"
	"github.com/canopy-hpc/canopy/infer/gpu"
	"github.com/canopy-hpc/canopy/infer/modelfile"
	"github.com/canopy-hpc/canopy/infer/retinanet"
	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/detect"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/urfave/cli/v2"
)

// canopy gpu-plan: time cuDNN's eligible engines for every layer of a
// model at one batch size and precision on this GPU, and write the plan
// file that --plan pins at run time.

type gpuPlanConfig struct {
	Spec      string
	Batch     int
	Precision cuda.Precision
	Sizes     [][2]int // input images (H, W) the plans cover
	Device    int
	CUDNN     string
	Out       string
	Repeat    int
}

func gpuPlanCommand(code *int, stdout, stderr io.Writer) *cli.Command {
	return &cli.Command{
		Name:  "gpu-plan",
		Usage: "time cuDNN's engines for every layer of a model on this GPU and write a plan file for --plan",
		Description: "For --precision fp32, tf32 or bf16 at one --batch-size: every convolution shape the\n" +
			"model runs on images of --image-size, each eligible engine of cuDNN's heuristic\n" +
			"(no NONDETERMINISTIC engine, no split-K/stream-K/split-P) timed --repeat times on\n" +
			"this GPU; the fastest is pinned. The file is keyed by cuDNN's version, the GPU's\n" +
			"name, compute capability and SM count: eval and predict --plan refuse it (exit 5)\n" +
			"on another stack. One process, no MPI.\n\n" + ExitTable,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Required: true, Usage: "a model folder or owner/name[@revision] in the Hugging Face cache (as eval --model)"},
			&cli.IntFlag{Name: "batch-size", Value: 8, Usage: "the global batch N the plans are for (eval/predict --batch-size)"},
			&cli.StringFlag{Name: "precision", Value: "tf32", Usage: "fp32, tf32 or bf16"},
			&cli.StringFlag{Name: "image-size", Value: "400x400", Usage: "input image sizes HxW, comma-separated (DeepForest's 400x400 tiles resize to 800x800); layer shapes of other sizes take the heuristic's engine at run time"},
			&cli.StringFlag{Name: "device", Value: "cuda:0", Usage: "the GPU: cuda:N among the visible devices"},
			&cli.StringFlag{Name: "cudnn", Usage: "the cuDNN 9 library or its folder (default: the search of eval --cudnn)"},
			&cli.StringFlag{Name: "out", Required: true, Usage: "the plan file to write"},
			&cli.IntFlag{Name: "repeat", Value: 10, Usage: "timed runs per engine (after one warm-up)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageError(fmt.Errorf("gpu-plan takes no arguments, got %q", c.Args().Slice()))
			}
			cfg, err := gpuPlanConfigOf(c)
			if err != nil {
				return usageError(err)
			}
			if err := gpuPlan(cfg, stdout); err != nil {
				*code = Code(err)
				collective.SayLine(stderr, "canopy: ", err)
			}
			return nil
		},
	}
}

func gpuPlanConfigOf(c *cli.Context) (gpuPlanConfig, error) {
	cfg := gpuPlanConfig{Spec: c.String("model"), Batch: c.Int("batch-size"), CUDNN: c.String("cudnn"), Out: c.String("out"), Repeat: c.Int("repeat")}
	var err error
	if cfg.Precision, err = cuda.ParsePrecision(c.String("precision")); err != nil {
		return cfg, err
	}
	if !cfg.Precision.Cudnn() {
		return cfg, fmt.Errorf("--precision %s: gpu-plan plans cuDNN's modes (fp32, tf32, bf16)", cfg.Precision)
	}
	if cfg.Batch < 1 || cfg.Repeat < 1 {
		return cfg, fmt.Errorf("--batch-size %d and --repeat %d must be at least 1", cfg.Batch, cfg.Repeat)
	}
	for _, f := range strings.Split(c.String("image-size"), ",") {
		h, w, ok := strings.Cut(strings.TrimSpace(f), "x")
		hi, e1 := strconv.Atoi(h)
		wi, e2 := strconv.Atoi(w)
		if !ok || e1 != nil || e2 != nil || hi < 1 || wi < 1 || hi > 1<<15 || wi > 1<<15 {
			return cfg, fmt.Errorf("--image-size %q: want HxW, such as 400x400", f)
		}
		cfg.Sizes = append(cfg.Sizes, [2]int{hi, wi})
	}
	req, err := cuda.ParseDevice(c.String("device"))
	if err != nil || req.Kind != "cuda" {
		return cfg, fmt.Errorf("--device %q: want cuda:N", c.String("device"))
	}
	cfg.Device = max(req.Index, 0)
	return cfg, nil
}

// gpuPlan runs the timing and writes the plan file. The runner and the
// device close before the plan is written: a close error (a late CUDA
// fault, the timings not to be trusted) is exit 5 and no plan file.
func gpuPlan(cfg gpuPlanConfig, stdout io.Writer) (err error) {
	dir, err := modelfile.Resolve(cfg.Spec)
	if err != nil {
		return &Error{Code: ExitModel, Err: err}
	}
	m, _, _, err := modelfile.LoadFolder(dir)
	if err != nil {
		return &Error{Code: ExitModel, Err: err}
	}
	lib, err := modelsel.FindCUDNN(cudnn.Search{Flag: cfg.CUDNN})
	if err != nil {
		return &Error{Code: ExitMPI, Err: fmt.Errorf("jobs: gpu-plan: %w", err)}
	}
	dev, err := modelsel.OpenDevice(cfg.Device)
	if err != nil {
		return &Error{Code: ExitMPI, Err: fmt.Errorf("jobs: gpu-plan: %w", err)}
	}
	devCloser := detect.NewCloser(dev, "the GPU")
	defer devCloser.Join(&err)
	r, err := retinanet.NewGPURunnerWith(m, dev, gpu.Options{Precision: cfg.Precision, CUDNN: lib, Timing: true, Repeat: cfg.Repeat})
	if err != nil {
		return &Error{Code: ExitMPI, Err: err}
	}
	runCloser := detect.NewCloser(r, "the GPU runner")
	defer runCloser.Join(&err)
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, sz := range cfg.Sizes {
		imgs := make([]retinanet.Image, cfg.Batch)
		for i := range imgs {
			img := retinanet.Image{H: sz[0], W: sz[1], Pix: make([]float32, 3*sz[0]*sz[1])}
			for j := range img.Pix {
				img.Pix[j] = float32(rnd.IntN(256)) / 255
			}
			imgs[i] = img
		}
		if _, err := r.DetectBatch(imgs, cfg.Batch); err != nil {
			if errors.Is(err, infer.ErrModel) {
				return &Error{Code: ExitModel, Err: err}
			}
			return &Error{Code: ExitMPI, Err: fmt.Errorf("jobs: gpu-plan: %w", err)}
		}
	}
	info := dev.Info()
	pf := &cudnn.PlanFile{Format: cudnn.PlanFormat, Key: cudnn.PlanKey{CUDNN: lib.Version, GPU: info.Name, CC: info.SM, SMs: info.SMs},
		Model: cfg.Spec, Batch: cfg.Batch, Precision: cfg.Precision.String(), Plans: r.TimedPlans()}
	if err := errkind.Join(runCloser.Close(), devCloser.Close()); err != nil {
		return err
	}
	if err := os.WriteFile(cfg.Out, pf.Marshal(), 0o644); err != nil {
		return ioErr("jobs: gpu-plan: %w", err)
	}
	fmt.Fprintf(stdout, "canopy gpu-plan: %s, batch %d, %s, cuDNN %s (%s), %s (CC %s, %d SMs)\n",
		cfg.Spec, cfg.Batch, cfg.Precision, lib.VersionString(), lib.Path, info.Name, info.SM, info.SMs)
	keys := pf.Keys()
	sort.Strings(keys)
	var total float64
	for _, k := range keys {
		lp := pf.Plans[k]
		total += lp.Millis
		fmt.Fprintf(stdout, "  %-58s %-22s %9.3f ms  (%d engines timed; %s)\n", k, lp.Engine, lp.Millis, lp.Tried, lp.Layer)
	}
	fmt.Fprintf(stdout, "%d layer shapes, %.3f ms per batch of the shapes' fastest engines; wrote %s\n", len(keys), total, cfg.Out)
	return nil
}
