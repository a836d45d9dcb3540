package output

import (
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/parts"
)

// More of the files and folders a run publishes in --out.
const (
	CropsCSV        = "crops.csv"        // eval-crops' per-crop table
	PredictionsGPKG = "predictions.gpkg" // a tile run's boxes with their CRS
	RastersDir      = "rasters"          // a tile run's per-raster outputs
)

// Names declares every command's entries of OUT to the output folder's
// transaction (internal/outdir knows no output's name): the reports (any
// of them in --out marks a previous run), the part files' folder and the
// per-raster outputs.
var Names = outdir.Names{
	Reports: []string{ReportJSON, PredictionsCSV, ResultsCSV, ReportHTML, CropsCSV, COCOTruthFile, COCOPredFile, PredictionsGPKG},
	Others:  []string{parts.Dir, RastersDir},
}
