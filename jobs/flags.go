package jobs

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/retinanet"
	"github.com/canopy-hpc/canopy/internal/cropstage"
	"github.com/canopy-hpc/canopy/internal/htmlreport"
	"github.com/canopy-hpc/canopy/internal/limits"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/urfave/cli/v2"
)

// The flag groups eval and predict share, each parsed once here.

// rootDirFlag is eval's and predict's --root-dir.
func rootDirFlag() cli.Flag {
	return &cli.StringFlag{Name: "root-dir", Usage: "folder the CSV's image_path values are relative to (default: the CSV's folder)"}
}

// batchSizeFlag is eval's and predict's --batch-size; batchSize parses it.
func batchSizeFlag() cli.Flag {
	return &cli.IntFlag{Name: "batch-size", Value: 4, Usage: "images per detector call (results do not depend on it)"}
}

// batchSize is --batch-size, checked once: at least 1.
func batchSize(c *cli.Context) (int, error) {
	n := c.Int("batch-size")
	if n < 1 {
		return n, fmt.Errorf("--batch-size %d must be at least 1", n)
	}
	return n, nil
}

// verboseFlag is eval's and predict's --verbose.
func verboseFlag() cli.Flag {
	return &cli.BoolFlag{Name: "verbose", Usage: "every rank prints its own line when the job is interrupted or fails (default: one line per job, from rank 0 or the failing rank)"}
}

// shardJobFlags are --batch-size, --verbose and --collective-timeout (its
// help text the command's own), in that order: the flags runShardJob runs
// a job with.
func shardJobFlags(timeoutUsage string) []cli.Flag {
	return []cli.Flag{
		batchSizeFlag(),
		verboseFlag(),
		&cli.DurationFlag{Name: "collective-timeout", Value: 10 * time.Minute, Usage: timeoutUsage},
	}
}

// modelFlags are the detector flags of eval and predict.
func modelFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "model", Usage: "run the native RetinaNet: a DeepForest model folder (model.safetensors + config.json), a Lightning checkpoint (.ckpt, from deepforest train or save_model(): labels and thresholds from its stored config), a torch.save state dict (.pt or .pth: labels from --label-dict), or owner/name[@revision] in the local Hugging Face cache ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub; no network), e.g. weecology/deepforest-tree. With predict, a DeepForest point model (TreeFormer: a folder, .ckpt or .pt whose state dict is a TreeFormer's, recognised by its keys) writes points instead: image_path,x,y,label,score"},
		&cli.IntFlag{Name: "threads", Usage: "compute threads per rank (default: the cores this rank may use, which follows mpirun's --bind-to, but at most the node's cores divided by its ranks)"},
		&cli.Float64Flag{Name: "score-thresh", Value: -1, Usage: "keep detections scoring strictly above this (default: DeepForest's 0.1, which, as in DeepForest, beats the model's config.json). For a point model (TreeFormer): the peaks' threshold relative to the density map's maximum, in (0, 1] (default: point.yaml's 0.3)"},
		&cli.Float64Flag{Name: "nms-thresh", Value: -1, Usage: "per-class NMS IoU threshold (default: DeepForest's 0.05, which beats config.json likewise)"},
		&cli.StringFlag{Name: "device", Value: "auto", Usage: "where each rank runs the model: auto (a GPU when this is the cuda build and one is visible, else the CPU), cpu, cuda (node-local rank mod the visible GPUs: mpirun -np 4 on a 4-GPU node gives each rank its own; under srun --gpus-per-task=1 each rank sees its one GPU as 0) or cuda:N (every rank on visible device N)"},
		&cli.StringFlag{Name: "precision", Usage: "GPU convolutions: exact (canopy's own strict-FP32 kernels: the same bits for any rank count, --batch-size and --threads; the reference, and what CI runs), fp32 (cuDNN without tensor cores, as torchvision with allow_tf32 off), tf32 (cuDNN with TF32 tensor cores, PyTorch's default for convolutions; the default on a GPU) or bf16 (cuDNN, BF16 activations and weights, FP32 accumulation; heads' outputs and after in FP32); fp32/tf32/bf16 give the same bytes for any rank count at one --batch-size on one GPU model and cuDNN version (images are batched by global position); on the CPU only exact"},
		&cli.StringFlag{Name: "cudnn", Usage: "the cuDNN 9 library for --precision fp32/tf32/bf16: libcudnn.so.9 or its folder (default: $CANOPY_CUDNN, else the loader path, then nvidia/cudnn/lib under the site-packages of $VIRTUAL_ENV, $CONDA_PREFIX and the user's site, then $CUDA_HOME; none found: exit 5 naming every place)"},
		&cli.StringFlag{Name: "plan", Usage: "a plan file from canopy gpu-plan: the cuDNN engine of every layer shape, timed on this GPU model and cuDNN version (another key: exit 5); without it each layer takes the first deterministic engine of cuDNN's heuristic"},
		&cli.BoolFlag{Name: "exclusive-gpu", Usage: "fail (exit 5) when two ranks of a node would share a GPU, instead of warning"},
		&cli.StringFlag{Name: "resize", Value: "torchvision", Usage: "the transform's resize size rule: torchvision (torchvision >= 0.16 in eager mode, as DeepForest 2.x runs it: scale min(min_size/short side, max_size/long side) in float64) or torchvision-0.15 (torchvision <= 0.15, or a model under torch.jit.script/ONNX: the scale in float32; about half of all image sizes resize one pixel smaller in one dimension)"},
		&cli.StringFlag{Name: "blend", Value: "fma", Usage: "the bilinear resize's rounding, each bit for bit torch's on the CPU: fma (torch's AVX2 kernel with more than one thread, as the x86-64 wheels run it: fused multiply-adds), no-fma (torch with ATEN_CPU_CAPABILITY=default) or fma-1t (torch's AVX2 kernel on one thread); fma and no-fma differ by at most 2.4e-7 on a normalized pixel, fma-1t by up to 8.4e-5 where its source index moves a tap"},
		&cli.BoolFlag{Name: "layer-times", Usage: "print, on rank 0, where the model's time went, by layer group (stem, layer1-4, fpn, heads, transform, postprocess): wall seconds, the process's CPU seconds, and the convolutions' direct-equivalent GFLOP and GFLOP/s"},
		&cli.Int64Flag{Name: "max-image-pixels", Value: limits.DefaultMaxImagePixels, Usage: "refuse (exit 3, at pre-flight, from the image header) an image of more pixels than this; the default is where PIL refuses one (2 x Image.MAX_IMAGE_PIXELS); 0: no limit"},
		&cli.StringFlag{Name: "rank-memory", Usage: "memory one rank may use, such as 6G (default: the node's memory, or its cgroup limit, divided by the ranks on the node); before inference each rank estimates what its largest image needs, and before the metrics what the matching holds (the boxes and their overlapping pairs, counted) and what the COCO metrics hold, and refuses (exit 3) when it exceeds this"},
		&cli.BoolFlag{Name: "allow-outside-root", Usage: "let image paths leave --root-dir: absolute paths, \"..\" elements and symlinks to files outside it (refused by default; the report records this flag)"},
		&cli.GenericFlag{Name: "crop-model", Value: &repeated{}, Usage: "after detection, classify every box's crop with a DeepForest CropModel (species, alive/dead), as predict_tile(crop_model=...): a Lightning checkpoint (.ckpt: labels from its label_dict), a save_pretrained folder (config.json + model.safetensors; owner/name[@revision] in the local Hugging Face cache, as --model) or a torch.save state dict (.pt/.pth: labels from --crop-label-dict); ResNet-50 or ResNet-18. Repeatable: the columns are cropmodel_label and cropmodel_score for one model, cropmodel_label_<i> and cropmodel_score_<i> (i from 0, in order) for several. predict leaves out boxes of zero width or height, as DeepForest does; eval keeps them with empty cells. Crops are shared over the ranks and gathered: the same bytes for any rank count, --threads and --batch-size. Not for a point model (TreeFormer: exit 2): a point has no box to crop, and DeepForest's crop step reads boxes"},
		&cli.GenericFlag{Name: "crop-label-dict", Value: &repeated{}, Usage: "label,id CSV naming a crop model's classes: needed for a .pt state dict or a folder whose config.json has none; given once per --crop-model (in order), a model with its own labels must equal it; given once for several models, it names the classes of those that hold none"},
	}
}

// flagNamed is modelFlags' flag of this name (another command's same
// flag, with the same text).
func flagNamed(name string) cli.Flag {
	for _, f := range modelFlags() {
		if f.Names()[0] == name {
			return f
		}
	}
	panic("jobs: no model flag " + name)
}

// repeated is a flag's values in the order given (a path may hold commas,
// which cli's StringSliceFlag would split).
type repeated []string

func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }
func (r *repeated) String() string     { return strings.Join(*r, " ") }

// cropConfig reads --crop-model and --crop-label-dict.
func cropConfig(c *cli.Context) (cropstage.CropConfig, error) {
	var cc cropstage.CropConfig
	if r, ok := c.Generic("crop-model").(*repeated); ok {
		cc.Models = append(cc.Models, *r...)
	}
	if r, ok := c.Generic("crop-label-dict").(*repeated); ok {
		cc.LabelDicts = append(cc.LabelDicts, *r...)
	}
	for _, m := range cc.Models {
		if m == "" {
			return cc, errors.New("--crop-model: an empty path")
		}
	}
	switch n := len(cc.LabelDicts); {
	case n > 0 && len(cc.Models) == 0:
		return cc, errors.New("--crop-label-dict needs --crop-model")
	case n > 1 && n != len(cc.Models):
		return cc, fmt.Errorf("--crop-label-dict given %d times for %d --crop-model: give it once (for every model) or once per model", n, len(cc.Models))
	}
	return cc, nil
}

func concatFlags(fs ...[]cli.Flag) []cli.Flag {
	var out []cli.Flag
	for _, f := range fs {
		out = append(out, f...)
	}
	return out
}

// ModelConfig selects and tunes the native RetinaNet (modelsel.ModelConfig).
type ModelConfig = modelsel.ModelConfig

// modelConfig reads and checks the detector flags.
func modelConfig(c *cli.Context) (ModelConfig, cropstage.CropConfig, error) {
	mc := ModelConfig{Spec: c.String("model"), Threads: c.Int("threads"), ScoreThresh: c.Float64("score-thresh"),
		NMSThresh: c.Float64("nms-thresh"), LayerTimes: c.Bool("layer-times"), ExclusiveGPU: c.Bool("exclusive-gpu")}
	cc, err := cropConfig(c)
	if err != nil {
		return mc, cc, err
	}
	if v := c.String("rank-memory"); v != "" {
		n, err := limits.ParseBytes(v)
		if err != nil || n == 0 {
			return mc, cc, fmt.Errorf("--rank-memory: %q is not a positive size such as 512M or 4GiB", v)
		}
		mc.RankMemory = n
	}
	if mc.Spec == "" {
		if len(cc.Models) > 0 && mc.Threads < 0 {
			return mc, cc, fmt.Errorf("--threads %d must be at least 1 (0: the rank's cores)", mc.Threads)
		}
		for _, f := range []string{"threads", "score-thresh", "nms-thresh", "device", "precision", "cudnn", "plan", "exclusive-gpu", "layer-times", "max-image-pixels", "resize", "blend"} {
			if c.IsSet(f) && !(f == "threads" && len(cc.Models) > 0) {
				return mc, cc, fmt.Errorf("--%s needs --model", f)
			}
		}
		return mc, cc, nil
	}
	rule, err := retinanet.ParseResizeRule(c.String("resize"))
	if err != nil {
		return mc, cc, fmt.Errorf("--resize: %w", err)
	}
	mc.Resize = rule
	if mc.Blend, err = retinanet.ParseBlendRule(c.String("blend")); err != nil {
		return mc, cc, fmt.Errorf("--blend: %w", err)
	}
	if mc.Threads < 0 {
		return mc, cc, fmt.Errorf("--threads %d must be at least 1 (0: the rank's cores)", mc.Threads)
	}
	for _, f := range []string{"score-thresh", "nms-thresh"} {
		if v := c.Float64(f); c.IsSet(f) && !(v >= 0 && v <= 1) {
			return mc, cc, fmt.Errorf("--%s %v is not in [0, 1]", f, v)
		}
	}
	if mc.MaxImagePixels = c.Int64("max-image-pixels"); mc.MaxImagePixels < 0 {
		return mc, cc, fmt.Errorf("--max-image-pixels %d must be at least 0 (0: no limit)", mc.MaxImagePixels)
	}
	if err := deviceFlags(c, &mc); err != nil {
		return mc, cc, err
	}
	return mc, cc, nil
}

// deviceFlags reads --device, --precision, --cudnn and --plan into mc (the
// box detectors' and the point models').
func deviceFlags(c *cli.Context, mc *ModelConfig) error {
	dev := c.String("device")
	req, err := cuda.ParseDevice(dev)
	if err != nil {
		return err
	}
	if req.Kind == "cuda" && !modelsel.HaveCUDA {
		return &Error{Code: ExitMPI, Collective: true, Err: fmt.Errorf("--device %s: %w", dev, cuda.ErrNoCUDA)}
	}
	mc.Device = req
	if c.IsSet("precision") {
		if mc.Precision, err = cuda.ParsePrecision(c.String("precision")); err != nil {
			return err
		}
		mc.PrecisionSet = true
	}
	mc.CUDNN, mc.Plan = c.String("cudnn"), c.String("plan")
	if f := modelsel.GPUOnlyFlag(*mc, mc.Precision); f != "" && !modelsel.HaveCUDA {
		// refused before any work, with placeDevice's code (a build with
		// the cuda backend decides per rank, where it is placed)
		return &Error{Code: ExitMPI, Collective: true, Err: fmt.Errorf("%s needs a GPU: %w", f, cuda.ErrNoCUDA)}
	}
	return nil
}

// reportFlags are eval's flags of the extra outputs: report.html and COCO JSON.
func reportFlags() []cli.Flag {
	d := htmlreport.DefaultOptions
	return []cli.Flag{
		&cli.BoolFlag{Name: "html", Value: true, Usage: "rank 0 writes OUT/report.html after the metrics: one self-contained page (metrics, PR curves, score histograms, box sizes, per-rank timeline, worst images drawn, the run; with --tile the rasters' worst windows are drawn instead, read alone, never a whole raster); --html=false turns it off"},
		&cli.IntFlag{Name: "html-worst", Value: d.Worst, Usage: "images drawn in report.html: half with the lowest recall, the rest with the most false positives; with --tile, the windows with the most errors (truth boxes centred in the window that no detection matched, plus detections centred in it that matched no truth box; ties: raster, then window order) (0: none)"},
		&cli.IntFlag{Name: "html-thumb", Value: d.Thumb, Usage: "longest side, in pixels, of the images drawn in report.html"},
		&cli.BoolFlag{Name: "coco-out", Usage: "also write OUT/coco_truth.json (the truth as a COCO dataset; image ids 1.. in truth order, category ids as label_map) and OUT/coco_predictions.json (COCO results format), for pycocotools"},
	}
}

// htmlOptions parses the flags once; nil means no report.html.
func htmlOptions(c *cli.Context) (*htmlreport.Options, error) {
	if !c.Bool("html") {
		return nil, nil
	}
	o := htmlreport.Options{Worst: c.Int("html-worst"), Thumb: c.Int("html-thumb")}
	if o.Worst < 0 {
		return nil, fmt.Errorf("--html-worst %d must be at least 0", o.Worst)
	}
	if o.Thumb < 16 || o.Thumb > 4096 {
		return nil, fmt.Errorf("--html-thumb %d must be in [16, 4096]", o.Thumb)
	}
	return &o, nil
}
