package jobs

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"reflect"
	"testing"

	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/dataset"
)

// FuzzInputPacket: rank 0's broadcast packet. Any bytes unpack without
// panic, to inputs or an error carrying an exit code; what unpacks packs
// back to the same bytes.
func FuzzInputPacket(f *testing.F) {
	f.Add(collective.PackFields([]byte{0}, []byte("image_path\n"), nil, []byte("Tree,0\n"), []byte("nonce"),
		binary.LittleEndian.AppendUint64(nil, 2), []byte("/m"), []byte("abc"), []byte(""), []byte("part bytes")))
	f.Add(append([]byte{byte(ExitInput)}, "jobs: bad csv"...))
	f.Add([]byte{0, 1, 0, 0})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		in, err := unpackInputs(pkt)
		if err != nil {
			if len(pkt) > 0 && pkt[0] != 0 && Code(err) != int(pkt[0]) {
				t.Fatalf("error packet with code %d gives exit %d", pkt[0], Code(err))
			}
			return
		}
		fields := [][]byte{in.csv, in.preds, in.labels, []byte(in.probe), binary.LittleEndian.AppendUint64(nil, uint64(in.attempt)),
			[]byte(in.modelDir), []byte(in.modelDigest), []byte(in.modelConfig)}
		for _, p := range in.parts {
			fields = append(fields, p.Data)
		}
		if again := collective.PackFields([]byte{0}, fields...); !bytes.Equal(again, pkt) {
			t.Fatalf("repacked %q as %q", pkt, again)
		}
	})
}

// FuzzManifest: a manifest.json that parses survives a write and read back
// with no difference --resume would see.
func FuzzManifest(f *testing.F) {
	b, _ := json.MarshalIndent(newManifest(EvalConfig{}, inputs{csv: []byte("x")}), "", " ")
	f.Add(b)
	f.Add([]byte(`{"canopy":"0.1.0","detector":"retinanet weights sha256 ab","detector_settings":{"nms_thresh_flag":"-1"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m manifest
		if json.Unmarshal(b, &m) != nil {
			return
		}
		out, err := json.MarshalIndent(m, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		var back manifest
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatal(err)
		}
		if d := m.diff(back); len(d) > 0 {
			t.Fatalf("round trip differs: %v", d)
		}
	})
}

// FuzzFolderPacket: eval-crops' folder listing, as rank 0 broadcasts it:
// a packet that unpacks packs back to a listing that unpacks the same.
func FuzzFolderPacket(f *testing.F) {
	f.Add(collective.PackFields([]byte{0}, folderFields(&dataset.ImageFolder{Classes: []string{"a", "b"},
		Samples: []dataset.FolderSample{{Class: "a", Path: "a/x.png"}, {Class: "b", Path: "b/c/y.png"}},
		Skipped: []string{"a/n.txt"}, Dropped: []string{"a/d/z.png"}})...))
	f.Add(append([]byte{byte(ExitInput)}, "dataset: bad folder"...))
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
	rec := func(i uint32, vals ...float32) []byte {
		b := binary.LittleEndian.AppendUint32(nil, i)
		for _, v := range vals {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
		return b
	}
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
