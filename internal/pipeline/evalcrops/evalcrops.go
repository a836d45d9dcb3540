// Package evalcrops is `canopy eval-crops`' data path: every rank loads
// the crop model, rank 0 lists the folder (or the CSV's truth boxes) and
// broadcasts it, each rank classifies its block of crops, the logits are
// gathered, every rank computes DeepForest's CropModel validation table
// (the same bits for any rank count, agreed by hash) and rank 0 writes
// crops.csv, report.json and report.html.
package evalcrops

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/crop"
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/gemm"
	"github.com/canopy-hpc/canopy/infer/gpu"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/confine"
	"github.com/canopy-hpc/canopy/internal/cropstage"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/detect"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/htmlreport"
	"github.com/canopy-hpc/canopy/internal/limits"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/plan"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/report"
)

// Config is the configuration of one `canopy eval-crops` run.
type Config struct {
	Folder string // an ImageFolder: one sub-folder per class
	// CSV (instead of Folder): an annotation CSV whose truth boxes are the
	// crops, read from the images under RootDir (default: the CSV's folder).
	CSV, RootDir string
	Out          string
	Force        bool
	// CropModel and CropLabelDict: the classifier and, for a file
	// without labels, its label,id CSV.
	CropModel, CropLabelDict string
	// BatchSize is canopy's crops per classifier call (no effect on the
	// results); LossBatch is --loss-batch-size (0: the crop model's
	// stored cropmodel.batch_size, else DeepForest's 4), the batches
	// Lightning averages val_loss over.
	BatchSize, LossBatch int
	Threads              int
	// Device is --device, --precision and --cudnn (its Device, Precision,
	// PrecisionSet and CUDNN; the rest unused): where each rank runs the
	// crop model, placed as the detectors are (modelsel.PlaceAlone).
	Device            modelsel.ModelConfig
	MaxImagePixels    int64
	AllowOutsideRoot  bool
	HTML              bool
	Command           []string
	Stdout            io.Writer
	Progress          io.Writer
	CollectiveTimeout time.Duration
}

// maxListed bounds the skipped and dropped files named in report.json.
const maxListed = 20

// LoadModel loads the classifier on every rank (cropstage.OpenOne); a
// test replaces it with a stand-in.
var LoadModel = cropstage.OpenOne

// defaultLossBatch is DeepForest 2.1.0's cropmodel.batch_size.
const defaultLossBatch = 4

type evalCropsReport struct {
	Canopy  string          `json:"canopy"`
	Git     string          `json:"git"`
	MPI     string          `json:"mpi"`
	Command []string        `json:"command"`
	Ranks   int             `json:"ranks"`
	Metrics json.RawMessage `json:"metrics"`
	// Confusion[t][p] counts crops of class t predicted p (labels by id).
	Confusion Confusion `json:"confusion"`
	Crops     int       `json:"crops"`
	Input     Input     `json:"input"`
	CropModel any       `json:"crop_model"`
	// Device is where rank 0 classified ("cpu", or "cuda <precision> on
	// <GPU>"), Devices where every rank ran, in rank order.
	Device  string                `json:"device"`
	Devices []modelsel.RankDevice `json:"devices"`
	// LossBatch is cropmodel.batch_size: val_loss averages its batches;
	// LossBatchFrom says where it came from (flag, crop model, default).
	LossBatch        int                    `json:"loss_batch_size"`
	LossBatchFrom    string                 `json:"loss_batch_size_from"`
	Semantics        string                 `json:"semantics"`
	AllowOutsideRoot bool                   `json:"allow_outside_root,omitempty"`
	PerRank          []collective.RankStats `json:"per_rank"`
	Outputs          map[string]string      `json:"outputs,omitempty"`
}

// Confusion is report.json's confusion matrix: Matrix[t][p] counts the
// crops of class t predicted p (labels by id).
type Confusion struct {
	Labels []string  `json:"labels"`
	Matrix [][]int64 `json:"matrix"`
}

// Input is report.json's account of the crops read.
type Input struct {
	Folder  string   `json:"folder,omitempty"`
	CSV     string   `json:"csv,omitempty"`
	RootDir string   `json:"root_dir,omitempty"`
	Images  int      `json:"images,omitempty"`
	Classes []string `json:"classes"`
	// DroppedZeroSize (--csv): truth boxes of zero width or height, which
	// DeepForest's crop step drops.
	DroppedZeroSize int `json:"dropped_zero_size,omitempty"`
	// Skipped: files of other extensions ImageFolder skips; Dropped:
	// images in sub-folders that name no label, which DeepForest's
	// FixedClassImageFolder drops.
	Skipped      int      `json:"skipped"`
	SkippedFiles []string `json:"skipped_files,omitempty"`
	Dropped      int      `json:"dropped"`
	DroppedFiles []string `json:"dropped_files,omitempty"`
}

// Run runs eval-crops on this rank: every rank loads the crop model,
// rank 0 lists the folder and broadcasts it, each rank classifies its
// block of crops, the logits are gathered, every rank computes the table
// (the same bytes, agreed by hash) and rank 0 writes crops.csv,
// report.json and report.html.
func Run(ctx context.Context, c mpi.Comm, cfg Config) (err error) {
	cfg.BatchSize = detect.BatchOrOne(cfg.BatchSize)
	stats := collective.RankStats{Rank: c.Rank(), Host: c.Host(), LocalRank: c.LocalRank(), LocalSize: c.LocalSize(), Seconds: map[string]float64{}, SGEMM: gemm.Backend() + " " + gemm.Core()}
	t0 := time.Now()
	var out *outdir.Run
	var oerr error
	if c.Rank() == 0 {
		out, oerr = outdir.Prepare(cfg.Out, cfg.Force, output.Names)
	}
	defer func() { out.Finish(err) }()
	if err := collective.AgreeErr(c, errkind.ExitUsage, oerr); err != nil {
		return err
	}
	model, err := LoadModel(c, cfg.CropModel, cfg.CropLabelDict, cfg.Threads)
	if err != nil {
		return err
	}
	devs, err := placeModel(c, cfg, model)
	// The GPU engine's close error is the run's: it closes once the crops
	// are classified, before anything is published (closer.Close), else on
	// the way out, joined with the error that ended the run.
	closable, _ := model.(io.Closer)
	closer := detect.NewCloser(closable, "the crop model's GPU engine")
	defer closer.Join(&err)
	if err != nil {
		return err
	}
	lossFrom := "--loss-batch-size"
	switch {
	case cfg.LossBatch > 0:
	case model.BatchSize() > 0:
		cfg.LossBatch, lossFrom = model.BatchSize(), "crop model cropmodel.batch_size"
	default:
		cfg.LossBatch, lossFrom = defaultLossBatch, "DeepForest's default"
	}
	labels := model.Labels()
	id := make(map[string]int32, len(labels))
	for i, l := range labels {
		id[l] = int32(i)
	}
	var pkt []byte
	if c.Rank() == 0 {
		pkt = packCropInput(cfg, func(s string) bool { _, ok := id[s]; return ok })
	}
	f, err := collective.BcastFields(c, pkt, 2)
	if err != nil {
		return err
	}
	in, err := unpackCropInput(cfg, f, id, labels)
	if err != nil {
		return err
	}
	samples := in.samples
	n := len(samples)
	targets := make([]int32, n)
	for i, s := range samples {
		targets[i] = id[s.Class]
	}
	p, err := plan.Blocks(n, c.Size())
	if err != nil {
		return errkind.Collective(errkind.ExitInternal, "jobs: %w", err)
	}
	shard := p.Shards[c.Rank()]
	stats.Images = len(shard)
	var paths []string // the shard's files, each once
	for _, i := range shard {
		if p := samples[i].Path; len(paths) == 0 || paths[len(paths)-1] != p {
			paths = append(paths, p)
		}
	}
	if err := limits.Preflight(c, in.root, paths, cfg.AllowOutsideRoot, nil, modelsel.ModelConfig{MaxImagePixels: cfg.MaxImagePixels}, cfg.BatchSize); err != nil {
		return err
	}
	stats.Seconds["load"] = time.Since(t0).Seconds()

	t1 := time.Now()
	mine, err := classifyShard(ctx, model, cfg, in, shard)
	if err != nil {
		err = errkind.Local(errkind.Code(err), "jobs: %w", err)
	}
	err = errkind.Join(err, closer.Close())
	if err != nil {
		return err
	}
	stats.Detections = len(shard)
	stats.Seconds["classify"] = time.Since(t1).Seconds()

	t2 := time.Now()
	all, err := mpi.AllgatherBytes(c, mine)
	if err != nil {
		return errkind.Local(errkind.ExitMPI, "jobs: gather logits: %w", err)
	}
	stats.BytesSent = len(mine)
	logits, scores, err := mergeLogits(all, n, len(labels))
	if err != nil {
		return errkind.Collective(errkind.ExitInternal, "jobs: %w", err)
	}
	stats.Seconds["gather"] = time.Since(t2).Seconds()
	table, err := metrics.ComputeCropTable(logits, len(labels), targets, cfg.LossBatch)
	if err != nil {
		return errkind.Collective(errkind.ExitModel, "jobs: %w", err)
	}
	vals := Values(table, labels)
	mj := output.MetricsJSON(vals)
	if err := collective.Agree(c, mj); err != nil {
		return err
	}
	return collective.WriteReport(c, stats, "eval-crops outputs", func(allStats []collective.RankStats) error {
		rep := evalCropsReport{Canopy: output.Version, Git: output.GitRevision(), MPI: c.Implementation(), Command: cfg.Command, Ranks: c.Size(),
			Metrics: mj, Confusion: Confusion{Labels: labels, Matrix: table.Confusion}, Crops: n, CropModel: model.Info(),
			Device: deviceOf(model), Devices: devs,
			LossBatch: cfg.LossBatch, LossBatchFrom: lossFrom, AllowOutsideRoot: cfg.AllowOutsideRoot, PerRank: allStats,
			Semantics: "DeepForest 2.1.0 CropModel validation (torchmetrics multiclass, Lightning epoch mean of val_loss)",
			Input:     in.report}
		if err := writeCropOutputs(cfg, rep, samples, labels, table, scores); err != nil {
			return err
		}
		if err := out.Commit(); err != nil {
			return err
		}
		if cfg.Stdout != nil {
			output.PrintTable(cfg.Stdout, vals)
			if k := in.report.Dropped; k > 0 {
				fmt.Fprintf(cfg.Stdout, "note: %d images in sub-folders that name no class were left out, as DeepForest's FixedClassImageFolder leaves them out (report.json input.dropped_files)\n", k)
			}
		}
		return nil
	})
}

// placeModel places every rank's crop model (--device, as the detectors'
// are placed: exit 5 when a rank cannot have what was asked) and moves it
// onto its GPU when placed on one (exit 5 for a device or cuDNN that does
// not open); every rank learns where the others run.
func placeModel(c mpi.Comm, cfg Config, model cropstage.Classifier) ([]modelsel.RankDevice, error) {
	lm, err := modelsel.PlaceAlone(c, cfg.Device)
	if err != nil {
		return nil, err
	}
	var info *cuda.Info
	var gerr error
	if lm.Place.Kind == "cuda" {
		gerr = onGPU(lm, model)
		if gerr == nil {
			i := model.(gpuClassifier).GPU()
			info = &i
		}
	}
	if err := collective.AgreeErr(c, errkind.ExitMPI, gerr); err != nil {
		return nil, err
	}
	if err := lm.GatherDevices(c, info, nil); err != nil {
		return nil, err
	}
	return lm.Info.Devices, nil
}

// gpuClassifier is a classifier that can run on a GPU (cropstage's).
type gpuClassifier interface {
	OnGPU(dev cuda.Device, opt gpu.Options) error
	GPU() cuda.Info
}

// onGPU opens this rank's GPU and moves the classifier onto it.
func onGPU(lm *modelsel.Model, model cropstage.Classifier) error {
	g, ok := model.(gpuClassifier)
	if !ok {
		return errkind.Local(errkind.ExitInternal, "jobs: --device cuda: this crop model's classifier has no GPU engine")
	}
	dev, opt, err := lm.OpenGPU()
	if err != nil {
		return err
	}
	if err := g.OnGPU(dev, opt); err != nil {
		dev.Close()
		return &errkind.Error{Code: errkind.ExitMPI, Err: fmt.Errorf("jobs: --device %s: %w", lm.Info.Device, err)}
	}
	return nil
}

// deviceOf is where the classifier runs, for the report.
func deviceOf(model cropstage.Classifier) string {
	if d, ok := model.(interface{ Device() string }); ok {
		return d.Device()
	}
	return "cpu"
}

func firstN(s []string) []string { return s[:min(len(s), maxListed)] }

// cropSample is one crop: a whole image file (an ImageFolder's) or a
// truth box of an image (--csv), and its class.
type cropSample struct {
	Path, Class string
	Box         *box.Box
}

// cropInputs are the crops every rank holds: samples in DeepForest's
// order, the folder their paths are relative to, and report.json's input.
type cropInputs struct {
	samples []cropSample
	root    string
	report  Input
}

// packCropInput is rank 0's packet: "folder" and the folder listing, or
// "csv" and the annotation CSV's bytes; or its error.
func packCropInput(cfg Config, isLabel func(string) bool) []byte {
	if cfg.CSV != "" {
		data, err := confine.ReadNamedInput(cfg.CSV)
		if err != nil {
			return append([]byte{errkind.ExitInput}, fmt.Sprintf("jobs: %v", err)...)
		}
		return collective.PackFields([]byte{0}, []byte("csv"), data)
	}
	f, err := dataset.ReadImageFolder(cfg.Folder, isLabel, cfg.AllowOutsideRoot)
	if err != nil {
		return append([]byte{errkind.ExitInput}, err.Error()...)
	}
	return collective.PackFields([]byte{0}, append([][]byte{[]byte("folder")}, folderFields(f)...)...)
}

// unpackCropInput is every rank's reading of the packet. A CSV's truth
// boxes are the crops in the CSV's order (images in order of first
// appearance), 0,0,0,0 rows left out; a box of zero width or height is
// dropped, as DeepForest's _predict_crop_model_ drops it; a label the
// crop model does not know is bad input (exit 3).
func unpackCropInput(cfg Config, f [][]byte, id map[string]int32, labels []string) (*cropInputs, error) {
	switch string(f[0]) {
	case "folder":
		folder, err := unpackFolder(f[1:])
		if err != nil {
			return nil, errkind.Collective(errkind.ExitInternal, "jobs: %w", err)
		}
		in := &cropInputs{root: cfg.Folder, report: Input{Folder: cfg.Folder, Classes: folder.Classes,
			Skipped: len(folder.Skipped), SkippedFiles: firstN(folder.Skipped), Dropped: len(folder.Dropped), DroppedFiles: firstN(folder.Dropped)}}
		for _, s := range folder.Samples {
			in.samples = append(in.samples, cropSample{Path: s.Path, Class: s.Class})
		}
		return in, nil
	case "csv":
		t, err := dataset.ParseTruth(cfg.CSV, f[1])
		if err != nil {
			return nil, &errkind.Error{Code: errkind.ExitInput, Collective: true, Err: err}
		}
		root := cfg.RootDir
		if root == "" {
			root = filepath.Dir(cfg.CSV)
		}
		in := &cropInputs{root: root, report: Input{CSV: cfg.CSV, RootDir: root, Images: len(t.Images)}}
		seen := map[string]bool{}
		for _, im := range t.Images {
			for _, r := range im.Rows {
				if _, ok := id[r.Label]; !ok {
					return nil, &errkind.Error{Code: errkind.ExitInput, Collective: true, Err: fmt.Errorf("jobs: %s line %d: label %q is not a class of the crop model (%s): %w",
						cfg.CSV, r.Line, r.Label, strings.Join(labels, ", "), dataset.ErrInput)}
				}
				if crop.ZeroSize(r.Box.Xmin, r.Box.Ymin, r.Box.Xmax, r.Box.Ymax) {
					in.report.DroppedZeroSize++
					continue
				}
				b := r.Box
				in.samples = append(in.samples, cropSample{Path: im.Path, Class: r.Label, Box: &b})
				if !seen[r.Label] {
					seen[r.Label] = true
					in.report.Classes = append(in.report.Classes, r.Label)
				}
			}
		}
		sort.Strings(in.report.Classes)
		if len(in.samples) == 0 {
			return nil, &errkind.Error{Code: errkind.ExitInput, Collective: true, Err: fmt.Errorf("jobs: %s: no truth box to crop: %w", cfg.CSV, dataset.ErrInput)}
		}
		return in, nil
	}
	return nil, errkind.Collective(errkind.ExitInternal, "jobs: malformed eval-crops input packet")
}

// folderFields are a listing's packet fields: classes, samples (class and
// path, each NUL-terminated), skipped and dropped files (NUL-separated).
func folderFields(f *dataset.ImageFolder) [][]byte {
	var samples []byte
	for _, s := range f.Samples {
		samples = append(append(append(append(samples, s.Class...), 0), s.Path...), 0)
	}
	return [][]byte{[]byte(strings.Join(f.Classes, "\x00")), samples,
		[]byte(strings.Join(f.Skipped, "\x00")), []byte(strings.Join(f.Dropped, "\x00"))}
}

func unpackFolder(f [][]byte) (*dataset.ImageFolder, error) {
	split := func(b []byte) []string {
		if len(b) == 0 {
			return nil
		}
		return strings.Split(string(b), "\x00")
	}
	if len(f) != 4 || (len(f[1]) > 0 && f[1][len(f[1])-1] != 0) {
		return nil, fmt.Errorf("malformed folder listing")
	}
	out := &dataset.ImageFolder{Classes: split(f[0]), Skipped: split(f[2]), Dropped: split(f[3])}
	s := split(bytes.TrimSuffix(f[1], []byte{0}))
	if len(s)%2 != 0 {
		return nil, fmt.Errorf("malformed folder listing")
	}
	for i := 0; i < len(s); i += 2 {
		out.Samples = append(out.Samples, dataset.FolderSample{Class: s[i], Path: s[i+1]})
	}
	return out, nil
}

// classifyShard reads and classifies the rank's crops in batches and
// encodes their outputs: per crop its global index (uint32), its score
// and its logits (float32 bits), little-endian.
func classifyShard(ctx context.Context, m cropstage.Classifier, cfg Config, in *cropInputs, shard []int) ([]byte, error) {
	k := len(m.Labels())
	buf := make([]byte, 0, len(shard)*(8+4*k))
	prog := detect.NewProgress(cfg.Progress, len(shard))
	if prog != nil {
		prog.Unit = "crops"
	}
	// --csv: each image is decoded once while its crops are cut (a rank's
	// crops of one image are contiguous), as predict's crop stage reads them.
	var files []string
	index := map[string]int{}
	for _, i := range shard {
		if p := in.samples[i].Path; in.samples[i].Box != nil {
			if _, ok := index[p]; !ok {
				index[p] = len(files)
				files = append(files, p)
			}
		}
	}
	src := cropstage.NewImageCrops(in.root, files, cfg.AllowOutsideRoot)
	read := func(s cropSample) (imagefile.Image, error) {
		if s.Box == nil {
			return imagefile.Read(confine.ImageFile(in.root, filepath.FromSlash(s.Path)))
		}
		f := index[s.Path]
		w, h, err := src.Open(f)
		if err != nil {
			return imagefile.Image{}, err
		}
		b := *s.Box
		r, err := crop.Window(b.Xmin, b.Ymin, b.Xmax, b.Ymax, m.Expand(), w, h)
		if err != nil {
			return imagefile.Image{}, fmt.Errorf("%s: box %v: %w", s.Path, b, err)
		}
		return src.Read(f, r)
	}
	for b := 0; b < len(shard); b += cfg.BatchSize {
		e := min(b+cfg.BatchSize, len(shard))
		crops := make([]imagefile.Image, 0, e-b)
		for _, i := range shard[b:e] {
			im, err := read(in.samples[i])
			if err != nil {
				return nil, &errkind.Error{Code: errkind.ExitInput, Err: err}
			}
			crops = append(crops, im)
		}
		if e < len(shard) {
			for _, i := range shard[b:e] {
				if s := in.samples[i]; s.Box != nil && s.Path != in.samples[shard[e]].Path {
					src.Release(index[s.Path])
				}
			}
		}
		out, scores, err := m.Classify(ctx, crops)
		if err != nil {
			return nil, &errkind.Error{Code: errkind.ExitModel, Err: err}
		}
		if len(out) != len(crops) || len(scores) != len(crops) {
			return nil, &errkind.Error{Code: errkind.ExitInternal, Err: fmt.Errorf("the crop model gave %d outputs for %d crops", len(out), len(crops))}
		}
		for j, row := range out {
			if len(row) != k {
				return nil, &errkind.Error{Code: errkind.ExitInternal, Err: fmt.Errorf("the crop model gave %d logits, not %d", len(row), k)}
			}
			buf = binary.LittleEndian.AppendUint32(buf, uint32(shard[b+j]))
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(scores[j]))
			for _, v := range row {
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
			}
		}
		if prog != nil {
			prog.Add(e - b)
		}
	}
	return buf, nil
}

// mergeLogits places every rank's logits and scores at their crop's
// index, checking that each crop came exactly once.
func mergeLogits(parts [][]byte, n, k int) ([]float32, []float32, error) {
	out, scores := make([]float32, n*k), make([]float32, n)
	seen := make([]bool, n)
	rec := 8 + 4*k
	for r, b := range parts {
		if len(b)%rec != 0 {
			return nil, nil, fmt.Errorf("rank %d sent %d bytes of logits, not whole records of %d", r, len(b), rec)
		}
		for o := 0; o < len(b); o += rec {
			i := int(binary.LittleEndian.Uint32(b[o:]))
			if i >= n || seen[i] {
				return nil, nil, fmt.Errorf("rank %d sent crop %d twice or out of range (%d crops)", r, i, n)
			}
			seen[i] = true
			scores[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[o+4:]))
			for j := range k {
				out[i*k+j] = math.Float32frombits(binary.LittleEndian.Uint32(b[o+8+4*j:]))
			}
		}
	}
	for i, s := range seen {
		if !s {
			return nil, nil, fmt.Errorf("crop %d was classified by no rank", i)
		}
	}
	return out, scores, nil
}

// Values is the table under DeepForest's logged names, in
// trainer.validate's order: val_loss, Class Accuracy_<label> (only with
// more than one label), the micro averages, the macro precision. Each is
// a float32, written as its float64 value (what Lightning returns).
func Values(t metrics.CropTable, labels []string) []metrics.Value {
	v := func(k string, x float32) metrics.Value { return metrics.Value{Key: k, V: float64(x)} }
	vals := []metrics.Value{v("val_loss", t.ValLoss)}
	if len(labels) > 1 {
		for i, l := range labels {
			vals = append(vals, v("Class Accuracy_"+l, t.ClassAccuracy[i]))
		}
	}
	return append(vals, v("Micro-Average Accuracy", t.Accuracy), v("Micro-Average Precision", t.Precision),
		v("Macro-Average Precision", t.MacroPrecision))
}

// writeCropOutputs stages crops.csv (path, label, predicted label, score:
// the softmax's largest probability, as postprocess_predictions gives
// it), report.html and report.json, and publishes them as one set.
func writeCropOutputs(cfg Config, rep evalCropsReport, samples []cropSample, labels []string,
	t metrics.CropTable, scores []float32) error {
	var set []outdir.Staged
	cleanup := func() {
		for _, s := range set {
			outdir.Discard(cfg.Out, s.Tmp)
		}
	}
	s, err := outdir.Stage(cfg.Out, output.CropsCSV, func(w io.Writer) error {
		head := "path,label,predicted_label,score\n"
		if cfg.CSV != "" {
			head = "image_path,xmin,ymin,xmax,ymax,label,predicted_label,score\n"
		}
		if _, err := io.WriteString(w, head); err != nil {
			return err
		}
		var line []byte
		for i, smp := range samples {
			line = append(line[:0], dataset.CSVField(smp.Path)...)
			if b := smp.Box; b != nil {
				for _, v := range [4]float64{b.Xmin, b.Ymin, b.Xmax, b.Ymax} {
					line = report.AppendFloat(append(line, ','), v)
				}
			}
			line = append(append(append(append(line, ','), dataset.CSVField(smp.Class)...), ','), dataset.CSVField(labels[t.Pred[i]])...)
			line = append(report.AppendFloat(append(line, ','), float64(scores[i])), '\n')
			if _, err := w.Write(line); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	set = append(set, s)
	if cfg.HTML {
		page := htmlreport.Crops{Title: "canopy eval-crops: " + cfg.Folder + cfg.CSV, Labels: labels, Confusion: t.Confusion,
			Run: [][2]string{{"crop model", cfg.CropModel}, {"crops", strconv.Itoa(rep.Crops)}, {"ranks", strconv.Itoa(rep.Ranks)}, {"loss batch size", strconv.Itoa(rep.LossBatch)},
				{"command", strings.Join(rep.Command, " ")}}}
		for _, v := range Values(t, labels) {
			page.Metrics = append(page.Metrics, [2]string{v.Key, output.FormatValue(v)})
		}
		for i, smp := range samples {
			if lt := labels[t.Pred[i]]; lt != smp.Class {
				if page.WrongTotal++; len(page.Wrong) < htmlreport.MaxWrong {
					name := smp.Path
					if b := smp.Box; b != nil {
						name = fmt.Sprintf("%s (%v, %v, %v, %v)", smp.Path, b.Xmin, b.Ymin, b.Xmax, b.Ymax)
					}
					page.Wrong = append(page.Wrong, [4]string{name, smp.Class, lt, report.FormatFloat(float64(scores[i]))})
				}
			}
		}
		if n := rep.Input.Dropped; n > 0 {
			page.Notes = append(page.Notes, fmt.Sprintf("%d images in sub-folders that name no class were left out, as DeepForest's FixedClassImageFolder leaves them out.", n))
		}
		s, err := outdir.Stage(cfg.Out, "report.html", func(w io.Writer) error { return htmlreport.WriteCrops(w, page) })
		if err != nil {
			cleanup()
			return err
		}
		set = append(set, s)
	}
	rep.Outputs = map[string]string{}
	for _, s := range set {
		rep.Outputs[s.Name] = s.SHA256
	}
	rj, err := outdir.Stage(cfg.Out, "report.json", func(w io.Writer) error {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(rep)
	})
	if err != nil {
		cleanup()
		return err
	}
	return outdir.Publish(cfg.Out, append(set, rj))
}
