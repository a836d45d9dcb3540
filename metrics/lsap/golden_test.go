package lsap

import (
	"testing"

	"github.com/canopy-hpc/canopy/internal/testsupport/testfile"
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
	testfile.ReadJSON(t, "../../testdata/golden/scipy/lsap.json", &g)
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
