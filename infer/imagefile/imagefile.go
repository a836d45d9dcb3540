// Package imagefile reads image files into the tensors DeepForest feeds its
// RetinaNet: RGB, float32, channel-major (CHW), values in [0, 1].
//
// DeepForest opens an image with PIL, Image.open(path).convert("RGB"), and
// scales it with numpy, (a / 255.0).astype("float32"), so the 8-bit sample k
// becomes float32(float64(k)/255), the correctly rounded k/255. This package
// reproduces that conversion:
//
//   - the format is found from the file's content (PNG, JPEG or TIFF; the
//     TIFF reader handles uncompressed, LZW, Deflate and PackBits data), not
//     from its extension;
//   - alpha is dropped without premultiplying: the RGB of a PNG or of a TIFF
//     with unassociated alpha is the stored samples; a TIFF with associated
//     (premultiplied) alpha is un-premultiplied as PIL does, min(255, c*255/a)
//     in integers, 0 where a is 0;
//   - grayscale is replicated to three channels and paletted images are
//     expanded through their palette, as PIL's convert does;
//   - 16-bit images are read as Pillow reads them (checked against Pillow
//     13 by testdata/pil_16bit.json): 16-bit grayscale (PIL's I;16, PNG or
//     TIFF) is clipped, min(v, 255); 16-bit RGB and RGBA (PNG or TIFF) and
//     16-bit gray+alpha PNG keep the high byte, v>>8; a TIFF with
//     associated alpha is then un-premultiplied in 8 bits, as above. A
//     16-bit gray+alpha TIFF, which Pillow cannot identify, is refused with
//     Pillow's words;
//   - other colour models (CMYK JPEG) are refused.
//
// JPEG files are decoded by image/jpeg, and converted to RGB as libjpeg
// converts them for PIL: 4:2:2 and 4:2:0 chroma is interpolated ("fancy
// upsampling") rather than replicated, and the YCbCr to RGB arithmetic is
// libjpeg's. Go's inverse DCT still differs from libjpeg's by ±1 in a few
// samples, which can move a few per cent of the RGB values by 1 to 3 levels:
// JPEG parity with PIL is within that, PNG and TIFF parity is exact. 4:4:0
// and 4:1:1 chroma, which libjpeg interpolates too, is replicated here.
//
// As with PIL's Image.open, EXIF orientation is not applied, and a TIFF's
// first image is read.
package imagefile

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/color"
	"io"
	"os"
	"syscall"

	// Decoders, registered with package image.
	_ "image/jpeg"
	_ "image/png"

	"golang.org/x/image/tiff"
)

// ErrImage is wrapped by every error of this package: a missing or
// unreadable file, an unknown format, a corrupt or unsupported image.
var ErrImage = errors.New("bad image")

// Image is an RGB image in DeepForest's layout: Pix holds the R plane, then
// the G plane, then the B plane, each H rows of W values, top row first.
// Values are float32(float64(k)/255) for the 8-bit sample k.
type Image struct {
	W, H int
	Pix  []float32
}

// formats are the image.RegisterFormat names this package accepts. Other
// packages of the program may register more (GIF, BMP); they are refused.
var formats = map[string]bool{"png": true, "jpeg": true, "tiff": true}

var unit [256]float32 // unit[k] = float32(float64(k)/255)

func init() {
	for k := range unit {
		unit[k] = float32(float64(k) / 255)
	}
}

// Read decodes the PNG, JPEG or TIFF file at path into an Image.
// Errors name the path and wrap ErrImage, and the cause: a missing file
// also satisfies errors.Is(err, os.ErrNotExist).
func Read(path string) (Image, error) {
	f, err := openRegular(path)
	if err != nil {
		return Image{}, wrap(path, err)
	}
	defer f.Close()
	if _, err := config(f); err != nil {
		return Image{}, wrap(path, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Image{}, wrap(path, err)
	}
	img, format, err := image.Decode(f)
	if err != nil {
		return Image{}, wrap(path, err)
	}
	if m, ok := img.(*image.YCbCr); ok && format == "jpeg" && m.Rect.Min == (image.Point{}) {
		return fromJPEG(m), nil
	}
	im, err := FromImage(img)
	if err != nil {
		return Image{}, wrap(path, err)
	}
	return im, nil
}

// Decode opens the file at path as Read does (a regular file, a supported
// format and colour model) and decodes it as a Go image, for drawing. The
// header is checked against maxPixels (0: no limit) on the same open file
// before any pixel is decoded.
func Decode(path string, maxPixels int64) (image.Image, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, wrap(path, err)
	}
	defer f.Close()
	c, err := config(f)
	if err != nil {
		return nil, wrap(path, err)
	}
	if px := int64(c.Width) * int64(c.Height); maxPixels > 0 && px > maxPixels {
		return nil, wrap(path, fmt.Errorf("%dx%d is %d pixels, over the limit of %d", c.Width, c.Height, px, maxPixels))
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, wrap(path, err)
	}
	img, _, err := image.Decode(f)
	if err != nil {
		return nil, wrap(path, err)
	}
	return img, nil
}

// Check reads only the header of the file at path and reports the image's
// size, or an error, wrapping ErrImage, if Read would refuse the file for
// its format or colour model. It does not detect corrupt pixel data.
func Check(path string) (w, h int, err error) {
	f, err := openRegular(path)
	if err != nil {
		return 0, 0, wrap(path, err)
	}
	defer f.Close()
	c, err := config(f)
	if err != nil {
		return 0, 0, wrap(path, err)
	}
	return c.Width, c.Height, nil
}

// Identify reports what identifies the regular file at path: its size,
// its modification time in nanoseconds and the sha256 of its bytes (at most
// size bytes are read; a file that changes meanwhile is an error). It
// opens the file as Read does.
func Identify(path string) (size, mtimeNS int64, sum [32]byte, err error) {
	f, err := openRegular(path)
	if err != nil {
		return 0, 0, sum, wrap(path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, 0, sum, wrap(path, err)
	}
	h := sha256.New()
	if _, err := io.CopyN(h, f, st.Size()); err != nil {
		return 0, 0, sum, wrap(path, fmt.Errorf("read %d bytes: %w", st.Size(), err))
	}
	if st2, err := f.Stat(); err != nil || st2.Size() != st.Size() || !st2.ModTime().Equal(st.ModTime()) {
		return 0, 0, sum, wrap(path, errors.New("the file changed while it was read"))
	}
	copy(sum[:], h.Sum(nil))
	return st.Size(), st.ModTime().UnixNano(), sum, nil
}

// OpenRegular opens path for reading as every reader of this package
// does: without blocking, and only a regular file (a named pipe, a device,
// a directory or a socket is refused, the error naming which).
func OpenRegular(path string) (*os.File, error) { return openRegular(path) }

// openRegular opens path for reading without blocking (a FIFO would block
// a plain open until a writer comes) and refuses anything but a regular
// file: a named pipe, a device, a directory or a socket.
func openRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if m := st.Mode(); !m.IsRegular() {
		f.Close()
		return nil, fmt.Errorf("not a regular file (%s)", fileKind(m))
	}
	return f, nil
}

func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return m.Type().String()
}

func wrap(path string, err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Path == path {
		err = pe.Err // the path is in our prefix already
	}
	return fmt.Errorf("imagefile: %s: %w: %w", path, ErrImage, err)
}

// config decodes the header from r and checks the format and colour model.
func config(r io.ReadSeeker) (image.Config, error) {
	c, format, err := image.DecodeConfig(r)
	var unsupported tiff.UnsupportedError
	switch {
	case errors.As(err, &unsupported) && unsupported == "extra samples" && tiffBits(r) == 16:
		// 16-bit gray+alpha, which Pillow cannot identify either
		return c, fmt.Errorf("cannot identify image file (as Pillow says; %w)", err)
	case err != nil:
		return c, err
	case !formats[format]:
		return c, fmt.Errorf("unsupported format %q", format)
	case c.Width <= 0 || c.Height <= 0:
		return c, fmt.Errorf("empty %dx%d image", c.Width, c.Height)
	}
	if _, ok := c.ColorModel.(color.Palette); ok {
		return c, nil
	}
	switch c.ColorModel {
	case color.RGBAModel, color.NRGBAModel, color.GrayModel, color.YCbCrModel,
		color.RGBA64Model, color.NRGBA64Model, color.Gray16Model:
		return c, nil
	}
	return c, fmt.Errorf("unsupported %s colour model", modelName(c.ColorModel))
}

// tiffBits is the first BitsPerSample value of the TIFF in r (0 when r
// is not a TIFF or the tag cannot be read).
func tiffBits(r io.ReadSeeker) int {
	var h [8]byte
	if _, err := r.Seek(0, io.SeekStart); err != nil || readFull(r, h[:]) != nil {
		return 0
	}
	var bo binary.ByteOrder
	switch string(h[:2]) {
	case "II":
		bo = binary.LittleEndian
	case "MM":
		bo = binary.BigEndian
	default:
		return 0
	}
	var n [2]byte
	if _, err := r.Seek(int64(bo.Uint32(h[4:])), io.SeekStart); err != nil || readFull(r, n[:]) != nil {
		return 0
	}
	for i := 0; i < int(bo.Uint16(n[:])); i++ {
		var e [12]byte
		if readFull(r, e[:]) != nil {
			return 0
		}
		if bo.Uint16(e[:]) != 258 || bo.Uint16(e[2:]) != 3 { // BitsPerSample, SHORT
			continue
		}
		if bo.Uint32(e[4:]) <= 2 {
			return int(bo.Uint16(e[8:]))
		}
		var v [2]byte
		if _, err := r.Seek(int64(bo.Uint32(e[8:])), io.SeekStart); err != nil || readFull(r, v[:]) != nil {
			return 0
		}
		return int(bo.Uint16(v[:]))
	}
	return 0
}

func readFull(r io.Reader, b []byte) error {
	_, err := io.ReadFull(r, b)
	return err
}

func modelName(m color.Model) string {
	switch m {
	case color.CMYKModel:
		return "CMYK"
	case color.AlphaModel, color.Alpha16Model:
		return "alpha-only"
	case color.NYCbCrAModel:
		return "YCbCr+alpha"
	}
	return fmt.Sprintf("%T", m)
}

// FromImage converts img as Read converts a decoded PNG or TIFF. Alpha is
// dropped: *image.RGBA is taken as premultiplied and un-premultiplied as PIL
// un-premultiplies a TIFF with associated alpha, other types are converted
// with color.NRGBAModel. *image.YCbCr is converted with color.YCbCrToRGB,
// not libjpeg's arithmetic as Read does for JPEG files. 16-bit images follow
// Pillow: *image.Gray16 is clipped to 255, *image.NRGBA64 keeps the high
// byte, *image.RGBA64 keeps the high byte and is un-premultiplied in 8 bits
// as *image.RGBA. The error, if any, does not wrap ErrImage: Read adds that.
func FromImage(img image.Image) (Image, error) {
	r := img.Bounds()
	w, h := r.Dx(), r.Dy()
	if w <= 0 || h <= 0 {
		return Image{}, fmt.Errorf("empty %dx%d image", w, h)
	}
	n := w * h
	im := Image{W: w, H: h, Pix: make([]float32, 3*n)}
	R, G, B := im.Pix[:n], im.Pix[n:2*n], im.Pix[2*n:]
	switch m := img.(type) {
	case *image.NRGBA:
		for y := 0; y < h; y++ {
			p := m.Pix[m.PixOffset(r.Min.X, r.Min.Y+y):][:4*w]
			o := y * w
			for x := 0; x < w; x++ {
				s := p[4*x : 4*x+3 : 4*x+3]
				R[o+x], G[o+x], B[o+x] = unit[s[0]], unit[s[1]], unit[s[2]]
			}
		}
	case *image.RGBA:
		for y := 0; y < h; y++ {
			p := m.Pix[m.PixOffset(r.Min.X, r.Min.Y+y):][:4*w]
			o := y * w
			for x := 0; x < w; x++ {
				s := p[4*x : 4*x+4 : 4*x+4]
				cr, cg, cb := s[0], s[1], s[2]
				if a := s[3]; a != 0xff {
					cr, cg, cb = unpremul(cr, a), unpremul(cg, a), unpremul(cb, a)
				}
				R[o+x], G[o+x], B[o+x] = unit[cr], unit[cg], unit[cb]
			}
		}
	case *image.Gray:
		for y := 0; y < h; y++ {
			p := m.Pix[m.PixOffset(r.Min.X, r.Min.Y+y):][:w]
			o := y * w
			for x, k := range p {
				v := unit[k]
				R[o+x], G[o+x], B[o+x] = v, v, v
			}
		}
	case *image.YCbCr:
		hd, vd := chromaDiv(m.SubsampleRatio)
		for y := 0; y < h; y++ {
			yy := m.Y[m.YOffset(r.Min.X, r.Min.Y+y):][:w]
			c0 := ((r.Min.Y+y)/vd-m.Rect.Min.Y/vd)*m.CStride - m.Rect.Min.X/hd
			o := y * w
			for x, lum := range yy {
				ci := c0 + (r.Min.X+x)/hd // as image.YCbCr.COffset
				cr, cg, cb := color.YCbCrToRGB(lum, m.Cb[ci], m.Cr[ci])
				R[o+x], G[o+x], B[o+x] = unit[cr], unit[cg], unit[cb]
			}
		}
	case *image.Paletted:
		var lut [256][3]uint8 // indices past the palette are black
		for i, c := range m.Palette[:min(len(m.Palette), len(lut))] {
			nc := color.NRGBAModel.Convert(c).(color.NRGBA)
			lut[i] = [3]uint8{nc.R, nc.G, nc.B}
		}
		for y := 0; y < h; y++ {
			p := m.Pix[m.PixOffset(r.Min.X, r.Min.Y+y):][:w]
			o := y * w
			for x, k := range p {
				c := &lut[k]
				R[o+x], G[o+x], B[o+x] = unit[c[0]], unit[c[1]], unit[c[2]]
			}
		}
	case *image.Gray16: // Pillow's I;16 -> L clips
		for y := 0; y < h; y++ {
			p := m.Pix[m.PixOffset(r.Min.X, r.Min.Y+y):][:2*w]
			o := y * w
			for x := 0; x < w; x++ {
				v := unit[uint8(min(uint(p[2*x])<<8|uint(p[2*x+1]), 255))]
				R[o+x], G[o+x], B[o+x] = v, v, v
			}
		}
	case *image.NRGBA64: // Pillow's RGBA;16B, LA;16B: the high byte
		for y := 0; y < h; y++ {
			p := m.Pix[m.PixOffset(r.Min.X, r.Min.Y+y):][:8*w]
			o := y * w
			for x := 0; x < w; x++ {
				R[o+x], G[o+x], B[o+x] = unit[p[8*x]], unit[p[8*x+2]], unit[p[8*x+4]]
			}
		}
	case *image.RGBA64: // RGB;16B, or TIFF RGBa;16: the high byte, un-premultiplied
		for y := 0; y < h; y++ {
			p := m.Pix[m.PixOffset(r.Min.X, r.Min.Y+y):][:8*w]
			o := y * w
			for x := 0; x < w; x++ {
				cr, cg, cb := p[8*x], p[8*x+2], p[8*x+4]
				if a := p[8*x+6]; a != 0xff {
					cr, cg, cb = unpremul(cr, a), unpremul(cg, a), unpremul(cb, a)
				}
				R[o+x], G[o+x], B[o+x] = unit[cr], unit[cg], unit[cb]
			}
		}
	default:
		// Rare types (CMYK, NYCbCrA, images made in memory): one At per pixel.
		for y := 0; y < h; y++ {
			o := y * w
			for x := 0; x < w; x++ {
				c := color.NRGBAModel.Convert(img.At(r.Min.X+x, r.Min.Y+y)).(color.NRGBA)
				R[o+x], G[o+x], B[o+x] = unit[c.R], unit[c.G], unit[c.B]
			}
		}
	}
	return im, nil
}

// unpremul un-premultiplies the sample c of alpha a as PIL does (unpackRGBa
// in libImaging/Unpack.c): c*255/a in integers, clipped to 255, 0 if a is 0.
func unpremul(c, a uint8) uint8 {
	if a == 0 {
		return 0
	}
	return uint8(min(uint(c)*255/uint(a), 255))
}

// chromaDiv gives the horizontal and vertical chroma subsampling factors.
func chromaDiv(s image.YCbCrSubsampleRatio) (h, v int) {
	switch s {
	case image.YCbCrSubsampleRatio422:
		return 2, 1
	case image.YCbCrSubsampleRatio420:
		return 2, 2
	case image.YCbCrSubsampleRatio440:
		return 1, 2
	case image.YCbCrSubsampleRatio411:
		return 4, 1
	case image.YCbCrSubsampleRatio410:
		return 4, 2
	}
	return 1, 1
}
