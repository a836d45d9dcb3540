package report

import "strconv"

// FormatFloat writes the shortest decimal that round-trips, as Python's
// repr does, always with a decimal point or exponent.
func FormatFloat(f float64) string { return string(AppendFloat(nil, f)) }

// AppendFloat appends FormatFloat(f) to b.
func AppendFloat(b []byte, f float64) []byte {
	n := len(b)
	b = strconv.AppendFloat(b, f, 'g', -1, 64)
	for _, c := range b[n:] {
		if c == '.' || c == 'e' || c == 'n' || c == 'N' || c == 'I' {
			return b
		}
	}
	return append(b, ".0"...)
}
