package jobs

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"testing"

	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/pipeline/eval"
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
		fields := [][]byte{in.CSV, in.Preds, in.Labels, []byte(in.probe), binary.LittleEndian.AppendUint64(nil, uint64(in.attempt)),
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
	b, _ := json.MarshalIndent(newManifest(EvalConfig{}, inputs{Inputs: eval.Inputs{CSV: []byte("x")}}), "", " ")
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
