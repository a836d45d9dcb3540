package output

import (
	"image"
	"io"
	"path/filepath"

	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/internal/confine"
	"github.com/canopy-hpc/canopy/internal/htmlreport"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/testhook"
)

// Page is where report.html goes and how it may open the images it draws.
type Page struct {
	Out     string // the output folder
	CSV     string // the truth file, shown on the page
	RootDir string // the images' root
	// Options are the page's settings (nil: no report.html).
	Options *htmlreport.Options
	// AllowOutsideRoot lets the page open images outside RootDir;
	// MaxImagePixels caps the pixels of an image it decodes (0: none).
	AllowOutsideRoot bool
	MaxImagePixels   int64
}

// StagePage stages report.html of e in p.Out (its RootDir and CSV are set
// here; the caller publishes it); nothing without p.Options.
func StagePage(p Page, e htmlreport.Eval) ([]outdir.Staged, error) {
	if p.Options == nil {
		return nil, nil
	}
	csv, _ := filepath.Abs(p.CSV)
	root, _ := filepath.Abs(p.RootDir)
	opt := *p.Options
	opt.Open = DrawnImage(p.AllowOutsideRoot, p.MaxImagePixels)
	testhook.Stop(0, "html") // rank 0 alone writes the outputs
	e.RootDir, e.CSV = root, csv
	s, err := outdir.Stage(p.Out, ReportHTML, func(w io.Writer) error { return htmlreport.WriteEval(w, e, opt) })
	if err != nil {
		return nil, err
	}
	return []outdir.Staged{s}, nil
}

// DrawnImage opens an image for the page under the pre-flight's rules, so
// report.html opens no file the run would not (a replay's CSV, or a
// compare's report, may name any path): unless outside, the path must stay
// inside the root; the file must be a regular one in a supported format
// and colour model, of at most maxPixels pixels (0: no limit), checked on
// the open file before its pixels are decoded.
func DrawnImage(outside bool, maxPixels int64) func(root, path string) (image.Image, error) {
	return func(root, p string) (image.Image, error) {
		if !outside {
			if err := confine.New(root).Check(p); err != nil {
				return nil, err
			}
		}
		return imagefile.Decode(confine.ImageFile(root, p), maxPixels)
	}
}
