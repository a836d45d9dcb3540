package runkind

import (
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/internal/errkind"
)

// TestOf reads the kind from each manifest's shape, and nothing from what
// is not a canopy manifest.
func TestOf(t *testing.T) {
	for m, want := range map[string]string{
		`{"command":"predict --tile","rasters":[]}`: PredictTile,
		`{"command":"eval --tile"}`:                 EvalTile,
		`{"job":"predict","images_sha256":"x"}`:     Predict,
		`{"job":"predict points"}`:                  PredictPoints,
		`{"csv_sha256":"x","canopy":"0.1.0"}`:       Eval,
		`{"command":"predict"}`:                     "",
		`{"job":"eval"}`:                            "",
		`{}`:                                        "",
		`[1,2]`:                                     "",
		`not json`:                                  "",
	} {
		if got := Of([]byte(m)); got != want {
			t.Errorf("Of(%s) = %q, want %q", m, got, want)
		}
	}
}

// TestCheck: the same kind passes; another kind is a usage error naming
// both and the command that continues the folder's run; a manifest of no
// kind is named as such.
func TestCheck(t *testing.T) {
	if err := Check("out", []byte(`{"job":"predict"}`), Predict); err != nil {
		t.Fatalf("same kind: %v", err)
	}
	err := Check("out", []byte(`{"job":"predict"}`), PredictTile)
	if errkind.Code(err) != errkind.ExitUsage {
		t.Fatalf("another kind: exit %d (%v), want %d", errkind.Code(err), err, errkind.ExitUsage)
	}
	for _, s := range []string{"holds " + Describe(Predict), "not " + Describe(PredictTile), "canopy predict --resume", "another --out"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("another kind: %q lacks %q", err, s)
		}
	}
	err = Check("out", []byte(`{"command":"x"}`), EvalTile)
	if errkind.Code(err) != errkind.ExitUsage || !strings.Contains(err.Error(), "not a canopy run's manifest") {
		t.Errorf("no kind: %v", err)
	}
}

// A box run's --resume into a point model's folder names the point run
// and how to continue it.
func TestResumeIntoPointRun(t *testing.T) {
	err := Check("OUT", []byte(`{"job": "predict points"}`), PredictTile)
	if err == nil || errkind.Code(err) != errkind.ExitUsage || !strings.Contains(err.Error(), "a point model's predict run") ||
		!strings.Contains(err.Error(), "canopy predict --model POINT-MODEL --resume") {
		t.Fatalf("%v", err)
	}
}
