package parts

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/wire"
)

// record frames images as Writer.Append does.
func record(t testing.TB, images []wire.Image) []byte {
	b, err := wire.Encode(make([]byte, 8), images)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint64(b, uint64(len(b)-8))
	return b
}

// identRecord frames images with their identities as Writer.Append does.
func identRecord(t testing.TB, images []wire.Image, ids []Identity) []byte {
	dir := t.TempDir()
	if err := Prepare(dir, "f"); err != nil {
		t.Fatal(err)
	}
	w, err := Create(dir, "f", 0, 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Append(images, ids); err != nil {
		t.Fatal(err)
	}
	w.Close()
	files, err := ReadAll(dir)
	if err != nil || len(files) != 1 {
		t.Fatal(files, err)
	}
	return files[0].Data
}

// FuzzDecode: any bytes as a part file decode without panic; every image
// found is in range, with finite, non-inverted boxes; and the images found,
// framed again one record each, decode to the same images with nothing
// dropped.
func FuzzDecode(f *testing.F) {
	dets := []box.Detection{{Box: box.Box{Xmin: 1, Ymin: 2, Xmax: 3, Ymax: 4}, Label: 1, Score: 0.5}}
	good := append(record(f, []wire.Image{{Index: 0, Dets: dets}}), record(f, []wire.Image{{Index: 2}, {Index: 1, Dets: dets}})...)
	f.Add(good, 3)
	f.Add(good[:len(good)-3], 3) // a record cut short by a kill
	f.Add([]byte{}, 1)
	f.Add(identRecord(f, []wire.Image{{Index: 1, Dets: dets}}, []Identity{{Size: 9, MtimeNS: 1}}), 2)
	f.Add(record(f, []wire.Image{{Index: 0, Dets: []box.Detection{{Box: box.Box{Xmin: 3, Xmax: 1}}}}}), 1) // inverted: refused
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		n = max(0, min(n, 1<<16))
		done, st, err := Decode([]File{{Name: "part-000-00000.part", Data: b}}, n)
		if err != nil {
			return
		}
		if st.Images != len(done) || st.Dropped > 1 {
			t.Fatalf("stats %+v for %d images", st, len(done))
		}
		var again []byte
		for i := 0; i < n; i++ {
			im, ok := done[i]
			if !ok {
				continue
			}
			if im.Index != i {
				t.Fatalf("image %d filed under %d", im.Index, i)
			}
			for _, d := range im.Dets {
				if b := d.Box; !(b.Xmin <= b.Xmax && b.Ymin <= b.Ymax && finite(b.Xmin, b.Ymin, b.Xmax, b.Ymax, d.Score)) {
					t.Fatalf("image %d: invalid box %+v", i, d.Box)
				}
			}
			again = append(again, record(t, []wire.Image{im.Image})...)
		}
		back, st2, err := Decode([]File{{Name: "again", Data: again}}, n)
		if err != nil || st2.Dropped != 0 || len(back) != len(done) {
			t.Fatalf("re-framed: %v, %+v, %d images then %d", err, st2, len(done), len(back))
		}
	})
}

func finite(vs ...float64) bool {
	for _, v := range vs {
		if v-v != 0 {
			return false
		}
	}
	return true
}

// A record whose checksum holds but whose box is inverted or not finite is
// refused, not resumed from.
func TestDecodeRefusesBadBoxes(t *testing.T) {
	for _, b := range []box.Box{{Xmin: 3, Xmax: 1}, {Ymin: 2, Ymax: 1}, {Xmax: math.Inf(1)}} {
		_, _, err := Decode([]File{{Name: "p", Data: record(t, []wire.Image{{Index: 0, Dets: []box.Detection{{Box: b}}}})}}, 1)
		if err == nil || !strings.Contains(err.Error(), "non-finite or inverted box") {
			t.Errorf("%+v: %v", b, err)
		}
	}
}
