package retinanet

import (
	"github.com/canopy-hpc/canopy/infer/cuda/kernels"
	"github.com/canopy-hpc/canopy/infer/gpu"
	"github.com/canopy-hpc/canopy/infer/imagefile"
)

// The transform on the device: each image goes up as its 8-bit samples
// (a quarter of the float32 bytes; float32 when its values are not 8-bit
// samples), and kernels.cu's transform_img normalizes, resizes and pads it
// into its slot of the batch with the float32 operations of
// normalizeResizePad, for every --blend rule (TestDeviceTransformBits).

// unit8 is imagefile's conversion of the 8-bit sample k: float32(k/255).
var unit8 = func() (u [256]float32) {
	for k := range u {
		u[k] = imagefile.Unit(uint8(k))
	}
	return u
}()

// pixBytes is imagefile.ToPlanes.
var pixBytes = imagefile.ToPlanes

// prepared is a group of images ready to upload: their samples (8-bit, or
// float32 for an image whose values are not 8-bit samples) and sizes.
type prepared struct {
	imgs   []Image
	u8     [][]byte // nil for an image that goes up as float32
	ph, pw int
	rh, rw []int
	// targets, when not nil, are the images' loss targets.
	targets [][]Target
}

// prepare is the host's part of the transform: the sizes, and the samples
// as bytes (run ahead of the device, while it computes the previous group);
// u8, when not nil, holds samples the decoders already made (nil entries
// are made here).
func (r *GPURunner) prepare(imgs []Image, u8 [][]byte, targets [][]Target) prepared {
	t0 := r.g.Times.Now()
	defer r.g.Times.Add("prepare", t0)
	p := prepared{imgs: imgs, targets: targets, u8: make([][]byte, len(imgs))}
	for i, img := range imgs {
		rh, rw := resizeSize(img.H, img.W, r.m.Opt)
		if i == 0 {
			p.ph, p.pw = (rh+31)/32*32, (rw+31)/32*32
		}
		p.rh, p.rw = append(p.rh, rh), append(p.rw, rw)
		if u8 != nil && u8[i] != nil {
			p.u8[i] = u8[i]
			continue
		}
		b := make([]byte, len(img.Pix))
		if pixBytes(img.Pix, b) {
			p.u8[i] = b
		}
	}
	return p
}

// transform uploads a prepared group and queues transform_img for each
// image: the batch [n, 3, ph, pw] the network reads.
func (r *GPURunner) transform(p prepared) gpu.Map {
	x := r.g.Alloc(len(p.imgs), 3, p.ph, p.pw)
	r.transformInto(p, x)
	return x
}

// transformInto is transform into the batch buffer x.
func (r *GPURunner) transformInto(p prepared, x gpu.Map) {
	g := r.g
	o := r.m.Opt
	for i, img := range p.imgs {
		if g.Err != nil {
			break
		}
		done := g.Timed("upload")
		src := g.UploadSource(imagefile.Image(img), p.u8[i])
		s8, s32 := src.Pointers()
		done()
		done = g.Timed("transform")
		if g.Err == nil {
			g.Fail(g.Dev.Launch(kernels.TransformImg, kernels.Elem(3*p.ph*p.pw),
				s8, s32, x.P, int64(i*3*p.ph*p.pw), img.H, img.W, p.rh[i], p.rw[i], p.ph, p.pw,
				o.ImageMean[0], o.ImageMean[1], o.ImageMean[2], o.ImageStd[0], o.ImageStd[1], o.ImageStd[2],
				int(o.Blend)))
		}
		done()
		// Reused only by later work in the same stream, after this kernel;
		// or held for the crops cut from it later (HoldWindows).
		if key, ok := r.heldKey(img); ok {
			g.Hold(key, src)
		} else {
			g.Put(src.Map)
		}
	}
}

// heldKey is the key an image's source is held under on the device (its
// input's Index) when the detector holds windows (HoldWindows).
func (r *GPURunner) heldKey(img Image) (int, bool) {
	if r.keys == nil || len(img.Pix) == 0 {
		return 0, false
	}
	k, ok := r.keys[&img.Pix[0]]
	return k, ok
}
