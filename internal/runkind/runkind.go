// Package runkind names the kinds of run an output folder's manifest.json
// records (the tile manifests' "command", plain predict's "job"; eval's
// manifest has neither), so that a --resume of one kind into another
// kind's folder names both and the command that continues the folder's
// run, instead of failing on a field the other kind's manifest lacks.
package runkind

import (
	"encoding/json"

	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/outdir"
)

// Run kinds as manifest.json records them: the tile manifests' "command",
// plain predict's "job"; eval's manifest has neither.
const (
	Predict     = "predict"
	Eval        = "eval"
	PredictTile = "predict --tile"
	EvalTile    = "eval --tile"
	// a point model's predict (jobs/points; its manifest's job is
	// PointsJob): continued as predict --model with the point model
	PredictPoints = "predict --model POINT-MODEL"
)

// PointsJob is a point model's predict manifest's "job".
const PointsJob = "predict points"

// Of reads the kind of run a manifest.json records ("" when b is not
// a canopy manifest).
func Of(b []byte) string {
	var m struct {
		Command *string `json:"command"`
		Job     *string `json:"job"`
		CSV     *string `json:"csv_sha256"`
	}
	if json.Unmarshal(b, &m) != nil {
		return ""
	}
	switch {
	case m.Command != nil && (*m.Command == PredictTile || *m.Command == EvalTile):
		return *m.Command
	case m.Command != nil:
		return ""
	case m.Job != nil && *m.Job == Predict:
		return Predict
	case m.Job != nil && *m.Job == PointsJob:
		return PredictPoints
	case m.Job == nil && m.CSV != nil:
		return Eval
	}
	return ""
}

// Describe names a run kind for a message.
func Describe(kind string) string {
	switch kind {
	case Predict:
		return "a plain predict run (predict without --tile)"
	case Eval:
		return "an eval run (eval without --tile)"
	case PredictTile:
		return "a predict --tile run"
	case EvalTile:
		return "an eval --tile run"
	case PredictPoints:
		return "a point model's predict run"
	}
	return "no canopy run this version reads"
}

// Check refuses a --resume into dir whose manifest (b) records
// another kind of run than want, naming the kind it holds and what to do
// instead.
func Check(dir string, b []byte, want string) error {
	have := Of(b)
	if have == want {
		return nil
	}
	if have == "" {
		return errkind.Usage("jobs: --resume refused: %s in %s is not a canopy run's manifest (damaged, or written by another program); start again with --force (or another --out)", outdir.ManifestFile, dir)
	}
	return errkind.Usage("jobs: --resume refused: %s holds %s, not %s: continue that run with canopy %s --resume and its inputs, "+
		"or give this %s run another --out (--force replaces the run in %s)", dir, Describe(have), Describe(want), have, want, dir)
}
