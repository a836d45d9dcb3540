package jobs

import (
	"errors"
	"fmt"

	"github.com/canopy-hpc/canopy/infer"
)

// openCropModel loads a crop model (--crop-model) for eval-crops.
func openCropModel(path, labelDict string, threads int) (cropClassifier, error) { //nolint:unparam // wired to infer/crop next
	return nil, fmt.Errorf("%w: %w", errors.New("the crop classifier (infer/crop) is not in this build yet"), infer.ErrModel)
}
