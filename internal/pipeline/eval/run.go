package eval

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/gemm"
	"github.com/canopy-hpc/canopy/infer/modelfile"
	"github.com/canopy-hpc/canopy/infer/replay"
	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/cropstage"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/detect"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/imagesrun"
	"github.com/canopy-hpc/canopy/internal/limits"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/shardmetrics"
	"github.com/canopy-hpc/canopy/internal/testhook"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/mpi"
)

// Run is `canopy eval` on this rank, its sequence of steps: read once
// and broadcast (rank 0 also opens the output folder, loadInputs), resume,
// plan, detect, gather, score, agree, report. It returns an
// *errkind.Error whose Collective flag says whether every rank returns
// the same error.
func Run(ctx context.Context, c mpi.Comm, cfg Config) (err error) {
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
	if kind, err := InputKinds(cfg, in.Inputs); err != nil {
		return &errkind.Error{Code: errkind.ExitInput, Collective: true, Err: err}
	} else if kind != box.KindBox {
		return Geometry(c, cfg, in.Inputs, out, kind)
	}
	truth, err := dataset.ParseTruthFile(cfg.CSV, in.CSV)
	if err != nil {
		return &errkind.Error{Code: errkind.ExitInput, Collective: true, Err: err}
	}
	var predRows []dataset.Row
	if cfg.Predictions != "" {
		if predRows, err = dataset.ParsePredictions(cfg.Predictions, in.Preds, dataset.Options{AllowAnyScore: cfg.AllowAnyScore}); err != nil {
			return &errkind.Error{Code: errkind.ExitInput, Collective: true, Err: err}
		}
	}
	var model *modelsel.Model
	if cfg.Model.Spec != "" {
		mc := cfg.Model
		if in.Labels != nil && modelfile.IsTorchFile(in.modelDir) {
			// a bare .pt takes its labels from --label-dict
			lm, err := dataset.ParseLabelDict(cfg.LabelDict, in.Labels)
			if err != nil {
				return &errkind.Error{Code: errkind.ExitInput, Collective: true, Err: err}
			}
			mc.LabelDict = modelsel.LabelDictOf(lm)
		}
		if model, err = modelsel.Load(c, mc, in.modelDir, in.modelDigest, in.modelConfig); err != nil {
			return err
		}
	}
	labels, err := ChooseLabels(cfg, in.Inputs, truth, predRows)
	if err != nil {
		return &errkind.Error{Code: errkind.ExitInput, Collective: true, Err: err}
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
			return &errkind.Error{Code: errkind.ExitModel, Collective: true, Err: err}
		}
	}
	images, err := truth.Resolve(cfg.CSV, labels)
	if err != nil {
		return &errkind.Error{Code: errkind.ExitInput, Collective: true, Err: err}
	}
	cropWorkers := cropstage.DefaultWorkers(cfg.Model.Threads, c.LocalSize())
	if model != nil {
		cropWorkers = model.CropWorkers()
	}
	crops, err := cropstage.Open(c, cfg.Crops, cropWorkers)
	if err != nil {
		return err
	}
	byPath, ignored, err := JoinPredictions(cfg.Predictions, truth, predRows, labels)
	if err != nil {
		return &errkind.Error{Code: errkind.ExitInput, Collective: true, Err: err}
	}
	warnings := InputWarnings(cfg, truth, predRows, ignored)
	if len(warnings) > 0 && cfg.Strict {
		return errkind.Collective(errkind.ExitInput, "jobs: --strict: %s", strings.Join(warnings, "; "))
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
	shard, err := model.RankShard(todo, costs, cfg.BatchSize, c.Rank(), c.Size())
	if err != nil {
		return errkind.Collective(errkind.ExitInternal, "jobs: %w", err)
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
	closer := detect.NewCloser(det, "the detector")
	defer closer.Join(&err)
	rec, err := imagesrun.OpenRecorder(out, cfg.Out, in.saved, c.Rank())
	if err != nil {
		return err
	}
	mine, derr := detect.Shard(ctx, det, detect.Options{RootDir: cfg.RootDir, BatchSize: cfg.BatchSize, Progress: cfg.Progress, Losses: model != nil, Identify: model != nil, Global: model.GlobalBatching()},
		images, shard, c.Rank(), rec.Record)
	if err := detect.Err(rec.Close(derr), ""); err != nil {
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
	// The detector's engine (and the crops on it) is done: a close error
	// (on a GPU, a late fault) fails the run before anything is published.
	if err := closer.Close(); err != nil {
		return err
	}

	// 6. Score.
	t3 := time.Now()
	fam := cfg.Families
	if fam == 0 {
		fam = metrics.All
	}
	metricIn := metrics.Input{Images: images, Dets: dets, Labels: labels,
		LabelValues: PandasLabelValues(in.Inputs, truth, predRows, labels)}
	if err := limits.CheckMetrics(c, metricIn, fam, cfg.Model); err != nil {
		return err
	}
	matched, err := matchShard(shard, done, metricIn, c.Size(), c.Rank())
	if err != nil {
		return errkind.Collective(errkind.ExitInternal, "jobs: %w", err)
	}
	scored, err := collective.ScoreShard(c, metricIn, matched, shardmetrics.Config{
		Options: metrics.Options{IoUThreshold: cfg.IoUThreshold, Semantics: cfg.Semantics}, Families: fam, ClassMetrics: cfg.ClassMetrics,
		Sweep: cfg.IoUSweep}, &stats)
	if err != nil {
		return err
	}
	res := scored.Result
	if model != nil {
		res.Values = append(res.Values, LossValues(losses)...)
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
		rep := Record{
			Metrics: metricJSON,
			Sweep:   sweepJSON,
			Run:     BuildRun(c, cfg, in.Inputs, labels, allStats, len(images), ignored, resumed, model),
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
			h, err := StageHTML(cfg, rj, images, dets, labels, res, since(tw))
			return append(set, h...), err
		}
		if err := WriteOutputs(cfg, rep, images, dets, labels, res, more); err != nil {
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

// matchShard is the images this rank matches: those it detected (shard),
// and its share of the images an earlier attempt finished (done), split
// by their boxes. Every rank computes the same split.
func matchShard(shard []int, done map[int]parts.Done, in metrics.Input, ranks, rank int) ([]int, error) {
	if len(done) == 0 {
		return shard, nil
	}
	prev := make([]int, 0, len(done))
	for i := range done {
		prev = append(prev, i)
	}
	slices.Sort(prev)
	costs := make([]int64, len(prev))
	for k, i := range prev {
		costs[k] = shardmetrics.Cost(in, i)
	}
	split, err := shardmetrics.Shards(costs, ranks)
	if err != nil {
		return nil, err
	}
	mine := append([]int(nil), shard...)
	for _, k := range split[rank] {
		mine = append(mine, prev[k])
	}
	return mine, nil
}
