package output

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/report"
)

// MetricsJSON renders metric values as a flat JSON object in their order,
// null for NaN/None. It is also the byte string the agreement check hashes.
func MetricsJSON(vals []metrics.Value) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, v := range vals {
		if i > 0 {
			b.WriteString(", ")
		}
		k, _ := json.Marshal(v.Key)
		b.Write(k)
		b.WriteString(": ")
		b.WriteString(FormatValue(v))
	}
	b.WriteByte('}')
	return b.Bytes()
}

// SweepJSON is report.json's metrics_by_iou_threshold: one entry per
// --iou-sweep threshold, in the order given, holding the threshold and the
// recall and iou families' values at it (MetricsJSON's form); nil without a
// sweep.
func SweepJSON(thresholds []float64, vals [][]metrics.Value) []byte {
	if len(thresholds) == 0 {
		return nil
	}
	var b bytes.Buffer
	b.WriteString("[")
	for k, thr := range thresholds {
		if k > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "\n  {\"iou_threshold\": %s, \"metrics\": %s}", FormatValue(metrics.Value{V: thr}), bytes.TrimSpace(MetricsJSON(vals[k])))
	}
	b.WriteString("\n ]")
	return b.Bytes()
}

// FormatValue is one metric value as report.json writes it: Python's
// float repr, a list for the per-class and integer values, null for a
// NaN, an infinity or None.
func FormatValue(v metrics.Value) string {
	if v.Ints != nil {
		parts := make([]string, len(v.Ints))
		for i, x := range v.Ints {
			parts[i] = strconv.Itoa(x)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	if v.Array != nil {
		parts := make([]string, len(v.Array))
		for i, x := range v.Array {
			parts[i] = FormatValue(metrics.Value{V: x})
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	if v.Null || math.IsNaN(v.V) || math.IsInf(v.V, 0) {
		return "null"
	}
	return report.FormatFloat(v.V)
}

// PrintTable prints the metrics like Lightning's "Validate metric" table.
func PrintTable(w io.Writer, vals []metrics.Value) {
	kw, vw := len("Validate metric"), len("DataLoader 0")
	cells := make([]string, len(vals))
	keys := make([]string, len(vals))
	for i, v := range vals {
		cells[i] = FormatValue(v)
		keys[i] = box.Printable(v.Key) // a label may hold terminal escapes
		kw = max(kw, utf8.RuneCountInString(keys[i]))
		vw = max(vw, len(cells[i]))
	}
	kw, vw = kw+6, vw+6
	center := func(s string, n int) string {
		pad := n - utf8.RuneCountInString(s)
		l := pad / 2
		return strings.Repeat(" ", l) + s + strings.Repeat(" ", pad-l)
	}
	line := func(l, m, r, f string) {
		fmt.Fprintln(w, l+strings.Repeat(f, kw)+m+strings.Repeat(f, vw)+r)
	}
	line("┏", "┳", "┓", "━")
	fmt.Fprintln(w, "┃"+center("Validate metric", kw)+"┃"+center("DataLoader 0", vw)+"┃")
	line("┡", "╇", "┩", "━")
	for i := range vals {
		fmt.Fprintln(w, "│"+center(keys[i], kw)+"│"+center(cells[i], vw)+"│")
	}
	line("└", "┴", "┘", "─")
}
