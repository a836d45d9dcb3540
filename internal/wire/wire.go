// Package wire is canopy's binary encoding of one rank's detections, the
// payload of the MPI_Allgatherv.
//
// Layout (little endian), version 1:
//
//	header  magic "CNPY" | u16 version | u16 flags | u32 nImages | u64 nDets
//	images  nImages × (u32 global image index | u32 detection count)
//	dets    nDets × (u32 label | 4 coordinates | score)
//	trailer u32 CRC-32C of everything before it
//
// Coordinates and score are float32 (24 bytes per detection) when flag
// bit 0 is set, else float64 (44 bytes). The encoder picks float32 only when
// every value survives the round trip, so the encoding is lossless for its
// input: replayed CSV values keep float64 unless they are float32 values.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/canopy-hpc/canopy/box"
)

// Version is the wire format version this package writes and reads.
const Version = 1

const (
	magic      = "CNPY"
	headerSize = 4 + 2 + 2 + 4 + 8
	flagF32    = 1
)

// ErrCorrupt wraps every decoding failure.
var ErrCorrupt = errors.New("wire: corrupt buffer")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Image is one image's detections with its global index.
type Image struct {
	Index int
	Dets  []box.Detection
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
	start := len(dst)
	need := headerSize + 8*len(images) + per*int(n) + 4
	if cap(dst)-len(dst) < need {
		nd := make([]byte, len(dst), len(dst)+need)
		copy(nd, dst)
		dst = nd
	}
	le := binary.LittleEndian
	dst = append(dst, magic...)
	dst = le.AppendUint16(dst, Version)
	dst = le.AppendUint16(dst, flags)
	dst = le.AppendUint32(dst, uint32(len(images)))
	dst = le.AppendUint64(dst, n)
	for _, im := range images {
		dst = le.AppendUint32(dst, uint32(im.Index))
		dst = le.AppendUint32(dst, uint32(len(im.Dets)))
	}
	for _, im := range images {
		for _, d := range im.Dets {
			dst = le.AppendUint32(dst, uint32(d.Label))
			vals := [5]float64{d.Box.Xmin, d.Box.Ymin, d.Box.Xmax, d.Box.Ymax, d.Score}
			for _, v := range vals {
				if f32 {
					dst = le.AppendUint32(dst, math.Float32bits(float32(v)))
				} else {
					dst = le.AppendUint64(dst, math.Float64bits(v))
				}
			}
		}
	}
	dst = le.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
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
	if flags&^flagF32 != 0 {
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
	want := uint64(headerSize) + 8*nImages + per*nDets + 4
	if uint64(len(buf)) != want {
		return nil, fmt.Errorf("%w: length %d, header implies %d", ErrCorrupt, len(buf), want)
	}
	body := buf[:len(buf)-4]
	if got, sum := crc32.Checksum(body, castagnoli), le.Uint32(buf[len(buf)-4:]); got != sum {
		return nil, fmt.Errorf("%w: checksum %08x, expected %08x", ErrCorrupt, got, sum)
	}
	images := make([]Image, nImages)
	off := headerSize
	var total uint64
	for i := range images {
		images[i].Index = int(le.Uint32(buf[off:]))
		c := le.Uint32(buf[off+4:])
		total += uint64(c)
		if total > nDets {
			return nil, fmt.Errorf("%w: image counts exceed %d detections", ErrCorrupt, nDets)
		}
		images[i].Dets = make([]box.Detection, c)
		off += 8
	}
	if total != nDets {
		return nil, fmt.Errorf("%w: image counts sum to %d, header says %d", ErrCorrupt, total, nDets)
	}
	for i := range images {
		for k := range images[i].Dets {
			d := &images[i].Dets[k]
			d.Label = int32(le.Uint32(buf[off:]))
			off += 4
			var v [5]float64
			for j := range v {
				if flags&flagF32 != 0 {
					v[j] = float64(math.Float32frombits(le.Uint32(buf[off:])))
					off += 4
				} else {
					v[j] = math.Float64frombits(le.Uint64(buf[off:]))
					off += 8
				}
			}
			d.Box = box.Box{Xmin: v[0], Ymin: v[1], Xmax: v[2], Ymax: v[3]}
			d.Score = v[4]
		}
	}
	return images, nil
}

// Merge decodes every rank's buffer and places each image's detections at
// its global index, checking that every one of nImages images arrives
// exactly once.
func Merge(parts [][]byte, nImages int) ([][]box.Detection, error) {
	out := make([][]box.Detection, nImages)
	seen := make([]int, nImages) // rank+1 that delivered the image
	for r, p := range parts {
		imgs, err := Decode(p)
		if err != nil {
			return nil, fmt.Errorf("wire: rank %d: %w", r, err)
		}
		for _, im := range imgs {
			if im.Index >= nImages {
				return nil, fmt.Errorf("%w: rank %d sent image %d of %d", ErrCorrupt, r, im.Index, nImages)
			}
			if seen[im.Index] != 0 {
				return nil, fmt.Errorf("wire: image %d delivered by rank %d and rank %d", im.Index, seen[im.Index]-1, r)
			}
			seen[im.Index] = r + 1
			out[im.Index] = im.Dets
		}
	}
	for i, s := range seen {
		if s == 0 {
			return nil, fmt.Errorf("wire: image %d delivered by no rank", i)
		}
	}
	return out, nil
}
