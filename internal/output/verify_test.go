package output

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/internal/outdir"
)

// A published run checks against the sha256s its report.json records:
// eval's run.outputs and the derived page, predict's outputs; each
// missing, changed, non-regular or extra output is named.
func TestVerify(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(PredictionsCSV, "p\n")
	write(ResultsCSV, "r\n")
	rep, _ := json.Marshal(map[string]any{"run": map[string]any{"outputs": map[string]string{
		PredictionsCSV: outdir.SHA256Hex([]byte("p\n")), ResultsCSV: outdir.SHA256Hex([]byte("r\n"))}}})
	write(ReportJSON, string(rep))
	write(ReportHTML, "<html>") // derived: not recorded, not extra
	if bad := Verify(dir); bad != "" {
		t.Fatalf("a published eval run: %s", bad)
	}
	if c := Complete(dir); !strings.Contains(c, "(predictions.csv, results.csv)") || !strings.Contains(c, "made from report.json: report.html") {
		t.Errorf("Complete: %s", c)
	}
	write(ResultsCSV, "R\n")
	os.Remove(filepath.Join(dir, PredictionsCSV))
	write(CropsCSV, "c\n")
	bad := Verify(dir)
	for _, want := range []string{"missing: predictions.csv", "differs from report.json's): results.csv", "does not record them): crops.csv"} {
		if !strings.Contains(bad, want) {
			t.Errorf("Verify says %q, missing %q", bad, want)
		}
	}
	rep, _ = json.Marshal(map[string]any{"outputs": map[string]string{"../x.csv": "00"}})
	write(ReportJSON, string(rep))
	if bad := Verify(dir); !strings.Contains(bad, "outside the folder") {
		t.Errorf("an output outside the folder: %q", bad)
	}
	write(ReportJSON, "{}")
	if bad := Verify(dir); !strings.Contains(bad, "records no outputs") {
		t.Errorf("no outputs: %q", bad)
	}
}
