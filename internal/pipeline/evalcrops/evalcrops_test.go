package evalcrops

import (
	"encoding/binary"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/errkind"
)

// logitRecord is one crop's record as a rank sends it: its index, its
// score and its logits.
func logitRecord(i uint32, vals ...float32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, i)
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

// The gathered logits land at their crop's index whatever rank sent
// them; a crop sent twice, sent by no rank, out of range, or a torn
// record is refused.
func TestMergeLogits(t *testing.T) {
	a := append(logitRecord(2, 0.75, 1, 2), logitRecord(0, 0.5, 3, 4)...)
	b := logitRecord(1, 0.25, 5, 6)
	logits, scores, err := mergeLogits([][]byte{a, b}, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []float32{3, 4, 5, 6, 1, 2}; !reflect.DeepEqual(logits, want) {
		t.Errorf("logits %v, want %v", logits, want)
	}
	if want := []float32{0.5, 0.25, 0.75}; !reflect.DeepEqual(scores, want) {
		t.Errorf("scores %v, want %v", scores, want)
	}
	for name, c := range map[string]struct {
		parts [][]byte
		msg   string
	}{
		"twice":   {[][]byte{a, logitRecord(0, 0.5, 3, 4)}, "twice or out of range"},
		"missing": {[][]byte{a}, "classified by no rank"},
		"range":   {[][]byte{a, logitRecord(3, 0.5, 3, 4)}, "twice or out of range"},
		"torn":    {[][]byte{a, b[:len(b)-1]}, "not whole records"},
	} {
		if _, _, err := mergeLogits(c.parts, 3, 2); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.msg)
		}
	}
}

// FuzzFolderPacket: eval-crops' folder listing, as rank 0 broadcasts it:
// a packet that unpacks packs back to a listing that unpacks the same.
func FuzzFolderPacket(f *testing.F) {
	f.Add(collective.PackFields([]byte{0}, folderFields(&dataset.ImageFolder{Classes: []string{"a", "b"},
		Samples: []dataset.FolderSample{{Class: "a", Path: "a/x.png"}, {Class: "b", Path: "b/c/y.png"}},
		Skipped: []string{"a/n.txt"}, Dropped: []string{"a/d/z.png"}})...))
	f.Add(append([]byte{byte(errkind.ExitInput)}, "dataset: bad folder"...))
	f.Fuzz(func(t *testing.T, pkt []byte) {
		fields, err := collective.UnpackPacket(pkt, 4)
		if err != nil {
			return
		}
		a, err := unpackFolder(fields)
		if err != nil {
			return
		}
		b, err := unpackFolder(folderFields(a))
		if err != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("%+v repacked as %+v (%v)", a, b, err)
		}
	})
}

// FuzzMergeLogits: gathered crop outputs merge only when every crop came
// exactly once, and the merge re-encoded in crop order merges to the same
// bits.
func FuzzMergeLogits(f *testing.F) {
	rec := logitRecord
	f.Add(rec(1, 0.5, 1, 2), rec(0, 0.25, -1, 3), uint8(2), uint8(2))
	f.Add(rec(0, 0.5, 1, 2), rec(0, 0.25, -1, 3), uint8(2), uint8(2))
	f.Fuzz(func(t *testing.T, a, b []byte, n, k uint8) {
		logits, scores, err := mergeLogits([][]byte{a, b}, int(n), int(k))
		if err != nil {
			return
		}
		var one []byte
		for i := range int(n) {
			one = append(one, rec(uint32(i), append([]float32{scores[i]}, logits[i*int(k):(i+1)*int(k)]...)...)...)
		}
		l2, s2, err := mergeLogits([][]byte{one}, int(n), int(k))
		if err != nil {
			t.Fatal(err)
		}
		for i := range logits {
			if math.Float32bits(l2[i]) != math.Float32bits(logits[i]) {
				t.Fatalf("logit %d changed", i)
			}
		}
		for i := range scores {
			if math.Float32bits(s2[i]) != math.Float32bits(scores[i]) {
				t.Fatalf("score %d changed", i)
			}
		}
	})
}
