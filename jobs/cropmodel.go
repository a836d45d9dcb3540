package jobs

import (
	"errors"
	"fmt"

	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/mpi"
)

// openCropModel loads eval-crops' crop model (--crop-model) on every rank:
// a collective, whose errors every rank returns alike.
func openCropModel(c mpi.Comm, path, labelDict string, threads int) (cropClassifier, error) {
	err := fmt.Errorf("jobs: --crop-model %s: %w: %w", path, errors.New("the crop classifier (infer/crop) is not in this build yet"), infer.ErrModel)
	return nil, agreeErr(c, ExitModel, err)
}
