package metrics

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParseThresholds(t *testing.T) {
	good := map[string][]float64{
		"0.5":              {0.5},
		"0.5,0.75,0":       {0.5, 0.75, 0},
		"1,.25,5e-1,1E-2":  {1, 0.25, 0.5, 0.01},
		"0.50000000000001": {0.50000000000001},
	}
	for s, want := range good {
		got, err := ParseThresholds(s)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%q: %v, %v; want %v", s, got, err, want)
		}
	}
	many := strings.Repeat("0.1,", MaxSweep)
	for _, s := range []string{"", ",", "0.5,", ",0.5", "0.5,,0.6", " 0.5", "0.5 ", "1.5", "-0", "-0.1", "+0.5",
		"0x1p-1", "NaN", "inf", "0.5,0.5", "0.5,5e-1", "1e", "1e+", "0.5e99999", "1_0", ".", "0..5", "0.5.1", "5%",
		strings.TrimSuffix(many, ",") + ",0.2"} {
		if v, err := ParseThresholds(s); err == nil {
			t.Errorf("%q accepted as %v", s, v)
		}
	}
}

// FuzzParseThresholds: a list is refused or gives distinct values in
// [0, 1], at most MaxSweep, that each read back from their shortest form.
func FuzzParseThresholds(f *testing.F) {
	for _, s := range []string{"0.5", "0.4,0.5,0.75", "1,.25,5e-1", "0.5,0.5", "NaN", "-0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseThresholds(s)
		if err != nil {
			return
		}
		if len(v) == 0 || len(v) > MaxSweep {
			t.Fatalf("%q: %d values", s, len(v))
		}
		for k, x := range v {
			if !(x >= 0 && x <= 1) || slices.Contains(v[:k], x) {
				t.Fatalf("%q: value %v out of range or repeated", s, x)
			}
			again, err := ParseThresholds(strconv.FormatFloat(x, 'g', -1, 64))
			if err != nil || len(again) != 1 || again[0] != x {
				t.Fatalf("%q: %v does not read back (%v, %v)", s, x, again, err)
			}
		}
	})
}
