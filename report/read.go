package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/canopy-hpc/canopy/internal/jsonorder"
)

// File is an input a report records: its path and sha256 (run.Inputs).
type File struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
}

// Cell is one side of a metric row.
type Cell struct {
	Present bool    // the key is in the report
	Null    bool    // its value is null
	V       float64 // its value otherwise
}

func (c Cell) defined() bool { return c.Present && !c.Null && c.V != -1 }

func (c Cell) String() string {
	switch {
	case !c.Present:
		return "absent"
	case c.Null:
		return "null"
	}
	return FormatFloat(c.V)
}

// Metrics are a report's metrics flattened into rows: scalars under
// their key, array elements as key[id].
type Metrics struct {
	order  []string
	cells  map[string]Cell
	arrays map[string]bool // keys that hold arrays
}

// Report is what compare reads of a report.json.
type Report struct {
	Path    string          // the report.json read
	Inputs  map[string]File // run.inputs
	metrics Metrics
	run     map[string]json.RawMessage
}

// Read reads path, a report.json or a folder holding one.
func Read(path string) (*Report, error) { return ReadWith(path, os.ReadFile) }

// ReadWith is Read with the file read by read (canopy compare passes one
// that does not block on a FIFO nor read a device).
func ReadWith(path string, read func(string) ([]byte, error)) (*Report, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "report.json")
	}
	b, err := read(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, b)
}

// Parse parses the bytes b of the report at path.
func Parse(path string, b []byte) (*Report, error) {
	var top struct {
		Metrics json.RawMessage `json:"metrics"`
		Sweep   []struct {
			IoU     *float64        `json:"iou_threshold"`
			Metrics json.RawMessage `json:"metrics"`
		} `json:"metrics_by_iou_threshold"`
		Run map[string]json.RawMessage `json:"run"`
	}
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, fmt.Errorf("%s: not a canopy report: %w", path, err)
	}
	if len(top.Metrics) == 0 || bytes.Equal(bytes.TrimSpace(top.Metrics), []byte("null")) {
		return nil, fmt.Errorf("%s: not a canopy report: no \"metrics\" object", path)
	}
	m, err := parseMetrics(top.Metrics)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// --iou-sweep's thresholds: their rows are "@<threshold>/<key>"
	seenIoU := map[float64]bool{}
	for k, e := range top.Sweep {
		if e.IoU == nil || !(*e.IoU >= 0 && *e.IoU <= 1) || seenIoU[*e.IoU] {
			return nil, fmt.Errorf("%s: metrics_by_iou_threshold[%d]: want a distinct iou_threshold in [0, 1]", path, k)
		}
		seenIoU[*e.IoU] = true
		sm, err := parseMetrics(e.Metrics)
		if err != nil {
			return nil, fmt.Errorf("%s: metrics_by_iou_threshold[%d]: %w", path, k, err)
		}
		m.addSweep(*e.IoU, sm)
	}
	r := &Report{Path: path, Inputs: map[string]File{}, metrics: m, run: top.Run}
	if raw, ok := top.Run["inputs"]; ok {
		if err := json.Unmarshal(raw, &r.Inputs); err != nil {
			return nil, fmt.Errorf("%s: run.Inputs: %w", path, err)
		}
	}
	return r, nil
}

// SweepPrefix is the row prefix of an --iou-sweep threshold's metrics.
func SweepPrefix(iou float64) string { return "@" + FormatFloat(iou) + "/" }

// addSweep appends the rows of one sweep threshold, prefixed.
func (m *Metrics) addSweep(iou float64, o Metrics) {
	p := SweepPrefix(iou)
	for _, k := range o.order {
		if _, dup := m.cells[p+k]; !dup {
			m.order = append(m.order, p+k)
		}
		m.cells[p+k] = o.cells[k]
	}
	for k := range o.arrays {
		m.arrays[p+k] = true
	}
}

// parseMetrics flattens the "metrics" object in its key order.
func parseMetrics(raw json.RawMessage) (Metrics, error) {
	m := Metrics{cells: map[string]Cell{}, arrays: map[string]bool{}}
	members, err := jsonorder.Members(raw)
	if errors.Is(err, jsonorder.ErrNotObject) {
		return m, errors.New("\"metrics\" is not an object")
	}
	if err != nil {
		return m, fmt.Errorf("metrics: %w", err)
	}
	var entries []jsonorder.Member
	var classes []float64
	for _, e := range members {
		if e.Key == "classes" {
			if err := json.Unmarshal(e.Value, &classes); err != nil {
				return m, fmt.Errorf("metrics: classes: want an array of class ids: %w", err)
			}
			continue
		}
		entries = append(entries, e)
	}
	ids := make([]int, len(classes))
	seen := map[int]bool{}
	for i, c := range classes {
		if c != math.Trunc(c) || math.Abs(c) > 1<<31 {
			return m, fmt.Errorf("metrics: classes: %v is not a class id", c)
		}
		ids[i] = int(c)
		if seen[ids[i]] {
			return m, fmt.Errorf("metrics: classes: id %d appears twice", ids[i])
		}
		seen[ids[i]] = true
	}
	add := func(k string, c Cell) {
		if _, dup := m.cells[k]; !dup {
			m.order = append(m.order, k)
		}
		m.cells[k] = c
	}
	for _, e := range entries {
		v := bytes.TrimSpace(e.Value)
		switch {
		case bytes.Equal(v, []byte("null")):
			add(e.Key, Cell{Present: true, Null: true})
		case len(v) > 0 && v[0] == '[':
			var arr []*float64
			if err := json.Unmarshal(v, &arr); err != nil {
				return m, fmt.Errorf("metrics: %s: want an array of numbers or Null: %w", e.Key, err)
			}
			if classes != nil && len(classes) != len(arr) {
				return m, fmt.Errorf("metrics: %s has %d values but classes has %d ids", e.Key, len(arr), len(classes))
			}
			m.arrays[e.Key] = true
			for i, x := range arr {
				id := i
				if classes != nil {
					id = ids[i]
				}
				c := Cell{Present: true, Null: x == nil}
				if x != nil {
					c.V = *x
				}
				add(fmt.Sprintf("%s[%d]", e.Key, id), c)
			}
		default:
			var f float64
			if err := json.Unmarshal(v, &f); err != nil {
				return m, fmt.Errorf("metrics: %s: want a number, null or an array: %w", e.Key, err)
			}
			add(e.Key, Cell{Present: true, V: f})
		}
	}
	return m, nil
}
