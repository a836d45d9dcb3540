package georec

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
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
	// well-formed, checksummed buffers that hold what no matcher writes
	for name, edit := range map[string]func(*metrics.GeoRecord){
		"truth id past nTruth":  func(r *metrics.GeoRecord) { r.Matches[0].TruthID = 2 },
		"prediction id < -1":    func(r *metrics.GeoRecord) { r.Matches[0].PredID = -2 },
		"prediction past nPred": func(r *metrics.GeoRecord) { r.Matches[0].PredID = 1 },
	} {
		recs := sample()
		edit(&recs[0])
		if _, err := Decode(Encode(nil, recs), 3); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
	for _, off := range []int{12 + 4, 12 + recSize + 32} { // record 0's flags, its first match byte
		c := append([]byte(nil), b[:len(b)-4]...)
		c[off] |= 4
		if _, err := Decode(binary.LittleEndian.AppendUint32(c, crc32.Checksum(c, crcTable)), 3); err == nil {
			t.Errorf("byte %d = %#x accepted", off, c[off])
		}
	}
	if _, err := Merge([][]byte{b, b}, 3); err == nil {
		t.Fatal("images given twice accepted")
	}
	if _, err := Merge([][]byte{Encode(nil, sample()[:1])}, 3); err == nil {
		t.Fatal("missing images accepted")
	}
}

// FuzzDecode: any bytes decode to an error or to records that encode back
// to the same bytes. The fuzzer's bytes get a valid checksum first (a
// mutated body with its old CRC would only ever test the checksum).
func FuzzDecode(f *testing.F) {
	f.Add(Encode(nil, sample()))
	f.Add(Encode(nil, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) >= 4 {
			body := b[:len(b)-4]
			b = binary.LittleEndian.AppendUint32(body[:len(body):len(body)], crc32.Checksum(body, crcTable))
		}
		recs, err := Decode(b, 8)
		if err != nil {
			return
		}
		if !bytes.Equal(Encode(nil, recs), b) {
			t.Fatal("decoded records do not encode back to their bytes")
		}
	})
}
