package dataset

import "testing"

// TestPandasNumber: the cells pandas 3.1.1's read_csv types as numbers
// (checked with pd.read_csv on a one-cell label column: int64, uint64,
// float64) and those it leaves as text (str, object) or canopy leaves as
// text (missing-value markers, which pandas reads as NaN).
func TestPandasNumber(t *testing.T) {
	nums := map[string]float64{"0": 0, " 0": 0, "0 ": 0, "+1": 1, "-1": -1, "1.": 1, "1.5": 1.5,
		".5": 0.5, "1e3": 1000, "1E+3": 1000, "00": 0, "9223372036854775808": 9223372036854775808}
	for s, want := range nums {
		if got, ok := PandasNumber(s); !ok || got != want {
			t.Errorf("PandasNumber(%q) = %v, %v; pandas reads %v", s, got, ok, want)
		}
	}
	for _, s := range []string{"Tree", "", " ", "1_000", "0x10", "1,0", "１", "True", "inf", "nan", "NA",
		"18446744073709551616", "e3", ".", "1e", "+", "1.2.3", "--1"} {
		if got, ok := PandasNumber(s); ok {
			t.Errorf("PandasNumber(%q) = %v, true; want text", s, got)
		}
	}
	if NumericLabels([]Row{{Label: "0"}, {Label: "Tree"}}) || !NumericLabels([]Row{{Label: "0"}, {Label: "2.5"}}) {
		t.Error("NumericLabels: a column is numeric only when every cell is")
	}
}
