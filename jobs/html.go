package jobs

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/htmlreport"
	"github.com/canopy-hpc/canopy/metrics"
)

// writeHTML writes OUT/report.html from the report.json just written (rank
// 0, after the metrics; writeSeconds is its time writing the other files).
func writeHTML(cfg EvalConfig, images []box.Image, dets [][]box.Detection, labels box.LabelMap, res metrics.Result, writeSeconds float64) error {
	if cfg.HTML == nil {
		return nil
	}
	rj, err := os.ReadFile(filepath.Join(cfg.Out, "report.json"))
	if err != nil {
		return fmt.Errorf("jobs: %w", err)
	}
	csv, _ := filepath.Abs(cfg.CSV)
	root, _ := filepath.Abs(cfg.RootDir)
	return writeAtomic(cfg.Out, "report.html", func(w io.Writer) error {
		return htmlreport.WriteEval(w, htmlreport.Eval{ReportJSON: rj, Images: images, Dets: dets, Labels: labels,
			Matches: res.Matches, PR: res.PR, RootDir: root, CSV: csv, WriteSeconds: writeSeconds}, *cfg.HTML)
	})
}
