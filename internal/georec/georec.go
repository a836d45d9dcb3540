// Package georec is the binary encoding of point and polygon match
// records (metrics.GeoRecord), what each rank of eval sends the others
// after matching its own images.
//
// Layout (little endian), version 1:
//
//	header  magic "CNGR" | u32 version | u32 nRecords
//	record  u32 image | u8 flags (1 counted, 2 empty frame) | u32 nTruth |
//	        u32 nPred | u32 width | u32 height | u32 nMatches | nMatches × match
//	match   u32 truth id | i32 prediction id | f64 IoU | f64 distance |
//	        f64 score | u8 match | i32 true label | i32 predicted label
//	trailer u32 CRC-32C of everything before it
//
// Floats travel as their bits, so the records every rank reduces are the
// ones each matcher made.
package georec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/canopy-hpc/canopy/metrics"
)

const (
	magic     = "CNGR"
	version   = 1
	recSize   = 4 + 1 + 4 + 4 + 4 + 4 + 4
	matchSize = 4 + 4 + 8 + 8 + 8 + 1 + 4 + 4
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Encode appends recs to dst.
func Encode(dst []byte, recs []metrics.GeoRecord) []byte {
	le := binary.LittleEndian
	start := len(dst)
	dst = append(dst, magic...)
	dst = le.AppendUint32(dst, version)
	dst = le.AppendUint32(dst, uint32(len(recs)))
	for _, r := range recs {
		var flags byte
		if r.Counted {
			flags |= 1
		}
		if r.EmptyFrame {
			flags |= 2
		}
		dst = le.AppendUint32(dst, uint32(r.Image))
		dst = append(dst, flags)
		dst = le.AppendUint32(dst, uint32(r.NTruth))
		dst = le.AppendUint32(dst, uint32(r.NPred))
		dst = le.AppendUint32(dst, uint32(r.Width))
		dst = le.AppendUint32(dst, uint32(r.Height))
		dst = le.AppendUint32(dst, uint32(len(r.Matches)))
		for _, m := range r.Matches {
			dst = le.AppendUint32(dst, uint32(m.TruthID))
			dst = le.AppendUint32(dst, uint32(int32(m.PredID)))
			for _, f := range [3]float64{m.IoU, m.Distance, m.Score} {
				dst = le.AppendUint64(dst, math.Float64bits(f))
			}
			var b byte
			if m.Match.Match {
				b = 1
			}
			dst = append(dst, b)
			dst = le.AppendUint32(dst, uint32(m.TrueLabel))
			dst = le.AppendUint32(dst, uint32(m.PredLabel))
		}
	}
	return le.AppendUint32(dst, crc32.Checksum(dst[start:], crcTable))
}

// Decode reads one buffer, checking every size against what is left before
// allocating and image indices against nImages.
func Decode(buf []byte, nImages int) ([]metrics.GeoRecord, error) {
	le := binary.LittleEndian
	if len(buf) < 12+4 || string(buf[:4]) != magic {
		return nil, errors.New("georec: not a record buffer")
	}
	body := buf[:len(buf)-4]
	if crc32.Checksum(body, crcTable) != le.Uint32(buf[len(buf)-4:]) {
		return nil, errors.New("georec: checksum mismatch")
	}
	if v := le.Uint32(body[4:]); v != version {
		return nil, fmt.Errorf("georec: version %d, want %d", v, version)
	}
	n := int(le.Uint32(body[8:]))
	p := body[12:]
	if n > len(p)/recSize {
		return nil, fmt.Errorf("georec: %d records in %d bytes", n, len(p))
	}
	recs := make([]metrics.GeoRecord, n)
	for k := range recs {
		if len(p) < recSize {
			return nil, errors.New("georec: truncated record")
		}
		r := metrics.GeoRecord{Image: int(le.Uint32(p)), Counted: p[4]&1 != 0, EmptyFrame: p[4]&2 != 0,
			NTruth: int(le.Uint32(p[5:])), NPred: int(le.Uint32(p[9:])), Width: int(le.Uint32(p[13:])), Height: int(le.Uint32(p[17:]))}
		nm := int(le.Uint32(p[21:]))
		if p[4]&^3 != 0 {
			return nil, fmt.Errorf("georec: record %d: flags %#x", k, p[4])
		}
		p = p[recSize:]
		if r.Image >= nImages || nm > len(p)/matchSize {
			return nil, fmt.Errorf("georec: record %d: image %d of %d, %d matches in %d bytes", k, r.Image, nImages, nm, len(p))
		}
		if nm > 0 {
			r.Matches = make([]metrics.GeoMatch, nm)
		}
		for j := range r.Matches {
			m := &r.Matches[j]
			m.Image = r.Image
			m.TruthID = int(le.Uint32(p))
			m.PredID = int(int32(le.Uint32(p[4:])))
			m.IoU = math.Float64frombits(le.Uint64(p[8:]))
			m.Distance = math.Float64frombits(le.Uint64(p[16:]))
			m.Score = math.Float64frombits(le.Uint64(p[24:]))
			m.Match.Match = p[32] == 1
			m.TrueLabel = int32(le.Uint32(p[33:]))
			m.PredLabel = int32(le.Uint32(p[37:]))
			// one spelling of each record (a 0/1 match byte), and ids
			// within the image's truth and predictions (-1: none)
			if p[32] > 1 || m.TruthID >= r.NTruth || m.PredID < -1 || m.PredID >= r.NPred {
				return nil, fmt.Errorf("georec: record %d match %d: match byte %d, truth %d of %d, prediction %d of %d",
					k, j, p[32], m.TruthID, r.NTruth, m.PredID, r.NPred)
			}
			p = p[matchSize:]
		}
		recs[k] = r
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("georec: %d bytes after the records", len(p))
	}
	return recs, nil
}

// Merge decodes every rank's buffer and orders the records by image,
// refusing an image given twice or missing.
func Merge(bufs [][]byte, nImages int) ([]metrics.GeoRecord, error) {
	out := make([]metrics.GeoRecord, nImages)
	seen := make([]bool, nImages)
	for rank, b := range bufs {
		recs, err := Decode(b, nImages)
		if err != nil {
			return nil, fmt.Errorf("rank %d: %w", rank, err)
		}
		for _, r := range recs {
			if seen[r.Image] {
				return nil, fmt.Errorf("georec: image %d matched twice", r.Image)
			}
			seen[r.Image] = true
			out[r.Image] = r
		}
	}
	for i, ok := range seen {
		if !ok {
			return nil, fmt.Errorf("georec: image %d matched by no rank", i)
		}
	}
	return out, nil
}
