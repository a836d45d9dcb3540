// Package wire is canopy's binary encoding of one rank's detections, the
// payload of the MPI_Allgatherv.
//
// Layout (little endian), version 1:
//
//	header  magic "CNPY" | u16 version | u16 flags | u32 nImages | u64 nDets
//	images  nImages × (u32 global image index | u32 detection count)
//	losses  nImages × (f32 classification | f32 box regression), flag bit 1 only
//	dets    nDets × (u32 label | 4 coordinates | score)
//	trailer u32 CRC-32C of everything before it
//
// Coordinates and score are float32 (24 bytes per detection) when flag
// bit 0 is set, else float64 (44 bytes). The encoder picks float32 only when
// every value survives the round trip, so the encoding is lossless for its
// input: replayed CSV values keep float64 unless they are float32 values.
// Flag bit 1 marks a buffer whose images carry their validation losses
// (eval --model); a buffer holds losses for all of its images or none.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"

	"github.com/canopy-hpc/canopy/box"
)

// Version is the wire format version this package writes and reads.
const Version = 1

const (
	magic      = "CNPY"
	headerSize = 4 + 2 + 2 + 4 + 8
	flagF32    = 1
	flagLoss   = 2
)

// ErrCorrupt wraps every decoding failure.
var ErrCorrupt = errors.New("wire: corrupt buffer")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Image is one image's detections with its global index, and its
// validation losses when the detector computed them (nil otherwise).
type Image struct {
	Index int
	Dets  []box.Detection
	Loss  *box.Loss
}

func fitsF32(images []Image) bool {
	ok := func(v float64) bool { return float64(float32(v)) == v }
	for _, im := range images {
		for _, d := range im.Dets {
			if !ok(d.Box.Xmin) || !ok(d.Box.Ymin) || !ok(d.Box.Xmax) || !ok(d.Box.Ymax) || !ok(d.Score) {
				return false
			}
		}
	}
	return true
}

// Encode appends the encoding of images to dst and returns it.
func Encode(dst []byte, images []Image) ([]byte, error) {
	var n uint64
	for _, im := range images {
		if im.Index < 0 || im.Index > math.MaxUint32 || len(im.Dets) > math.MaxUint32 {
			return nil, fmt.Errorf("wire: image %d with %d detections does not fit the format", im.Index, len(im.Dets))
		}
		n += uint64(len(im.Dets))
	}
	if len(images) > math.MaxUint32 {
		return nil, fmt.Errorf("wire: %d images do not fit the format", len(images))
	}
	f32 := fitsF32(images)
	var flags uint16
	per := 4 + 5*8
	if f32 {
		flags |= flagF32
		per = 4 + 5*4
	}
	losses := len(images) > 0 && images[0].Loss != nil
	for _, im := range images {
		if (im.Loss != nil) != losses {
			return nil, fmt.Errorf("wire: image %d: losses for some images of a buffer, not all", im.Index)
		}
	}
	lossSize := 0
	if losses {
		flags |= flagLoss
		lossSize = 8 * len(images)
	}
	start := len(dst)
	need := headerSize + 8*len(images) + lossSize + per*int(n) + 4
	dst = slices.Grow(dst, need)[:start+need]
	b := dst[start:]
	le := binary.LittleEndian
	copy(b, magic)
	le.PutUint16(b[4:], Version)
	le.PutUint16(b[6:], flags)
	le.PutUint32(b[8:], uint32(len(images)))
	le.PutUint64(b[12:], n)
	off := headerSize
	for _, im := range images {
		le.PutUint32(b[off:], uint32(im.Index))
		le.PutUint32(b[off+4:], uint32(len(im.Dets)))
		off += 8
	}
	if losses {
		for _, im := range images {
			le.PutUint32(b[off:], math.Float32bits(im.Loss.Classification))
			le.PutUint32(b[off+4:], math.Float32bits(im.Loss.BoxRegression))
			off += 8
		}
	}
	for _, im := range images {
		for _, d := range im.Dets {
			r := b[off : off+per]
			le.PutUint32(r, uint32(d.Label))
			if f32 {
				le.PutUint32(r[4:], math.Float32bits(float32(d.Box.Xmin)))
				le.PutUint32(r[8:], math.Float32bits(float32(d.Box.Ymin)))
				le.PutUint32(r[12:], math.Float32bits(float32(d.Box.Xmax)))
				le.PutUint32(r[16:], math.Float32bits(float32(d.Box.Ymax)))
				le.PutUint32(r[20:], math.Float32bits(float32(d.Score)))
			} else {
				le.PutUint64(r[4:], math.Float64bits(d.Box.Xmin))
				le.PutUint64(r[12:], math.Float64bits(d.Box.Ymin))
				le.PutUint64(r[20:], math.Float64bits(d.Box.Xmax))
				le.PutUint64(r[28:], math.Float64bits(d.Box.Ymax))
				le.PutUint64(r[36:], math.Float64bits(d.Score))
			}
			off += per
		}
	}
	le.PutUint32(b[off:], crc32.Checksum(b[:off], castagnoli))
	return dst, nil
}

// Decode parses one buffer, validating magic, version, lengths and checksum.
func Decode(buf []byte) ([]Image, error) {
	le := binary.LittleEndian
	if len(buf) < headerSize+4 {
		return nil, fmt.Errorf("%w: %d bytes is shorter than a header", ErrCorrupt, len(buf))
	}
	if string(buf[:4]) != magic {
		return nil, fmt.Errorf("%w: bad magic %q", ErrCorrupt, buf[:4])
	}
	if v := le.Uint16(buf[4:]); v != Version {
		return nil, fmt.Errorf("%w: version %d, this canopy reads version %d", ErrCorrupt, v, Version)
	}
	flags := le.Uint16(buf[6:])
	if flags&^(flagF32|flagLoss) != 0 {
		return nil, fmt.Errorf("%w: unknown flags %#x", ErrCorrupt, flags)
	}
	nImages := uint64(le.Uint32(buf[8:]))
	nDets := le.Uint64(buf[12:])
	per := uint64(44)
	if flags&flagF32 != 0 {
		per = 24
	}
	if nDets > uint64(len(buf))/per || nImages > uint64(len(buf))/8 {
		return nil, fmt.Errorf("%w: header claims %d images and %d detections in %d bytes", ErrCorrupt, nImages, nDets, len(buf))
	}
	lossSize := uint64(0)
	if flags&flagLoss != 0 {
		lossSize = 8 * nImages
	}
	want := uint64(headerSize) + 8*nImages + lossSize + per*nDets + 4
	if uint64(len(buf)) != want {
		return nil, fmt.Errorf("%w: length %d, header implies %d", ErrCorrupt, len(buf), want)
	}
	body := buf[:len(buf)-4]
	if got, sum := crc32.Checksum(body, castagnoli), le.Uint32(buf[len(buf)-4:]); got != sum {
		return nil, fmt.Errorf("%w: checksum %08x, expected %08x", ErrCorrupt, got, sum)
	}
	images := make([]Image, nImages)
	all := make([]box.Detection, nDets)
	off := headerSize
	var total uint64
	for i := range images {
		images[i].Index = int(le.Uint32(buf[off:]))
		c := uint64(le.Uint32(buf[off+4:]))
		if c > nDets-total {
			return nil, fmt.Errorf("%w: image counts exceed %d detections", ErrCorrupt, nDets)
		}
		images[i].Dets = all[total : total+c : total+c]
		total += c
		off += 8
	}
	if total != nDets {
		return nil, fmt.Errorf("%w: image counts sum to %d, header says %d", ErrCorrupt, total, nDets)
	}
	if flags&flagLoss != 0 {
		ls := make([]box.Loss, nImages)
		for i := range images {
			ls[i] = box.Loss{Classification: math.Float32frombits(le.Uint32(buf[off:])), BoxRegression: math.Float32frombits(le.Uint32(buf[off+4:]))}
			images[i].Loss = &ls[i]
			off += 8
		}
	}
	p := int(per)
	for k := range all {
		r := buf[off : off+p]
		d := &all[k]
		d.Label = int32(le.Uint32(r))
		if flags&flagF32 != 0 {
			d.Box.Xmin = float64(math.Float32frombits(le.Uint32(r[4:])))
			d.Box.Ymin = float64(math.Float32frombits(le.Uint32(r[8:])))
			d.Box.Xmax = float64(math.Float32frombits(le.Uint32(r[12:])))
			d.Box.Ymax = float64(math.Float32frombits(le.Uint32(r[16:])))
			d.Score = float64(math.Float32frombits(le.Uint32(r[20:])))
		} else {
			d.Box.Xmin = math.Float64frombits(le.Uint64(r[4:]))
			d.Box.Ymin = math.Float64frombits(le.Uint64(r[12:]))
			d.Box.Xmax = math.Float64frombits(le.Uint64(r[20:]))
			d.Box.Ymax = math.Float64frombits(le.Uint64(r[28:]))
			d.Score = math.Float64frombits(le.Uint64(r[36:]))
		}
		off += p
	}
	return images, nil
}

// Merge decodes every rank's buffer and places each image's detections
// (and losses, nil where a buffer had none) at its global index, checking
// that every one of nImages images arrives exactly once.
func Merge(parts [][]byte, nImages int) ([][]box.Detection, []*box.Loss, error) {
	out := make([][]box.Detection, nImages)
	losses := make([]*box.Loss, nImages)
	seen := make([]int, nImages) // rank+1 that delivered the image
	for r, p := range parts {
		imgs, err := Decode(p)
		if err != nil {
			return nil, nil, fmt.Errorf("wire: rank %d: %w", r, err)
		}
		for _, im := range imgs {
			if im.Index >= nImages {
				return nil, nil, fmt.Errorf("%w: rank %d sent image %d of %d", ErrCorrupt, r, im.Index, nImages)
			}
			if seen[im.Index] != 0 {
				return nil, nil, fmt.Errorf("wire: image %d delivered by rank %d and rank %d", im.Index, seen[im.Index]-1, r)
			}
			seen[im.Index] = r + 1
			out[im.Index] = im.Dets
			losses[im.Index] = im.Loss
		}
	}
	for i, s := range seen {
		if s == 0 {
			return nil, nil, fmt.Errorf("wire: image %d delivered by no rank", i)
		}
	}
	return out, losses, nil
}
