package jobs

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/htmlreport"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/urfave/cli/v2"
)

// reportFlags are eval's flags of the extra outputs: report.html and COCO JSON.
func reportFlags() []cli.Flag {
	d := htmlreport.DefaultOptions
	return []cli.Flag{
		&cli.BoolFlag{Name: "html", Value: true, Usage: "rank 0 writes OUT/report.html after the metrics: one self-contained page (metrics, PR curves, score histograms, box sizes, per-rank timeline, worst images drawn, the run); --html=false turns it off"},
		&cli.IntFlag{Name: "html-worst", Value: d.Worst, Usage: "images drawn in report.html: half with the lowest recall, the rest with the most false positives (0: none)"},
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
