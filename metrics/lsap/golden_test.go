package lsap

import (
	"encoding/json"
	"os"
	"testing"
)

// TestAssignScipyGolden compares exact assignments, ties included, with
// scipy.optimize.linear_sum_assignment (testdata/golden/scipy/lsap.json,
// made by tools/scipy/lsap_golden.py; the file records scipy's version).
func TestAssignScipyGolden(t *testing.T) {
	var g struct {
		Version string
		Cases   []struct {
			Rows, Cols int
			Cost       []float64
			Maximize   bool
			ColForRow  []int `json:"col_for_row"`
		}
	}
	b, err := os.ReadFile("../../testdata/golden/scipy/lsap.json")
	if err == nil {
		err = json.Unmarshal(b, &g)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Cases) == 0 {
		t.Fatal("no cases")
	}
	for i, c := range g.Cases {
		got, err := Assign(c.Cost, c.Rows, c.Cols, c.Maximize)
		if err != nil {
			t.Fatal(err)
		}
		for r := range got {
			if got[r] != c.ColForRow[r] {
				t.Errorf("case %d (%dx%d maximize=%v): got %v, scipy %s gives %v", i, c.Rows, c.Cols, c.Maximize, got, g.Version, c.ColForRow)
				break
			}
		}
	}
}
