package safetensors

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

// FuzzParse: whatever Parse accepts has, for every tensor, a float dtype and
// exactly prod(shape) values, the tensors' prod(shape)·dtype-size bytes fit
// in the data section, and writing the tensors back as F32 and reading them
// again gives the same shapes, bits and metadata.
func FuzzParse(f *testing.F) {
	for _, dt := range []string{"F32", "F16", "BF16"} {
		b, err := Encode(map[string]Tensor{"a.weight": {Shape: []int{2, 3}, Data: []float32{1, -2, 0.5, 3, 4, 5}},
			"b": {Shape: []int{}, Data: []float32{7}}, "z": {Shape: []int{0, 4}}}, dt, map[string]string{"format": "pt"})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("\x10\x00\x00\x00\x00\x00\x00\x00{}              "))
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, meta, err := Parse("f", b)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error without ErrFormat: %v", err)
			}
			return
		}
		data := len(b) - 8 - int(binary.LittleEndian.Uint64(b))
		used := 0
		for name, tn := range ts {
			n := 1
			for _, d := range tn.Shape {
				if d < 0 {
					t.Fatalf("%q: negative dimension %v", name, tn.Shape)
				}
				n *= d
			}
			size := map[string]int{"F32": 4, "F16": 2, "BF16": 2}[tn.DType]
			if size == 0 || n != len(tn.Data) {
				t.Fatalf("%q: dtype %s, shape %v, %d values", name, tn.DType, tn.Shape, len(tn.Data))
			}
			used += n * size
		}
		if used > data {
			t.Fatalf("tensors use %d bytes of a %d-byte data section", used, data)
		}
		// Every header entry, read tensors and skipped counters alike, holds
		// exactly prod(shape)·dtype size bytes, and together they fill the
		// data section.
		n := binary.LittleEndian.Uint64(b)
		entries, _, err := parseHeader(b[8 : 8+n])
		if err != nil {
			t.Fatalf("Parse accepted a header parseHeader refuses: %v", err)
		}
		total := uint64(0)
		for _, e := range entries {
			want := uint64(dtypeSize[e.dtype])
			for _, d := range e.shape {
				want *= uint64(d)
			}
			if e.end-e.begin != want {
				t.Fatalf("%q: %d bytes for %s %v", e.name, e.end-e.begin, e.dtype, e.shape)
			}
			total += want
		}
		if total != uint64(data) {
			t.Fatalf("entries hold %d bytes of a %d-byte data section", total, data)
		}
		if _, ok := ts[""]; ok {
			return // a legal name Encode does not write
		}
		again, err := Encode(ts, "F32", meta)
		if err != nil {
			t.Fatalf("the parsed tensors do not encode: %v", err)
		}
		back, meta2, err := Decode(again)
		if err != nil || len(back) != len(ts) || len(meta2) != len(meta) {
			t.Fatalf("round trip: %v, %d tensors then %d", err, len(ts), len(back))
		}
		for k, v := range meta {
			if meta2[k] != v {
				t.Fatalf("metadata %q: %q then %q", k, v, meta2[k])
			}
		}
		for name, tn := range ts {
			u := back[name]
			if len(u.Shape) != len(tn.Shape) || len(u.Data) != len(tn.Data) {
				t.Fatalf("%q: shape %v then %v", name, tn.Shape, u.Shape)
			}
			for i := range tn.Shape {
				if u.Shape[i] != tn.Shape[i] {
					t.Fatalf("%q: shape %v then %v", name, tn.Shape, u.Shape)
				}
			}
			for i, v := range tn.Data {
				if math.Float32bits(u.Data[i]) != math.Float32bits(v) {
					t.Fatalf("%q[%d]: %v then %v", name, i, v, u.Data[i])
				}
			}
		}
	})
}
