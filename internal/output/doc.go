// Package output holds canopy's writers: what a run publishes in --out,
// byte for byte. The metrics as JSON and as Lightning's table
// (MetricsJSON, SweepJSON, PrintTable), predictions.csv and results.csv
// for boxes (WritePredictions, WriteResults) and for points and polygons
// (WriteGeoPredictions, WriteGeoResults, WKT), the --coco-out files
// (StageCOCO), report.html's glue (StagePage, DrawnImage, GeoPage) and
// report.json's run record (RunInfo). It knows nothing of ranks or of the
// commands: a pipeline hands it typed values and stages what it returns
// through internal/outdir.
package output
