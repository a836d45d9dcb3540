package metrics

import "testing"

// TestPyFloatRepr: Python 3's repr of these floats.
func TestPyFloatRepr(t *testing.T) {
	for v, want := range map[float64]string{0: "0.0", 1: "1.0", 10: "10.0", 0.1: "0.1", 1.5: "1.5",
		1e15: "1000000000000000.0", 1e16: "1e+16", 123456789012345678: "1.2345678901234568e+17",
		0.0001: "0.0001", 1.5e-05: "1.5e-05", -2: "-2.0", 1e100: "1e+100"} {
		if got := PyFloatRepr(v); got != want {
			t.Errorf("PyFloatRepr(%v) = %q, Python %q", v, got, want)
		}
	}
}
