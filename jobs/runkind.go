package jobs

import (
	"encoding/json"

	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/jobs/points"
)

// The kind of run an output folder's manifest.json records, so that a
// --resume of one kind into another kind's folder names both and the
// command that continues the folder's run (instead of failing on a field
// the other kind's manifest lacks).

// Run kinds as manifest.json records them: the tile manifests' "command",
// plain predict's "job"; eval's manifest has neither.
const (
	kindPredict     = "predict"
	kindEval        = "eval"
	kindPredictTile = "predict --tile"
	kindEvalTile    = "eval --tile"
	// a point model's predict (jobs/points; its manifest's job is
	// points.Job): continued as predict --model with the point model
	kindPredictPoints = "predict --model POINT-MODEL"
)

// runKindOf reads the kind of run a manifest.json records ("" when b is not
// a canopy manifest).
func runKindOf(b []byte) string {
	var m struct {
		Command *string `json:"command"`
		Job     *string `json:"job"`
		CSV     *string `json:"csv_sha256"`
	}
	if json.Unmarshal(b, &m) != nil {
		return ""
	}
	switch {
	case m.Command != nil && (*m.Command == kindPredictTile || *m.Command == kindEvalTile):
		return *m.Command
	case m.Command != nil:
		return ""
	case m.Job != nil && *m.Job == kindPredict:
		return kindPredict
	case m.Job != nil && *m.Job == points.Job:
		return kindPredictPoints
	case m.Job == nil && m.CSV != nil:
		return kindEval
	}
	return ""
}

// describeKind names a run kind for a message.
func describeKind(kind string) string {
	switch kind {
	case kindPredict:
		return "a plain predict run (predict without --tile)"
	case kindEval:
		return "an eval run (eval without --tile)"
	case kindPredictTile:
		return "a predict --tile run"
	case kindEvalTile:
		return "an eval --tile run"
	case kindPredictPoints:
		return "a point model's predict run"
	}
	return "no canopy run this version reads"
}

// checkRunKind refuses a --resume into dir whose manifest (b) records
// another kind of run than want, naming the kind it holds and what to do
// instead.
func checkRunKind(dir string, b []byte, want string) error {
	have := runKindOf(b)
	if have == want {
		return nil
	}
	if have == "" {
		return usageErr("jobs: --resume refused: %s in %s is not a canopy run's manifest (damaged, or written by another program); start again with --force (or another --out)", outdir.ManifestFile, dir)
	}
	return usageErr("jobs: --resume refused: %s holds %s, not %s: continue that run with canopy %s --resume and its inputs, "+
		"or give this %s run another --out (--force replaces the run in %s)", dir, describeKind(have), describeKind(want), have, want, dir)
}

// kind is the kind of run a plain manifest is for.
func (m manifest) kind() string {
	if m.Job == kindPredict {
		return kindPredict
	}
	return kindEval
}
