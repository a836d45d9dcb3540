package predict

import (
	"encoding/binary"
	"fmt"

	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/confine"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/imagesrun"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/mpi"
)

// inputs are what rank 0 reads and every rank receives: the model folder
// rank 0 resolved, its weights' sha256 and its config.json's, the label
// dict's bytes, the image list, and the saved run (imagesrun.Saved).
type inputs struct {
	modelDir, modelDigest, modelConfig string
	labels                             []byte
	paths                              []string
	saved                              imagesrun.Saved
}

// pack is rank 0's packet: the model, the label dict, the image
// count and list, then the saved run (imagesrun.PackSaved).
func pack(cfg Config) ([]byte, *outdir.Run) {
	fail := func(code int, err error) ([]byte, *outdir.Run) {
		return append([]byte{byte(code)}, err.Error()...), nil
	}
	var paths []string
	var err error
	if cfg.CSV != "" {
		var data []byte
		if data, err = confine.ReadNamedInput(cfg.CSV); err != nil {
			return fail(errkind.ExitInput, fmt.Errorf("jobs: %w", err))
		}
		paths, err = dataset.ImagePaths(cfg.CSV, data)
	} else {
		paths, err = dataset.ListImages(cfg.Images)
	}
	if err != nil {
		return fail(errkind.ExitInput, err)
	}
	var labels []byte
	if cfg.LabelDictData != nil {
		labels = cfg.LabelDictData
	} else if cfg.LabelDict != "" {
		if labels, err = confine.ReadNamedInput(cfg.LabelDict); err != nil {
			return fail(errkind.ExitInput, fmt.Errorf("jobs: %w", err))
		}
	}
	dir, digest, config, err := modelsel.Resolve(cfg.Model.Spec)
	if err != nil {
		return fail(errkind.ExitModel, err)
	}
	run := imagesrun.PredictRun{Paths: paths, LabelDict: labels, RootDir: cfg.RootDir,
		Detector: imagesrun.Detector{WeightsSHA256: digest, Settings: modelsel.DetectorSettings(cfg.Model, config)}}
	out, saved, err := imagesrun.Open(imagesrun.Folder{Dir: cfg.Out, Resume: cfg.Resume, Force: cfg.Force}, run.Manifest())
	if err != nil {
		return fail(errkind.Code(err), err)
	}
	fields := [][]byte{[]byte(dir), []byte(digest), []byte(config), labels, binary.LittleEndian.AppendUint64(nil, uint64(len(paths)))}
	fields = append(fields, imagesrun.StringsBytes(paths)...)
	return collective.PackFields([]byte{0}, imagesrun.PackSaved(fields, saved)...), out
}

// unpack broadcasts rank 0's packet (pack) and reads it on every rank:
// rank 0's error, or the inputs.
func unpack(c mpi.Comm, pkt []byte) (inputs, error) {
	f, err := collective.BcastFields(c, pkt, 7)
	if err != nil {
		return inputs{}, err
	}
	if len(f[4]) != 8 || binary.LittleEndian.Uint64(f[4]) > uint64(len(f)-7) {
		return inputs{}, errkind.Collective(errkind.ExitInternal, "jobs: malformed input broadcast")
	}
	n := int(binary.LittleEndian.Uint64(f[4]))
	in := inputs{modelDir: string(f[0]), modelDigest: string(f[1]), modelConfig: string(f[2]), labels: f[3], paths: make([]string, n)}
	for i, b := range f[5 : 5+n] {
		in.paths[i] = string(b)
	}
	if in.saved, err = imagesrun.UnpackSaved(f[5+n:]); err != nil {
		return inputs{}, err
	}
	return in, nil
}
