package parts

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/wire"
)

func TestRoundTripAndTornTail(t *testing.T) {
	out := t.TempDir()
	w, err := Create(out, 0, 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if err := w.Append([]wire.Image{{Index: i, Dets: []box.Detection{{Score: float64(i)}}, Loss: &box.Loss{Classification: float32(i) + 0.5, BoxRegression: 0.25}}}); err != nil {
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
