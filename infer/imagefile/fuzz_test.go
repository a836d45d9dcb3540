package imagefile

import (
	"bytes"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

// FuzzRead: any bytes as an image file: Check refuses what Read refuses for
// its header, and what Read accepts has Check's size, 3·W·H values, each
// finite and in [0, 1].
func FuzzRead(f *testing.F) {
	var buf bytes.Buffer
	png.Encode(&buf, image.NewNRGBA(image.Rect(0, 0, 3, 2)))
	f.Add(buf.Bytes())
	for _, n := range []string{"gray16.png", "rgb16.tif", "rgba16p.tif", "lzw_pred_rgb.tif", "jpeg_420.jpg", "cmyk.jpg"} {
		if b, err := os.ReadFile(filepath.Join("testdata", n)); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "x.img")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		w, h, cerr := Check(path)
		if cerr == nil && int64(w)*int64(h) > 1<<20 {
			return // a large header: decoding it is the pixel cap's business, not the fuzzer's
		}
		im, err := Read(path)
		if err != nil {
			return
		}
		if cerr != nil {
			t.Fatalf("Read accepts what Check refuses: %v", cerr)
		}
		if im.W != w || im.H != h || len(im.Pix) != 3*w*h {
			t.Fatalf("Read %dx%d with %d values, Check %dx%d", im.W, im.H, len(im.Pix), w, h)
		}
		for i, v := range im.Pix {
			if !(v >= 0 && v <= 1) {
				t.Fatalf("value %d is %v", i, v)
			}
		}
	})
}
