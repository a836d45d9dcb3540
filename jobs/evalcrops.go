package jobs

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/canopy-hpc/canopy/infer/gemm"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/htmlreport"
	"github.com/canopy-hpc/canopy/internal/plan"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/report"
)

// EvalCropsConfig is the configuration of one `canopy eval-crops` run.
type EvalCropsConfig struct {
	Folder string // an ImageFolder: one sub-folder per class
	Out    string
	Force  bool
	// CropModel and CropLabelDict: the classifier and, for a file
	// without labels, its label,id CSV.
	CropModel, CropLabelDict string
	// BatchSize is canopy's crops per classifier call (no effect on the
	// results); LossBatch is DeepForest's cropmodel.batch_size, the
	// batches Lightning averages val_loss over.
	BatchSize, LossBatch int
	Threads              int
	MaxImagePixels       int64
	AllowOutsideRoot     bool
	HTML                 bool
	Command              []string
	Stdout               io.Writer
	Progress             io.Writer
	CollectiveTimeout    time.Duration
}

// cropsFile is eval-crops' per-crop table.
const cropsFile = "crops.csv"

// maxListed bounds the skipped and dropped files named in report.json.
const maxListed = 20

// cropClassifier is what eval-crops needs of a crop model.
type cropClassifier interface {
	// Labels are the class names by index.
	Labels() []string
	// Classify classifies raw crops (imagefile's layout), in order: for
	// each, its len(Labels()) logits and its score, the largest softmax
	// probability (DeepForest's postprocess_predictions).
	Classify(ctx context.Context, crops []imagefile.Image) (logits [][]float32, scores []float32, err error)
	// Info is what report.json records of the model.
	Info() any
}

type evalCropsReport struct {
	Canopy  string          `json:"canopy"`
	Git     string          `json:"git"`
	MPI     string          `json:"mpi"`
	Command []string        `json:"command"`
	Ranks   int             `json:"ranks"`
	Metrics json.RawMessage `json:"metrics"`
	// Confusion[t][p] counts crops of class t predicted p (labels by id).
	Confusion cropConfusion `json:"confusion"`
	Crops     int           `json:"crops"`
	Input     cropInput     `json:"input"`
	CropModel any           `json:"crop_model"`
	// LossBatch is cropmodel.batch_size: val_loss averages its batches.
	LossBatch        int               `json:"loss_batch_size"`
	Semantics        string            `json:"semantics"`
	AllowOutsideRoot bool              `json:"allow_outside_root,omitempty"`
	PerRank          []rankStats       `json:"per_rank"`
	Outputs          map[string]string `json:"outputs,omitempty"`
}

type cropConfusion struct {
	Labels []string  `json:"labels"`
	Matrix [][]int64 `json:"matrix"`
}

type cropInput struct {
	Folder  string   `json:"folder"`
	Classes []string `json:"classes"`
	// Skipped: files of other extensions ImageFolder skips; Dropped:
	// images in sub-folders that name no label, which DeepForest's
	// FixedClassImageFolder drops.
	Skipped      int      `json:"skipped"`
	SkippedFiles []string `json:"skipped_files,omitempty"`
	Dropped      int      `json:"dropped"`
	DroppedFiles []string `json:"dropped_files,omitempty"`
}

// EvalCrops runs eval-crops on this rank: every rank loads the crop model,
// rank 0 lists the folder and broadcasts it, each rank classifies its
// block of crops, the logits are gathered, every rank computes the table
// (the same bytes, agreed by hash) and rank 0 writes crops.csv,
// report.json and report.html.
func EvalCrops(ctx context.Context, c mpi.Comm, cfg EvalCropsConfig) (err error) {
	cfg.BatchSize, cfg.LossBatch = batchOrOne(cfg.BatchSize), batchOrOne(cfg.LossBatch)
	stats := rankStats{Rank: c.Rank(), Host: c.Host(), LocalRank: c.LocalRank(), LocalSize: c.LocalSize(), Seconds: map[string]float64{}, SGEMM: gemm.Backend() + " " + gemm.Core()}
	t0 := time.Now()
	var out *outRun
	var oerr error
	if c.Rank() == 0 {
		out, oerr = prepareRunOut(cfg.Out, cfg.Force)
	}
	defer func() { out.finish(err) }()
	if err := agreeErr(c, ExitUsage, oerr); err != nil {
		return err
	}
	model, err := loadCropModel(c, cfg.CropModel, cfg.CropLabelDict, cfg.Threads)
	if err != nil {
		return err
	}
	labels := model.Labels()
	id := make(map[string]int32, len(labels))
	for i, l := range labels {
		id[l] = int32(i)
	}
	var pkt []byte
	if c.Rank() == 0 {
		pkt = packFolder(cfg, func(s string) bool { _, ok := id[s]; return ok })
	}
	f, err := bcastFields(c, pkt, 4)
	if err != nil {
		return err
	}
	folder, err := unpackFolder(f)
	if err != nil {
		return collective(ExitInternal, "jobs: %w", err)
	}
	n := len(folder.Samples)
	targets := make([]int32, n)
	for i, s := range folder.Samples {
		targets[i] = id[s.Class]
	}
	p, err := plan.Blocks(n, c.Size())
	if err != nil {
		return collective(ExitInternal, "jobs: %w", err)
	}
	shard := p.Shards[c.Rank()]
	stats.Images = len(shard)
	paths := make([]string, len(shard))
	for k, i := range shard {
		paths[k] = folder.Samples[i].Path
	}
	if err := preflight(c, cfg.Folder, paths, cfg.AllowOutsideRoot, nil, ModelConfig{MaxImagePixels: cfg.MaxImagePixels}, cfg.BatchSize); err != nil {
		return err
	}
	stats.Seconds["load"] = since(t0)

	t1 := time.Now()
	mine, cerr := classifyShard(ctx, model, cfg, shard, paths)
	if cerr != nil {
		return localErr(Code(cerr), "jobs: %w", cerr)
	}
	stats.Detections = len(shard)
	stats.Seconds["classify"] = since(t1)

	t2 := time.Now()
	all, err := mpi.AllgatherBytes(c, mine)
	if err != nil {
		return localErr(ExitMPI, "jobs: gather logits: %w", err)
	}
	stats.BytesSent = len(mine)
	logits, scores, err := mergeLogits(all, n, len(labels))
	if err != nil {
		return collective(ExitInternal, "jobs: %w", err)
	}
	stats.Seconds["gather"] = since(t2)
	table, err := metrics.ComputeCropTable(logits, len(labels), targets, cfg.LossBatch)
	if err != nil {
		return collective(ExitModel, "jobs: %w", err)
	}
	vals := cropValues(table, labels)
	mj := MetricsJSON(vals)
	if err := agree(c, mj); err != nil {
		return err
	}
	return writeReport(c, stats, "eval-crops outputs", func(allStats []rankStats) error {
		rep := evalCropsReport{Canopy: Version, Git: gitRevision(), MPI: c.Implementation(), Command: cfg.Command, Ranks: c.Size(),
			Metrics: mj, Confusion: cropConfusion{Labels: labels, Matrix: table.Confusion}, Crops: n, CropModel: model.Info(),
			LossBatch: cfg.LossBatch, AllowOutsideRoot: cfg.AllowOutsideRoot, PerRank: allStats,
			Semantics: "DeepForest 2.1.0 CropModel validation (torchmetrics multiclass, Lightning epoch mean of val_loss)",
			Input: cropInput{Folder: cfg.Folder, Classes: folder.Classes, Skipped: len(folder.Skipped), SkippedFiles: firstN(folder.Skipped),
				Dropped: len(folder.Dropped), DroppedFiles: firstN(folder.Dropped)}}
		if err := writeCropOutputs(cfg, rep, folder, labels, table, scores); err != nil {
			return err
		}
		if err := out.commit(); err != nil {
			return err
		}
		if cfg.Stdout != nil {
			printTable(cfg.Stdout, vals)
			if k := len(folder.Dropped); k > 0 {
				fmt.Fprintf(cfg.Stdout, "note: %d images in sub-folders that name no class were left out, as DeepForest's FixedClassImageFolder leaves them out (report.json input.dropped_files)\n", k)
			}
		}
		return nil
	})
}

func firstN(s []string) []string { return s[:min(len(s), maxListed)] }

// packFolder is rank 0's packet: the folder listing, or its error.
func packFolder(cfg EvalCropsConfig, isLabel func(string) bool) []byte {
	f, err := dataset.ReadImageFolder(cfg.Folder, isLabel, cfg.AllowOutsideRoot)
	if err != nil {
		return append([]byte{ExitInput}, err.Error()...)
	}
	return packFields([]byte{0}, folderFields(f)...)
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
func classifyShard(ctx context.Context, m cropClassifier, cfg EvalCropsConfig, shard []int, paths []string) ([]byte, error) {
	k := len(m.Labels())
	buf := make([]byte, 0, len(shard)*(8+4*k))
	prog := newProgress(cfg.Progress, len(shard))
	if prog != nil {
		prog.unit = "crops"
	}
	for b := 0; b < len(shard); b += cfg.BatchSize {
		e := min(b+cfg.BatchSize, len(shard))
		crops := make([]imagefile.Image, 0, e-b)
		for _, p := range paths[b:e] {
			im, err := imagefile.Read(filepath.Join(cfg.Folder, filepath.FromSlash(p)))
			if err != nil {
				return nil, &Error{Code: ExitInput, Err: err}
			}
			crops = append(crops, im)
		}
		out, scores, err := m.Classify(ctx, crops)
		if err != nil {
			return nil, &Error{Code: ExitModel, Err: err}
		}
		if len(out) != len(crops) || len(scores) != len(crops) {
			return nil, &Error{Code: ExitInternal, Err: fmt.Errorf("the crop model gave %d outputs for %d crops", len(out), len(crops))}
		}
		for j, row := range out {
			if len(row) != k {
				return nil, &Error{Code: ExitInternal, Err: fmt.Errorf("the crop model gave %d logits, not %d", len(row), k)}
			}
			buf = binary.LittleEndian.AppendUint32(buf, uint32(shard[b+j]))
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(scores[j]))
			for _, v := range row {
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
			}
		}
		if prog != nil {
			prog.add(e - b)
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

// cropValues is the table under DeepForest's logged names, in
// trainer.validate's order: val_loss, Class Accuracy_<label> (only with
// more than one label), the micro averages, the macro precision. Each is
// a float32, written as its float64 value (what Lightning returns).
func cropValues(t metrics.CropTable, labels []string) []metrics.Value {
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
func writeCropOutputs(cfg EvalCropsConfig, rep evalCropsReport, folder *dataset.ImageFolder, labels []string,
	t metrics.CropTable, scores []float32) error {
	var set []staged
	cleanup := func() {
		for _, s := range set {
			discard(cfg.Out, s.Tmp)
		}
	}
	s, err := stage(cfg.Out, cropsFile, func(w io.Writer) error {
		if _, err := io.WriteString(w, "path,label,predicted_label,score\n"); err != nil {
			return err
		}
		for i, smp := range folder.Samples {
			line := csvField(smp.Path) + "," + csvField(smp.Class) + "," + csvField(labels[t.Pred[i]]) + "," + report.FormatFloat(float64(scores[i])) + "\n"
			if _, err := io.WriteString(w, line); err != nil {
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
		page := htmlreport.Crops{Title: "canopy eval-crops: " + cfg.Folder, Labels: labels, Confusion: t.Confusion,
			Run: [][2]string{{"crop model", cfg.CropModel}, {"crops", strconv.Itoa(rep.Crops)}, {"ranks", strconv.Itoa(rep.Ranks)}, {"loss batch size", strconv.Itoa(rep.LossBatch)},
				{"command", strings.Join(rep.Command, " ")}}}
		for _, v := range cropValues(t, labels) {
			page.Metrics = append(page.Metrics, [2]string{v.Key, formatValue(v)})
		}
		for i, smp := range folder.Samples {
			if lt := labels[t.Pred[i]]; lt != smp.Class {
				if page.WrongTotal++; len(page.Wrong) < htmlreport.MaxWrong {
					page.Wrong = append(page.Wrong, [4]string{smp.Path, smp.Class, lt, report.FormatFloat(float64(scores[i]))})
				}
			}
		}
		if n := len(folder.Dropped); n > 0 {
			page.Notes = append(page.Notes, fmt.Sprintf("%d images in sub-folders that name no class were left out, as DeepForest's FixedClassImageFolder leaves them out.", n))
		}
		s, err := stage(cfg.Out, "report.html", func(w io.Writer) error { return htmlreport.WriteCrops(w, page) })
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
	rj, err := stage(cfg.Out, "report.json", func(w io.Writer) error {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(rep)
	})
	if err != nil {
		cleanup()
		return err
	}
	return publish(cfg.Out, append(set, rj))
}
