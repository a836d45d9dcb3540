package records

import (
	"errors"
	"fmt"
	"testing"

	"github.com/canopy-hpc/canopy/metrics"
)

// TestIoUEveryPairRoundTrip: records matched for a lowest threshold of 0
// (every same-label pair valid, zeros counted and not listed) decode to
// the same records; every truncation and every tampered position or count
// is refused.
func TestIoUEveryPairRoundTrip(t *testing.T) {
	in := genInput(60, 5)
	lim := limits(in)
	idx := make([]int, len(in.Images))
	for i := range idx {
		idx[i] = i
	}
	recs, err := metrics.MatchImages(in, idx, metrics.MatchOptions{MinIoU: 0}, metrics.IoUMean)
	if err != nil {
		t.Fatal(err)
	}
	every, entries := 0, 0
	for _, r := range recs {
		if r.IoU.Every {
			every++
			entries += len(r.IoU.Entries)
		}
	}
	if every == 0 || entries == 0 {
		t.Fatalf("generated input too thin: %d every-pair records, %d entries", every, entries)
	}
	buf := Encode(nil, recs, metrics.IoUMean)
	got, _, err := Decode(buf, lim)
	if err != nil {
		t.Fatal(err)
	}
	for k := range recs {
		// %+v prints a nil and an empty list alike
		if fmt.Sprintf("%+v", got[k].IoU) != fmt.Sprintf("%+v", recs[k].IoU) {
			t.Fatalf("record %d differs after the round trip:\n%+v\n%+v", k, got[k].IoU, recs[k].IoU)
		}
	}
	for n := 0; n < len(buf); n++ {
		if _, _, err := Decode(buf[:n], lim); !errors.Is(err, ErrMalformed) {
			t.Fatalf("truncated at %d of %d: %v", n, len(buf), err)
		}
	}
	// tamper with one every-pair record at a time
	var k int
	for k = range recs {
		if recs[k].IoU.Every && len(recs[k].IoU.Entries) > 1 {
			break
		}
	}
	tamper := func(what string, f func(r *metrics.IoURecord)) {
		t.Helper()
		c := append([]metrics.ImageRecord(nil), recs...)
		r := c[k].IoU
		r.Entries = append([]metrics.IoUEntry(nil), r.Entries...)
		r.Counts = append([]metrics.IoUCount(nil), r.Counts...)
		f(&r)
		c[k].IoU = r
		if _, _, err := Decode(Encode(nil, c, metrics.IoUMean), lim); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", what, err)
		}
	}
	tamper("position past the pairs", func(r *metrics.IoURecord) { r.Entries[len(r.Entries)-1].Pos = r.Pairs })
	tamper("positions out of order", func(r *metrics.IoURecord) { r.Entries[1].Pos = r.Entries[0].Pos })
	tamper("column position past the column", func(r *metrics.IoURecord) { r.Entries[0].ClassPos = r.Counts[len(r.Counts)-1].N + r.Pairs })
	tamper("a zero entry listed", func(r *metrics.IoURecord) { r.Entries[0].V = 0 })
	tamper("counts not summing to the pairs", func(r *metrics.IoURecord) { r.Pairs++ })
	tamper("no detections and every pair", func(r *metrics.IoURecord) { r.NoDets = true })
}
