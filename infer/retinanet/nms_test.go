package retinanet

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// nmsTies is testdata/golden/retinanet/nms_ties.json, written by
// tools/retinanet/nms_ties.py: torchvision's nms and batched_nms on
// constructed exact ties, and torch's descending sort on tie-heavy vectors.
type nmsTies struct {
	Peer         map[string]any `json:"peer"`
	Capabilities []string       `json:"capabilities"`
	Command      string         `json:"command"`
	Cases        []struct {
		Name         string       `json:"name"`
		Note         string       `json:"note"`
		IoUThreshold float64      `json:"iou_threshold"`
		Boxes        [][4]float32 `json:"boxes"`
		Scores       []float32    `json:"scores"`
		Labels       []int        `json:"labels"`
		Keep         []int        `json:"keep"`
		BatchedKeep  []int        `json:"batched_keep"`
	} `json:"cases"`
	Sorts []struct {
		Values  []float32 `json:"values"`
		Indices []int     `json:"indices"`
	} `json:"sorts"`
}

// readFixture decodes testdata/golden/retinanet/NAME into v.
func readFixture(t testing.TB, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "golden", "retinanet", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func readNMSTies(t *testing.T) *nmsTies {
	t.Helper()
	var f nmsTies
	readFixture(t, "nms_ties.json", &f)
	if len(f.Cases) == 0 || len(f.Sorts) == 0 {
		t.Fatal("nms_ties.json holds no cases")
	}
	return &f
}

// TestNMSTies: nms, over the boxes in scoreOrder, keeps what
// torchvision.ops.nms keeps, in its order, on exact score ties, identical
// boxes and IoU exactly at the threshold.
func TestNMSTies(t *testing.T) {
	f := readNMSTies(t)
	t.Logf("peer %v (capabilities %v)", f.Peer, f.Capabilities)
	n := 0
	for _, c := range f.Cases {
		if c.Labels != nil {
			continue
		}
		n++
		got := nms(c.Boxes, scoreOrder(c.Scores), c.IoUThreshold, nil)
		if fmt.Sprint(got) != fmt.Sprint(c.Keep) {
			t.Errorf("%s (%s): nms keeps %v, torchvision %v", c.Name, c.Note, got, c.Keep)
		}
	}
	if n < 10 {
		t.Fatalf("only %d unlabelled cases", n)
	}
}

// TestBatchedNMSTies: batchedNMS keeps what torchvision.ops.batched_nms
// keeps, in its order, on both of its paths (coordinate offset up to 1,000
// boxes, per-class loop above).
func TestBatchedNMSTies(t *testing.T) {
	f := readNMSTies(t)
	paths := map[bool]int{}
	for _, c := range f.Cases {
		cs := make([]cand, len(c.Scores))
		for i := range cs {
			cs[i] = cand{box: c.Boxes[i], score: c.Scores[i], idx: i}
			if c.Labels != nil {
				cs[i].label = c.Labels[i]
			}
		}
		paths[len(cs) > 1000]++
		got := batchedNMS(cs, c.IoUThreshold)
		if fmt.Sprint(got) != fmt.Sprint(c.BatchedKeep) {
			t.Errorf("%s (%s): batchedNMS keeps %v, torchvision %v", c.Name, c.Note, got, c.BatchedKeep)
		}
	}
	if paths[false] == 0 || paths[true] == 0 {
		t.Fatalf("the fixture covers only one of batched_nms's paths: %v", paths)
	}
}

// TestTorchSortDesc: torchSortDesc is torch's descending (unstable) sort,
// ties included.
func TestTorchSortDesc(t *testing.T) {
	f := readNMSTies(t)
	unstable, heaps := 0, 0
	for i, s := range f.Sorts {
		got, h := torchSortDescHeaps(s.Values)
		heaps += h
		if fmt.Sprint(got) != fmt.Sprint(s.Indices) {
			t.Errorf("sort %d (n=%d): %v, torch %v", i, len(s.Values), first20(got), first20(s.Indices))
		}
		if fmt.Sprint(scoreOrder(s.Values)) != fmt.Sprint(s.Indices) {
			unstable++
		}
	}
	if unstable == 0 {
		t.Error("no sort in the fixture tells torch's sort from a stable one")
	}
	if heaps == 0 {
		t.Error("no sort in the fixture reaches the heap-sort fallback")
	}
	if got := torchSortDesc(nil); len(got) != 0 {
		t.Errorf("empty: %v", got)
	}
}

func first20(x []int) []int { return x[:min(len(x), 20)] }
