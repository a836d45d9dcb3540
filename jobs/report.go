package jobs

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/cropstage"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/report"
)

type reportRecord struct {
	metrics []byte
	sweep   []byte // metrics_by_iou_threshold (nil: no --iou-sweep)
	run     output.RunInfo
	crops   *cropstage.Table // the crop models' columns of predictions.csv
}

func buildRun(c mpi.Comm, cfg EvalConfig, in inputs, labels box.LabelMap, allStats []collective.RankStats, nImages, ignored int, resumed output.ResumeInfo, model *modelsel.Model) output.RunInfo {
	r := output.RunInfo{
		Canopy:             output.Version,
		Go:                 runtime.Version(),
		MPI:                c.Implementation(),
		Git:                output.GitRevision(),
		Command:            cfg.Command,
		Semantics:          cfg.Semantics.String(),
		IoUThreshold:       cfg.IoUThreshold,
		Detector:           "replay",
		Ranks:              c.Size(),
		Inputs:             map[string]report.File{"csv": {Path: cfg.CSV, SHA256: outdir.SHA256Hex(in.csv)}, "predictions": {Path: cfg.Predictions, SHA256: outdir.SHA256Hex(in.preds)}},
		LabelMap:           modelsel.LabelMapJSON(labels),
		IgnoredPredictions: ignored,
		Resume:             resumed,
	}
	if r.Command == nil {
		r.Command = []string{}
	}
	if model != nil {
		r.Detector = model.Info.Detector
		info := model.Info
		info.LossBatchNorm = batchNormNote
		r.Model = &info
		delete(r.Inputs, "predictions")
	}
	if cfg.LabelDict != "" {
		r.Inputs["label_dict"] = report.File{Path: cfg.LabelDict, SHA256: outdir.SHA256Hex(in.labels)}
	}
	if rc := cfg.RunConfig; rc != nil {
		r.Config, r.ConfigIgnored = rc.File, rc.C.Ignored
		r.Settings = rc.finishSettings(r.Model)
	}
	for _, s := range allStats {
		r.PerRank = append(r.PerRank, s)
		r.Coverage.Processed += s.Images
	}
	r.Hosts = output.HostsOf(allStats)
	r.Coverage.Images = nImages
	r.Coverage.Processed += resumed.FromParts
	return r
}

// writeOutputs stages predictions.csv, results.csv, report.json (which
// records the other two's sha256) and what more stages from report.json's
// bytes (the COCO files, report.html; nil: nothing), and publishes them as
// one set, report.json last: a failure in any of them publishes nothing,
// and a kill before the publication leaves no new report.json.
func writeOutputs(cfg EvalConfig, rep reportRecord, images []box.Image, dets [][]box.Detection, labels box.LabelMap, res metrics.Result,
	more func(reportJSON []byte) ([]outdir.Staged, error)) error {
	var set []outdir.Staged
	fail := func(err error) error {
		for _, s := range set {
			os.Remove(filepath.Join(cfg.Out, s.Tmp))
		}
		return err
	}
	preds, err := outdir.Stage(cfg.Out, "predictions.csv", func(w io.Writer) error {
		return output.WritePredictions(w, images, dets, labels, rep.crops)
	})
	if err != nil {
		return err
	}
	set = append(set, preds)
	results, err := outdir.Stage(cfg.Out, "results.csv", func(w io.Writer) error {
		return output.WriteResults(w, images, labels, res.Matches)
	})
	if err != nil {
		return fail(err)
	}
	set = append(set, results)
	rep.run.Outputs = map[string]string{preds.Name: preds.SHA256, results.Name: results.SHA256}
	run, err := json.MarshalIndent(rep.run, " ", " ")
	if err != nil {
		return fail(fmt.Errorf("jobs: write report.json: %w", err))
	}
	body := fmt.Appendf(nil, "{\"metrics\": %s,\n", rep.metrics)
	if rep.sweep != nil {
		body = fmt.Appendf(body, " \"metrics_by_iou_threshold\": %s,\n", rep.sweep)
	}
	body = fmt.Appendf(body, " \"run\": %s}\n", run)
	if more != nil {
		extra, err := more(body)
		set = append(set, extra...)
		if err != nil {
			return fail(err)
		}
	}
	rj, err := outdir.Stage(cfg.Out, "report.json", func(w io.Writer) error {
		_, err := w.Write(body)
		return err
	})
	if err != nil {
		return fail(err)
	}
	return outdir.Publish(cfg.Out, append(set, rj))
}
