// Command tileparquet writes the GeoParquet file of each georeferenced
// raster of a finished predict --tile folder, from its predictions.csv and
// report.json, as OUT/rasters/<name>.parquet (<name>: the raster's file
// name without its extension): the rows of predictions.csv in their order,
// each box as predictions.gpkg holds it (gdal.BoxFeature), the CRS as
// PROJJSON (gdal.PROJJSON). It makes the files tools/geoparquet/check.py
// checks against DeepForest before predict --tile writes them itself, and
// the parquet files of runs made before it did.
//
//	go run ./cmd/tileparquet -out OUT
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/canopy-hpc/canopy/infer/gdal"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/geoparquet"
)

func main() {
	out := flag.String("out", "", "a finished predict --tile folder (predictions.csv, report.json)")
	flag.Parse()
	if *out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: tileparquet -out OUT")
		os.Exit(2)
	}
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "tileparquet:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	rep, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		return err
	}
	var r struct {
		Tile struct {
			Rasters []struct {
				Path         string      `json:"image_path"`
				CRS          string      `json:"crs"`
				GeoTransform *[6]float64 `json:"geotransform"`
			} `json:"rasters"`
		} `json:"tile"`
	}
	if err := json.Unmarshal(rep, &r); err != nil {
		return fmt.Errorf("report.json: %w", err)
	}
	if len(r.Tile.Rasters) == 0 {
		return fmt.Errorf("%s is not a predict --tile folder (report.json lists no rasters)", out)
	}
	data, err := os.ReadFile(filepath.Join(out, "predictions.csv"))
	if err != nil {
		return err
	}
	rows, err := dataset.ParsePredictions("predictions.csv", data, dataset.Options{})
	if err != nil {
		return err
	}
	byPath := map[string][]dataset.Row{}
	for _, row := range rows {
		byPath[row.Path] = append(byPath[row.Path], row)
	}
	dir := filepath.Join(out, "rasters")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	names := map[string]string{}
	for _, ras := range r.Tile.Rasters {
		if ras.CRS == "" || ras.GeoTransform == nil {
			fmt.Fprintf(os.Stderr, "tileparquet: %s has no CRS: left out\n", ras.Path)
			continue
		}
		base := filepath.Base(ras.Path)
		name := strings.TrimSuffix(base, filepath.Ext(base))
		if prev, ok := names[name]; ok {
			return fmt.Errorf("%s and %s both make %s.parquet", prev, ras.Path, name)
		}
		names[name] = ras.Path
		crs, err := gdal.PROJJSON(ras.CRS)
		if err != nil {
			return fmt.Errorf("%s: %w", ras.Path, err)
		}
		var gp []geoparquet.Row
		for _, d := range byPath[ras.Path] {
			gp = append(gp, geoparquet.Row(gdal.BoxFeature(*ras.GeoTransform, d.Box, d.Path, d.Label, d.Score)))
		}
		var b bytes.Buffer
		if err := geoparquet.Write(&b, crs, gp); err != nil {
			return fmt.Errorf("%s: %w", ras.Path, err)
		}
		p := filepath.Join(dir, name+".parquet")
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		if _, err := f.Write(b.Bytes()); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Printf("%s: %d rows\n", p, len(gp))
	}
	return nil
}
