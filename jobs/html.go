package jobs

import (
	"image"
	"io"
	"path/filepath"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/internal/htmlreport"
	"github.com/canopy-hpc/canopy/metrics"
)

// stageHTML stages OUT/report.html from report.json's bytes (rank 0,
// after the metrics; writeSeconds is its time writing the other files);
// writeOutputs publishes it with the rest.
func stageHTML(cfg EvalConfig, rj []byte, images []box.Image, dets [][]box.Detection, labels box.LabelMap, res metrics.Result, writeSeconds float64) ([]staged, error) {
	return stagePage(cfg, htmlreport.Eval{ReportJSON: rj, Images: images, Dets: dets, Labels: labels,
		Matches: res.Matches, PR: res.PR, WriteSeconds: writeSeconds})
}

// stagePage stages report.html of e (its RootDir and CSV are set here).
func stagePage(cfg EvalConfig, e htmlreport.Eval) ([]staged, error) {
	if cfg.HTML == nil {
		return nil, nil
	}
	csv, _ := filepath.Abs(cfg.CSV)
	root, _ := filepath.Abs(cfg.RootDir)
	opt := *cfg.HTML
	maxPixels := int64(DefaultMaxImagePixels)
	if cfg.Model.Spec != "" {
		maxPixels = cfg.Model.MaxImagePixels
	}
	opt.Open = drawnImage(cfg.AllowOutsideRoot, maxPixels)
	stopForTest(0, "html") // rank 0 alone writes the outputs
	e.RootDir, e.CSV = root, csv
	s, err := stage(cfg.Out, "report.html", func(w io.Writer) error { return htmlreport.WriteEval(w, e, opt) })
	if err != nil {
		return nil, err
	}
	return []staged{s}, nil
}

// drawnImage opens an image for the page under the pre-flight's rules, so
// report.html opens no file the run would not (a replay's CSV, or a
// compare's report, may name any path): unless outside, the path must stay
// inside the root; the file must be a regular one in a supported format
// and colour model, of at most maxPixels pixels (0: no limit), checked on
// the open file before its pixels are decoded.
func drawnImage(outside bool, maxPixels int64) func(root, path string) (image.Image, error) {
	return func(root, p string) (image.Image, error) {
		if !outside {
			if err := newConfiner(root).check(p); err != nil {
				return nil, err
			}
		}
		return imagefile.Decode(imageFile(root, p), maxPixels)
	}
}
