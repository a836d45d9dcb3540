package eval

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/confine"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/geotruth"
	"github.com/canopy-hpc/canopy/internal/imagesrun"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/mpi"
)

// shared is what rank 0 reads and broadcasts: the files' bytes
// (Inputs), the shared-filesystem probe, and for --resume
// the part files and the attempt number (imagesrun.Saved).
type shared struct {
	Inputs
	saved imagesrun.Saved
	// modelDir and modelDigest: the model folder rank 0 resolved and the
	// sha256 of its weights (empty for replay).
	modelDir, modelDigest, modelConfig string
}

// loadInputs: rank 0 checks the output folder and reads the inputs, then
// broadcasts either the bytes or its error, so every rank fails alike.
// Rank 0 also returns its hold on the output folder (nil elsewhere).
func loadInputs(c mpi.Comm, cfg Config) (shared, *outdir.Run, error) {
	var pkt []byte
	var out *outdir.Run
	if c.Rank() == 0 {
		pkt, out = packInputs(cfg)
	}
	pkt, err := c.Bcast(pkt, 0)
	if err != nil {
		return shared{}, out, errkind.Local(errkind.ExitMPI, "jobs: broadcast inputs: %w", err)
	}
	in, err := unpackInputs(pkt)
	return in, out, err
}

func packInputs(cfg Config) ([]byte, *outdir.Run) {
	fail := func(code int, err error) ([]byte, *outdir.Run) {
		return append([]byte{byte(code)}, err.Error()...), nil
	}
	var in shared
	dst := []*[]byte{&in.CSV, &in.Preds, &in.Labels}
	for i, f := range []string{cfg.CSV, cfg.Predictions, cfg.LabelDict} {
		if f == "" {
			continue
		}
		if i == 1 && cfg.PredictionsData != nil {
			in.Preds = cfg.PredictionsData
			continue
		}
		if i == 2 && cfg.LabelDictData != nil {
			in.Labels = cfg.LabelDictData
			continue
		}
		if fi, err := os.Stat(f); i == 0 && err == nil && fi.IsDir() {
			// a folder of Pascal VOC files: rank 0 makes them one CSV
			data, err := dataset.ReadVOCFolder(f)
			if err != nil {
				return fail(errkind.ExitInput, err)
			}
			*dst[i] = data
			in.TruthFolder = true
			continue
		}
		if i == 0 && geotruth.IsVector(f) {
			// points or polygons of a layer: rank 0 makes them one CSV
			data, warns, err := geotruth.GeometryCSV(f, cfg.RootDir)
			if err != nil {
				return fail(errkind.ExitInput, err)
			}
			for _, w := range warns {
				if cfg.Warnings != nil {
					collective.SayLine(cfg.Warnings, "canopy: warning: ", w)
				}
			}
			in.CSV = data
			continue
		}
		data, err := confine.ReadNamedInput(f)
		if err != nil {
			return fail(errkind.ExitInput, fmt.Errorf("jobs: %w", err))
		}
		*dst[i] = data
	}
	if cfg.Model.Spec != "" {
		dir, digest, config, err := modelsel.Resolve(cfg.Model.Spec)
		if err != nil {
			return fail(errkind.ExitModel, err)
		}
		in.modelDir, in.modelDigest, in.modelConfig = dir, digest, config
	}
	out, err := prepareOut(cfg, &in)
	if err != nil {
		return fail(errkind.Code(err), err)
	}
	return collective.PackFields([]byte{0}, in.fields()...), out
}

// fields are the packet's fields, in the order unpackInputs reads them:
// the three files, the model's folder, digest and config, the VOC-folder
// flag, then the saved run (imagesrun.PackSaved: probe, attempt, parts).
func (in shared) fields() [][]byte {
	f := [][]byte{in.CSV, in.Preds, in.Labels, []byte(in.modelDir), []byte(in.modelDigest), []byte(in.modelConfig), boolByte(in.TruthFolder)}
	return imagesrun.PackSaved(f, in.saved)
}

func unpackInputs(pkt []byte) (shared, error) {
	f, err := collective.UnpackPacket(pkt, 9)
	if err != nil {
		return shared{}, err
	}
	saved, err := imagesrun.UnpackSaved(f[7:])
	if err != nil || len(f[6]) != 1 || f[6][0] > 1 {
		return shared{}, errkind.Collective(errkind.ExitInternal, "jobs: malformed input broadcast")
	}
	in := shared{Inputs: Inputs{CSV: f[0], Preds: f[1], TruthFolder: f[6][0] == 1}, saved: saved,
		modelDir: string(f[3]), modelDigest: string(f[4]), modelConfig: string(f[5])}
	if len(f[2]) > 0 {
		in.Labels = f[2]
	}
	return in, nil
}

// evalManifest is eval's OUT/manifest.json (imagesrun.EvalRun): the
// root folder is --root-dir, default the CSV's folder.
func evalManifest(cfg Config, in shared) imagesrun.Manifest {
	r := imagesrun.EvalRun{CSV: in.CSV, Predictions: in.Preds, LabelDict: in.Labels, RootDir: cfg.RootDir}
	if r.RootDir == "" {
		r.RootDir = filepath.Dir(cfg.CSV)
	}
	if cfg.Model.Spec != "" {
		r.Detector = imagesrun.Detector{WeightsSHA256: in.modelDigest, Settings: modelsel.DetectorSettings(cfg.Model, in.modelConfig)}
	}
	return r.Manifest()
}

// prepareOut is rank 0's output-folder step of eval, before anything is
// computed (imagesrun.Open with eval's manifest).
func prepareOut(cfg Config, in *shared) (*outdir.Run, error) {
	o, saved, err := imagesrun.Open(imagesrun.Folder{Dir: cfg.Out, Resume: cfg.Resume, Force: cfg.Force}, evalManifest(cfg, *in))
	if err != nil {
		return nil, err
	}
	in.saved = saved
	return o, nil
}

func boolByte(b bool) []byte {
	if b {
		return []byte{1}
	}
	return []byte{0}
}
