package jobs

import (
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/tilerun"
)

// reportFiles are the files a run writes; any of them in --out marks a
// previous run.
var reportFiles = []string{output.ReportJSON, output.PredictionsCSV, output.ResultsCSV, output.ReportHTML, cropsFile, output.COCOTruthFile, output.COCOPredFile, tilerun.GPKGFile}

// outNames declares the commands' entries of OUT to the output folder's
// transaction (internal/outdir knows no output's name): the reports, the
// part files' folder and the per-raster outputs.
var outNames = outdir.Names{Reports: reportFiles, Others: []string{parts.Dir, tilerun.RastersDir}}
