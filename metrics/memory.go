package metrics

import (
	"github.com/canopy-hpc/canopy/box"
)

// MatchCost is what DeepForest's matching (the recall family) and the
// torchmetrics IoU family hold, counted before they allocate.
type MatchCost struct {
	Images, Boxes int
	// Pairs counts the overlapping truth × prediction pairs (the only
	// ones either family stores); Partial means the count stopped early
	// because Bytes had already passed the limit it was given.
	Pairs   int64
	Partial bool
	// Bytes is the estimated peak of the two families' own allocations.
	Bytes int64
}

// Bytes per unit of the matching's estimate, upper bounds from the data
// structures: per box, the implicit solver's per-column state (potentials,
// assignment, per-search stamps, two ordered sets: about 80 B), the
// overlap grid (at most 64 cells a box plus the cell table: 272 B), a match
// row in the record and in the result, which grows by appending (3 × 64 B),
// and the IoU family's per-box share (rank, labels: 32 B); per overlapping
// pair, the solver's entry and row storage (24 + 12 B), the IoU family's
// pair (12 B) and record entry (24 B), and the reduction's image and class
// terms (16 + 16 B, twice: they grow by appending, and a slice being grown
// is briefly held twice).
const (
	matchBytesPerBox  = 80 + 272 + 3*64 + 32
	matchBytesPerPair = 24 + 12 + 12 + 24 + 2*(16+16)
)

// MatchMemory estimates the memory of the recall and IoU families over in
// by counting the overlapping pairs through the same index the matching
// uses, in O(boxes) memory. It stops counting once the estimate passes
// limit (when limit > 0), so a tile of a million mutually overlapping
// boxes is refused after counting about limit/matchBytesPerPair pairs.
func MatchMemory(in Input, limit int64) MatchCost {
	var c MatchCost
	for i, im := range in.Images {
		if im.Empty || len(im.Truth) == 0 {
			continue
		}
		c.Images++
		var dets []box.Detection
		if i < len(in.Dets) {
			dets = in.Dets[i]
		}
		c.Boxes += len(im.Truth) + len(dets)
	}
	c.Bytes = int64(c.Boxes) * matchBytesPerBox
	for i, im := range in.Images {
		if im.Empty || len(im.Truth) == 0 || i >= len(in.Dets) || len(in.Dets[i]) == 0 {
			continue
		}
		db := make([]box.Box, len(in.Dets[i]))
		for k, d := range in.Dets[i] {
			db[k] = d.Box
		}
		ix := newOverlapIndex(db)
		for _, t := range im.Truth {
			ix.each(db, t.Box, func(int, float64) { c.Pairs++ })
			c.Bytes = int64(c.Boxes)*matchBytesPerBox + c.Pairs*matchBytesPerPair
			if limit > 0 && c.Bytes > limit {
				c.Partial = true
				return c
			}
		}
	}
	return c
}
