package imagefile

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/gif" // registers GIF, which Read must still refuse
	"image/jpeg"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
	"github.com/canopy-hpc/canopy/internal/testsupport/shareddata"
	"golang.org/x/image/tiff"
)

// samples is the DeepForest sample data, relative to this package.
const samples = "../../../shared/data/deepforest"

// want is the DeepForest value of the 8-bit sample k.
func want(k uint8) float32 { return float32(float64(k) / 255) }

// expect is the RGB the conversion must give at (x, y) of img, found through
// At, independently of the fast paths: the stored colour for non-premultiplied
// types, PIL's un-premultiplication for color.RGBA.
func expect(img image.Image, x, y int) [3]uint8 {
	switch c := img.At(x, y).(type) {
	case color.RGBA:
		if c.A == 0 {
			return [3]uint8{}
		}
		f := func(v uint8) uint8 { return uint8(min(int(v)*255/int(c.A), 255)) }
		return [3]uint8{f(c.R), f(c.G), f(c.B)}
	default:
		n := color.NRGBAModel.Convert(c).(color.NRGBA)
		return [3]uint8{n.R, n.G, n.B}
	}
}

// compare checks im against the 8-bit RGB that rgb gives for each pixel.
func compare(t *testing.T, im Image, w, h int, rgb func(x, y int) [3]uint8) {
	t.Helper()
	if im.W != w || im.H != h || len(im.Pix) != 3*w*h {
		t.Fatalf("got %dx%d with %d values, want %dx%d with %d", im.W, im.H, len(im.Pix), w, h, 3*w*h)
	}
	bad := 0
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			c := rgb(x, y)
			for ch, k := range c {
				if got := im.Pix[(ch*h+y)*w+x]; got != want(k) {
					if bad++; bad <= 5 {
						t.Errorf("(%d,%d) channel %d: got %v (%v/255), want %v (%d/255)", x, y, ch, got, got*255, want(k), k)
					}
				}
			}
		}
	}
	if bad > 5 {
		t.Errorf("%d values differ in all", bad)
	}
}

// readBack reads path and checks Check's size against Read's.
func readBack(t *testing.T, path string) Image {
	t.Helper()
	im, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	w, h, err := Check(path)
	if err != nil {
		t.Fatal(err)
	}
	if w != im.W || h != im.H {
		t.Errorf("Check says %dx%d, Read %dx%d", w, h, im.W, im.H)
	}
	return im
}

func write(t testing.TB, name string, img image.Image, enc func(*os.File, image.Image) error) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := enc(f, img); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func encPNG(f *os.File, img image.Image) error { return png.Encode(f, img) }

func encTIFF(c tiff.CompressionType) func(*os.File, image.Image) error {
	return func(f *os.File, img image.Image) error {
		return tiff.Encode(f, img, &tiff.Options{Compression: c})
	}
}

// Test images, 37x23 (odd, not a multiple of any block size), random bytes.
const tw, th = 37, 23

func randBytes(seed uint64, p []uint8) {
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range p {
		p[i] = uint8(r.Uint32())
	}
}

func opaqueRGBA() *image.RGBA {
	m := image.NewRGBA(image.Rect(0, 0, tw, th))
	randBytes(1, m.Pix)
	for i := 3; i < len(m.Pix); i += 4 {
		m.Pix[i] = 0xff
	}
	return m
}

// translucentNRGBA has alpha below 255 (and 0) almost everywhere.
func translucentNRGBA() *image.NRGBA {
	m := image.NewNRGBA(image.Rect(0, 0, tw, th))
	randBytes(2, m.Pix)
	m.Pix[3] = 0
	return m
}

// premulRGBA is premultiplied RGBA with every alpha, and samples above
// their alpha, which a TIFF with associated alpha may hold.
func premulRGBA() *image.RGBA {
	m := image.NewRGBA(image.Rect(0, 0, tw, th))
	randBytes(3, m.Pix)
	for i := 0; i < 256; i++ {
		m.Pix[4*i+3] = uint8(i)
	}
	return m
}

func grayImage() *image.Gray {
	m := image.NewGray(image.Rect(0, 0, tw, th))
	randBytes(4, m.Pix)
	for i := 0; i < 256; i++ {
		m.Pix[i] = uint8(i)
	}
	return m
}

// palettedImage has 200 colours, one of them translucent if asked: its RGB
// must be kept as stored, as PIL keeps a palette's RGB.
func palettedImage(translucent bool) *image.Paletted {
	pal := make(color.Palette, 200)
	var c [3]uint8
	for i := range pal {
		randBytes(uint64(100+i), c[:])
		pal[i] = color.RGBA{c[0], c[1], c[2], 0xff}
	}
	if translucent {
		pal[7] = color.NRGBA{200, 100, 50, 60}
	}
	m := image.NewPaletted(image.Rect(0, 0, tw, th), pal)
	randBytes(5, m.Pix)
	for i := range m.Pix {
		m.Pix[i] %= uint8(len(pal))
	}
	m.Pix[0] = 7
	return m
}

func TestPNG(t *testing.T) {
	for _, c := range []struct {
		name string
		img  image.Image
	}{
		{"rgb", opaqueRGBA()}, // written as 8-bit truecolour
		{"rgba", translucentNRGBA()},
		{"gray", grayImage()},
		{"paletted", palettedImage(true)},
	} {
		t.Run(c.name, func(t *testing.T) {
			im := readBack(t, write(t, c.name+".png", c.img, encPNG))
			compare(t, im, tw, th, func(x, y int) [3]uint8 { return expect(c.img, x, y) })
		})
	}
	// The NRGBA expectation really is the stored bytes, not premultiplied.
	m := translucentNRGBA()
	if got := expect(m, 1, 0); got != [3]uint8(m.Pix[4:7]) || m.Pix[7] == 0xff {
		t.Fatalf("test helper: %v for %v", got, m.Pix[4:8])
	}
}

func TestTIFF(t *testing.T) {
	for _, comp := range []struct {
		name string
		c    tiff.CompressionType
	}{{"uncompressed", tiff.Uncompressed}, {"deflate", tiff.Deflate}} {
		for _, c := range []struct {
			name string
			img  image.Image
		}{
			{"rgb", opaqueRGBA()},
			// ExtraSamples 2: the stored RGB, as PIL gives it.
			{"unassociated", translucentNRGBA()},
			// ExtraSamples 1: un-premultiplied as PIL does; checked
			// against Pillow 9.4.0 on files written by this encoder.
			{"associated", premulRGBA()},
			{"gray", grayImage()},
			{"paletted", palettedImage(false)}, // a TIFF colour map has no alpha
		} {
			t.Run(comp.name+"/"+c.name, func(t *testing.T) {
				im := readBack(t, write(t, c.name+".tif", c.img, encTIFF(comp.c)))
				compare(t, im, tw, th, func(x, y int) [3]uint8 { return expect(c.img, x, y) })
			})
		}
	}
}

// fixtureRGB is the pattern of the TIFFs written by testdata/make_lzw.py.
func fixtureRGB(x, y int) [3]uint8 {
	return [3]uint8{uint8((7*x + 3*y) % 256), uint8(x * y % 256), uint8((255 - 2*x + 5*y) % 256)}
}

func TestTIFFFixtures(t *testing.T) {
	for _, name := range []string{"lzw_rgb.tif", "lzw_pred_rgb.tif", "packbits_rgb.tif"} {
		t.Run(name, func(t *testing.T) {
			compare(t, readBack(t, filepath.Join("testdata", name)), 40, 30, fixtureRGB)
		})
	}
}

// TestJPEGFixtures compares with PIL's decoding, exactly: see
// testdata/make_jpeg.py for why these files leave no room for IDCT rounding.
func TestJPEGFixtures(t *testing.T) {
	const w, h = 50, 33
	for _, ss := range []string{"444", "422", "420"} {
		t.Run(ss, func(t *testing.T) {
			path := filepath.Join("testdata", "jpeg_"+ss+".jpg")
			pil, err := os.ReadFile(filepath.Join("testdata", "jpeg_"+ss+".rgb"))
			if err != nil {
				t.Fatal(err)
			}
			pilRGB := func(x, y int) [3]uint8 { return [3]uint8(pil[3*(y*w+x):]) }
			compare(t, readBack(t, path), w, h, pilRGB)

			// The fixture must exercise what Read does beyond Go's
			// conversion (libjpeg's rounding, chroma interpolation).
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			img, err := jpeg.Decode(f)
			if err != nil {
				t.Fatal(err)
			}
			same := true
			for y := 0; y < h && same; y++ {
				for x := 0; x < w && same; x++ {
					same = expect(img, x, y) == pilRGB(x, y)
				}
			}
			if same {
				t.Error("Go's own YCbCr conversion matches PIL here: the fixture tests nothing")
			}
		})
	}
}

// TestFromImage checks the fast paths on sub-images, whose bounds do not
// start at the origin, against At.
func TestFromImage(t *testing.T) {
	ycc := func(r image.YCbCrSubsampleRatio) *image.YCbCr {
		m := image.NewYCbCr(image.Rect(-3, -5, tw-3, th-5), r)
		randBytes(6, m.Y)
		randBytes(7, m.Cb)
		randBytes(8, m.Cr)
		return m
	}
	cmyk := image.NewCMYK(image.Rect(0, 0, tw, th))
	randBytes(9, cmyk.Pix)
	sub := image.Rect(3, 2, tw-4, th-1)
	for _, c := range []struct {
		name string
		img  interface {
			image.Image
			SubImage(image.Rectangle) image.Image
		}
	}{
		{"nrgba", translucentNRGBA()},
		{"rgba", premulRGBA()},
		{"gray", grayImage()},
		{"paletted", palettedImage(true)},
		{"ycbcr444", ycc(image.YCbCrSubsampleRatio444)},
		{"ycbcr422", ycc(image.YCbCrSubsampleRatio422)},
		{"ycbcr420", ycc(image.YCbCrSubsampleRatio420)},
		{"ycbcr440", ycc(image.YCbCrSubsampleRatio440)},
		{"ycbcr411", ycc(image.YCbCrSubsampleRatio411)},
		{"ycbcr410", ycc(image.YCbCrSubsampleRatio410)},
		{"cmyk", cmyk}, // the generic path
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, img := range []image.Image{c.img, c.img.SubImage(sub)} {
				im, err := FromImage(img)
				if err != nil {
					t.Fatal(err)
				}
				b := img.Bounds()
				compare(t, im, b.Dx(), b.Dy(), func(x, y int) [3]uint8 { return expect(img, b.Min.X+x, b.Min.Y+y) })
			}
		})
	}
	if _, err := FromImage(image.NewRGBA(image.Rect(0, 0, 0, 5))); err == nil {
		t.Error("empty image accepted")
	}
}

// badFile checks that err names path and wraps ErrImage, and, if set, cause.
func badFile(t *testing.T, what string, err error, path string, cause error, text string) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: no error", what)
	case !errors.Is(err, ErrImage):
		t.Errorf("%s: %v does not wrap ErrImage", what, err)
	case !strings.HasPrefix(err.Error(), "imagefile: "+path+": "):
		t.Errorf("%s: %q does not start with imagefile: and the path", what, err)
	case cause != nil && !errors.Is(err, cause):
		t.Errorf("%s: %v does not wrap %v", what, err, cause)
	case !strings.Contains(err.Error(), text):
		t.Errorf("%s: %q does not say %q", what, err, text)
	}
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	if err := png.Encode(&buf, opaqueRGBA()); err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "truncated.png")
	header := filepath.Join(dir, "header.png") // cut inside the IHDR chunk
	text := filepath.Join(dir, "notes.png")
	missing := filepath.Join(dir, "missing.tif")
	gifFile := filepath.Join(dir, "image.gif")
	pal := image.NewPaletted(image.Rect(0, 0, 4, 4), color.Palette{color.Black, color.White})
	var gbuf bytes.Buffer
	if err := gif.Encode(&gbuf, pal, nil); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		truncated: buf.Bytes()[:buf.Len()/2],
		header:    buf.Bytes()[:20],
		text:      []byte("image_path,xmin,ymin,xmax,ymax,label\n"),
		gifFile:   gbuf.Bytes(),
	} {
		if err := os.WriteFile(name, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	_, err := Read(truncated)
	badFile(t, "Read truncated", err, truncated, nil, "not enough pixel data")
	if _, _, err := Check(truncated); err != nil { // the header is whole
		t.Errorf("Check truncated: %v", err)
	}
	_, _, err = Check(header)
	badFile(t, "Check header", err, header, nil, "EOF")
	for _, c := range []struct {
		path  string
		cause error
		text  string
	}{
		{text, image.ErrFormat, "unknown format"},
		{missing, os.ErrNotExist, "no such file"},
		{gifFile, nil, `unsupported format "gif"`},
	} {
		_, err := Read(c.path)
		badFile(t, "Read "+filepath.Base(c.path), err, c.path, c.cause, c.text)
		_, _, err = Check(c.path)
		badFile(t, "Check "+filepath.Base(c.path), err, c.path, c.cause, c.text)
	}

	cmyk := filepath.Join("testdata", "cmyk.jpg")
	_, err = Read(cmyk)
	badFile(t, "Read cmyk.jpg", err, cmyk, nil, "unsupported CMYK colour model")
	_, _, err = Check(cmyk)
	badFile(t, "Check cmyk.jpg", err, cmyk, nil, "unsupported CMYK colour model")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestSamples reads DeepForest's sample images and compares them with what
// PIL gives (testdata/pil_sums.json, from testdata/make_pil_sums.py).
func TestSamples(t *testing.T) {
	shareddata.Need(t, samples, "the DeepForest sample images")
	var ref struct {
		Pillow string
		Files  []struct {
			Name          string
			Width, Height int
			Sum8          [3]int64
			Sum           [3]float64
			SHA256        string
		}
	}
	if err := json.Unmarshal(must(os.ReadFile("testdata/pil_sums.json")), &ref); err != nil {
		t.Fatal(err)
	}
	byName := map[string]int{}
	for i, f := range ref.Files {
		byName[f.Name] = i
	}
	var files []string
	for _, ext := range []string{"*.tif", "*.png", "*.jpg"} {
		files = append(files, must(filepath.Glob(filepath.Join(samples, ext)))...)
	}
	if len(files) == 0 {
		t.Fatalf("no .tif, .png or .jpg in %s", samples)
	}
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			im := readBack(t, path)
			n := im.W * im.H
			var sum8 [3]int64
			var sum [3]float64
			rgb := make([]byte, 3*n)
			for i, v := range im.Pix {
				if !(v >= 0 && v <= 1) {
					t.Fatalf("value %v at %d outside [0,1]", v, i)
				}
				k := uint8(math.Round(float64(v) * 255))
				if v != want(k) {
					t.Fatalf("value %v at %d is not k/255", v, i)
				}
				ch := i / n
				sum8[ch] += int64(k)
				sum[ch] += float64(v)
				rgb[3*(i%n)+ch] = k
			}
			i, ok := byName[name]
			if !ok {
				t.Skipf("%s is not in testdata/pil_sums.json", name)
			}
			r := ref.Files[i]
			if im.W != r.Width || im.H != r.Height {
				t.Fatalf("%dx%d, PIL %dx%d", im.W, im.H, r.Width, r.Height)
			}
			hash := sha256.Sum256(rgb)
			if strings.HasSuffix(name, ".jpg") {
				// Go's IDCT differs from libjpeg's by ±1 in some
				// samples: 2.7% of them, none by more than 3/255,
				// sums within 2e-6 relative, on the sample JPEG.
				for ch := range 3 {
					if d := math.Abs(float64(sum8[ch]-r.Sum8[ch])) / float64(r.Sum8[ch]); approx.Far(d, 1e-5) {
						t.Errorf("channel %d: sum %d, PIL %d (relative %.2g)", ch, sum8[ch], r.Sum8[ch], d)
					}
				}
				return
			}
			if got := hex.EncodeToString(hash[:]); got != r.SHA256 {
				t.Errorf("RGB bytes differ from PIL %s's: sha256 %s, want %s", ref.Pillow, got, r.SHA256)
			}
			for ch := range 3 {
				if sum8[ch] != r.Sum8[ch] {
					t.Errorf("channel %d: sum %d, PIL %d", ch, sum8[ch], r.Sum8[ch])
				}
				if d := math.Abs(sum[ch]-r.Sum[ch]) / r.Sum[ch]; approx.Far(d, 1e-9) {
					t.Errorf("channel %d: float sum %v, PIL %v (relative %.2g)", ch, sum[ch], r.Sum[ch], d)
				}
			}
		})
	}
}

func BenchmarkRead(b *testing.B) {
	const w, h = 2000, 2000
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	randBytes(10, m.Pix)
	for y := 0; y < h; y++ { // smooth, so it compresses like a photograph
		for x := 0; x < w; x++ {
			p := m.Pix[m.PixOffset(x, y):]
			p[0], p[1], p[2], p[3] = uint8(x/8)+p[0]%8, uint8(y/8)+p[1]%8, uint8((x+y)/16)+p[2]%8, 0xff
		}
	}
	path := write(b, "bench.png", m, encPNG)
	b.SetBytes(w * h * 3)
	b.ResetTimer()
	for b.Loop() {
		if _, err := Read(path); err != nil {
			b.Fatal(err)
		}
	}
}

func ExampleRead() {
	im, err := Read("testdata/lzw_rgb.tif")
	if err != nil {
		fmt.Println(err)
		return
	}
	n := im.W * im.H
	fmt.Println(im.W, im.H, im.Pix[0], im.Pix[n+1], im.Pix[2*n])
	// Output: 40 30 0 0 1
}

// 16-bit PNG and TIFF files read as Pillow 13 reads them with
// convert("RGB") (testdata/pil_16bit.json, tools/imagefile/make_16bit.py),
// and the one Pillow cannot identify is refused in Pillow's words.
func TestSixteenBitAsPillow(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "pil_16bit.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Meta  map[string]any
		Cases []struct {
			File, SHA256, Mode, RGB, Error string
			Size                           []int
		}
	}
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	if fx.Meta["pillow"] == nil || len(fx.Cases) < 10 {
		t.Fatalf("fixture without Pillow's version or cases: %v", fx.Meta)
	}
	for _, c := range fx.Cases {
		path := filepath.Join("testdata", c.File)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if s := sha256.Sum256(data); hex.EncodeToString(s[:]) != c.SHA256 {
			t.Fatalf("%s is not the file Pillow read", c.File)
		}
		im, err := Read(path)
		_, _, cerr := Check(path)
		if c.Error != "" {
			if err == nil || cerr == nil || !strings.Contains(c.Error, "cannot identify image file") ||
				!strings.Contains(err.Error(), "cannot identify image file") || !errors.Is(err, ErrImage) {
				t.Errorf("%s: Pillow says %q, canopy %v / %v", c.File, c.Error, err, cerr)
			}
			continue
		}
		if err != nil || cerr != nil {
			t.Errorf("%s (Pillow mode %s): %v / %v", c.File, c.Mode, err, cerr)
			continue
		}
		rgb, _ := hex.DecodeString(c.RGB)
		w, h := c.Size[0], c.Size[1]
		compare(t, im, w, h, func(x, y int) [3]uint8 {
			p := rgb[3*(y*w+x):]
			return [3]uint8{p[0], p[1], p[2]}
		})
	}
}

// BenchmarkIdentity: what --resume's image identity costs against reading
// the same image (a lower bound of what detecting it costs): Identify
// (size, mtime and sha256 of the bytes) and Read (decode to float RGB) of
// DeepForest's OSBS_029.png (400×400, 412 KB) and a 2000×2000 PNG. The
// figures and the decision are in docs/benchmarks.md.
func BenchmarkIdentity(b *testing.B) {
	big := image.NewRGBA(image.Rect(0, 0, 2000, 2000))
	randBytes(10, big.Pix)
	files := map[string]string{
		"osbs029": filepath.Join(samples, "OSBS_029.png"),
		"2000px":  write(b, "big.png", big, encPNG),
	}
	for _, name := range []string{"osbs029", "2000px"} {
		path := files[name]
		st, err := os.Stat(path)
		if err != nil {
			b.Logf("%s: %v (DeepForest's sample data is absent)", name, err)
			continue
		}
		b.Run(name+"/identify", func(b *testing.B) {
			b.SetBytes(st.Size())
			for b.Loop() {
				if _, _, _, err := Identify(path); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/read", func(b *testing.B) {
			b.SetBytes(st.Size())
			for b.Loop() {
				if _, err := Read(path); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Identify reports size, modification time and the sha256 of the bytes;
// it refuses what Read refuses to open (a FIFO, a device, a folder).
func TestIdentify(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.png")
	os.WriteFile(p, []byte("hello"), 0o644)
	when := time.Unix(1700000000, 123456789)
	os.Chtimes(p, when, when)
	size, mtime, sum, err := Identify(p)
	if err != nil || size != 5 || mtime != when.UnixNano() || sum != sha256.Sum256([]byte("hello")) {
		t.Fatalf("%d %d %x %v", size, mtime, sum, err)
	}
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{fifo, "/dev/zero", t.TempDir()} {
		if _, _, _, err := Identify(bad); !errors.Is(err, ErrImage) || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
