package cudnn

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"
)

// PlanKey is what a plan file's timings hold for: the same cuDNN, the same
// GPU model, compute capability and SM count.
type PlanKey struct {
	CUDNN int    `json:"cudnn_version"`
	GPU   string `json:"gpu_name"`
	CC    string `json:"compute_capability"`
	SMs   int    `json:"sm_count"`
}

// Mismatch names the fields where k (the file's) and here differ, "" when
// none.
func (k PlanKey) Mismatch(here PlanKey) string {
	var d []string
	if k.CUDNN != here.CUDNN {
		d = append(d, fmt.Sprintf("cuDNN %d in the file, %d here", k.CUDNN, here.CUDNN))
	}
	if k.GPU != here.GPU {
		d = append(d, fmt.Sprintf("GPU %q in the file, %q here", k.GPU, here.GPU))
	}
	if k.CC != here.CC {
		d = append(d, fmt.Sprintf("compute capability %s in the file, %s here", k.CC, here.CC))
	}
	if k.SMs != here.SMs {
		d = append(d, fmt.Sprintf("%d SMs in the file, %d here", k.SMs, here.SMs))
	}
	return strings.Join(d, "; ")
}

// LayerPlan is one layer's pinned engine and what gpu-plan measured.
type LayerPlan struct {
	Layer  string  `json:"layer"` // the model's name for it (for people)
	Engine Engine  `json:"engine"`
	Millis float64 `json:"ms,omitempty"` // its time per batch when timed
	Tried  int     `json:"engines_timed,omitempty"`
}

// PlanFile is canopy gpu-plan's output: an engine per layer shape
// (Conv.Key: shape, batch N, arithmetic), keyed by the stack it was timed
// on.
type PlanFile struct {
	Format    string               `json:"format"`
	Key       PlanKey              `json:"key"`
	Model     string               `json:"model"`
	Batch     int                  `json:"batch_size"`
	Precision string               `json:"precision"`
	Plans     map[string]LayerPlan `json:"plans"`
}

// PlanFormat is the format tag of a plan file.
const PlanFormat = "canopy-cudnn-plans/1"

// Marshal is the file's bytes (sorted keys: the same plans give the same
// bytes).
func (p *PlanFile) Marshal() []byte {
	b, _ := json.MarshalIndent(p, "", "  ")
	return append(b, '\n')
}

// maxPlanFile caps what ReadPlanFile reads (a plan file is a few KiB).
const maxPlanFile = 4 << 20

// ReadPlanFile reads and checks a plan file; it returns it with the sha256
// of its bytes.
func ReadPlanFile(path string) (*PlanFile, string, error) {
	// O_NONBLOCK and fstat: a FIFO or a device is refused at once, never
	// waited on.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, "", fmt.Errorf("cudnn: plan file: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, "", fmt.Errorf("cudnn: plan file %s: not a regular file", path)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(&limited{f, maxPlanFile + 1}); err != nil {
		return nil, "", fmt.Errorf("cudnn: plan file %s: %w", path, err)
	}
	if buf.Len() > maxPlanFile {
		return nil, "", fmt.Errorf("cudnn: plan file %s is over %d bytes", path, maxPlanFile)
	}
	p, err := ParsePlanFile(buf.Bytes())
	if err != nil {
		return nil, "", fmt.Errorf("cudnn: plan file %s: %w", path, err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return p, hex.EncodeToString(sum[:]), nil
}

type limited struct {
	f interface{ Read([]byte) (int, error) }
	n int
}

func (l *limited) Read(b []byte) (int, error) {
	if l.n <= 0 {
		return 0, fmt.Errorf("too large")
	}
	if len(b) > l.n {
		b = b[:l.n]
	}
	n, err := l.f.Read(b)
	l.n -= n
	return n, err
}

// ParsePlanFile decodes a plan file's bytes, refusing unknown fields and
// impossible values.
func ParsePlanFile(b []byte) (*PlanFile, error) {
	var p PlanFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, err
	}
	if p.Format != PlanFormat {
		return nil, fmt.Errorf("format %q, want %q", p.Format, PlanFormat)
	}
	if p.Batch < 1 {
		return nil, fmt.Errorf("batch_size %d", p.Batch)
	}
	for k, lp := range p.Plans {
		if lp.Engine.Index < 0 || len(lp.Engine.Knobs) > 32 {
			return nil, fmt.Errorf("layer %q: engine %s", k, lp.Engine)
		}
	}
	return &p, nil
}

// Keys lists the plan keys in order.
func (p *PlanFile) Keys() []string {
	var out []string
	for k := range p.Plans {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
