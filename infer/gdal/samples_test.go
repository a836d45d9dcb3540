//go:build !nogdal

package gdal

import (
	"bytes"
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoDataAlpha: the nodata values and the alpha plane come through as
// GDAL has them (gdal_translate -a_nodata, an RGBA band, a TIFF mask), and
// ReadSamples' RGB8 is Read's window.
func TestNoDataAlpha(t *testing.T) {
	dir := t.TempDir()
	const W, H = 211, 157
	rgb := writePNG(t, dir, "rgb.png", W, H, false, false)
	rgba := writePNG(t, dir, "rgba.png", W, H, true, false)
	type want struct {
		nodata    bool
		value     float64
		alpha     bool
		alphaFrom string // the PNG whose alpha the plane's zeros follow
	}
	cases := []struct {
		name, file string
		want
	}{
		{"png rgb", rgb, want{}},
		{"tiff nodata 7", translate(t, rgb, filepath.Join(dir, "n.tif"), "-a_nodata", "7"), want{nodata: true, value: 7}},
		{"tiff nodata 0, tiled", translate(t, rgb, filepath.Join(dir, "n0.tif"), "-a_nodata", "0", "-co", "TILED=YES"), want{nodata: true}},
		{"png rgba", rgba, want{alpha: true, alphaFrom: rgba}},
		{"tiff rgba", translate(t, rgba, filepath.Join(dir, "a.tif"), "-co", "TILED=YES"), want{alpha: true, alphaFrom: rgba}},
		{"tiff rgba and nodata", translate(t, rgba, filepath.Join(dir, "an.tif"), "-a_nodata", "255"), want{nodata: true, value: 255, alpha: true, alphaFrom: rgba}},
		{"tiff rgb with a mask", translate(t, rgba, filepath.Join(dir, "m.tif"), "-b", "1", "-b", "2", "-b", "3", "-mask", "4"), want{alpha: true, alphaFrom: rgba}},
	}
	for _, c := range cases {
		r, err := Open(c.file)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		in := r.Info()
		if in.HasNoData != [3]bool{c.nodata, c.nodata, c.nodata} || (c.nodata && in.NoData != [3]float64{c.value, c.value, c.value}) {
			t.Errorf("%s: nodata %v %v, want %v %v", c.name, in.HasNoData, in.NoData, c.nodata, c.value)
		}
		if in.Alpha != c.alpha {
			t.Errorf("%s: alpha %v, want %v", c.name, in.Alpha, c.alpha)
		}
		if c.alphaFrom != "" {
			// The reference: the PNG's band 4 (imagefile drops alpha).
			a, err := Open(c.alphaFrom)
			if err != nil {
				t.Fatal(err)
			}
			full, err := a.ReadSamples(0, 0, W, H)
			a.Close()
			if err != nil {
				t.Fatal(err)
			}
			for _, win := range [][4]int{{0, 0, W, H}, {W - 50, H - 40, 50, 40}, {17, 3, 90, 120}} {
				s, err := r.ReadSamples(win[0], win[1], win[2], win[3])
				if err != nil {
					t.Fatalf("%s %v: %v", c.name, win, err)
				}
				if len(s.Alpha) != win[2]*win[3] {
					t.Fatalf("%s %v: alpha of %d samples", c.name, win, len(s.Alpha))
				}
				zeros := 0
				for j := range win[3] {
					for i := range win[2] {
						got, src := s.Alpha[j*win[2]+i], full.Alpha[(win[1]+j)*W+win[0]+i]
						if (got == 0) != (src == 0) {
							t.Fatalf("%s %v: alpha at (%d,%d) is %d, the PNG's %d", c.name, win, i, j, got, src)
						}
						if got == 0 {
							zeros++
						}
					}
				}
				if win[2] == W && zeros == 0 {
					t.Fatalf("%s: no transparent pixel to test", c.name)
				}
			}
		}
		for _, win := range [][4]int{{0, 0, W, H}, {W - 1, H - 1, 1, 1}, {5, 6, 70, 80}} {
			s, err := r.ReadSamples(win[0], win[1], win[2], win[3])
			if err != nil {
				t.Fatalf("%s %v: %v", c.name, win, err)
			}
			if !c.alpha && s.Alpha != nil {
				t.Errorf("%s: an alpha plane without alpha", c.name)
			}
			if (s.Pix16 != nil) != (in.Bits == 16) || (s.Pix8 != nil) != (in.Bits == 8) {
				t.Fatalf("%s: %d-bit raster, Pix8 %d, Pix16 %d samples", c.name, in.Bits, len(s.Pix8), len(s.Pix16))
			}
			rd, err := r.Read(win[0], win[1], win[2], win[3])
			if err != nil {
				t.Fatal(err)
			}
			if got := s.RGB8(); got.W != rd.W || got.H != rd.H || !bytes.Equal(got.Pix, rd.Pix) {
				t.Fatalf("%s %v: ReadSamples' RGB8 differs from Read", c.name, win)
			}
		}
		if _, err := r.ReadSamples(W-9, 0, 10, 1); !errors.Is(err, ErrRaster) {
			t.Errorf("%s: a window past the edge: %v", c.name, err)
		}
		r.Close()
		if _, err := r.ReadSamples(0, 0, 1, 1); !errors.Is(err, ErrRaster) {
			t.Errorf("%s: read after close: %v", c.name, err)
		}
	}
}

// TestAlpha16: a 16-bit alpha plane is read as bytes that saturate at
// 255, and 0 stays 0.
func TestAlpha16(t *testing.T) {
	levels := []uint16{0, 1, 255, 256, 40000, 65535}
	m := image.NewNRGBA64(image.Rect(0, 0, len(levels), 2))
	for i, a := range levels {
		m.SetNRGBA64(i, 0, color.NRGBA64{uint16(i * 1000), 2, 3, a})
		m.SetNRGBA64(i, 1, color.NRGBA64{4, 5, 6, 65535 - a})
	}
	p := filepath.Join(t.TempDir(), "a16.png")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := png.Encode(f, m); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if in := r.Info(); !in.Alpha || in.Bits != 16 {
		t.Fatalf("info %+v", in)
	}
	s, err := r.ReadSamples(0, 0, len(levels), 2)
	if err != nil {
		t.Fatal(err)
	}
	for j := range 2 {
		for i, a := range levels {
			if j == 1 {
				a = 65535 - a
			}
			if got := s.Alpha[j*len(levels)+i]; got != uint8(min(a, 255)) {
				t.Errorf("alpha %d read as %d", a, got)
			}
		}
	}
	if s.Pix16[len(levels)-1] != uint16((len(levels)-1)*1000) {
		t.Errorf("16-bit samples %v", s.Pix16[:len(levels)])
	}
}

// TestPROJJSON: a raster's WKT CRS as one-line PROJJSON naming its EPSG
// code; no CRS gives nil; what is not a CRS is an error.
func TestPROJJSON(t *testing.T) {
	dir := t.TempDir()
	rgb := writePNG(t, dir, "rgb.png", 30, 20, false, false)
	for _, c := range []struct {
		srs, typ string
		code     float64
	}{{"EPSG:32617", "ProjectedCRS", 32617}, {"EPSG:3857", "ProjectedCRS", 3857}, {"EPSG:4326", "GeographicCRS", 4326}} {
		geo := translate(t, rgb, filepath.Join(dir, strings.ReplaceAll(c.srs, ":", "")+".tif"), "-a_srs", c.srs, "-a_ullr", "0", "20", "30", "0")
		r, err := Open(geo)
		if err != nil {
			t.Fatal(err)
		}
		wkt := r.Info().CRS
		r.Close()
		p, err := PROJJSON(wkt)
		if err != nil {
			t.Fatalf("%s: %v", c.srs, err)
		}
		var m struct {
			Type string `json:"type"`
			ID   struct {
				Authority string  `json:"authority"`
				Code      float64 `json:"code"`
			} `json:"id"`
		}
		if err := json.Unmarshal(p, &m); err != nil {
			t.Fatalf("%s: %v: %s", c.srs, err, p)
		}
		if m.Type != c.typ || m.ID.Authority != "EPSG" || m.ID.Code != c.code || bytes.ContainsRune(p, '\n') {
			t.Errorf("%s: %s", c.srs, p)
		}
		q, _ := PROJJSON(wkt)
		if !bytes.Equal(p, q) {
			t.Errorf("%s: two calls differ", c.srs)
		}
	}
	if p, err := PROJJSON(""); p != nil || err != nil {
		t.Errorf("no CRS: %q, %v", p, err)
	}
	if _, err := PROJJSON("GEOGCS[broken"); err == nil || !strings.Contains(err.Error(), "PROJJSON") {
		t.Errorf("a broken WKT: %v", err)
	}
}
