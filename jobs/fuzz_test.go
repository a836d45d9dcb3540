package jobs

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// FuzzInputPacket: rank 0's broadcast packet. Any bytes unpack without
// panic, to inputs or an error carrying an exit code; what unpacks packs
// back to the same bytes.
func FuzzInputPacket(f *testing.F) {
	f.Add(packFields([]byte{0}, []byte("image_path\n"), nil, []byte("Tree,0\n"), []byte("nonce"),
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
		if again := packFields([]byte{0}, fields...); !bytes.Equal(again, pkt) {
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

// FuzzCompareReport: compare's reader. What it accepts has finite values,
// one row per key, and compares with itself as "same" everywhere, even
// with --fail-on change.
func FuzzCompareReport(f *testing.F) {
	for _, n := range []string{"baseline.json", "per_class_reordered.json", "not_a_report.json"} {
		if b, err := os.ReadFile(filepath.Join("testdata", "compare", n)); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"metrics":{"box_recall":0.5,"map_per_class":[0.1,null],"classes":[3,7],"map":-1,"iou":null},"run":{"inputs":{}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseCompareReport("r.json", b)
		if err != nil {
			return
		}
		m := r.metrics
		if len(m.order) != len(m.cells) {
			t.Fatalf("%d keys in order, %d cells", len(m.order), len(m.cells))
		}
		for _, k := range m.order {
			c, ok := m.cells[k]
			if !ok || math.IsNaN(c.v) || math.IsInf(c.v, 0) {
				t.Fatalf("%q: %+v, %v", k, c, ok)
			}
		}
		for _, row := range compareRows(m, m, nil, 0, FailOnChange) {
			if row.verdict != verdictSame || row.regression {
				t.Fatalf("%q compared with itself: %s", row.key, row.verdict)
			}
		}
	})
}

// FuzzTolerances: --tolerance accepts only finite tolerances >= 0.
func FuzzTolerances(f *testing.F) {
	for _, s := range []string{"default=0.02", "map=0.01,box_recall=0", "map=1e400", "x=-0", "x=NaN", "=1", "map_per_class=0x1p-4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		tols, def, err := parseTolerances([]string{spec})
		if err != nil {
			return
		}
		for k, v := range tols {
			if k == "" || !(v >= 0) || math.IsInf(v, 0) {
				t.Fatalf("%q: tolerance %q = %v", spec, k, v)
			}
		}
		if !(def >= 0) || math.IsInf(def, 0) {
			t.Fatalf("%q: default tolerance %v", spec, def)
		}
	})
}
