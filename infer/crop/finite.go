package crop

import (
	"fmt"

	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/nn"
)

// Non-finite weights and outputs (issue 42, F2): a crop model with a NaN
// weight, or finite weights whose logits overflow float32, gave every crop
// class 0 with score NaN (DeepForest does the same, without a word). The
// loader refuses weights holding NaN or ±Inf (nn.Weights' CheckFinite, the
// detector's check), and the runner refuses a forward pass whose logits or
// probabilities are not finite: both are model errors (exit 4), as the
// detector's (infer/retinanet NonFiniteError).

// NonFiniteError is a crop whose logits or softmax probabilities hold NaN
// or ±Inf. It matches infer.ErrModel.
type NonFiniteError struct {
	// Crop is the crop's index in the batch given to Run or Classify.
	Crop int
	// Output is "logits" (fc's output) or "probabilities" (their softmax);
	// Value the first value that is not finite.
	Output string
	Value  float64
}

func (e *NonFiniteError) Error() string {
	return fmt.Sprintf("crop: the classifier's %s for crop %d hold %v: float32 overflowed, the weights give no usable scores (DeepForest would label the crop class 0 with score NaN)", e.Output, e.Crop, e.Value)
}

// Unwrap makes the error a model error (exit 4).
func (e *NonFiniteError) Unwrap() error { return infer.ErrModel }

// checkFinite refuses outputs whose logits or probabilities are not finite
// (the first such crop, in batch order).
func checkFinite(out []Output) error {
	for i, o := range out {
		for _, v := range [...]struct {
			name string
			d    []float32
		}{{"logits", o.Logits}, {"probabilities", o.Probs}} {
			if k := nn.FirstNonFinite(v.d); k >= 0 {
				return &NonFiniteError{Crop: i, Output: v.name, Value: float64(v.d[k])}
			}
		}
	}
	return nil
}
