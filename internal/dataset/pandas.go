package dataset

import (
	"strconv"
	"strings"
)

// PandasNumber reports whether pandas' read_csv (C parser, default
// options), reading a column whose every cell is like s, types it as a
// number (int64, uint64 or float64), and if so the cell's value as
// float64 (the value DeepForest's evaluate_boxes names a class by once
// iterrows() upcasts it beside a float). Checked against pandas 3.1.1:
// surrounding blanks are allowed; "0", "+1", "00", "1.", ".5", "1e3" are
// numbers; "1_000", "0x10", "1,0" and full-width digits are text. pandas
// also reads "inf", "nan", "NA" and the other missing-value markers as
// floats; canopy treats those as text (DeepForest drops NaN labels), and an
// integer beyond uint64 (an object column in pandas) as text too.
func PandasNumber(s string) (float64, bool) {
	s = strings.Trim(s, " \t")
	if s == "" {
		return 0, false
	}
	if isInt(s) {
		if _, err := strconv.ParseInt(s, 10, 64); err == nil {
			f, _ := strconv.ParseFloat(s, 64)
			return f, true
		}
		if _, err := strconv.ParseUint(strings.TrimPrefix(s, "+"), 10, 64); err == nil {
			f, _ := strconv.ParseFloat(s, 64)
			return f, true
		}
		return 0, false
	}
	if !isDecimalFloat(s) {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, false // out of range: pandas' xstrtod gives inf; left as text
	}
	return f, true
}

func isInt(s string) bool {
	if s[0] == '+' || s[0] == '-' {
		s = s[1:]
	}
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// isDecimalFloat: [+-]? (digits [. digits?] | . digits) ([eE] [+-]? digits)?
func isDecimalFloat(s string) bool {
	if s[0] == '+' || s[0] == '-' {
		s = s[1:]
	}
	mant, exp := s, ""
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, exp = s[:i], s[i+1:]
		if exp != "" && (exp[0] == '+' || exp[0] == '-') {
			exp = exp[1:]
		}
		if exp == "" || strings.Trim(exp, "0123456789") != "" {
			return false
		}
	}
	whole, frac, _ := strings.Cut(mant, ".")
	if whole == "" && frac == "" {
		return false
	}
	return strings.Trim(whole, "0123456789") == "" && strings.Trim(frac, "0123456789") == ""
}

// NumericLabels reports whether pandas would type the label column of
// these rows (every row, 0,0,0,0 rows included) as numbers.
func NumericLabels(rows []Row) bool {
	for _, r := range rows {
		if _, ok := PandasNumber(r.Label); !ok {
			return false
		}
	}
	return len(rows) > 0
}
