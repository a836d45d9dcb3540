package jobs

import "github.com/canopy-hpc/canopy/internal/runkind"

// The run kinds (internal/runkind) under the names the commands use.
const (
	kindPredict     = runkind.Predict
	kindEval        = runkind.Eval
	kindPredictTile = runkind.PredictTile
	kindEvalTile    = runkind.EvalTile
	// kindPredictPoints: a point model's predict (jobs/points)
	kindPredictPoints = runkind.PredictPoints
)

var (
	checkRunKind = runkind.Check
	describeKind = runkind.Describe
)
