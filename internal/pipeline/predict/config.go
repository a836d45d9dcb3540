package predict

import (
	"io"
	"time"

	"github.com/canopy-hpc/canopy/internal/cropstage"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/output"
)

// Config is the configuration of one `canopy predict` run (whole images;
// --tile is internal/tilerun's). Every rank passes the same values.
type Config struct {
	CSV     string // images by image_path (other columns ignored)
	Images  string // or: every image file in this folder
	RootDir string // default: the CSV's folder, or Images
	Out     string
	Force   bool
	// Resume continues the interrupted run in Out from its part files.
	Resume    bool
	BatchSize int
	// AllowOutsideRoot lets image paths leave RootDir (absolute, "..",
	// symlinks out).
	AllowOutsideRoot bool
	Model            modelsel.ModelConfig
	// Crops are --crop-model and --crop-label-dict.
	Crops cropstage.CropConfig
	// LabelDict is --label-dict: the labels of a bare .pt state dict.
	LabelDict string
	// LabelDictData and RunConfig: as eval.Config's (internal/pipeline/eval).
	LabelDictData []byte
	RunConfig     *output.RunConfig
	Command       []string
	Stdout        io.Writer
	Progress      io.Writer // rank 0's progress lines (nil: none)
	// CollectiveTimeout: as eval.Config's.
	CollectiveTimeout time.Duration
	// RawRows is --raw-rows: write each image's detections as the detector
	// gives them, without DeepForest's across_class_nms.
	RawRows bool
}
