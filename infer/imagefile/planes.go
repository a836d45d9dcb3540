package imagefile

import (
	"fmt"
	"math"
)

// FromPlanes is the Image of 8-bit R, G and B planes (each w·h samples,
// rows top first), scaled as Read scales a file's samples: float32(k/255).
func FromPlanes(w, h int, planes []uint8) (Image, error) {
	if w < 1 || h < 1 || len(planes) != 3*w*h {
		return Image{}, fmt.Errorf("imagefile: %d samples for 3 planes of %dx%d: %w", len(planes), w, h, ErrImage)
	}
	im := Image{W: w, H: h, Pix: make([]float32, len(planes))}
	for i, k := range planes {
		im.Pix[i] = unit[k]
	}
	return im, nil
}

// Unit is the value of the 8-bit sample k: float32(k/255), as Read scales.
func Unit(k uint8) float32 { return unit[k] }

// ToPlanes is FromPlanes backwards: it writes the 8-bit sample of every
// value of pix to dst (len(pix) bytes) and reports whether every value is
// one, bit for bit (the GPU transforms upload 8-bit samples, a quarter of
// the float32 bytes; float32 when not).
func ToPlanes(pix []float32, dst []byte) bool {
	for i, v := range pix {
		k := int(v*255 + 0.5)
		if k < 0 || k > 255 || math.Float32bits(unit[k]) != math.Float32bits(v) {
			return false
		}
		dst[i] = byte(k)
	}
	return true
}
