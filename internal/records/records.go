// Package records is the binary encoding of the per-image match records
// (metrics.ImageRecord) that the ranks gather after each has matched its
// own images: compact, and decoded strictly, every count checked against
// the bytes left before anything is allocated.
//
// A buffer is the magic "CMR1", the record count and the records in
// increasing image order. Numbers are unsigned varints (minimal encoding
// only), floats little-endian IEEE bits. A record is:
//
//	image, a family byte (1 recall, 2 iou, 4 coco)
//	recall: truth count T, prediction count P, then T rows:
//	        true label, prediction id + 1 (0: none) and, when assigned,
//	        the prediction's label, IoU (float64) and score (float64)
//	iou:    a flag byte (1 passed, 2 no detections, 4 every pair valid);
//	        when passed: the label count and labels (strictly increasing);
//	        with no detections or every pair valid, the pair count and the
//	        per-label counts (count, then label and count, labels strictly
//	        increasing, counts positive and summing to the pair count);
//	        the entry count and entries (float32 value, label and, with
//	        every pair valid, the position among the pairs and in the
//	        label's column, both increasing and below their counts)
//	coco:   the category count, then per category (strictly increasing
//	        labels): label, the four non-ignored truth counts, the kept
//	        detection count D (at most 100), D float32 scores (not NaN) and D × 10
//	        bytes of flags (2 bits per area range and IoU threshold)
package records

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/canopy-hpc/canopy/metrics"
)

var magic = []byte("CMR1")

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("records: malformed buffer")

const (
	famRecall = 1
	famIoU    = 2
	famCOCO   = 4

	iouPassed = 1
	iouNoDets = 2
	iouEvery  = 4

	// maxCount bounds every count (boxes, labels, images) the format holds.
	maxCount = 1 << 31
	// maxPairs bounds the IoU family's pair counts and positions (a
	// product of two box counts).
	maxPairs = 1 << 62
	// flagBytes is one COCO detection's packed flags: 2 bits × 4 areas × 10
	// thresholds.
	flagBytes = metrics.COCOAreas * metrics.COCOThresholds * 2 / 8
)

// Limits are what a decoded buffer may name.
type Limits struct {
	Images int // image indices in [0, Images)
	Labels int // label ids in [0, Labels)
}

// Encode appends the records (in increasing image order) to dst with the
// families in fam.
func Encode(dst []byte, recs []metrics.ImageRecord, fam metrics.Family) []byte {
	dst = append(dst, magic...)
	dst = binary.AppendUvarint(dst, uint64(len(recs)))
	var mask byte
	if fam&metrics.Recall != 0 {
		mask |= famRecall
	}
	if fam&metrics.IoUMean != 0 {
		mask |= famIoU
	}
	if fam&metrics.COCOmAP != 0 {
		mask |= famCOCO
	}
	for i := range recs {
		dst = appendRecord(dst, &recs[i], mask)
	}
	return dst
}

func appendRecord(dst []byte, r *metrics.ImageRecord, mask byte) []byte {
	u := func(v int) { dst = binary.AppendUvarint(dst, uint64(v)) }
	f64 := func(v float64) { dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(v)) }
	f32 := func(v float32) { dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(v)) }
	u(r.Image)
	dst = append(dst, mask)
	if mask&famRecall != 0 {
		u(r.DF.Truth)
		u(r.DF.Preds)
		for _, m := range r.DF.Rows {
			u(int(m.TrueLabel))
			u(m.PredID + 1)
			if m.PredID >= 0 {
				u(int(m.PredLabel))
				f64(m.IoU)
				f64(m.Score)
			}
		}
	}
	if mask&famIoU != 0 {
		var fl byte
		if r.IoU.Passed {
			fl |= iouPassed
		}
		if r.IoU.NoDets {
			fl |= iouNoDets
		}
		if r.IoU.Every {
			fl |= iouEvery
		}
		dst = append(dst, fl)
		if r.IoU.Passed {
			u(len(r.IoU.Labels))
			for _, l := range r.IoU.Labels {
				u(int(l))
			}
			if r.IoU.NoDets || r.IoU.Every {
				dst = binary.AppendUvarint(dst, uint64(r.IoU.Pairs))
				u(len(r.IoU.Counts))
				for _, c := range r.IoU.Counts {
					u(int(c.Label))
					dst = binary.AppendUvarint(dst, uint64(c.N))
				}
			}
			u(len(r.IoU.Entries))
			for _, e := range r.IoU.Entries {
				f32(e.V)
				u(int(e.Label))
				if r.IoU.Every {
					dst = binary.AppendUvarint(dst, uint64(e.Pos))
					dst = binary.AppendUvarint(dst, uint64(e.ClassPos))
				}
			}
		}
	}
	if mask&famCOCO != 0 {
		u(len(r.COCO))
		for _, c := range r.COCO {
			u(int(c.Label))
			for _, n := range c.NPIG {
				u(int(n))
			}
			u(len(c.Scores))
			for _, s := range c.Scores {
				f32(float32(s))
			}
			dst = appendFlags(dst, c.Flags, len(c.Scores))
		}
	}
	return dst
}

// appendFlags packs detection d's 40 flags (area-major, as COCOCat holds
// them across detections) into 10 bytes, 2 bits each, in (area,
// threshold) order.
func appendFlags(dst []byte, flags []uint8, nd int) []byte {
	for d := range nd {
		var b [flagBytes]byte
		for j := range metrics.COCOAreas * metrics.COCOThresholds {
			b[j/4] |= (flags[j*nd+d] & 3) << (2 * (j % 4))
		}
		dst = append(dst, b[:]...)
	}
	return dst
}

// reader decodes with every check in one place. Its pools hand the
// records' many short slices out of a few larger allocations.
type reader struct {
	b   []byte
	err error

	rows    []metrics.Match
	entries []metrics.IoUEntry
	labels  []int32
	cats    []metrics.COCOCat
	scores  []float64
	flags   []uint8
}

// carve returns n elements of *pool (n already checked against the bytes
// left, min bytes each), refilling the pool with room for the smaller of
// 16,384 elements and what the bytes left could hold, so no allocation
// exceeds what the buffer can justify.
func carve[T any](pool *[]T, n, left, min int) []T {
	if n > cap(*pool)-len(*pool) {
		*pool = make([]T, 0, max(n, minInt(1<<14, left/min)))
	}
	p := *pool
	*pool = p[:len(p)+n]
	return p[len(p) : len(p)+n : len(p)+n]
}

func minInt(a, b int) int {
	if a < b {
		return a
	}
	return b
}

func (r *reader) fail(format string, a ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, a...)...)
	}
}

// uv reads a minimally encoded varint not above max.
func (r *reader) uv(what string, max uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("%s: truncated or overflowing number", what)
		return 0
	}
	if n != len(binary.AppendUvarint(nil, v)) {
		r.fail("%s: non-minimal number", what)
		return 0
	}
	if v > max {
		r.fail("%s %d above its bound %d", what, v, max)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a count of elements of at least min bytes each, checked
// against the bytes left before the caller allocates.
func (r *reader) count(what string, min int) int {
	v := r.uv(what, maxCount)
	if r.err == nil && v > uint64(len(r.b)/min) {
		r.fail("%s %d exceeds the %d bytes left", what, v, len(r.b))
		return 0
	}
	return int(v)
}

func (r *reader) byte1(what string) byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 1 {
		r.fail("%s: truncated", what)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) bytes(what string, n int) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) < n {
		r.fail("%s: truncated", what)
		return nil
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func (r *reader) f64(what string) float64 {
	p := r.bytes(what, 8)
	if p == nil {
		return 0
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(p))
}

func (r *reader) f32(what string) float32 {
	p := r.bytes(what, 4)
	if p == nil {
		return 0
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(p))
}

func (r *reader) label(what string, lim Limits) int32 {
	if lim.Labels <= 0 {
		r.fail("%s: no label may appear", what)
		return 0
	}
	return int32(r.uv(what, uint64(lim.Labels-1)))
}

// Decode reads one buffer and returns its records (increasing image
// order) and the families it holds.
func Decode(buf []byte, lim Limits) ([]metrics.ImageRecord, metrics.Family, error) {
	if len(buf) < len(magic) || string(buf[:len(magic)]) != string(magic) {
		return nil, 0, fmt.Errorf("%w: no CMR1 header", ErrMalformed)
	}
	r := &reader{b: buf[len(magic):]}
	n := r.count("record count", 2) // image and family byte at least
	recs := make([]metrics.ImageRecord, 0, n)
	var fam metrics.Family
	for k := 0; k < n && r.err == nil; k++ {
		rec, mask := decodeRecord(r, lim)
		if r.err != nil {
			break
		}
		f := famOf(mask)
		if k == 0 {
			fam = f
		} else if f != fam {
			r.fail("record %d holds families %d, the first %d", k, f, fam)
		}
		if k > 0 && rec.Image <= recs[k-1].Image {
			r.fail("image %d after image %d", rec.Image, recs[k-1].Image)
		}
		recs = append(recs, rec)
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d bytes after the last record", len(r.b))
	}
	if r.err != nil {
		return nil, 0, r.err
	}
	return recs, fam, nil
}

func famOf(mask byte) metrics.Family {
	var f metrics.Family
	if mask&famRecall != 0 {
		f |= metrics.Recall
	}
	if mask&famIoU != 0 {
		f |= metrics.IoUMean
	}
	if mask&famCOCO != 0 {
		f |= metrics.COCOmAP
	}
	return f
}

func decodeRecord(r *reader, lim Limits) (metrics.ImageRecord, byte) {
	var rec metrics.ImageRecord
	if lim.Images <= 0 {
		r.fail("no image may appear")
		return rec, 0
	}
	rec.Image = int(r.uv("image", uint64(lim.Images-1)))
	mask := r.byte1("families")
	if mask&^(famRecall|famIoU|famCOCO) != 0 || mask == 0 {
		r.fail("image %d: family byte %#x", rec.Image, mask)
	}
	if mask&famRecall != 0 {
		decodeDF(r, &rec, lim)
	}
	if mask&famIoU != 0 {
		decodeIoU(r, &rec, lim)
	}
	if mask&famCOCO != 0 {
		decodeCOCO(r, &rec, lim)
	}
	return rec, mask
}

func decodeDF(r *reader, rec *metrics.ImageRecord, lim Limits) {
	nt := r.count("truth count", 2) // a row is two bytes at least
	np := r.uv("prediction count", maxCount)
	if r.err != nil {
		return
	}
	rec.DF.Truth, rec.DF.Preds = nt, int(np)
	if nt > 0 {
		rec.DF.Rows = carve(&r.rows, nt, len(r.b), 2)
	}
	for t := 0; t < nt && r.err == nil; t++ {
		m := metrics.Match{Image: rec.Image, TruthID: t, PredID: -1, PredLabel: -1}
		m.TrueLabel = r.label("true label", lim)
		if p := int(r.uv("prediction id", np)) - 1; p >= 0 {
			m.PredID = p
			m.PredLabel = r.label("predicted label", lim)
			m.IoU = r.f64("IoU")
			m.Score = r.f64("score")
		}
		rec.DF.Rows[t] = m
	}
}

func decodeIoU(r *reader, rec *metrics.ImageRecord, lim Limits) {
	fl := r.byte1("iou flags")
	if fl&^(iouPassed|iouNoDets|iouEvery) != 0 || (fl&iouPassed == 0 && fl != 0) || fl&(iouNoDets|iouEvery) == iouNoDets|iouEvery {
		r.fail("image %d: iou flag byte %#x", rec.Image, fl)
		return
	}
	rec.IoU.Passed, rec.IoU.NoDets, rec.IoU.Every = fl&iouPassed != 0, fl&iouNoDets != 0, fl&iouEvery != 0
	if !rec.IoU.Passed {
		return
	}
	nl := r.count("iou label count", 1)
	rec.IoU.Labels = make([]int32, 0, nl)
	for k := 0; k < nl && r.err == nil; k++ {
		l := r.label("iou label", lim)
		if k > 0 && l <= rec.IoU.Labels[k-1] {
			r.fail("image %d: iou labels out of order", rec.Image)
		}
		rec.IoU.Labels = append(rec.IoU.Labels, l)
	}
	counted := rec.IoU.NoDets || rec.IoU.Every
	if counted {
		rec.IoU.Pairs = int64(r.uv("iou pair count", maxPairs))
		nc := r.count("iou label count", 2)
		rec.IoU.Counts = make([]metrics.IoUCount, 0, nc)
		var sum int64
		for k := 0; k < nc && r.err == nil; k++ {
			l := r.label("iou count label", lim)
			n := int64(r.uv("iou label pair count", maxPairs))
			if r.err == nil && (n == 0 || (k > 0 && l <= rec.IoU.Counts[k-1].Label)) {
				r.fail("image %d: iou label counts out of order or zero", rec.Image)
			}
			sum += n
			if r.err == nil && sum > rec.IoU.Pairs {
				r.fail("image %d: iou label counts exceed the pair count %d", rec.Image, rec.IoU.Pairs)
			}
			rec.IoU.Counts = append(rec.IoU.Counts, metrics.IoUCount{Label: l, N: n})
		}
		if r.err == nil && sum != rec.IoU.Pairs {
			r.fail("image %d: iou label counts sum to %d, not the pair count %d", rec.Image, sum, rec.IoU.Pairs)
		}
	}
	ne := r.count("iou entry count", 5)
	if r.err == nil && rec.IoU.NoDets && ne != 0 {
		r.fail("image %d: iou entries without detections", rec.Image)
	}
	rec.IoU.Entries = make([]metrics.IoUEntry, 0, ne)
	next := map[int32]int64{} // per label, the least next column position
	for k := 0; k < ne && r.err == nil; k++ {
		e := metrics.IoUEntry{V: r.f32("iou entry"), Label: r.label("iou entry label", lim)}
		if rec.IoU.Every {
			e.Pos = int64(r.uv("iou entry position", maxPairs))
			e.ClassPos = int64(r.uv("iou entry column position", maxPairs))
			n := int64(0)
			ci, ok := slices.BinarySearchFunc(rec.IoU.Counts, e.Label, func(c metrics.IoUCount, l int32) int { return cmp.Compare(c.Label, l) })
			if ok {
				n = rec.IoU.Counts[ci].N
			}
			switch {
			case r.err != nil:
			case !(e.V > 0):
				r.fail("image %d: iou entry %v is not a positive value", rec.Image, e.V)
			case !ok || e.ClassPos < next[e.Label] || e.ClassPos >= n:
				r.fail("image %d: iou entry column position %d out of order or range", rec.Image, e.ClassPos)
			case (k > 0 && e.Pos <= rec.IoU.Entries[k-1].Pos) || e.Pos >= rec.IoU.Pairs:
				r.fail("image %d: iou entry position %d out of order or range", rec.Image, e.Pos)
			}
			next[e.Label] = e.ClassPos + 1
		}
		rec.IoU.Entries = append(rec.IoU.Entries, e)
	}
}

func decodeCOCO(r *reader, rec *metrics.ImageRecord, lim Limits) {
	nc := r.count("coco category count", 6) // label, four counts, detections
	if r.err != nil || nc == 0 {
		return
	}
	rec.COCO = carve(&r.cats, nc, len(r.b), 6)[:0]
	for k := 0; k < nc && r.err == nil; k++ {
		var c metrics.COCOCat
		c.Label = r.label("coco label", lim)
		if k > 0 && c.Label <= rec.COCO[k-1].Label {
			r.fail("image %d: coco categories out of order", rec.Image)
		}
		for a := range c.NPIG {
			c.NPIG[a] = int32(r.uv("coco truth count", math.MaxInt32))
		}
		nd := int(r.uv("coco detection count", metrics.COCOMaxDets))
		if r.err == nil && nd*(4+flagBytes) > len(r.b) {
			r.fail("coco detection count %d exceeds the %d bytes left", nd, len(r.b))
		}
		if r.err != nil {
			return
		}
		c.Scores = carve(&r.scores, nd, len(r.b), 4+flagBytes)
		for d := range nd {
			v := r.f32("coco score")
			if v != v { // scores are finite: a NaN would not keep its bits through float64
				r.fail("image %d: a NaN coco score", rec.Image)
			}
			c.Scores[d] = float64(v)
		}
		c.Flags = carve(&r.flags, metrics.COCOAreas*metrics.COCOThresholds*nd, 4*len(r.b), 1)
		for d := range nd {
			b := r.bytes("coco flags", flagBytes)
			if b == nil {
				return
			}
			for j := range metrics.COCOAreas * metrics.COCOThresholds {
				c.Flags[j*nd+d] = (b[j/4] >> (2 * (j % 4))) & 3
			}
		}
		rec.COCO = append(rec.COCO, c)
	}
}

// Merge decodes every rank's buffer and places the records at their image
// index: each of the images must come exactly once, every buffer with the
// same families (an empty buffer, of a rank with no image, holds none).
func Merge(bufs [][]byte, lim Limits) ([]metrics.ImageRecord, error) {
	return MergeOwn(bufs, -1, nil, 0, lim)
}

// MergeOwn is Merge with rank self's records taken as they are (own, of
// families fam: the records bufs[self] encodes) instead of decoded again.
func MergeOwn(bufs [][]byte, self int, own []metrics.ImageRecord, ownFam metrics.Family, lim Limits) ([]metrics.ImageRecord, error) {
	out := make([]metrics.ImageRecord, lim.Images)
	seen := make([]bool, lim.Images)
	var fam metrics.Family
	for rank, b := range bufs {
		recs, f := own, ownFam
		if rank != self {
			var err error
			if recs, f, err = Decode(b, lim); err != nil {
				return nil, fmt.Errorf("rank %d: %w", rank, err)
			}
		}
		if len(recs) > 0 {
			if fam != 0 && f != fam {
				return nil, fmt.Errorf("%w: rank %d sent families %d, another %d", ErrMalformed, rank, f, fam)
			}
			fam = f
		}
		for _, rec := range recs {
			if rec.Image < 0 || rec.Image >= lim.Images {
				return nil, fmt.Errorf("%w: image %d of %d (rank %d)", ErrMalformed, rec.Image, lim.Images, rank)
			}
			if seen[rec.Image] {
				return nil, fmt.Errorf("%w: image %d comes twice (rank %d)", ErrMalformed, rec.Image, rank)
			}
			seen[rec.Image] = true
			out[rec.Image] = rec
		}
	}
	for i, ok := range seen {
		if !ok {
			return nil, fmt.Errorf("%w: no record of image %d", ErrMalformed, i)
		}
	}
	return out, nil
}
