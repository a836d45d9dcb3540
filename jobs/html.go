package jobs

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/imagefile"
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
	opt := *cfg.HTML
	maxPixels := int64(DefaultMaxImagePixels)
	if cfg.Model.Spec != "" {
		maxPixels = cfg.Model.MaxImagePixels
	}
	opt.Admit = admitImage(cfg.AllowOutsideRoot, maxPixels)
	return writeAtomic(cfg.Out, "report.html", func(w io.Writer) error {
		return htmlreport.WriteEval(w, htmlreport.Eval{ReportJSON: rj, Images: images, Dets: dets, Labels: labels,
			Matches: res.Matches, PR: res.PR, RootDir: root, CSV: csv, WriteSeconds: writeSeconds}, opt)
	})
}

// admitImage is the page's check before it opens an image to draw it: the
// pre-flight's, so report.html opens no file the run would not (a replay's
// predictions CSV, or a compare's report, may name any path). Unless
// outside, the path must stay inside the root; the header must be a
// supported image of at most maxPixels pixels (0: no limit).
func admitImage(outside bool, maxPixels int64) func(root, path string) error {
	return func(root, p string) error {
		if !outside {
			if err := newConfiner(root).check(p); err != nil {
				return err
			}
		}
		w, h, err := imagefile.Check(imageFile(root, p))
		if err != nil {
			return err
		}
		if px := int64(w) * int64(h); maxPixels > 0 && px > maxPixels {
			return fmt.Errorf("%dx%d is %d pixels, over the limit of %d", w, h, px, maxPixels)
		}
		return nil
	}
}
