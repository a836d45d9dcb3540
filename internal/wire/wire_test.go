package wire

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/canopy-hpc/canopy/box"
)

func sample(rng *rand.Rand, f32 bool) []Image {
	var imgs []Image
	for i := 0; i < 20; i++ {
		im := Image{Index: i * 3}
		for k := rng.IntN(5); k > 0; k-- {
			v := func() float64 {
				x := rng.Float64() * 400
				if f32 {
					return float64(float32(x))
				}
				return x
			}
			im.Dets = append(im.Dets, box.Detection{Box: box.Box{Xmin: v(), Ymin: v(), Xmax: v(), Ymax: v()}, Label: int32(rng.IntN(3)), Score: v()})
		}
		imgs = append(imgs, im)
	}
	return imgs
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, f32 := range []bool{false, true} {
		in := sample(rng, f32)
		buf, err := Encode(nil, in)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		for _, im := range in {
			n += len(im.Dets)
		}
		per := 44
		if f32 {
			per = 24
		}
		if want := headerSize + 8*len(in) + per*n + 4; len(buf) != want {
			t.Errorf("f32=%v: %d bytes, want %d", f32, len(buf), want)
		}
		out, err := Decode(buf)
		if err != nil {
			t.Fatal(err)
		}
		for i := range in { // nil and empty detection lists are equivalent
			if len(in[i].Dets) == 0 {
				in[i].Dets, out[i].Dets = nil, nil
			}
		}
		if !reflect.DeepEqual(in, out) {
			t.Errorf("f32=%v: round trip changed the detections", f32)
		}
	}
}

// A value that float32 cannot hold keeps the buffer in float64: lossless.
func TestLosslessChoosesFloat64(t *testing.T) {
	in := []Image{{Index: 0, Dets: []box.Detection{{Box: box.Box{Xmax: 0.1}, Score: 0.5}}}}
	buf, _ := Encode(nil, in)
	out, err := Decode(buf)
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Dets[0].Box.Xmax != 0.1 {
		t.Fatalf("0.1 became %v", out[0].Dets[0].Box.Xmax)
	}
}

func TestEmpty(t *testing.T) {
	buf, err := Encode(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decode(buf)
	if err != nil || len(out) != 0 {
		t.Fatalf("%v %v", out, err)
	}
}

func TestCorruptionRejected(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	buf, _ := Encode(nil, sample(rng, false))
	for cut := 0; cut < len(buf); cut += 7 {
		if _, err := Decode(buf[:cut]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d bytes: err %v", cut, err)
		}
	}
	for i := 0; i < len(buf); i++ {
		b := bytes.Clone(buf)
		b[i] ^= 0x10
		if _, err := Decode(b); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("bit flip at byte %d accepted", i)
		}
	}
	b := bytes.Clone(buf)
	b[4] = 9 // version
	if _, err := Decode(b); err == nil || !bytes.Contains([]byte(err.Error()), []byte("version 9")) {
		t.Fatalf("future version: %v", err)
	}
}

func TestMergeCoverage(t *testing.T) {
	a, _ := Encode(nil, []Image{{Index: 0}, {Index: 2, Dets: []box.Detection{{Score: 1}}}})
	b, _ := Encode(nil, []Image{{Index: 1}})
	got, _, err := Merge([][]byte{a, b}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || len(got[2]) != 1 {
		t.Fatalf("merge: %v", got)
	}
	if _, _, err := Merge([][]byte{a, a}, 3); err == nil {
		t.Fatal("an image delivered twice was accepted")
	}
	if _, _, err := Merge([][]byte{a}, 3); err == nil {
		t.Fatal("a missing image was accepted")
	}
	if _, _, err := Merge([][]byte{a, b}, 2); err == nil {
		t.Fatal("an out-of-range image was accepted")
	}
}

// Losses travel bit for bit with their images, through Merge too; a buffer
// holds them for all of its images or for none.
func TestLosses(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	in := sample(rng, true)
	for i := range in {
		in[i].Loss = &box.Loss{Classification: float32(rng.Float64() * 3), BoxRegression: float32(i) * 0.1}
	}
	in[3].Loss.BoxRegression = 0
	buf, err := Encode(nil, in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decode(buf)
	if err != nil {
		t.Fatal(err)
	}
	for i := range in {
		if out[i].Loss == nil || *out[i].Loss != *in[i].Loss {
			t.Fatalf("image %d: loss %v, sent %v", i, out[i].Loss, *in[i].Loss)
		}
	}
	var rest []Image // the indices sample skips, without losses
	for j := 0; j < 60; j++ {
		if j%3 != 0 {
			rest = append(rest, Image{Index: j})
		}
	}
	none, _ := Encode(nil, rest)
	_, losses, err := Merge([][]byte{buf, none}, 60)
	if err != nil {
		t.Fatal(err)
	}
	if *losses[in[5].Index] != *in[5].Loss || losses[59] != nil || losses[1] != nil {
		t.Fatalf("merged losses: %v %v %v", losses[in[5].Index], losses[59], losses[1])
	}
	in[4].Loss = nil
	if _, err := Encode(nil, in); err == nil {
		t.Fatal("losses for some images of a buffer were accepted")
	}
}

func FuzzDecode(f *testing.F) {
	buf, _ := Encode(nil, []Image{{Index: 1, Dets: []box.Detection{{Box: box.Box{Xmax: math.Pi}, Score: 0.5}}}})
	f.Add(buf)
	f.Fuzz(func(t *testing.T, b []byte) {
		imgs, err := Decode(b)
		if err != nil {
			return
		}
		again, err := Encode(nil, imgs)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Decode(again); err != nil {
			t.Fatal(err)
		}
	})
}
