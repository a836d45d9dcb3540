package tilerun

import (
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"io"
	"path/filepath"
	"runtime"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/htmlreport"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/testhook"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/report"
)

// stageTileHTML stages OUT/report.html for eval --tile (rank 0, with the
// rest of the set): eval's page (metrics table, PR curves, scores, box
// sizes, timeline, run) from the merged rows, and the rasters' worst
// windows drawn. Their pixels are read through GDAL from the rasters the
// run opened, only the windows drawn (never a whole raster), under the
// run's --gdal-cache bound; the page opens no other file.
func stageTileHTML(cfg Config, rep *tileReport, truthCSV []byte, rasters []tileRaster, ix tileIndex, rs *rasterSet, images []box.Image,
	merged [][]box.Detection, labels box.LabelMap, res metrics.Result, metricJSON []byte, writeSeconds float64) ([]outdir.Staged, error) {
	ec := cfg.Eval
	if ec == nil || ec.HTML == nil {
		return nil, nil
	}
	// The page reads report.json's "run" fields (eval's output.RunInfo); eval
	// --tile's report.json has its own shape, so the page gets this one.
	run := output.RunInfo{Canopy: rep.Canopy, Go: runtime.Version(), MPI: rep.MPI, Git: rep.Git, Command: rep.Command,
		Semantics: ec.Semantics.String(), IoUThreshold: ec.IoUThreshold, Detector: rep.Detector, Ranks: rep.Ranks, PerRank: rep.PerRank,
		Hosts: output.HostsOf(rep.PerRank), Inputs: map[string]report.File{"csv": {Path: cfg.CSV, SHA256: outdir.SHA256Hex(truthCSV)}}, Model: rep.Model,
		Coverage: output.Coverage{Images: len(rasters), Processed: len(rasters)}}
	rj, err := json.Marshal(struct {
		Metrics json.RawMessage `json:"metrics"`
		Run     output.RunInfo  `json:"run"`
	}{json.RawMessage(metricJSON), run})
	if err != nil {
		return nil, fmt.Errorf("jobs: report.html: %w", err)
	}
	tl := &htmlreport.Tile{Windows: make([][]htmlreport.Window, len(rasters))}
	for i, g := range ix.grids {
		for k := range g.Len() {
			w := g.At(k)
			tl.Windows[i] = append(tl.Windows[i], htmlreport.Window{X: w.X, Y: w.Y, W: w.W, H: w.H})
		}
	}
	tl.Settings = [][2]string{
		{"tile: patch size, overlap, merge IoU", fmt.Sprintf("%d, %v, %v", rep.Tile.PatchSize, rep.Tile.PatchOverlap, rep.Tile.IoU)},
		{"tile: windows", fmt.Sprintf("%d on %d rasters; %d window detections merged into %d", rep.Tile.Windows, len(rasters), rep.Tile.WindowDets, rep.Boxes)},
	}
	tl.Read = func(r, k int) (image.Image, error) {
		w := ix.grids[r].At(k)
		px, err := rs.pixels(r, w)
		if err != nil {
			return nil, err
		}
		return rgbImage(px.W, px.H, px.Pix), nil
	}
	opt := *ec.HTML
	opt.Open = func(string, string) (image.Image, error) { // never reached: windows are drawn, not files
		return nil, errors.New("eval --tile draws a raster's windows, not the file")
	}
	csv, _ := filepath.Abs(cfg.CSV)
	root := cfg.RootDir
	if root == "" {
		root = filepath.Dir(cfg.CSV)
	}
	root, _ = filepath.Abs(root)
	testhook.Stop(0, "html") // rank 0 alone writes the outputs
	s, err := outdir.Stage(cfg.Out, "report.html", func(w io.Writer) error {
		return htmlreport.WriteEval(w, htmlreport.Eval{ReportJSON: rj, Images: images, Dets: merged, Labels: labels,
			Matches: res.Matches, PR: res.PR, RootDir: root, CSV: csv, WriteSeconds: writeSeconds, Tile: tl}, opt)
	})
	if err != nil {
		return nil, err
	}
	return []outdir.Staged{s}, nil
}

// rgbImage makes an image of R, G and B planes of w×h bytes each.
func rgbImage(w, h int, planes []uint8) *image.RGBA {
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	n := w * h
	for i := 0; i < n; i++ {
		m.Pix[4*i], m.Pix[4*i+1], m.Pix[4*i+2], m.Pix[4*i+3] = planes[i], planes[n+i], planes[2*n+i], 255
	}
	return m
}
