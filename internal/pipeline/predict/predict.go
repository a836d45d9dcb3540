// Package predict is plain `canopy predict`'s data path (whole images;
// --tile is internal/tilerun's) below the command layer: rank 0 reads the
// image list, resolves the model and opens the output folder
// (internal/imagesrun), and broadcasts them; every rank loads the model,
// detects its shard, appending each finished batch to its part file; the
// detections are gathered (with the images a --resume found saved), the
// crop models classify them, and rank 0 publishes predictions.csv and
// report.json.
package predict

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/gemm"
	"github.com/canopy-hpc/canopy/infer/tile"
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
	"github.com/canopy-hpc/canopy/internal/wire"
	"github.com/canopy-hpc/canopy/mpi"
)

// Run runs the predict job on this rank: every rank detects its shard,
// appending each finished batch to its part file (as eval does), the
// detections are gathered, rank 0 writes OUT/predictions.csv (DeepForest
// prediction columns) and OUT/report.json. A signal ends it with exit 8;
// --resume continues it at any rank count from the part files.
func Run(ctx context.Context, c mpi.Comm, cfg Config) (err error) {
	cfg.BatchSize = detect.BatchOrOne(cfg.BatchSize)
	if cfg.RootDir == "" {
		if cfg.CSV != "" {
			cfg.RootDir = filepath.Dir(cfg.CSV)
		} else {
			cfg.RootDir = cfg.Images
		}
	}
	stats := collective.RankStats{Rank: c.Rank(), Host: c.Host(), LocalRank: c.LocalRank(), LocalSize: c.LocalSize(), Seconds: map[string]float64{}, SGEMM: gemm.Backend() + " " + gemm.Core()}
	t0 := time.Now()
	var pkt []byte
	var out *outdir.Run
	if c.Rank() == 0 {
		pkt, out = pack(cfg)
	}
	defer imagesrun.Finish(out, cfg.Out, &err) // rank 0 releases the folder
	in, err := unpack(c, pkt)
	if err != nil {
		return err
	}
	paths, saved := in.paths, in.saved
	mc := cfg.Model
	var given box.LabelMap
	if cfg.LabelDict != "" {
		if given, err = dataset.ParseLabelDict(cfg.LabelDict, in.labels); err != nil {
			return &errkind.Error{Code: errkind.ExitInput, Collective: true, Err: err}
		}
		mc.LabelDict = modelsel.LabelDictOf(given)
	}
	model, err := modelsel.Load(c, mc, in.modelDir, in.modelDigest, in.modelConfig)
	if err != nil {
		return err
	}
	if cfg.LabelDict != "" {
		if err := modelsel.CheckLabels(model.Labels(), &given, cfg.LabelDict, nil, ""); err != nil {
			return &errkind.Error{Code: errkind.ExitModel, Collective: true, Err: err}
		}
	}
	labels := model.Labels()
	crops, err := cropstage.Open(c, cfg.Crops, model.CropWorkers())
	if err != nil {
		return err
	}
	images := make([]box.Image, len(paths))
	costs := make([]int64, len(paths))
	for i, p := range paths {
		images[i] = box.Image{Path: p}
		costs[i] = 1
	}
	done, pst, err := imagesrun.Resumed(c, imagesrun.Resumption{Out: cfg.Out, RootDir: cfg.RootDir, Saved: saved, Images: images, Identify: true})
	if err != nil {
		return err
	}
	var todo []int
	for i := range images {
		if _, ok := done[i]; !ok {
			todo = append(todo, i)
		}
	}
	shard, err := model.RankShard(todo, costs[:len(todo)], cfg.BatchSize, c.Rank(), c.Size())
	if err != nil {
		return errkind.Collective(errkind.ExitInternal, "jobs: %w", err)
	}
	stats.Images = len(shard)
	shardPaths := make([]string, len(shard))
	for k, i := range shard {
		shardPaths[k] = paths[i]
	}
	if err := limits.Preflight(c, cfg.RootDir, shardPaths, cfg.AllowOutsideRoot, model, cfg.Model, cfg.BatchSize); err != nil {
		return err
	}
	stats.Seconds["load"] = since(t0)

	t1 := time.Now()
	det, err := model.OpenDetector(c, labels, cfg.Progress)
	if err != nil {
		return err
	}
	closer := detect.NewCloser(det, "the detector")
	defer closer.Join(&err)
	crops.OnDetector(det) // --device cuda: the crops on the detector's GPU engine
	rec, err := imagesrun.OpenRecorder(out, cfg.Out, saved, c.Rank())
	if err != nil {
		return err
	}
	// The part files keep the detector's rows; the rows of
	// predictions.csv are made from them here and from the saved ones below.
	mine, derr := detect.Shard(ctx, det, detect.Options{RootDir: cfg.RootDir, BatchSize: cfg.BatchSize, Progress: cfg.Progress, Identify: true, Global: model.GlobalBatching()},
		images, shard, c.Rank(), rec.Record)
	if err := detect.Err(rec.Close(derr), ""); err != nil {
		return err
	}
	prev := imagesrun.SavedImages(done, len(images))
	rawPrev := 0
	for _, im := range prev {
		rawPrev += len(im.Dets)
	}
	for _, im := range mine {
		stats.Detections += len(im.Dets)
	}
	if !cfg.RawRows {
		for _, set := range [][]wire.Image{mine, prev} {
			for k := range set {
				set[k].Dets = tile.AcrossClassNMS(set[k].Dets, model.Net.Opt.NMSThresh)
			}
		}
	}
	stats.Seconds["detect"] = since(t1)
	modelsel.PrintLayerTimes(cfg.Progress, det)
	model.NoteCUDNN(det)

	dets, _, err := collective.GatherMerge(c, cfg.CollectiveTimeout, time.Since(t1), mine, prev, len(images), &stats)
	if err != nil {
		return err
	}
	var table *cropstage.Table
	if crops != nil {
		t2 := time.Now()
		if table, err = cropstage.Classify(ctx, c, crops, cropstage.NewImageCrops(cfg.RootDir, paths, cfg.AllowOutsideRoot), dets); err != nil {
			return err
		}
		dets = table.DropZero(dets)
		crops.Stats.Seconds = since(t2)
		stats.Seconds["crops"] = crops.Stats.Seconds
	}
	// The detector's engine (and the crops on it) is done: a close error
	// (on a GPU, a late fault) fails the run before anything is published.
	if err := closer.Close(); err != nil {
		return err
	}
	return collective.WriteReport(c, stats, "predictions", func(allStats []collective.RankStats) error {
		rep := output.PredictReport{Canopy: output.Version, Git: output.GitRevision(), MPI: c.Implementation(), Command: cfg.Command,
			Ranks: c.Size(), Images: len(images), Model: &model.Info, Detector: det.Name(), AllowOutsideRoot: cfg.AllowOutsideRoot,
			PerRank: allStats, Rows: output.RowsAcrossClassNMS}
		if cfg.RawRows {
			rep.Rows = output.RowsRaw
		} else {
			iou := model.Net.Opt.NMSThresh
			rep.RowsIoU = &iou
		}
		for _, d := range dets {
			rep.Boxes += len(d)
		}
		for _, s := range allStats {
			rep.RawDetections += s.Detections
		}
		rep.RawDetections += rawPrev // the detector's rows of the saved images
		if cfg.Resume {
			rep.Resumed = &output.ResumeInfo{Attempt: saved.Attempt, FromParts: len(done), Computed: len(todo), RecordsDropped: pst.Dropped}
		}
		rep.SetCrops(crops)
		rep.SetConfig(cfg.RunConfig, rep.Model)
		if err := writeOutputs(cfg.Out, rep, images, dets, labels, table); err != nil {
			return err
		}
		if err := out.Commit(); err != nil { // published: the previous run goes
			return err
		}
		if cfg.Stdout != nil {
			fmt.Fprintf(cfg.Stdout, "%d detections on %d images: %s\n", rep.Boxes, len(images), filepath.Join(cfg.Out, "predictions.csv"))
		}
		return nil
	})
}

// writeOutputs stages predictions.csv and report.json (which
// records the predictions' sha256) and publishes them as one set.
func writeOutputs(dir string, rep output.PredictReport, images []box.Image, dets [][]box.Detection, labels box.LabelMap, crops *cropstage.Table) error {
	return output.PublishPredictions(dir, images, dets, labels, crops, nil, func(outputs map[string]string) any {
		rep.Outputs = outputs
		return rep
	})
}

// since is the seconds since t (a rank's stage times).
func since(t time.Time) float64 { return time.Since(t).Seconds() }
