package points

import (
	"bytes"
	"math"
	"testing"

	"github.com/canopy-hpc/canopy/infer/treeformer"
)

func TestDecodeUnits(t *testing.T) {
	a := []treeformer.Point{{X: 1.5, Y: 2.25, Score: 0.75}, {X: math.Nextafter(3, 4), Y: 0, Score: 1}}
	b := appendUnit(appendUnit(nil, 1, a), 0, nil)
	got, err := decodeUnits(b, 2, nil)
	if err != nil || len(got[0]) != 0 || len(got[1]) != 2 || got[1][1] != a[1] || got[1][0] != a[0] {
		t.Fatalf("%v %v", got, err)
	}
	for name, bad := range map[string][]byte{
		"twice":     appendUnit(appendUnit(nil, 0, nil), 0, nil),
		"missing":   appendUnit(nil, 0, nil),
		"truncated": b[:len(b)-3],
		"range":     appendUnit(appendUnit(nil, 0, nil), 7, nil),
	} {
		if _, err := decodeUnits(bad, 2, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestWriteCSV(t *testing.T) {
	got := WriteCSV([]string{"a.png", "b,c.png"}, [][]treeformer.Point{{{X: 4, Y: 8.5, Score: 1}}, {{X: 0.1, Y: 2, Score: 0.5}}}, "Tree")
	want := "image_path,x,y,label,score\na.png,4.0,8.5,Tree,1.0\n\"b,c.png\",0.1,2.0,Tree,0.5\n"
	if string(got) != want {
		t.Fatalf("%q\nwant %q", got, want)
	}
}

// FuzzDecodeUnits: whatever the bytes, decodeUnits either refuses them or
// returns every unit once, and re-encoding gives back bytes that decode
// equal.
func FuzzDecodeUnits(f *testing.F) {
	f.Add(appendUnit(appendUnit(nil, 1, []treeformer.Point{{X: 1, Y: 2, Score: 0.5}}), 0, nil), 2)
	f.Add([]byte{}, 0)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		if n < 0 || n > 1000 {
			return
		}
		units, err := decodeUnits(b, n, nil)
		if err != nil {
			return
		}
		var re []byte
		for u, pts := range units {
			re = appendUnit(re, u, pts)
		}
		again, err := decodeUnits(re, n, nil)
		if err != nil || len(again) != n {
			t.Fatalf("re-encoded units refused: %v", err)
		}
		if !bytes.Equal(re, func() []byte {
			var x []byte
			for u, pts := range again {
				x = appendUnit(x, u, pts)
			}
			return x
		}()) {
			t.Fatal("re-encoding is not stable")
		}
	})
}
