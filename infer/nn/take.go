package nn

import (
	"fmt"
	"sort"
	"strings"
)

// Tensor is one float32 weight tensor in C order.
type Tensor struct {
	Shape []int
	Data  []float32
}

// Weights is a state dict by torchvision name.
type Weights map[string]Tensor

// Take hands out tensors by name and remembers which were used, so that
// leftovers (unexpected tensors) can be reported: torch loads with
// strict=False and silently ignores them; canopy refuses.
type Take struct {
	w    Weights
	used map[string]bool
	errs []string
	what string // the error's start: "retinanet: the weights do not fit a torchvision RetinaNet"
}

// NewTake hands out w's tensors; what starts Err's message.
func NewTake(w Weights, what string) *Take {
	return &Take{w: w, used: map[string]bool{}, what: what}
}

// Fail records a problem that Err reports with the others.
func (t *Take) Fail(msg string) { t.errs = append(t.errs, msg) }

// Get is the named tensor's data, checked against shape (zeros, and an
// error for Err, when it is missing or misshapen).
func (t *Take) Get(name string, shape ...int) []float32 {
	v, ok := t.w[name]
	if !ok {
		t.errs = append(t.errs, fmt.Sprintf("missing tensor %s %v", name, shape))
		return make([]float32, prod(shape))
	}
	t.used[name] = true
	if !sameShape(v.Shape, shape) {
		t.errs = append(t.errs, fmt.Sprintf("tensor %s has shape %v, want %v", name, v.Shape, shape))
		return make([]float32, prod(shape))
	}
	return v.Data
}

// Has reports whether the state dict holds name.
func (t *Take) Has(name string) bool { _, ok := t.w[name]; return ok }

// Shape is the named tensor's shape (nil when absent).
func (t *Take) Shape(name string) []int { return t.w[name].Shape }

// Err reports every problem so far and every tensor never taken.
func (t *Take) Err() error {
	var extra []string
	for k := range t.w {
		if !t.used[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		t.errs = append(t.errs, fmt.Sprintf("unexpected tensor %s %v", k, t.w[k].Shape))
	}
	if len(t.errs) == 0 {
		return nil
	}
	msg := t.errs
	if len(msg) > 12 {
		msg = append(msg[:12:12], fmt.Sprintf("... and %d more", len(t.errs)-12))
	}
	return fmt.Errorf("%s: %s", t.what, strings.Join(msg, "; "))
}

func prod(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
