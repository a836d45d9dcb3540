package georec

import (
	"math"
	"reflect"
	"testing"

	"github.com/canopy-hpc/canopy/metrics"
)

func sample() []metrics.GeoRecord {
	m := func(img, t, p int, iou, d float64, ok bool) metrics.GeoMatch {
		return metrics.GeoMatch{Match: metrics.Match{Image: img, TruthID: t, PredID: p, IoU: iou, Score: 0.5, Match: ok, TrueLabel: 1, PredLabel: int32(min(p, 1))}, Distance: d}
	}
	return []metrics.GeoRecord{
		{Image: 2, Counted: true, NTruth: 2, NPred: 1, Matches: []metrics.GeoMatch{m(2, 0, 0, 0.75, 3, true), m(2, 1, -1, 0, math.Inf(1), false)}},
		{Image: 0, EmptyFrame: true, NPred: 4, Width: 640, Height: 480},
		{Image: 1, Counted: true, NTruth: 1, Matches: []metrics.GeoMatch{m(1, 0, -1, 0, math.NaN(), false)}},
	}
}

// Records survive the trip bit for bit (NaN distances included) and come
// out of Merge in image order.
func TestRoundTrip(t *testing.T) {
	recs := sample()
	b := Encode(nil, recs[:1])
	c := Encode(nil, recs[1:])
	got, err := Merge([][]byte{b, c}, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []metrics.GeoRecord{recs[1], recs[2], recs[0]}
	if !math.IsNaN(got[1].Matches[0].Distance) {
		t.Fatalf("NaN lost: %v", got[1].Matches[0].Distance)
	}
	got[1].Matches[0].Distance, want[1].Matches[0].Distance = 0, 0
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

// Corrupt, truncated, repeated or missing records are errors, never a
// panic or a huge allocation.
func TestHostileBuffers(t *testing.T) {
	b := Encode(nil, sample())
	for i := 0; i < len(b); i++ {
		c := append([]byte(nil), b...)
		c[i] ^= 0x41
		if _, err := Decode(c, 3); err == nil {
			t.Fatalf("flipped byte %d accepted", i)
		}
		if _, err := Decode(b[:i], 3); err == nil {
			t.Fatalf("truncation at %d accepted", i)
		}
	}
	if _, err := Decode(b, 2); err == nil {
		t.Fatal("image index 2 of 2 accepted")
	}
	if _, err := Merge([][]byte{b, b}, 3); err == nil {
		t.Fatal("images given twice accepted")
	}
	if _, err := Merge([][]byte{Encode(nil, sample()[:1])}, 3); err == nil {
		t.Fatal("missing images accepted")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Encode(nil, sample()))
	f.Add(Encode(nil, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := Decode(b, 8)
		if err != nil {
			return
		}
		if !reflect.DeepEqual(Encode(nil, recs), b) && len(recs) > 0 && !hasNaN(recs) {
			t.Fatal("decoded records do not encode back to their bytes")
		}
	})
}

func hasNaN(recs []metrics.GeoRecord) bool {
	for _, r := range recs {
		for _, m := range r.Matches {
			if m.IoU != m.IoU || m.Distance != m.Distance || m.Score != m.Score {
				return true
			}
		}
	}
	return false
}
