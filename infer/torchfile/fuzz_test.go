package torchfile

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// FuzzRead: Read never panics; what it refuses matches ErrFormat; what it
// accepts converts, tensor by tensor, into exactly Numel float32 values or
// an ErrFormat error, and never more elements in all than its storages
// hold.
func FuzzRead(f *testing.F) {
	for _, name := range []string{"state_f32.pt", "state_bf16.pt", "state_proto5.pt", "hparams.pt", "views.pt"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(archive(f, tensorPickle(6, 0, []int32{2, 3}, []int32{3, 1}), map[string][]byte{"data/0": make([]byte, 24)}))
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Read("f.pt", bytes.NewReader(b), int64(len(b)))
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error without ErrFormat: %v", err)
			}
			return
		}
		var total int64
		var walk func(v any, depth int)
		seen := map[any]bool{}
		walk = func(v any, depth int) {
			if depth > 64 {
				return
			}
			switch v := v.(type) {
			case *Tensor:
				if seen[v] {
					return
				}
				seen[v] = true
				if v.Offset+v.Numel() > v.Storage.Numel {
					t.Fatalf("tensor %v+%d past storage %d", v.Shape, v.Offset, v.Storage.Numel)
				}
				data, err := file.Float32(v)
				if err != nil {
					if !errors.Is(err, ErrFormat) {
						t.Fatalf("Float32 error without ErrFormat: %v", err)
					}
					return
				}
				if int64(len(data)) != v.Numel() {
					t.Fatalf("%d values for shape %v", len(data), v.Shape)
				}
				total += int64(len(data))
			case *Dict:
				if seen[v] {
					return
				}
				seen[v] = true
				for _, x := range v.Values {
					walk(x, depth+1)
				}
			case *List:
				if seen[v] {
					return
				}
				seen[v] = true
				for _, x := range v.Items {
					walk(x, depth+1)
				}
			case Tuple:
				for _, x := range v {
					walk(x, depth+1)
				}
			}
		}
		walk(file.Root, 0)
		if total > file.stored {
			t.Fatalf("%d elements converted from %d stored", total, file.stored)
		}
	})
}
