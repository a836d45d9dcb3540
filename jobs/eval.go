package jobs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/gemm"
	"github.com/canopy-hpc/canopy/infer/modelfile"
	"github.com/canopy-hpc/canopy/infer/replay"
	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/confine"
	"github.com/canopy-hpc/canopy/internal/cropstage"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/detect"
	"github.com/canopy-hpc/canopy/internal/geotruth"
	"github.com/canopy-hpc/canopy/internal/imagesrun"
	"github.com/canopy-hpc/canopy/internal/limits"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/pipeline/eval"
	"github.com/canopy-hpc/canopy/internal/shardmetrics"
	"github.com/canopy-hpc/canopy/internal/testhook"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/mpi"
)

// EvalConfig is the configuration of one `canopy eval` run (the
// pipeline's, internal/pipeline/eval). Every rank passes the same values.
type EvalConfig = eval.Config

// inputs is what rank 0 reads and broadcasts: the files' bytes (the
// pipeline's eval.Inputs), the shared-filesystem probe, and for --resume
// the part files and the attempt number (imagesrun.Saved).
type inputs struct {
	eval.Inputs
	saved imagesrun.Saved
	// modelDir and modelDigest: the model folder rank 0 resolved and the
	// sha256 of its weights (empty for replay).
	modelDir, modelDigest, modelConfig string
}

// Eval runs the eval job on this rank. It returns an *Error whose
// Collective flag says whether every rank returns the same error.
func Eval(ctx context.Context, c mpi.Comm, cfg EvalConfig) (err error) {
	cfg.BatchSize = detect.BatchOrOne(cfg.BatchSize)
	if cfg.RootDir == "" {
		cfg.RootDir = filepath.Dir(cfg.CSV)
	}
	stats := collective.RankStats{Rank: c.Rank(), Host: c.Host(), LocalRank: c.LocalRank(), LocalSize: c.LocalSize(), Seconds: map[string]float64{}}
	t0 := time.Now()

	// 1. Read once, agree everywhere.
	testhook.Stop(c.Rank(), "start")
	in, out, err := loadInputs(c, cfg)
	// rank 0: a --force run that fails (or is interrupted) before it saved
	// anything puts the previous run back
	defer imagesrun.Finish(out, cfg.Out, &err)
	if err != nil {
		return err
	}
	if kind, err := eval.InputKinds(cfg, in.Inputs); err != nil {
		return &Error{Code: ExitInput, Collective: true, Err: err}
	} else if kind != box.KindBox {
		return eval.Geometry(c, cfg, in.Inputs, out, kind)
	}
	truth, err := dataset.ParseTruthFile(cfg.CSV, in.CSV)
	if err != nil {
		return &Error{Code: ExitInput, Collective: true, Err: err}
	}
	var predRows []dataset.Row
	if cfg.Predictions != "" {
		if predRows, err = dataset.ParsePredictions(cfg.Predictions, in.Preds, dataset.Options{AllowAnyScore: cfg.AllowAnyScore}); err != nil {
			return &Error{Code: ExitInput, Collective: true, Err: err}
		}
	}
	var model *modelsel.Model
	if cfg.Model.Spec != "" {
		mc := cfg.Model
		if in.Labels != nil && modelfile.IsTorchFile(in.modelDir) {
			// a bare .pt takes its labels from --label-dict
			lm, err := dataset.ParseLabelDict(cfg.LabelDict, in.Labels)
			if err != nil {
				return &Error{Code: ExitInput, Collective: true, Err: err}
			}
			mc.LabelDict = modelsel.LabelDictOf(lm)
		}
		if model, err = modelsel.Load(c, mc, in.modelDir, in.modelDigest, in.modelConfig); err != nil {
			return err
		}
	}
	labels, err := eval.ChooseLabels(cfg, in.Inputs, truth, predRows)
	if err != nil {
		return &Error{Code: ExitInput, Collective: true, Err: err}
	}
	if model != nil {
		stats.SGEMM = gemm.Backend() + " " + gemm.Core()
		var given *box.LabelMap
		if cfg.LabelDict != "" {
			g := labels // a copy: labels becomes the model's below
			given = &g
		}
		var names []string
		for _, im := range truth.Images {
			names = append(names, im.Labels...)
		}
		labels = model.Labels()
		if err := modelsel.CheckLabels(labels, given, cfg.LabelDict, names, cfg.CSV); err != nil {
			return &Error{Code: ExitModel, Collective: true, Err: err}
		}
	}
	images, err := truth.Resolve(cfg.CSV, labels)
	if err != nil {
		return &Error{Code: ExitInput, Collective: true, Err: err}
	}
	cropWorkers := cropstage.DefaultWorkers(cfg.Model.Threads, c.LocalSize())
	if model != nil {
		cropWorkers = model.CropWorkers()
	}
	crops, err := cropstage.Open(c, cfg.Crops, cropWorkers)
	if err != nil {
		return err
	}
	byPath, ignored, err := eval.JoinPredictions(cfg.Predictions, truth, predRows, labels)
	if err != nil {
		return &Error{Code: ExitInput, Collective: true, Err: err}
	}
	warnings := eval.InputWarnings(cfg, truth, predRows, ignored)
	if len(warnings) > 0 && cfg.Strict {
		return collectiveErr(ExitInput, "jobs: --strict: %s", strings.Join(warnings, "; "))
	}
	if c.Rank() == 0 && cfg.Warnings != nil {
		for _, w := range warnings {
			collective.SayLine(cfg.Warnings, "canopy: warning: ", w)
		}
	}
	done, pst, err := imagesrun.Resumed(c, imagesrun.Resumption{Out: cfg.Out, RootDir: cfg.RootDir, Saved: in.saved, Images: images, Identify: model != nil})
	if err != nil {
		return err
	}
	stats.Seconds["load"] = since(t0)

	// 2. Plan: a pure function of (dataset, images already done, ranks).
	var todo []int
	var costs []int64
	for i, im := range images {
		if _, ok := done[i]; ok {
			continue
		}
		todo = append(todo, i)
		if model != nil {
			costs = append(costs, 1) // inference costs the same per image of a size
		} else {
			costs = append(costs, 1+int64(len(truth.Images[i].Rows))+int64(len(byPath[im.Path])))
		}
	}
	p, err := model.Plan(todo, costs, cfg.BatchSize, c.Size())
	if err != nil {
		return collectiveErr(ExitInternal, "jobs: %w", err)
	}
	shard := make([]int, len(p.Shards[c.Rank()]))
	for k, j := range p.Shards[c.Rank()] {
		shard[k] = todo[j]
	}
	stats.Images = len(shard)

	// 3. Detect this rank's shard, recording finished batches in its part file.
	t1 := time.Now()
	var det infer.Detector
	if model != nil {
		paths := make([]string, len(shard))
		for k, i := range shard {
			paths[k] = images[i].Path
		}
		if err := limits.Preflight(c, cfg.RootDir, paths, cfg.AllowOutsideRoot, model, cfg.Model, cfg.BatchSize); err != nil {
			return err
		}
		stats.Seconds["preflight"] = since(t1)
		if det, err = model.OpenDetector(c, labels, cfg.Progress); err != nil {
			return err
		}
		crops.OnDetector(det) // --device cuda: the crops on the detector's GPU engine
	} else {
		rd := replay.New(byPath)
		rd.InjectFailure(c.Rank())
		det = rd
	}
	defer det.Close()
	rec, err := imagesrun.OpenRecorder(out, cfg.Out, in.saved, c.Rank())
	if err != nil {
		return err
	}
	mine, derr := detect.Shard(ctx, det, detect.Options{RootDir: cfg.RootDir, BatchSize: cfg.BatchSize, Progress: cfg.Progress, Losses: model != nil, Identify: model != nil, Global: model.GlobalBatching()},
		images, shard, c.Rank(), rec.Record)
	if err := detectErr(rec.Close(derr), ""); err != nil {
		return err
	}
	for _, im := range mine {
		stats.Detections += len(im.Dets)
	}
	stats.Seconds["detect"] = since(t1)
	modelsel.PrintLayerTimes(cfg.Progress, det)
	model.NoteCUDNN(det)

	// 4-5. Encode, gather, merge (with the images the part files hold).
	testhook.Stop(c.Rank(), "gather")
	dets, losses, err := collective.GatherMerge(c, cfg.CollectiveTimeout, time.Since(t1), mine, imagesrun.SavedImages(done, len(images)), len(images), &stats)
	if err != nil {
		return err
	}
	resumed := output.ResumeInfo{Attempt: in.saved.Attempt, FromParts: len(done), Computed: len(todo), RecordsDropped: pst.Dropped}
	var table *cropstage.Table
	if crops != nil {
		tc := time.Now()
		paths := make([]string, len(images))
		for i := range images {
			paths[i] = images[i].Path
		}
		if table, err = cropstage.Classify(ctx, c, crops, cropstage.NewImageCrops(cfg.RootDir, paths, cfg.AllowOutsideRoot), dets); err != nil {
			return err
		}
		crops.Stats.Seconds = since(tc)
		stats.Seconds["crops"] = crops.Stats.Seconds
	}

	// 6. Score.
	t3 := time.Now()
	fam := cfg.Families
	if fam == 0 {
		fam = metrics.All
	}
	metricIn := metrics.Input{Images: images, Dets: dets, Labels: labels,
		LabelValues: eval.PandasLabelValues(in.Inputs, truth, predRows, labels)}
	if err := limits.CheckMetrics(c, metricIn, fam, cfg.Model); err != nil {
		return err
	}
	matched, err := matchShard(shard, done, metricIn, c.Size(), c.Rank())
	if err != nil {
		return collectiveErr(ExitInternal, "jobs: %w", err)
	}
	scored, err := scoreShard(c, metricIn, matched, shardmetrics.Config{
		Options: metrics.Options{IoUThreshold: cfg.IoUThreshold, Semantics: cfg.Semantics}, Families: fam, ClassMetrics: cfg.ClassMetrics,
		Sweep: cfg.IoUSweep}, &stats)
	if err != nil {
		return err
	}
	res := scored.Result
	if model != nil {
		res.Values = append(res.Values, eval.LossValues(losses)...)
	}
	metricJSON := output.MetricsJSON(res.Values)
	sweepJSON := output.SweepJSON(cfg.IoUSweep, scored.Sweep)
	stats.Seconds["metrics"] = since(t3)

	// 7. Agree.
	if err := collective.Agree(c, append(append([]byte(nil), metricJSON...), sweepJSON...)); err != nil {
		return err
	}

	// 8. Report: gather per-rank stats; rank 0 writes; all learn the outcome.
	return collective.WriteReport(c, stats, "report", func(allStats []collective.RankStats) error {
		rep := eval.Record{
			Metrics: metricJSON,
			Sweep:   sweepJSON,
			Run:     eval.BuildRun(c, cfg, in.Inputs, labels, allStats, len(images), ignored, resumed, model),
			Crops:   table,
		}
		if crops != nil {
			rep.Run.SetCrops(crops)
		}
		tw := time.Now()
		rep.Run.Warnings = warnings
		rep.Run.AllowOutsideRoot = cfg.AllowOutsideRoot && (model != nil || cfg.HTML != nil)
		more := func(rj []byte) ([]outdir.Staged, error) {
			var set []outdir.Staged
			if cfg.COCOOut {
				var err error
				if set, err = output.StageCOCO(cfg.Out, images, dets, labels); err != nil {
					return set, err
				}
			}
			h, err := eval.StageHTML(cfg, rj, images, dets, labels, res, since(tw))
			return append(set, h...), err
		}
		if err := eval.WriteOutputs(cfg, rep, images, dets, labels, res, more); err != nil {
			return err
		}
		if cfg.Stdout != nil {
			output.PrintTable(cfg.Stdout, res.Values)
			fmt.Fprintf(cfg.Stdout, "report: %s\n", filepath.Join(cfg.Out, "report.json"))
			if cfg.HTML != nil {
				fmt.Fprintf(cfg.Stdout, "html: %s\n", filepath.Join(cfg.Out, "report.html"))
			}
		}
		return nil
	})
}

// loadInputs: rank 0 checks the output folder and reads the inputs, then
// broadcasts either the bytes or its error, so every rank fails alike.
// Rank 0 also returns its hold on the output folder (nil elsewhere).
func loadInputs(c mpi.Comm, cfg EvalConfig) (inputs, *outdir.Run, error) {
	var pkt []byte
	var out *outdir.Run
	if c.Rank() == 0 {
		pkt, out = packInputs(cfg)
	}
	pkt, err := c.Bcast(pkt, 0)
	if err != nil {
		return inputs{}, out, localErr(ExitMPI, "jobs: broadcast inputs: %w", err)
	}
	in, err := unpackInputs(pkt)
	return in, out, err
}

func packInputs(cfg EvalConfig) ([]byte, *outdir.Run) {
	fail := func(code int, err error) ([]byte, *outdir.Run) {
		return append([]byte{byte(code)}, err.Error()...), nil
	}
	var in inputs
	dst := []*[]byte{&in.CSV, &in.Preds, &in.Labels}
	for i, f := range []string{cfg.CSV, cfg.Predictions, cfg.LabelDict} {
		if f == "" {
			continue
		}
		if i == 1 && cfg.PredictionsData != nil {
			in.Preds = cfg.PredictionsData
			continue
		}
		if i == 2 && cfg.LabelDictData != nil {
			in.Labels = cfg.LabelDictData
			continue
		}
		if fi, err := os.Stat(f); i == 0 && err == nil && fi.IsDir() {
			// a folder of Pascal VOC files: rank 0 makes them one CSV
			data, err := dataset.ReadVOCFolder(f)
			if err != nil {
				return fail(ExitInput, err)
			}
			*dst[i] = data
			in.TruthFolder = true
			continue
		}
		if i == 0 && geotruth.IsVector(f) {
			// points or polygons of a layer: rank 0 makes them one CSV
			data, warns, err := geotruth.GeometryCSV(f, cfg.RootDir)
			if err != nil {
				return fail(ExitInput, err)
			}
			for _, w := range warns {
				if cfg.Warnings != nil {
					collective.SayLine(cfg.Warnings, "canopy: warning: ", w)
				}
			}
			in.CSV = data
			continue
		}
		data, err := confine.ReadNamedInput(f)
		if err != nil {
			return fail(ExitInput, fmt.Errorf("jobs: %w", err))
		}
		*dst[i] = data
	}
	if cfg.Model.Spec != "" {
		dir, digest, config, err := modelsel.Resolve(cfg.Model.Spec)
		if err != nil {
			return fail(ExitModel, err)
		}
		in.modelDir, in.modelDigest, in.modelConfig = dir, digest, config
	}
	out, err := prepareOut(cfg, &in)
	if err != nil {
		return fail(Code(err), err)
	}
	fields := [][]byte{in.CSV, in.Preds, in.Labels, []byte(in.modelDir), []byte(in.modelDigest), []byte(in.modelConfig), boolByte(in.TruthFolder)}
	fields = imagesrun.PackSaved(fields, in.saved)
	return collective.PackFields([]byte{0}, fields...), out
}

func unpackInputs(pkt []byte) (inputs, error) {
	f, err := collective.UnpackPacket(pkt, 9)
	if err != nil {
		return inputs{}, err
	}
	saved, err := imagesrun.UnpackSaved(f[7:])
	if err != nil || len(f[6]) != 1 {
		return inputs{}, collectiveErr(ExitInternal, "jobs: malformed input broadcast")
	}
	in := inputs{Inputs: eval.Inputs{CSV: f[0], Preds: f[1], TruthFolder: f[6][0] == 1}, saved: saved,
		modelDir: string(f[3]), modelDigest: string(f[4]), modelConfig: string(f[5])}
	if len(f[2]) > 0 {
		in.Labels = f[2]
	}
	return in, nil
}

// evalManifest is eval's OUT/manifest.json (imagesrun.EvalRun): the
// root folder is --root-dir, default the CSV's folder.
func evalManifest(cfg EvalConfig, in inputs) imagesrun.Manifest {
	r := imagesrun.EvalRun{CSV: in.CSV, Predictions: in.Preds, LabelDict: in.Labels, RootDir: cfg.RootDir}
	if r.RootDir == "" {
		r.RootDir = filepath.Dir(cfg.CSV)
	}
	if cfg.Model.Spec != "" {
		r.Detector = imagesrun.Detector{WeightsSHA256: in.modelDigest, Settings: modelsel.DetectorSettings(cfg.Model, in.modelConfig)}
	}
	return r.Manifest()
}

// prepareOut is rank 0's output-folder step of eval, before anything is
// computed (imagesrun.Open with eval's manifest).
func prepareOut(cfg EvalConfig, in *inputs) (*outdir.Run, error) {
	o, saved, err := imagesrun.Open(imagesrun.Folder{Dir: cfg.Out, Resume: cfg.Resume, Force: cfg.Force}, evalManifest(cfg, *in))
	if err != nil {
		return nil, err
	}
	in.saved = saved
	return o, nil
}

func boolByte(b bool) []byte {
	if b {
		return []byte{1}
	}
	return []byte{0}
}
