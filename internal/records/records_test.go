package records

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/canopy-hpc/canopy/metrics"
)

func frame(in metrics.Input) metrics.Frame {
	return metrics.Frame{Images: in.Images, Labels: in.Labels, LabelValues: in.LabelValues}
}

func limits(in metrics.Input) Limits { return Limits{Images: len(in.Images), Labels: in.Labels.Len()} }

// shards splits the images over n ranks: by round robin, or in
// contiguous blocks of uneven size (the shapes the planner gives).
func shards(nImages, n int, blocks bool) [][]int {
	out := make([][]int, n)
	for i := range nImages {
		r := i % n
		if blocks {
			r = min(n-1, i*i*n/(nImages*nImages))
		}
		out[r] = append(out[r], i)
	}
	return out
}

// sharded is the pipeline the ranks run: each shard matched alone,
// encoded, the buffers merged and reduced.
func sharded(t *testing.T, in metrics.Input, parts [][]int, opt metrics.Options, fam metrics.Family) metrics.Result {
	t.Helper()
	var bufs [][]byte
	var last []metrics.ImageRecord
	for _, idx := range parts {
		recs, err := metrics.MatchImages(in, idx, metrics.MatchOptions{Semantics: opt.Semantics, MinIoU: opt.IoUThreshold}, fam)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, Encode(nil, recs, fam))
		last = recs
	}
	// the last rank keeps its own records; the others' are decoded
	all, err := MergeOwn(bufs, len(bufs)-1, last, fam, limits(in))
	if err != nil {
		t.Fatal(err)
	}
	res, err := metrics.Reduce(frame(in), all, opt, fam, true)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// sameBits compares two results bit for bit (a NaN equals only the same
// NaN bits), the match tables and the PR curves.
func sameBits(t *testing.T, what string, got, want metrics.Result) {
	t.Helper()
	if len(got.Values) != len(want.Values) {
		t.Fatalf("%s: %d values, want %d", what, len(got.Values), len(want.Values))
	}
	for k := range want.Values {
		g, w := got.Values[k], want.Values[k]
		if g.Key != w.Key || g.Null != w.Null || math.Float64bits(g.V) != math.Float64bits(w.V) ||
			!sameFloats(g.Array, w.Array) || !reflect.DeepEqual(g.Ints, w.Ints) {
			t.Fatalf("%s: value %d is %+v, want %+v", what, k, g, w)
		}
	}
	if !reflect.DeepEqual(got.Matches, want.Matches) {
		t.Fatalf("%s: match tables differ (%d rows, want %d)", what, len(got.Matches), len(want.Matches))
	}
	if !reflect.DeepEqual(got.PR, want.PR) {
		t.Fatalf("%s: PR curves differ", what)
	}
}

// sameIoU compares two IoU records field by field (an empty slice equals
// a nil one: the decoder allocates what the count says).
func sameIoU(a, b metrics.IoURecord) bool {
	return a.Passed == b.Passed && a.NoDets == b.NoDets && a.Every == b.Every && a.Pairs == b.Pairs &&
		slices.Equal(a.Labels, b.Labels) && slices.Equal(a.Counts, b.Counts) && slices.Equal(a.Entries, b.Entries)
}

func sameFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return false
		}
	}
	return true
}

// TestShardedEqualsOneRank: matching the images on 1 to 5 ranks, in any
// split, and reducing the gathered records gives np 1's bits under both
// semantics, at thresholds 0 (zero-IoU pairs valid), 0.4 and 0.5.
func TestShardedEqualsOneRank(t *testing.T) {
	in := genInput(300, 1)
	for _, sem := range []metrics.Semantics{metrics.Validation, metrics.EvaluateBoxes} {
		for _, thr := range []float64{0, 0.4, 0.5} {
			opt := metrics.Options{IoUThreshold: thr, Semantics: sem}
			want, err := metrics.Compute(in, opt, metrics.All, true)
			if err != nil {
				t.Fatal(err)
			}
			if len(want.Matches) == 0 || len(want.PR) == 0 || len(want.Values) < 20 {
				t.Fatalf("generated input too thin: %d rows, %d curves, %d values", len(want.Matches), len(want.PR), len(want.Values))
			}
			for n := 1; n <= 5; n++ {
				for _, blocks := range []bool{false, true} {
					got := sharded(t, in, shards(len(in.Images), n, blocks), opt, metrics.All)
					sameBits(t, sem.String(), got, want)
				}
			}
			for _, fam := range []metrics.Family{metrics.Recall, metrics.IoUMean, metrics.COCOmAP, metrics.Recall | metrics.COCOmAP} {
				w, err := metrics.Compute(in, opt, fam, true)
				if err != nil {
					t.Fatal(err)
				}
				sameBits(t, "one family", sharded(t, in, shards(len(in.Images), 3, false), opt, fam), w)
			}
		}
	}
}

// TestRoundTrip: decoding gives the records back and re-encoding gives the
// same bytes; a rank with no image sends a buffer that merges.
func TestRoundTrip(t *testing.T) {
	in := genInput(120, 2)
	idx := []int{0, 3, 5, 6, 7, 50, 119}
	recs, err := metrics.MatchImages(in, idx, metrics.MatchOptions{MinIoU: 0.3}, metrics.All)
	if err != nil {
		t.Fatal(err)
	}
	buf := Encode(nil, recs, metrics.All)
	got, fam, err := Decode(buf, limits(in))
	if err != nil {
		t.Fatal(err)
	}
	if fam != metrics.All || len(got) != len(recs) {
		t.Fatalf("families %d, %d records; want %d, %d", fam, len(got), metrics.All, len(recs))
	}
	for k := range recs {
		if !reflect.DeepEqual(got[k].DF, recs[k].DF) || !reflect.DeepEqual(got[k].COCO, recs[k].COCO) ||
			!sameIoU(got[k].IoU, recs[k].IoU) {
			t.Fatalf("record %d (image %d) differs after the round trip", k, recs[k].Image)
		}
	}
	if again := Encode(nil, got, fam); !bytes.Equal(again, buf) {
		t.Fatal("re-encoding differs")
	}
	empty := Encode(nil, nil, metrics.All)
	if recs, _, err := Decode(empty, limits(in)); err != nil || len(recs) != 0 {
		t.Fatalf("empty buffer: %v, %d records", err, len(recs))
	}
}

// TestDecodeRefuses: every truncation, trailing byte, out-of-range image
// or label, reordered image and duplicated or missing image is an error
// wrapping ErrMalformed, never a panic or a short result.
func TestDecodeRefuses(t *testing.T) {
	in := genInput(40, 4)
	lim := limits(in)
	idx := []int{1, 2, 4, 8, 16, 32}
	recs, err := metrics.MatchImages(in, idx, metrics.MatchOptions{MinIoU: 0.5}, metrics.All)
	if err != nil {
		t.Fatal(err)
	}
	buf := Encode(nil, recs, metrics.All)
	for n := 0; n < len(buf); n++ {
		if _, _, err := Decode(buf[:n], lim); !errors.Is(err, ErrMalformed) {
			t.Fatalf("truncated at %d of %d: %v", n, len(buf), err)
		}
	}
	if _, _, err := Decode(append(append([]byte(nil), buf...), 0), lim); !errors.Is(err, ErrMalformed) {
		t.Fatalf("trailing byte: %v", err)
	}
	if _, _, err := Decode(buf, Limits{Images: 32, Labels: lim.Labels}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("image 32 of 32: %v", err)
	}
	if _, _, err := Decode(buf, Limits{Images: lim.Images, Labels: 1}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("labels above the map: %v", err)
	}
	rev := []metrics.ImageRecord{recs[1], recs[0]}
	if _, _, err := Decode(Encode(nil, rev, metrics.All), lim); !errors.Is(err, ErrMalformed) {
		t.Fatalf("images out of order: %v", err)
	}
	// a huge count in a short buffer is refused before any allocation
	huge := append([]byte("CMR1"), 0xff, 0xff, 0xff, 0xff, 0x07)
	if _, _, err := Decode(huge, lim); !errors.Is(err, ErrMalformed) {
		t.Fatalf("huge count: %v", err)
	}
	if _, _, err := Decode(append([]byte("CMR1"), 0x80, 0x00), lim); !errors.Is(err, ErrMalformed) {
		t.Fatalf("non-minimal count: %v", err)
	}
	first, err := metrics.MatchImages(in, []int{0, 1}, metrics.MatchOptions{}, metrics.All)
	if err != nil {
		t.Fatal(err)
	}
	rest := make([]int, 0, len(in.Images))
	for i := 1; i < len(in.Images); i++ {
		rest = append(rest, i)
	}
	others, err := metrics.MatchImages(in, rest, metrics.MatchOptions{}, metrics.All)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Merge([][]byte{Encode(nil, first, metrics.All), Encode(nil, others, metrics.All)}, lim); !errors.Is(err, ErrMalformed) {
		t.Fatalf("image 1 twice: %v", err)
	}
	if _, err := Merge([][]byte{Encode(nil, others, metrics.All)}, lim); !errors.Is(err, ErrMalformed) {
		t.Fatalf("image 0 missing: %v", err)
	}
	if _, err := Merge([][]byte{Encode(nil, first[:1], metrics.Recall), Encode(nil, others, metrics.All)}, lim); !errors.Is(err, ErrMalformed) {
		t.Fatalf("families differ: %v", err)
	}
}

// FuzzDecode: any bytes decode to an error or to records whose encoding
// is the same bytes (the format has one spelling of each record set).
func FuzzDecode(f *testing.F) {
	f.Add([]byte("CMR1\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		lim := Limits{Images: 64, Labels: 5}
		recs, fam, err := Decode(b, lim)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if again := Encode(nil, recs, fam); !bytes.Equal(again, b) {
			t.Fatalf("decoded %d records whose encoding differs from the input", len(recs))
		}
	})
}
