package imagefile

import "fmt"

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
