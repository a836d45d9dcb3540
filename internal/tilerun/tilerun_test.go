package tilerun

import (
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/gdal"
	"github.com/canopy-hpc/canopy/infer/tile"
)

// OUT/rasters/ names: from each raster's file name, with no character a
// terminal acts on (an ESC in a raster's name was an ESC in ls's output),
// short enough that the staging names fit a file name (a 250-byte raster
// name ended in exit 1, "file name too long", after the inference),
// unique ignoring case, the same for the same list.
func TestRasterNamesSafe(t *testing.T) {
	paths := []string{"a/x.tif", "b/X.png", "e\x1b[2J\nx.tif", strings.Repeat("L", 250) + ".tif", strings.Repeat("é", 200) + ".tif",
		".tif", "bad\xff.tif", "abc\u202e.tif", ".hidden.tif"}
	names := rasterNames(paths)
	dir := t.TempDir()
	seen := map[string]bool{}
	for i, n := range names {
		if seen[strings.ToLower(n)] || box.Printable(n) != n || strings.ContainsAny(n, "/\x00") || strings.HasPrefix(n, ".") {
			t.Fatalf("%q: name %q", paths[i], n)
		}
		seen[strings.ToLower(n)] = true
		f, err := os.CreateTemp(dir, "."+n+".parquet.tmp-gdal*")
		if err != nil {
			t.Fatalf("%q: name %q: %v", paths[i], n, err)
		}
		f.Close()
	}
	if names[0] != "x" || names[1] != "X-2" || names[5] != "raster" {
		t.Errorf("names %q", names)
	}
	if again := rasterNames(paths); strings.Join(again, "|") != strings.Join(names, "|") {
		t.Fatalf("not deterministic: %q, %q", names, again)
	}
}

// BenchmarkResumeHash is the cost of a raster's identity for --resume
// (docs/benchmarks.md, "--resume-hash"): CANOPY_BENCH_RASTER names the
// file (1 GiB in the recorded run; the benchmark skips without it), and
// each iteration identifies it as the run's start does, with the ends
// (first and last 64 KiB) and with the full (whole file) hash.
func BenchmarkResumeHash(b *testing.B) {
	file := os.Getenv("CANOPY_BENCH_RASTER")
	if file == "" {
		b.Skip("CANOPY_BENCH_RASTER names no file")
	}
	st, err := os.Stat(file)
	if err != nil {
		b.Fatal(err)
	}
	for _, full := range []bool{false, true} {
		name := ResumeHashEnds
		if full {
			name = ResumeHashFull
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(st.Size())
			for i := 0; i < b.N; i++ {
				if _, err := identifyRaster("r.tif", file, full); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestTileWindowPixels: the pixels the page draws of a window are the
// raster's (GDAL's R, G, B planes put back in order).
func TestTileWindowPixels(t *testing.T) {
	if !gdal.Available {
		t.Skip("built with -tags nogdal: no raster reads")
	}
	// A 320×240 PNG whose every pixel differs from its neighbours and
	// whose three channels differ from each other.
	img := image.NewRGBA(image.Rect(0, 0, 320, 240))
	for y := 0; y < 240; y++ {
		for x := 0; x < 320; x++ {
			img.SetRGBA(x, y, color.RGBA{uint8(x*7 + y), uint8(x + y*13), uint8(x*y + 3), 255})
		}
	}
	tif := filepath.Join(t.TempDir(), "r.png")
	f, err := os.Create(tif)
	if err == nil {
		err = png.Encode(f, img)
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	rs := &rasterSet{files: []string{tif}, open: map[int]*gdal.Raster{}}
	defer rs.close()
	w := tile.Window{X: 37, Y: 101, W: 200, H: 120}
	px, err := rs.pixels(0, w)
	if err != nil {
		t.Fatal(err)
	}
	got := rgbImage(px.W, px.H, px.Pix)
	for y := 0; y < w.H; y++ {
		for x := 0; x < w.W; x++ {
			r, g, b, _ := img.At(w.X+x, w.Y+y).RGBA()
			c := got.RGBAAt(x, y)
			if c.R != uint8(r>>8) || c.G != uint8(g>>8) || c.B != uint8(b>>8) || c.A != 255 {
				t.Fatalf("pixel (%d,%d): %v, raster %d %d %d", x, y, c, r>>8, g>>8, b>>8)
			}
		}
	}
}
