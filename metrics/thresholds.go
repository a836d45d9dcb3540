package metrics

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxSweep is the most IoU thresholds one sweep may list.
const MaxSweep = 64

// ParseThresholds parses an IoU-threshold list (--iou-sweep): decimal
// numbers in [0, 1] separated by commas, each written with digits, one
// point and an optional exponent only (no hex, infinities, NaN, signs but
// an exponent's, spaces or empty items), no value twice, at most MaxSweep.
// -0 is not admitted (no sign), so every value has one spelling's worth of
// meaning.
func ParseThresholds(s string) ([]float64, error) {
	if s == "" {
		return nil, fmt.Errorf("metrics: empty IoU threshold list")
	}
	items := strings.Split(s, ",")
	if len(items) > MaxSweep {
		return nil, fmt.Errorf("metrics: %d IoU thresholds, at most %d", len(items), MaxSweep)
	}
	out := make([]float64, 0, len(items))
	for k, it := range items {
		if !plainDecimal(it) {
			return nil, fmt.Errorf("metrics: IoU threshold %d (%q) is not a plain decimal number", k+1, it)
		}
		v, err := strconv.ParseFloat(it, 64)
		if err != nil || !(v >= 0 && v <= 1) {
			return nil, fmt.Errorf("metrics: IoU threshold %q is not a number in [0, 1]", it)
		}
		for _, w := range out {
			if w == v {
				return nil, fmt.Errorf("metrics: IoU threshold %q is listed twice", it)
			}
		}
		out = append(out, v)
	}
	return out, nil
}

// plainDecimal: digits with at most one point (a digit on some side), then
// optionally e or E, an optional sign and digits.
func plainDecimal(s string) bool {
	mant, exp, hasExp := strings.Cut(strings.ToLower(s), "e")
	digits := 0
	point := false
	for _, c := range mant {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && !point:
			point = true
		default:
			return false
		}
	}
	if digits == 0 {
		return false
	}
	if !hasExp {
		return true
	}
	exp = strings.TrimPrefix(strings.TrimPrefix(exp, "-"), "+")
	if exp == "" || len(exp) > 4 {
		return false
	}
	for _, c := range exp {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
