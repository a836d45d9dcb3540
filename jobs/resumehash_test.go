package jobs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/internal/outdir"
)

// TestResumeHashFull (issue 42, F3): a raster edited in its middle, its
// size and modification time kept. With the default --resume-hash ends
// the edit is not seen, as --help and the README say (the run's rasters
// are finished, so the resume reads nothing); with --resume-hash full
// given to the run and to the resume it is refused, exit 2, naming the
// raster and its content, the folder left as it was. A resume whose
// --resume-hash differs from the run's is refused, naming it; an unknown
// value is a usage error.
func TestResumeHashFull(t *testing.T) {
	const identSpan = 64 << 10 // the ends' hash reads the first and last 64 KiB (tilerun's rasterIdent)
	_, tif := tileRasterFile(t, 700, 600, 5)
	st, err := os.Stat(tif)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() < 3*identSpan {
		t.Fatalf("the raster is %d bytes, too small for an edit outside its first and last %d", st.Size(), identSpan)
	}
	base := []string{"predict", "--tile", "--raster", tif, "--patch-size", "300", "--model", demoModelDir, "--threads", "1"}
	ends := filepath.Join(t.TempDir(), "ends")
	full := filepath.Join(t.TempDir(), "full")
	for _, run := range [][]string{{"--out", ends}, {"--out", full, "--resume-hash", "full"}} {
		if code, stderr := runArgs(t, append(append([]string{}, base...), run...)...); code != 0 {
			t.Fatalf("%v: exit %d\n%s", run, code, stderr)
		}
	}
	b, err := os.ReadFile(full + "/" + outdir.ManifestFile)
	if err != nil || !strings.Contains(string(b), `"resume_hash": "full"`) || !strings.Contains(string(b), `"sha256": "`) {
		t.Fatalf("the full run's manifest records no whole-file sha256: %v\n%s", err, b)
	}
	// the edit: one byte in the middle, size and times kept
	raw, err := os.ReadFile(tif)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0xff
	if err := os.WriteFile(tif, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tif, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if code, stderr := runArgs(t, append(append([]string{}, base...), "--out", ends, "--resume")...); code != 0 {
		t.Errorf("--resume-hash ends: exit %d, want 0 (the edit is not seen, as documented)\n%s", code, stderr)
	}
	before := snapshot(t, full)
	code, stderr := runArgs(t, append(append([]string{}, base...), "--out", full, "--resume", "--resume-hash", "full")...)
	if code != ExitUsage || !strings.Contains(stderr, "raster 1 \"raster.tif\" changed since the run: its content differs (sha256 of the whole file)") {
		t.Errorf("--resume-hash full: exit %d, want %d naming the raster's content\n%s", code, ExitUsage, stderr)
	}
	sameTree(t, "refused resume", before, snapshot(t, full))
	code, stderr = runArgs(t, append(append([]string{}, base...), "--out", full, "--resume")...)
	if code != ExitUsage || !strings.Contains(stderr, `resume_hash: "full" in the run to resume, none now`) {
		t.Errorf("a resume without the run's --resume-hash full: exit %d\n%s", code, stderr)
	}
	code, stderr = runArgs(t, append(append([]string{}, base...), "--out", t.TempDir(), "--resume-hash", "md5")...)
	if code != ExitUsage || !strings.Contains(stderr, `--resume-hash "md5": want ends`) {
		t.Errorf("--resume-hash md5: exit %d\n%s", code, stderr)
	}
}
