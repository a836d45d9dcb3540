package tilerun

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/internal/outdir"
)

// TestReadPublished: doctor's reading of a tile run's folder counts a
// raster whose done record's outputs are all there with their sha256 as
// finished, one whose output changed or is gone as damaged, and one
// without a done record (or with a damaged one) as neither; a folder
// without a tile run's manifest is no tile run.
func TestReadPublished(t *testing.T) {
	dir := t.TempDir()
	if _, ok := ReadPublished(dir); ok {
		t.Fatal("a folder without a manifest read as a tile run")
	}
	os.WriteFile(filepath.Join(dir, outdir.ManifestFile), []byte(`{"job":"predict"}`), 0o644)
	if _, ok := ReadPublished(dir); ok {
		t.Fatal("plain predict's manifest read as a tile run")
	}
	m := tileManifest{Command: "eval --tile", Rasters: make([]rasterIdent, 5)}
	b, _ := json.Marshal(m)
	os.WriteFile(filepath.Join(dir, outdir.ManifestFile), b, 0o644)
	os.MkdirAll(doneDir(dir), 0o755)
	os.MkdirAll(filepath.Join(dir, RastersDir), 0o755)
	// output writes a raster's output and returns its name and sha256.
	output := func(name, text string) (string, string) {
		p := filepath.Join(RastersDir, name)
		os.WriteFile(filepath.Join(dir, p), []byte(text), 0o644)
		sum, err := fileSHA256(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		return p, sum
	}
	done := func(i int, outputs map[string]string) {
		b, _ := json.Marshal(rasterDone{Index: i, Outputs: outputs})
		os.WriteFile(filepath.Join(doneDir(dir), doneFile(i)), b, 0o644)
	}
	a, sa := output("a.csv", "image_path\n")
	ag, sag := output("a.gpkg", "gpkg")
	done(0, map[string]string{a: sa, ag: sag}) // finished
	bc, sb := output("b.csv", "image_path\n")
	done(1, map[string]string{bc: sb})
	os.WriteFile(filepath.Join(dir, bc), []byte("edited\n"), 0o644)    // damaged: changed
	done(2, map[string]string{filepath.Join(RastersDir, "c.csv"): sb}) // damaged: gone
	// raster 3: no done record; raster 4: a record naming another index
	b, _ = json.Marshal(rasterDone{Index: 7})
	os.WriteFile(filepath.Join(doneDir(dir), doneFile(4)), b, 0o644)
	p, ok := ReadPublished(dir)
	want := Published{Command: "eval --tile", Rasters: 5, Finished: 1, Damaged: 2}
	if !ok || p != want {
		t.Fatalf("ReadPublished: %+v (ok %v), want %+v", p, ok, want)
	}
}

// TestTileIndex: the global window list as arithmetic gives, for every
// global window, the raster and window that walking each raster's grid in
// turn gives (rasters of one window, of one row, and larger than a window
// on both sides).
func TestTileIndex(t *testing.T) {
	rasters := []tileRaster{{Width: 1000, Height: 700}, {Width: 50, Height: 60}, {Width: 900, Height: 200}, {Width: 401, Height: 1203}}
	s := tile.Settings{Patch: 400, Overlap: 0.1}
	ix, err := newTileIndex(rasters, s)
	if err != nil {
		t.Fatal(err)
	}
	g := 0
	for r, ras := range rasters {
		grid, err := tile.NewGrid(ras.Width, ras.Height, s)
		if err != nil {
			t.Fatal(err)
		}
		for k := range grid.Len() {
			gotR, gotW := ix.window(g)
			if gotR != r || gotW != grid.At(k) || ix.rasterOf(g) != r {
				t.Fatalf("window %d: raster %d %+v, want raster %d %+v", g, gotR, gotW, r, grid.At(k))
			}
			g++
		}
	}
	if ix.total() != g || g < 10 {
		t.Fatalf("total %d, walked %d", ix.total(), g)
	}
}
