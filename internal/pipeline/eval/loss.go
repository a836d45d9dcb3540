package eval

import (
	"math"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/report"
)

// The validation-loss rows of eval --model, under the names DeepForest's
// validation_step logs (val_ + torchvision's loss keys, and their sum).
const (
	KeyValClassification = report.KeyValClassification
	KeyValBoxRegression  = report.KeyValBoxRegression
	KeyValLoss           = "val_loss"
)

// batchNormNote is what the report says about the losses' batch norm.
const batchNormNote = "val_classification, val_bbox_regression and val_loss use the model's stored BatchNorm statistics: " +
	"equal to PyTorch's train-mode forward for FrozenBatchNorm2d models (DeepForest's hub models); for models with ordinary " +
	"BatchNorm2d (such as the demo model) PyTorch's train mode would normalise with each batch's statistics instead"

// LossValues are the validation losses: Lightning's epoch value on one GPU,
// the mean over all images of the per-image losses (each image's float32
// values as torchvision computes them). The sums run in float64 over the
// images in global image order, the same on every rank, and val_loss
// sums each image's two losses first. With an image whose losses are
// missing (part files of an older canopy), all three are null.
func LossValues(losses []*box.Loss) []metrics.Value {
	var cls, reg, tot float64
	for _, l := range losses {
		if l == nil {
			nan := math.NaN()
			cls, reg, tot = nan, nan, nan
			break
		}
		c, r := float64(l.Classification), float64(l.BoxRegression)
		cls += c
		reg += r
		tot += c + r
	}
	n := float64(len(losses))
	if n == 0 {
		n = math.NaN()
	}
	return []metrics.Value{
		{Key: KeyValClassification, V: cls / n},
		{Key: KeyValBoxRegression, V: reg / n},
		{Key: KeyValLoss, V: tot / n},
	}
}
