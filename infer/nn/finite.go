package nn

import (
	"fmt"
	"sort"
)

// The finiteness checks every model loader and forward pass shares (the
// detector's, infer/retinanet, and the crop models', infer/crop): weights
// holding NaN or ±Inf are refused at load, and a forward pass whose outputs
// hold one is refused by its caller.

// FirstNonFinite is the index of the first NaN or ±Inf in d, -1 if none.
func FirstNonFinite(d []float32) int {
	for i, v := range d {
		if v-v != 0 { // NaN and ±Inf only
			return i
		}
	}
	return -1
}

// CheckFinite refuses weights holding NaN or ±Inf (a corrupt or diverged
// checkpoint: torch would load it and compute garbage). The error names the
// first such tensor in name order, the first bad index and value, and how
// many tensors hold one.
func (w Weights) CheckFinite() error {
	names := make([]string, 0, len(w))
	for k := range w {
		names = append(names, k)
	}
	sort.Strings(names)
	first, at, n := "", 0, 0
	var val float32
	for _, k := range names {
		if i := FirstNonFinite(w[k].Data); i >= 0 {
			if n == 0 {
				first, at, val = k, i, w[k].Data[i]
			}
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("tensor %s holds %v at index %d (%d tensors hold NaN or Inf): the weights are not usable", first, val, at, n)
}
