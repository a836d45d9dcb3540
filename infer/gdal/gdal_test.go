//go:build !nogdal

package gdal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/infer/imagefile"
)

// writePNG writes a w×h noise image (RGBA with alpha when alpha, 16-bit
// when deep) and returns its path.
func writePNG(t *testing.T, dir, name string, w, h int, alpha, deep bool) string {
	t.Helper()
	r := rand.New(rand.NewPCG(uint64(w), uint64(h)))
	var img image.Image
	if deep {
		m := image.NewNRGBA64(image.Rect(0, 0, w, h))
		for y := range h {
			for x := range w {
				a := uint16(65535)
				if alpha {
					a = uint16(r.IntN(65536))
				}
				m.SetNRGBA64(x, y, color.NRGBA64{uint16(r.IntN(65536)), uint16(r.IntN(65536)), uint16(r.IntN(65536)), a})
			}
		}
		img = m
	} else {
		m := image.NewNRGBA(image.Rect(0, 0, w, h))
		for y := range h {
			for x := range w {
				a := uint8(255)
				if alpha {
					a = uint8(r.IntN(256))
				}
				m.SetNRGBA(x, y, color.NRGBA{uint8(r.IntN(256)), uint8(r.IntN(256)), uint8(r.IntN(256)), a})
			}
		}
		img = m
	}
	p := filepath.Join(dir, name)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// translate runs gdal_translate (gdal-bin, installed by scripts/install-deps.sh).
func translate(t *testing.T, src, dst string, args ...string) string {
	t.Helper()
	out, err := exec.Command("gdal_translate", append(append([]string{"-q"}, args...), src, dst)...).CombinedOutput()
	if err != nil {
		t.Fatalf("gdal_translate %v: %v\n%s", args, err, out)
	}
	return dst
}

// window is the reference: the window cut from imagefile's reading of the
// whole file, as 8-bit planes.
func window(t *testing.T, ref imagefile.Image, x, y, w, h int) []uint8 {
	out := make([]uint8, 0, 3*w*h)
	for c := range 3 {
		for j := y; j < y+h; j++ {
			for i := x; i < x+w; i++ {
				v := ref.Pix[c*ref.W*ref.H+j*ref.W+i]
				out = append(out, uint8(v*255+0.5))
			}
		}
	}
	return out
}

// TestReadFormats: every format and layout reads the same windows as
// imagefile reads the source PNG (alpha dropped, 16-bit high byte).
func TestReadFormats(t *testing.T) {
	SetCacheMax(8 << 20)
	dir := t.TempDir()
	const W, H = 517, 389
	rgb := writePNG(t, dir, "rgb.png", W, H, false, false)
	rgba := writePNG(t, dir, "rgba.png", W, H, true, false)
	deep := writePNG(t, dir, "deep.png", W, H, false, true)
	deepA := writePNG(t, dir, "deepa.png", W, H, true, true)
	cases := []struct{ name, src, file string }{
		{"png rgb", rgb, rgb},
		{"png rgba", rgba, rgba},
		{"png 16-bit", deep, deep},
		{"png 16-bit rgba", deepA, deepA},
		{"tiff striped", rgb, translate(t, rgb, filepath.Join(dir, "s.tif"), "-of", "GTiff")},
		{"tiff tiled deflate", rgb, translate(t, rgb, filepath.Join(dir, "t.tif"), "-of", "GTiff", "-co", "TILED=YES", "-co", "BLOCKXSIZE=64", "-co", "BLOCKYSIZE=64", "-co", "COMPRESS=DEFLATE")},
		{"tiff lzw predictor", rgb, translate(t, rgb, filepath.Join(dir, "l.tif"), "-of", "GTiff", "-co", "COMPRESS=LZW", "-co", "PREDICTOR=2")},
		{"bigtiff tiled", rgb, translate(t, rgb, filepath.Join(dir, "b.tif"), "-of", "GTiff", "-co", "BIGTIFF=YES", "-co", "TILED=YES")},
		{"cog", rgb, translate(t, rgb, filepath.Join(dir, "c.tif"), "-of", "COG", "-co", "COMPRESS=DEFLATE", "-co", "BLOCKSIZE=128")},
		{"tiff rgba", rgba, translate(t, rgba, filepath.Join(dir, "a.tif"), "-of", "GTiff", "-co", "TILED=YES")},
		{"tiff 16-bit", deep, translate(t, deep, filepath.Join(dir, "d.tif"), "-of", "GTiff", "-co", "COMPRESS=ZSTD")},
	}
	for _, c := range cases {
		ref, err := imagefile.Read(c.src)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Open(c.file)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		in := r.Info()
		if in.Width != W || in.Height != H {
			t.Fatalf("%s: %dx%d", c.name, in.Width, in.Height)
		}
		for _, win := range [][4]int{{0, 0, W, H}, {0, 0, 100, 100}, {W - 100, H - 100, 100, 100}, {123, 45, 200, 300}, {W - 1, 0, 1, H}} {
			got, err := r.Read(win[0], win[1], win[2], win[3])
			if err != nil {
				t.Fatalf("%s %v: %v", c.name, win, err)
			}
			want := window(t, ref, win[0], win[1], win[2], win[3])
			for i := range want {
				if got.Pix[i] != want[i] {
					t.Fatalf("%s window %v: sample %d is %d, imagefile %d", c.name, win, i, got.Pix[i], want[i])
				}
			}
		}
		if _, err := r.Read(W-99, 0, 100, 10); !errors.Is(err, ErrRaster) {
			t.Fatalf("%s: a window past the edge: %v", c.name, err)
		}
		r.Close()
		if _, err := r.Read(0, 0, 1, 1); !errors.Is(err, ErrRaster) {
			t.Fatalf("%s: read after close: %v", c.name, err)
		}
	}
}

// TestReadJPEG: a JPEG is read (libjpeg, as PIL decodes it); Go's decoder
// differs by a few levels, so the check is a tolerance.
func TestReadJPEG(t *testing.T) {
	dir := t.TempDir()
	rgb := writePNG(t, dir, "rgb.png", 300, 200, false, false)
	jpg := translate(t, rgb, filepath.Join(dir, "x.jpg"), "-of", "JPEG", "-co", "QUALITY=95")
	ref, err := imagefile.Read(jpg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(jpg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := r.Read(10, 20, 150, 100)
	if err != nil {
		t.Fatal(err)
	}
	want := window(t, ref, 10, 20, 150, 100)
	bad := 0
	for i := range want {
		if d := int(got.Pix[i]) - int(want[i]); d > 4 || d < -4 {
			bad++
		}
	}
	if bad > len(want)/100 {
		t.Fatalf("%d of %d samples differ by more than 4 levels", bad, len(want))
	}
}

// TestOpenRefuses: what is not a raster canopy reads is ErrRaster, at
// Open, never a crash or a hang.
func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	rgb := writePNG(t, dir, "rgb.png", 300, 200, false, false)
	rgba := writePNG(t, dir, "rgba.png", 300, 200, true, false)
	text := filepath.Join(dir, "notes.tif")
	os.WriteFile(text, []byte("not a raster\n"), 0o644)
	tiled := translate(t, rgb, filepath.Join(dir, "t.tif"), "-of", "GTiff", "-co", "TILED=YES", "-co", "COMPRESS=DEFLATE")
	data, _ := os.ReadFile(tiled)
	cut := filepath.Join(dir, "cut.tif")
	os.WriteFile(cut, data[:len(data)*2/3], 0o644)
	cases := map[string]string{
		"missing":    filepath.Join(dir, "nope.tif"),
		"folder":     dir,
		"text":       text,
		"truncated":  cut,
		"one band":   translate(t, rgb, filepath.Join(dir, "g.tif"), "-b", "1"),
		"two bands":  translate(t, rgb, filepath.Join(dir, "g2.tif"), "-b", "1", "-b", "2"),
		"five bands": translate(t, rgba, filepath.Join(dir, "g5.tif"), "-b", "1", "-b", "2", "-b", "3", "-b", "4", "-b", "1"),
		"rgb+nir":    translate(t, rgba, filepath.Join(dir, "nir.tif"), "-co", "ALPHA=NO", "-colorinterp_4", "undefined"),
		"float32":    translate(t, rgb, filepath.Join(dir, "f.tif"), "-ot", "Float32"),
	}
	for name, p := range cases {
		r, err := Open(p)
		if !errors.Is(err, ErrRaster) {
			if r != nil {
				r.Close()
			}
			t.Errorf("%s: %v, want ErrRaster", name, err)
			continue
		}
		t.Logf("%s: %v", name, err)
	}
}

// TestGeoreferencing: CRS and geotransform come through; a plain PNG has
// none.
func TestGeoreferencing(t *testing.T) {
	dir := t.TempDir()
	rgb := writePNG(t, dir, "rgb.png", 300, 200, false, false)
	geo := translate(t, rgb, filepath.Join(dir, "geo.tif"), "-a_srs", "EPSG:32617", "-a_ullr", "404000", "3285000", "404030", "3284980")
	r, err := Open(geo)
	if err != nil {
		t.Fatal(err)
	}
	in := r.Info()
	r.Close()
	if in.CRS == "" || !in.HasTransform || in.GeoTransform != [6]float64{404000, 0.1, 0, 3285000, 0, -0.1} {
		t.Fatalf("geo: %+v", in)
	}
	r, err = Open(rgb)
	if err != nil {
		t.Fatal(err)
	}
	in = r.Info()
	r.Close()
	if in.CRS != "" || in.HasTransform {
		t.Fatalf("plain png: %+v", in)
	}
}

// patchTIFFTag sets a SHORT or LONG tag of a little-endian classic TIFF's
// first IFD to v, in place (the header only: the file's data is left as it
// was, so the header then lies).
func patchTIFFTag(t *testing.T, path string, tag uint16, v uint32) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	if string(b[:4]) != "II*\x00" {
		t.Fatalf("%s: not a little-endian classic TIFF", path)
	}
	ifd := int(le.Uint32(b[4:]))
	n := int(le.Uint16(b[ifd:]))
	for i := range n {
		e := b[ifd+2+12*i:]
		if le.Uint16(e) != tag {
			continue
		}
		switch le.Uint16(e[2:]) {
		case 3: // SHORT
			le.PutUint16(e[8:], uint16(v))
		case 4: // LONG
			le.PutUint32(e[8:], v)
		default:
			t.Fatalf("tag %d has type %d", tag, le.Uint16(e[2:]))
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("%s: no tag %d", path, tag)
}

// TestBlockSizeChecked (issue 35, item 7): a small tiled GeoTIFF whose
// header says its tiles are 32768 or 65535 pixels square is refused at
// Open from the header, naming the file, the block size and the cache,
// before GDAL reads a block (it allocated 4.27 GB, and 12.9 GB at 65535,
// to read the first pixel); the same file with its true tile size opens,
// and a true block larger than the block cache is refused the same way.
func TestBlockSizeChecked(t *testing.T) {
	SetCacheMax(DefaultCacheMax) // other tests lower it
	defer SetCacheMax(DefaultCacheMax)
	dir := t.TempDir()
	src := writePNG(t, dir, "src.png", 300, 200, false, false)
	good := translate(t, src, filepath.Join(dir, "good.tif"), "-of", "GTiff", "-co", "TILED=YES", "-co", "BLOCKXSIZE=128", "-co", "BLOCKYSIZE=128", "-co", "COMPRESS=DEFLATE")
	r, err := Open(good)
	if err != nil {
		t.Fatalf("true tile size: %v", err)
	}
	if in := r.Info(); in.BlockW != 128 || in.BlockH != 128 {
		t.Errorf("blocks %dx%d, want 128x128", in.BlockW, in.BlockH)
	}
	r.Close()
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	for _, side := range []uint32{32768, 65535} {
		p := filepath.Join(dir, fmt.Sprintf("lie%d.tif", side))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		patchTIFFTag(t, p, 322, side) // TileWidth
		patchTIFFTag(t, p, 323, side) // TileLength
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		r, err := Open(p)
		runtime.ReadMemStats(&after)
		if err == nil {
			r.Close()
			t.Fatalf("tiles of %d: opened", side)
		}
		want := fmt.Sprintf("its blocks are %dx%d pixels", side, side)
		if !errors.Is(err, ErrRaster) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "block cache of 256.00 MiB") {
			t.Errorf("tiles of %d: %v, want an ErrRaster naming the file with %q", side, err, want)
		}
		if grew := after.HeapSys - before.HeapSys; grew > 64<<20 {
			t.Errorf("tiles of %d: the Go heap grew by %d bytes", side, grew)
		}
	}
	SetCacheMax(1 << 20) // 1 MiB: a true 1024x1024 RGB block (3 MiB) is too large
	big := translate(t, src, filepath.Join(dir, "big.tif"), "-of", "GTiff", "-co", "TILED=YES", "-co", "BLOCKXSIZE=1024", "-co", "BLOCKYSIZE=1024")
	if _, err := Open(big); err == nil || !strings.Contains(err.Error(), "its blocks are 1024x1024 pixels (3 bands of 8 bits: 3.00 MiB each") || !strings.Contains(err.Error(), "block cache of 1.00 MiB") {
		t.Errorf("a true block over the cache: %v", err)
	}
	if r, err := Open(good); err != nil { // 128x128x3 = 48 KiB
		t.Errorf("a small block under a 1 MiB cache: %v", err)
	} else {
		r.Close()
	}
}
