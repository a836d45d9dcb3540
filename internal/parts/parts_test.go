package parts

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/wire"
)

func TestRoundTripAndTornTail(t *testing.T) {
	out := t.TempDir()
	if err := Prepare(out, "run-a"); err != nil {
		t.Fatal(err)
	}
	w, err := Create(out, "run-a", 0, 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if err := w.Append([]wire.Image{{Index: i, Dets: []box.Detection{{Score: float64(i)}}, Loss: &box.Loss{Classification: float32(i) + 0.5, BoxRegression: 0.25}}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := ReadAll(out)
	if err != nil || len(files) != 1 {
		t.Fatalf("%v %v", files, err)
	}
	done, st, err := Decode(files, 10)
	if err != nil || len(done) != 5 || st.Dropped != 0 || done[3].Dets[0].Score != 3 || *done[3].Loss != (box.Loss{Classification: 3.5, BoxRegression: 0.25}) {
		t.Fatalf("%v %+v %v", done, st, err)
	}
	// a crash mid-write: the last record is cut short
	name := filepath.Join(out, Dir, files[0].Name)
	os.WriteFile(name, files[0].Data[:len(files[0].Data)-3], 0o644)
	files, _ = ReadAll(out)
	done, st, err = Decode(files, 10)
	if err != nil || len(done) != 4 || st.Dropped != 1 {
		t.Fatalf("torn tail: %d images, %+v, %v", len(done), st, err)
	}
	// a flipped byte in a record: that record and the rest of the file go
	b := append([]byte(nil), files[0].Data...)
	b[8+5] ^= 0xff
	done, st, _ = Decode([]File{{Name: "x.part", Data: b}}, 10)
	if len(done) != 0 || st.Dropped != 1 {
		t.Fatalf("corrupt first record: %d images %+v", len(done), st)
	}
	if _, _, err := Decode(files, 2); err == nil {
		t.Fatal("an image beyond the dataset was accepted")
	}
	if NextAttempt(files) != 1 {
		t.Fatalf("next attempt %d", NextAttempt(files))
	}
}

// A rank opens its part file only in a parts folder its own run owns: not
// in a folder of another run (a --force run's folder replaced by the
// previous run's), not where no run prepared one; and a folder renamed
// after Create opened it keeps the part file (it never lands in the folder
// that took the name).
func TestCreateOnlyInOwnRunsFolder(t *testing.T) {
	out := t.TempDir()
	if _, err := Create(out, "new", 0, 0, time.Hour); err == nil {
		t.Fatal("Create without a parts folder succeeded")
	}
	if err := Prepare(out, "old"); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(out, "new", 0, 0, time.Hour); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("another run's folder: %v, want ErrNotOwner", err)
	}
	w, err := Create(out, "old", 0, 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// the folder is set aside and another takes its name
	if err := os.Rename(filepath.Join(out, Dir), filepath.Join(out, "aside")); err != nil {
		t.Fatal(err)
	}
	if err := Prepare(out, "newer"); err != nil {
		t.Fatal(err)
	}
	if err := w.Append([]wire.Image{{Index: 0}}, nil); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if files, _ := ReadAll(out); len(files) != 0 {
		t.Fatalf("the record landed in the new folder: %v", files)
	}
	if st, err := os.Stat(filepath.Join(out, "aside", "part-000-00000.part")); err != nil || st.Size() == 0 {
		t.Fatalf("the record is not in the folder Create opened: %v", err)
	}
}

// TestDecodeStats: the counts Decode reports. A tail shorter than a length
// prefix is a dropped tail; an image found again (a retried attempt) keeps
// the first record's detections and counts as a duplicate.
func TestDecodeStats(t *testing.T) {
	img := func(i int, s float64) wire.Image {
		return wire.Image{Index: i, Dets: []box.Detection{{Box: box.Box{Xmax: 1, Ymax: 1}, Score: s}}}
	}
	a := append(record(t, []wire.Image{img(0, 0.5), img(1, 0.5)}), record(t, []wire.Image{img(2, 0.5)})...)
	a = append(a, 1, 2, 3) // a crash after three bytes of the next length
	b := record(t, []wire.Image{img(1, 0.25), img(3, 0.25)})
	done, st, err := Decode([]File{{Name: "part-000-00000.part", Data: a}, {Name: "part-001-00000.part", Data: b}}, 4)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Stats{Records: 3, Images: 4, Duplicates: 1, Dropped: 1}); st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	if len(done) != 4 || done[1].Dets[0].Score != 0.5 || done[3].Dets[0].Score != 0.25 {
		t.Errorf("images %v: image 1 must keep the first record's score 0.5", done)
	}
	if _, st, _ := Decode([]File{{Name: "x.part", Data: []byte{1, 2, 3, 4, 5, 6, 7}}}, 4); st != (Stats{Dropped: 1}) {
		t.Errorf("a 7-byte file: %+v, want one dropped tail", st)
	}
}

// A record keeps each image's identity beside its detections; a record of
// the first kind (a wire buffer alone, as canopy wrote before identities)
// still decodes, with no identity; a flipped identity byte drops the
// record; identities that do not match the images are refused.
func TestIdentities(t *testing.T) {
	out := t.TempDir()
	if err := Prepare(out, "r"); err != nil {
		t.Fatal(err)
	}
	w, err := Create(out, "r", 0, 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	id := Identity{Size: 412520, MtimeNS: -7, SHA256: [32]byte{1, 2, 3, 31: 9}}
	if err := w.Append([]wire.Image{{Index: 1}, {Index: 0, Dets: []box.Detection{{Score: 1}}}}, []Identity{{Size: 5}, id}); err != nil {
		t.Fatal(err)
	}
	if err := w.Append([]wire.Image{{Index: 2}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Append([]wire.Image{{Index: 3}}, []Identity{}); err == nil {
		t.Fatal("0 identities for 1 image accepted")
	}
	w.Close()
	files, _ := ReadAll(out)
	old := record(t, []wire.Image{{Index: 3}})
	done, st, err := Decode(append(files, File{Name: "old.part", Data: old}), 4)
	if err != nil || st.Dropped != 0 || len(done) != 4 {
		t.Fatalf("%v %+v %v", done, st, err)
	}
	if done[0].Ident == nil || *done[0].Ident != id || done[1].Ident == nil || done[1].Ident.Size != 5 || done[0].Dets[0].Score != 1 {
		t.Fatalf("identities: %+v %+v", done[0], done[1])
	}
	if done[2].Ident != nil || done[3].Ident != nil {
		t.Fatalf("a record without identities gave one: %+v %+v", done[2].Ident, done[3].Ident)
	}
	b := append([]byte(nil), files[0].Data...)
	b[8+identHeader+20] ^= 1 // inside the first identity's size
	if done, st, _ := Decode([]File{{Name: "x", Data: b}}, 4); len(done) != 0 || st.Dropped != 1 {
		t.Fatalf("a corrupt identity: %d images %+v", len(done), st)
	}
}

// TestScanEqualsDecode: reading record by record from disk finds what
// Decode finds in the bytes (a torn tail included), and keep filters.
func TestScanEqualsDecode(t *testing.T) {
	dir := t.TempDir()
	if err := Prepare(dir, "run"); err != nil {
		t.Fatal(err)
	}
	dets := []box.Detection{{Box: box.Box{Xmin: 1, Ymin: 2, Xmax: 3, Ymax: 4}, Label: 1, Score: 0.5}}
	for rank := range 2 {
		w, err := Create(dir, "run", 0, rank, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for k := range 5 {
			if err := w.Append([]wire.Image{{Index: 10*rank + k, Dets: dets}}, nil); err != nil {
				t.Fatal(err)
			}
		}
		w.Close()
	}
	p := filepath.Join(dir, Dir, "part-000-00001.part")
	b, _ := os.ReadFile(p)
	os.WriteFile(p, b[:len(b)-5], 0o644) // the last record torn
	files, err := ReadAll(dir)
	if err != nil {
		t.Fatal(err)
	}
	want, wst, err := Decode(files, 20)
	if err != nil {
		t.Fatal(err)
	}
	got, gst, names, err := Scan(dir, 20, nil)
	if err != nil || len(names) != 2 || gst != wst || len(got) != len(want) || len(got) != 9 {
		t.Fatalf("scan: %v %+v (decode %+v), %d images, decode %d, files %v", err, gst, wst, len(got), len(want), names)
	}
	for i, d := range want {
		if g, ok := got[i]; !ok || g.Index != d.Index || len(g.Dets) != len(d.Dets) {
			t.Fatalf("image %d: %+v, decode %+v", i, g, d)
		}
	}
	even, _, _, _ := Scan(dir, 20, func(i int) bool { return i%2 == 0 })
	if len(even) != 5 {
		t.Fatalf("keep: %d images", len(even))
	}
}
