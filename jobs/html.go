package jobs

import (
	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/htmlreport"
	"github.com/canopy-hpc/canopy/internal/limits"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/metrics"
)

// stageHTML stages OUT/report.html from report.json's bytes (rank 0,
// after the metrics; writeSeconds is its time writing the other files);
// writeOutputs publishes it with the rest.
func stageHTML(cfg EvalConfig, rj []byte, images []box.Image, dets [][]box.Detection, labels box.LabelMap, res metrics.Result, writeSeconds float64) ([]outdir.Staged, error) {
	return output.StagePage(evalPage(cfg), htmlreport.Eval{ReportJSON: rj, Images: images, Dets: dets, Labels: labels,
		Matches: res.Matches, PR: res.PR, WriteSeconds: writeSeconds})
}

// evalPage is where eval's report.html goes and what it may open: the
// images under --root-dir (or anywhere with --allow-outside-root), within
// the model's pixel cap with --model, the default cap on a replay.
func evalPage(cfg EvalConfig) output.Page {
	maxPixels := int64(limits.DefaultMaxImagePixels)
	if cfg.Model.Spec != "" {
		maxPixels = cfg.Model.MaxImagePixels
	}
	return output.Page{Out: cfg.Out, CSV: cfg.CSV, RootDir: cfg.RootDir, Options: cfg.HTML,
		AllowOutsideRoot: cfg.AllowOutsideRoot, MaxImagePixels: maxPixels}
}
