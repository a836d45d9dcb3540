// Package modelsel resolves --model and the detector flags into a loaded
// model on every rank: the model folder or hub name resolved and hashed on
// rank 0, the weights loaded and checked on every rank, the device placed
// (--device, --precision, the cuDNN path's library and plan file, global
// batching), the report's record of the model and its devices, and the
// GPU seams tests replace (HaveCUDA, CountDevices, OpenDevice, FindCUDNN).
package modelsel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/cpu"
	"github.com/canopy-hpc/canopy/infer/crop"
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/cudnn"
	"github.com/canopy-hpc/canopy/infer/gpu"
	"github.com/canopy-hpc/canopy/infer/modelfile"
	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/infer/retinanet"
	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/mpi"
)

// ModelConfig selects and tunes the native RetinaNet (eval --model, and
// predict).
type ModelConfig struct {
	// Spec is a model folder or owner/name[@revision] in the Hugging Face
	// cache (modelfile.Resolve).
	Spec string
	// Threads per rank; 0 means the cores this rank may use.
	Threads int
	// ScoreThresh and NMSThresh override the model's config.json when >= 0.
	ScoreThresh, NMSThresh float64
	// Device is --device, parsed (cuda.ParseDevice); the zero Request is
	// auto.
	Device cuda.Request
	// Precision is --precision (cuda.ParsePrecision); unless PrecisionSet,
	// the default: tf32 on a GPU, exact on the CPU.
	Precision    cuda.Precision
	PrecisionSet bool
	// CUDNN is --cudnn (a library or its folder; "" searches) and Plan
	// --plan (a gpu-plan file; "" the heuristic).
	CUDNN, Plan string
	// ExclusiveGPU makes two ranks on one GPU an error.
	ExclusiveGPU bool
	// LayerTimes prints, on rank 0, the model's time per layer group.
	LayerTimes bool
	// MaxImagePixels refuses larger images at pre-flight (0: no limit);
	// RankMemory is the memory a rank may use (0: the node's memory over
	// its ranks). See internal/limits.
	MaxImagePixels int64
	RankMemory     int64
	// Resize is --resize: the transform's size rule (the zero value is
	// torchvision ≥ 0.16's).
	Resize retinanet.ResizeRule
	// Blend is --blend: the bilinear resize's rounding.
	Blend retinanet.BlendRule
	// LabelDict is the label map the run gives (--label-dict), by name:
	// the labels of a bare .pt state dict, which holds none (nil: none
	// given). Set on every rank from the broadcast bytes.
	LabelDict map[string]int
	// DetectionsPerImg, TopkCandidates and NumClasses come from --config
	// (0: not given); NumClasses must equal the model's class count.
	DetectionsPerImg, TopkCandidates, NumClasses int
}

// labelMapText is a label map for a message, {"name": id, …} in id
// order, each name quoted (escaped).
func labelMapText(names []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q: %d", n, i)
	}
	b.WriteByte('}')
	return b.String()
}

// LabelDictOf is a label map as LabelDict.
func LabelDictOf(m box.LabelMap) map[string]int {
	out := make(map[string]int, m.Len())
	for i, n := range m.Names() {
		out[n] = i
	}
	return out
}

// Info is what the report records about the model.
type Info struct {
	Spec       string            `json:"spec"`
	Dir        string            `json:"dir"`
	SHA256     string            `json:"sha256"`
	Arch       string            `json:"arch"`
	LabelDict  json.RawMessage   `json:"label_dict"`
	Thresholds map[string]string `json:"thresholds"`
	Threads    int               `json:"threads"`
	Device     string            `json:"device"`
	Precision  string            `json:"precision"`
	// Resize is the transform's size rule (--resize).
	Resize string `json:"resize"`
	// Blend is the bilinear resize's rounding (--blend).
	Blend string `json:"blend"`
	// Format is the torch file's kind (lightning-checkpoint or
	// state-dict; absent for a model folder), LabelsFrom where its labels
	// came from and ConfigSet the options its stored config set.
	Format     string   `json:"format,omitempty"`
	LabelsFrom string   `json:"labels_from,omitempty"`
	ConfigSet  []string `json:"checkpoint_config,omitempty"`
	// Devices is where each rank ran, in rank order.
	Devices []RankDevice `json:"devices,omitempty"`
	Ignored []string     `json:"config_keys_ignored,omitempty"`
	// LossBatchNorm says which batch-norm statistics the validation losses
	// use (eval only).
	LossBatchNorm string `json:"loss_batchnorm,omitempty"`
	// CUDNN is the cuDNN path's record (fp32, tf32, bf16): the library,
	// the plan (sha256 or "heuristic"), each layer's engine.
	CUDNN *gpu.CUDNNReport `json:"cudnn,omitempty"`
	// Batching is the global batching of the cuDNN path.
	Batching *Batching `json:"batching,omitempty"`
	// Detector is rank 0's detector name (backend, precision, arch, GPU).
	Detector string `json:"-"`
}

// The GPU seams: the cuda backend in a cuda build; tests put host-shim
// devices (infer/cuda/hostkern) behind them.
var (
	HaveCUDA     = cuda.HaveCUDA
	CountDevices = cuda.Count
	OpenDevice   = cuda.Open
	FindCUDNN    = cudnn.Find // the cuDNN path's library (tests: the fake)
	NoGPU        = cuda.NoGPU // why a cuda build runs on the CPU ("": no more to say)
)

// RankDevice is one rank's device, for the report.
type RankDevice struct {
	Rank   int    `json:"rank"`
	Host   string `json:"host"`
	Device string `json:"device"` // "cpu" or "cuda:N" (N among the rank's visible devices)
	Name   string `json:"name,omitempty"`
	UUID   string `json:"uuid,omitempty"`
	SM     string `json:"sm,omitempty"`
	Shared int    `json:"ranks_on_device,omitempty"`
	Why    string `json:"why"`
}

// Resolve is rank 0's step: it resolves the model folder and hashes
// its weights and config.json ("" when absent), so the manifest (and every
// rank's check) knows the model.
func Resolve(spec string) (dir, digest, config string, err error) {
	dir, err = modelfile.Resolve(spec)
	if err != nil {
		return "", "", "", err
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs // other ranks may start elsewhere
	}
	if modelfile.IsTorchFile(dir) {
		if digest, err = outdir.HashFile(dir); err != nil {
			return "", "", "", fmt.Errorf("jobs: model %s: %w: %w", spec, err, infer.ErrModel)
		}
		return dir, digest, "", nil
	}
	if digest, err = outdir.HashFile(filepath.Join(dir, "model.safetensors")); err != nil {
		return "", "", "", fmt.Errorf("jobs: model %s: %w: %w", spec, err, infer.ErrModel)
	}
	if config, err = outdir.HashFile(filepath.Join(dir, "config.json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", "", "", fmt.Errorf("jobs: model %s: %w: %w", spec, err, infer.ErrModel)
	}
	return dir, digest, config, nil
}

// Model is a model loaded on this rank.
type Model struct {
	Net        *retinanet.Model
	cfg        modelfile.Config
	labelMap   box.LabelMap // the model's label_dict
	Info       Info
	layerTimes bool
	Place      cuda.Placement
	precision  cuda.Precision
	cudnnPath  string // --cudnn
	planPath   string // --plan
	batch      int    // --batch-size: the global batch N of the cuDNN path
	Threads    int    // compute threads of the detector, resolved once (info.Threads records it)
	decoders   int    // a GPU rank's image-decoding goroutines: its core budget
}

// Load loads the folder rank 0 resolved on every rank and checks that
// every rank read the same weights. Any rank's failure becomes one
// collective error (exit 4).
func Load(c mpi.Comm, mc ModelConfig, dir, digest, config string) (*Model, error) {
	lm, err := LoadLocal(mc, dir, digest, config, c.LocalSize())
	if err := collective.AgreeErr(c, errkind.ExitModel, err); err != nil {
		return nil, err
	}
	err = lm.placeDevice(mc, c.LocalRank(), c.LocalSize())
	if err := collective.AgreeErr(c, errkind.ExitMPI, err); err != nil {
		return nil, err
	}
	// The plan (global batches or not) must be every rank's: the ranks
	// must resolve one precision on one kind of device.
	all, err := mpi.AllgatherBytes(c, []byte(lm.precision.String()+" on "+lm.Place.Kind))
	if err != nil {
		return nil, errkind.Local(errkind.ExitMPI, "jobs: %w", err)
	}
	for r, b := range all {
		if string(b) != string(all[0]) {
			return nil, errkind.Collective(errkind.ExitMPI, "jobs: the ranks run different precisions: rank 0 %s, rank %d %s (give --precision and --device)", all[0], r, b)
		}
	}
	return lm, nil
}

// placeDevice chooses this rank's device (cuda.Place): node-local rank mod
// the visible GPUs, or the CPU.
func (lm *Model) placeDevice(mc ModelConfig, localRank, localSize int) error {
	lm.precision, lm.cudnnPath, lm.planPath = mc.Precision, mc.CUDNN, mc.Plan
	req := mc.Device
	visible := 0
	var err error
	if HaveCUDA && req.Kind != "cpu" {
		if visible, err = CountDevices(); err != nil {
			return fmt.Errorf("jobs: counting CUDA devices: %w", err)
		}
	}
	if lm.Place, err = cuda.Place(req, localRank, localSize, visible, HaveCUDA); err != nil {
		if why := NoGPU(); why != "" && visible == 0 {
			err = fmt.Errorf("%w: %s", err, why) // what the cuda build's front saw
		}
		return err
	}
	if why := NoGPU(); why != "" && lm.Place.Kind == "cpu" && req.Kind != "cpu" {
		lm.Place.Reason += ": " + why
	}
	if !mc.PrecisionSet && lm.Place.Kind == "cuda" {
		lm.precision = cuda.DefaultGPUPrecision
	}
	if lm.Place.Kind == "cpu" {
		if f := GPUOnlyFlag(mc, lm.precision); f != "" {
			return &errkind.Error{Code: errkind.ExitMPI, Err: fmt.Errorf("jobs: %s needs a GPU; this rank runs on the CPU (%s), which computes exact FP32 and reads no cuDNN or plan file", f, lm.Place.Reason)}
		}
	}
	if lm.Place.Kind == "cuda" && lm.Place.Sharing > 1 && mc.ExclusiveGPU {
		return fmt.Errorf("jobs: --exclusive-gpu: %d ranks of this node would share GPU %d (%s); start at most one rank per GPU", lm.Place.Sharing, lm.Place.Index, lm.Place.Reason)
	}
	lm.Info.Device = lm.Place.Kind
	if lm.Place.Kind == "cuda" {
		lm.Info.Device = fmt.Sprintf("cuda:%d", lm.Place.Index)
		lm.decoders = lm.Threads // the rank's cores decode ahead
		lm.Threads = 1           // the host side
	}
	lm.Info.Threads = lm.Threads
	lm.Info.Precision = lm.precision.String()
	return nil
}

// GPUOnlyFlag names the first flag given that only a GPU rank uses
// (--precision other than exact, --plan, --cudnn, --exclusive-gpu), ""
// when none is: on the CPU each is exit 5, as gpu-plan's missing GPU, never
// silently ignored.
func GPUOnlyFlag(mc ModelConfig, p cuda.Precision) string {
	switch {
	case p != cuda.Exact:
		return "--precision " + p.String()
	case mc.Plan != "":
		return "--plan " + mc.Plan
	case mc.CUDNN != "":
		return "--cudnn " + mc.CUDNN
	case mc.ExclusiveGPU:
		return "--exclusive-gpu"
	}
	return ""
}

func LoadLocal(mc ModelConfig, dir, digest, config string, localRanks int) (*Model, error) {
	m, cfg, tm, sum, err := modelfile.Load(dir, mc.LabelDict)
	if err != nil {
		if crop.Probe(dir) {
			return nil, infer.ModelErr(fmt.Errorf("jobs: --model %s is a crop model (a ResNet classifier), not a RetinaNet detector: give it as --crop-model", dir))
		}
		return nil, err
	}
	if sum != digest {
		what := dir + "/model.safetensors"
		if tm != nil {
			what = dir
		}
		return nil, fmt.Errorf("jobs: %s has sha256 %s here but %s on rank 0: the ranks see different files: %w", what, sum[:12], digest[:12], infer.ErrModel)
	}
	var ignored []string
	if tm == nil {
		if got := outdir.FileSHA(filepath.Join(dir, "config.json")); got != config {
			return nil, fmt.Errorf("jobs: %s/config.json differs from rank 0's (sha256 %q here, %q there): the ranks see different files: %w", dir, outdir.ShortSHA(got), outdir.ShortSHA(config), infer.ErrModel)
		}
		// DeepForest passes its own score_thresh, nms_thresh,
		// detections_per_img and topk_candidates to the constructor, and
		// explicit arguments beat config.json's (semantics §1.0): only the
		// flags change them. config.json's other constructor keys (min_size,
		// max_size, image_mean, image_std) do apply. A Lightning
		// checkpoint's stored config is DeepForest's own: its values stay
		// (modelfile.LoadTorch).
		def := retinanet.DefaultOptions()
		for _, k := range cfg.Set {
			switch k {
			case "score_thresh", "nms_thresh", "detections_per_img", "topk_candidates":
				ignored = append(ignored, k+" (DeepForest's own value wins)")
			}
		}
		m.Opt.ScoreThresh, m.Opt.NMSThresh = def.ScoreThresh, def.NMSThresh
		m.Opt.DetectionsPerImg, m.Opt.TopkCandidates = def.DetectionsPerImg, def.TopkCandidates
	}
	if mc.ScoreThresh >= 0 {
		m.Opt.ScoreThresh = float32(mc.ScoreThresh)
	}
	if mc.NMSThresh >= 0 {
		m.Opt.NMSThresh = mc.NMSThresh
	}
	if mc.DetectionsPerImg > 0 {
		m.Opt.DetectionsPerImg = mc.DetectionsPerImg
	}
	if mc.TopkCandidates > 0 {
		m.Opt.TopkCandidates = mc.TopkCandidates
	}
	if mc.NumClasses > 0 && mc.NumClasses != m.Classes {
		return nil, fmt.Errorf("jobs: the config's num_classes is %d, but the model %s has %d classes (canopy evaluates a model as it is; DeepForest would replace its heads to fine-tune): %w", mc.NumClasses, dir, m.Classes, infer.ErrModel)
	}
	m.Opt.Resize, m.Opt.Blend = mc.Resize, mc.Blend
	threads := mc.Threads
	if threads <= 0 {
		threads = DefaultThreads(StartProcs, runtime.NumCPU(), localRanks)
	}
	labels, err := box.NewLabelMap(cfg.Labels)
	if err != nil {
		return nil, fmt.Errorf("jobs: %w: %w", err, infer.ErrModel)
	}
	info := Info{
		Spec: mc.Spec, Dir: dir, SHA256: sum, Arch: m.Arch, LabelDict: LabelMapJSON(labels),
		Thresholds: modelSettings(m.Opt), Threads: threads, Device: "cpu", Ignored: append(ignored, cfg.Extra...),
		Resize: m.Opt.Resize.String(), Blend: m.Opt.Blend.String(),
	}
	if tm != nil {
		info.Format, info.LabelsFrom, info.ConfigSet = string(tm.Kind), tm.LabelsFrom, tm.Set
	}
	return &Model{Net: m, cfg: cfg, labelMap: labels, Info: info, layerTimes: mc.LayerTimes, Threads: threads}, nil
}

// StartProcs is GOMAXPROCS as the process started (the affinity mask),
// before raiseProcs raises it for a CPU detector.
var StartProcs = runtime.GOMAXPROCS(0)

// RaiseProcs gives the process at least n Ps (cpu.Procs: one more
// than the CPU detector's workers, which spend their time in cgo calls);
// it never lowers GOMAXPROCS. The thread count stays the one chosen from
// StartProcs, so no more workers compute than the rank has cores.
func RaiseProcs(n int) {
	if runtime.GOMAXPROCS(0) < n {
		runtime.GOMAXPROCS(n)
	}
}

// DefaultThreads is the thread count of a rank: the cores it may use
// (GOMAXPROCS follows the affinity mask, so mpirun --bind-to core gives 1),
// but no more than its share of the node when the mask is wider than that
// (Open MPI binds to a socket above 2 ranks; srun may not bind at all), so
// the ranks of a node never start more threads than it has cores.
func DefaultThreads(maxprocs, ncpu, localRanks int) int {
	share := ncpu / max(localRanks, 1)
	return max(1, min(maxprocs, share))
}

// modelSettings are the options that change detections, for the manifest
// and the report.
func modelSettings(o retinanet.Options) map[string]string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	return map[string]string{
		"score_thresh":       strconv.FormatFloat(float64(o.ScoreThresh), 'g', -1, 32),
		"nms_thresh":         f(o.NMSThresh),
		"detections_per_img": strconv.Itoa(o.DetectionsPerImg),
		"topk_candidates":    strconv.Itoa(o.TopkCandidates),
		"min_size":           strconv.Itoa(o.MinSize),
		"max_size":           strconv.Itoa(o.MaxSize),
	}
}

// Labels returns the model's label map.
func (lm *Model) Labels() box.LabelMap { return lm.labelMap }

// CropWorkers is the crop classifier's workers on this rank: the
// Detector's compute threads (the CPU), or the cores that decode ahead of
// a GPU.
func (lm *Model) CropWorkers() int { return max(lm.Threads, lm.decoders, 1) }

// OpenDetector is a collective: every rank builds its detector (opening
// its GPU), the ranks agree that all succeeded (so no rank waits for a peer
// that failed), and every rank learns where the others run (the report's
// model.devices). Two ranks on one GPU is a warning on rank 0's stderr.
func (lm *Model) OpenDetector(c mpi.Comm, labels box.LabelMap, stderr io.Writer) (infer.Detector, error) {
	det, err := lm.Detector(labels)
	if err := collective.AgreeErr(c, errkind.ExitModel, err); err != nil {
		if det != nil {
			det.Close()
		}
		return nil, err
	}
	var info *cuda.Info
	if g, ok := det.(interface{ Device() cuda.Info }); ok {
		i := g.Device()
		info = &i
	}
	if err := lm.GatherDevices(c, info, stderr); err != nil {
		det.Close()
		return nil, err
	}
	lm.Info.Detector = det.Name()
	return det, nil
}

// GatherDevices is a collective: every rank learns where the others run
// (Info.Devices, the report's devices; info is this rank's GPU, nil on
// the CPU), and rank 0 warns on stderr of ranks that share a GPU.
func (lm *Model) GatherDevices(c mpi.Comm, info *cuda.Info, stderr io.Writer) error {
	me := RankDevice{Rank: c.Rank(), Host: c.Host(), Device: lm.Info.Device, Why: lm.Place.Reason}
	if info != nil {
		me.Name, me.UUID, me.SM, me.Shared = info.Name, info.UUID, info.SM, lm.Place.Sharing
	}
	b, _ := json.Marshal(me)
	all, err := mpi.AllgatherBytes(c, b)
	if err != nil {
		return errkind.Local(errkind.ExitMPI, "jobs: %w", err)
	}
	lm.Info.Devices = lm.Info.Devices[:0]
	shared := map[string][]int{}
	for _, raw := range all {
		var d RankDevice
		if err := json.Unmarshal(raw, &d); err != nil {
			return errkind.Local(errkind.ExitInternal, "jobs: a rank's device record: %w", err)
		}
		lm.Info.Devices = append(lm.Info.Devices, d)
		if d.UUID != "" {
			shared[d.UUID] = append(shared[d.UUID], d.Rank)
		}
	}
	if c.Rank() == 0 && stderr != nil {
		autoCPUNote(stderr, lm.Info.Devices)
		for _, d := range lm.Info.Devices {
			if r := shared[d.UUID]; d.UUID != "" && len(r) > 1 && r[0] == d.Rank {
				collective.SayLine(stderr, "canopy: warning: ", fmt.Sprintf("ranks %v share GPU %s (%s on %s); each runs slower, and --exclusive-gpu makes this an error", r, d.UUID, d.Name, d.Host))
			}
		}
	}
	return nil
}

// PlaceAlone places this rank's device for a model that has no detector
// (eval-crops' crop model), as Load places a detector's (--device,
// --precision, --cudnn; exit 5 when a rank cannot have what was asked):
// a collective.
func PlaceAlone(c mpi.Comm, mc ModelConfig) (*Model, error) {
	lm := &Model{Threads: max(mc.Threads, 1)}
	err := lm.placeDevice(mc, c.LocalRank(), c.LocalSize())
	if err := collective.AgreeErr(c, errkind.ExitMPI, err); err != nil {
		return nil, err
	}
	return lm, nil
}

// Precision is the precision this rank resolved (--precision, or the
// GPU's default).
func (lm *Model) Precision() cuda.Precision { return lm.precision }

// OpenGPU opens this rank's GPU (Place) and the engine's options at the
// resolved precision (the cuDNN library and plan file for fp32, tf32,
// bf16); the caller closes the device.
func (lm *Model) OpenGPU() (cuda.Device, gpu.Options, error) {
	dev, err := OpenDevice(lm.Place.Index)
	if err != nil {
		return nil, gpu.Options{}, &errkind.Error{Code: errkind.ExitMPI, Err: fmt.Errorf("jobs: %w", err)}
	}
	opts, err := lm.gpuOptions(dev.Info())
	if err != nil {
		dev.Close()
		return nil, opts, err
	}
	return dev, opts, nil
}

// autoCPUNote is the one line a cuda build prints (rank 0) when --device
// auto put ranks on the CPU for want of a GPU: which ranks, and why (the
// first such rank's reason; the report has every rank's).
func autoCPUNote(w io.Writer, devs []RankDevice) {
	if !HaveCUDA {
		return
	}
	var ranks []int
	why := ""
	for _, d := range devs {
		if d.Device == "cpu" && strings.HasPrefix(d.Why, "auto:") {
			if ranks == nil {
				why = d.Why
			}
			ranks = append(ranks, d.Rank)
		}
	}
	if ranks == nil {
		return
	}
	all := fmt.Sprintf("ranks %v run", ranks)
	if len(ranks) == len(devs) {
		all = "every rank runs"
	}
	collective.SayLine(w, "canopy: note: ", fmt.Sprintf("--device auto: this cuda build has no usable GPU here; %s on the CPU (%s)", all, why))
}

// Detector builds this rank's detector (CPU or GPU), mapping the model's
// ids onto labels.
func (lm *Model) Detector(labels box.LabelMap) (infer.Detector, error) {
	ids := make([]int32, len(lm.cfg.Labels))
	for k, name := range lm.cfg.Labels {
		id, ok := labels.ID(name)
		if !ok {
			return nil, fmt.Errorf("jobs: the model's label %q is not in the label map: %w", name, infer.ErrModel)
		}
		ids[k] = id
	}
	if lm.Place.Kind == "cuda" {
		dev, opts, err := lm.OpenGPU()
		if err != nil {
			return nil, err
		}
		slots := 0
		if lm.GlobalBatching() {
			slots = lm.batch
		}
		g, err := retinanet.NewGPUDetectorWith(lm.Net, dev, opts, ids, slots)
		if err != nil {
			dev.Close()
			return nil, err
		}
		if lm.layerTimes {
			g.EnableLayerTimes()
		}
		g.SetDecodeWorkers(lm.decoders)
		return g, nil
	}
	d, err := retinanet.NewDetector(lm.Net, lm.Threads, ids)
	if err != nil {
		return nil, err
	}
	RaiseProcs(cpu.Procs(lm.Threads))
	if lm.layerTimes {
		d.EnableLayerTimes()
	}
	return d, nil
}

// PrintLayerTimes writes the detector's time per layer group (rank 0, with
// --layer-times).
func PrintLayerTimes(w io.Writer, d infer.Detector) {
	lt, ok := d.(interface{ LayerTimes() []nn.LayerTime })
	if w == nil || !ok {
		return
	}
	rows := lt.LayerTimes()
	if rows == nil {
		return
	}
	var total float64
	for _, r := range rows {
		total += r.Seconds
	}
	fmt.Fprintf(w, "canopy: rank 0: model time by layer group (%.2f s in all):\n", total)
	for _, r := range rows {
		line := fmt.Sprintf("canopy: rank 0:   %-12s %8.3f s %5.1f%% %6d calls %8.3f cpu-s", r.Group, r.Seconds, 100*r.Seconds/total, r.Calls, r.CPUSeconds)
		if r.GFLOP > 0 && r.Seconds > 0 && r.CPUSeconds > 0 {
			// direct-convolution FLOPs (Winograd layers multiply less), per
			// wall second and per CPU second
			line += fmt.Sprintf(" %8.1f GFLOP %6.1f GFLOP/s %6.1f GFLOP/cpu-s", r.GFLOP, r.GFLOP/r.Seconds, r.GFLOP/r.CPUSeconds)
		}
		fmt.Fprintln(w, line)
	}
}

// CheckLabels: with --model, the label map is the model's label_dict;
// a given map (--label-dict, or a config's or an override's label_dict,
// named by from) must equal it, and every truth label must be one of the
// model's. A model that carries labels keeps them, as DeepForest 2.1.0
// does (load_model sets the hub model's label_dict over the config's,
// on_load_checkpoint the checkpoint's), so a map that says otherwise is
// refused, naming both, never silently dropped (a bare .pt, which holds
// none, takes the given map at loading).
func CheckLabels(model box.LabelMap, given *box.LabelMap, from string, truthLabels []string, csvName string) error {
	if given != nil {
		a, b := given.Names(), model.Names()
		same := len(a) == len(b)
		for i := 0; same && i < len(a); i++ {
			same = a[i] == b[i]
		}
		if !same {
			return fmt.Errorf("jobs: the label map of %s, %s, contradicts the model's own label_dict, %s: a model that carries its labels keeps them, as DeepForest's load_model and load_from_checkpoint do; give the model's map or none: %w", from, labelMapText(a), labelMapText(b), infer.ErrModel)
		}
	}
	for _, l := range truthLabels {
		if _, ok := model.ID(l); !ok {
			return fmt.Errorf("jobs: %s has label %q, which the model does not know (its label_dict: %v): %w", csvName, l, model.Names(), infer.ErrModel)
		}
	}
	return nil
}

func LabelMapJSON(m box.LabelMap) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, n := range m.Names() {
		if i > 0 {
			b.WriteString(", ")
		}
		k, _ := json.Marshal(n)
		b.Write(k)
		fmt.Fprintf(&b, ": %d", i)
	}
	b.WriteByte('}')
	return b.Bytes()
}
