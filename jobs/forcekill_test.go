package jobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/tilerun"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// copyTree copies every file and folder under src (the lock file aside)
// to dst: what a kill at this moment would leave in the folder.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if fi.Name() == outdir.LockName {
			return nil
		}
		if fi.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// runArgs runs canopy's command line on one in-process rank.
func runArgs(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var stderr bytes.Buffer
	code := 0
	local.Run(1, func(c mpi.Comm) error {
		one := func() (mpi.Comm, func() error, error) { return c, func() error { return nil }, nil }
		code = MainWith(context.Background(), append([]string{"canopy"}, args...), &bytes.Buffer{}, &stderr, one)
		return nil
	})
	return code, stderr.String()
}

// outputsMatch says whether the folder's report.json records (outputs or
// run.outputs) exactly the files beside it.
func outputsMatch(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		return false
	}
	var rep struct {
		Outputs map[string]string `json:"outputs"`
		Run     struct {
			Outputs map[string]string `json:"outputs"`
		} `json:"run"`
	}
	if json.Unmarshal(b, &rep) != nil {
		return false
	}
	outs := rep.Outputs
	if outs == nil {
		outs = rep.Run.Outputs
	}
	if len(outs) == 0 {
		return false
	}
	for name, sum := range outs {
		d, err := os.ReadFile(filepath.Join(dir, name))
		s := sha256.Sum256(d)
		if err != nil || hex.EncodeToString(s[:]) != sum {
			return false
		}
	}
	return true
}

// A --force run killed at every write, rename and removal of its output
// folder's steps (set aside, staging, journal, publication, discard), for
// each command over another command's run: after the next canopy start in
// the folder, it holds either the previous run byte for byte or the new
// run complete (eval, predict and the tile runs: or the new run's saved part files
// and published rasters, resumable, once it has committed), never a mix,
// never neither; and canopy doctor --out, before
// that start, never says the new run saved nothing when its outputs are
// complete.
func TestForceKilledAtEveryStepLosesNothing(t *testing.T) {
	useFakeCrops(t)
	cmds := fourCommands(t)
	// each command replaces another's run
	over := map[string]string{"eval": "predict-tile", "predict": "eval", "predict-tile": "eval-tile", "eval-tile": "eval", "eval-crops": "predict"}
	for _, name := range []string{"predict-tile", "eval-tile", "predict", "eval", "eval-crops"} {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			if code, stderr := runArgs(t, append(cmds[over[name]], "--out", out)...); code != 0 {
				t.Fatalf("previous run (%s): exit %d\n%s", over[name], code, stderr)
			}
			old := snapshot(t, out)
			var steps []string
			shots := t.TempDir()
			outdir.StepHook = func(step string) {
				steps = append(steps, step)
				copyTree(t, out, filepath.Join(shots, fmt.Sprintf("%03d", len(steps))))
			}
			code, stderr := runArgs(t, append(cmds[name], "--out", out, "--force")...)
			outdir.StepHook = nil
			if code != 0 {
				t.Fatalf("--force: exit %d\n%s", code, stderr)
			}
			final := snapshot(t, out)
			if !outputsMatch(out) {
				t.Fatal("the finished run's report.json does not match its outputs")
			}
			kept := map[string]int{}
			journaled, wasNew := false, false
			for i, step := range steps {
				// the journal is the commit: from its write on, the new run stays
				journaled = journaled || step == "write "+outdir.JournalName
				d := filepath.Join(shots, fmt.Sprintf("%03d", i+1))
				_, perr := os.Stat(filepath.Join(d, outdir.PreviousDir))
				_, jerr := os.Stat(filepath.Join(d, outdir.JournalName))
				_, msg := outState(d)
				if perr == nil && jerr == nil && !strings.Contains(msg, "publishing") {
					t.Errorf("killed after %q: doctor says %q", step, msg)
				}
				o, err := outdir.Open(d, outNames) // any canopy start in the folder
				if err != nil {
					t.Fatalf("killed after %q: the next start: %v", step, err)
				}
				o.Finish(nil)
				got := snapshot(t, d)
				switch {
				case sameFiles(got, old):
					kept["old"]++
					if journaled || wasNew {
						t.Errorf("killed after step %d %q: the next start threw the finished new run away (doctor said %q)", i+1, step, msg)
					}
				case sameFiles(got, final) && outputsMatch(d):
					kept["new"]++
					wasNew = true
					if strings.Contains(msg, "puts it back") {
						t.Errorf("killed after step %d %q: the new run is kept, but doctor says %q", i+1, step, msg)
					}
				case partialOf(got, final): // a run with part files commits once it saved work: resumable
					kept["new, resumable"]++
				default:
					t.Errorf("killed after step %d %q: the folder holds %v: neither the previous run %v nor the new %v",
						i+1, step, names(got), names(old), names(final))
				}
			}
			t.Logf("%s over %s: %d steps, after each kill and a start: %v", name, over[name], len(steps), kept)
			if kept["old"] == 0 || kept["new"] == 0 || len(steps) < 8 {
				t.Fatalf("steps %v: kept %v", steps, kept)
			}
		})
	}
}

// sameFiles: the same names with the same bytes.
func sameFiles(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// partialOf: a new eval run not yet published: its manifest and part
// files (each a prefix of the final one's), no report.
func partialOf(got, final map[string]string) bool {
	if _, ok := got["report.json"]; ok || got[outdir.ManifestFile] != final[outdir.ManifestFile] || got[outdir.ManifestFile] == "" {
		return false
	}
	for k, v := range got {
		w, ok := final[k]
		published := strings.HasPrefix(k, tilerun.RastersDir+string(filepath.Separator)) // a tile run's finished raster
		if !ok || !strings.HasPrefix(w, v) || (published && w != v) ||
			(k != outdir.ManifestFile && !published && !strings.HasPrefix(k, "parts"+string(filepath.Separator))) {
			return false
		}
	}
	return true
}

// fourCommands are the command lines of eval, predict, predict --tile,
// eval --tile (less --out) over one small georeferenced forest, and of
// eval-crops over the test crop folder (with useFakeCrops).
func fourCommands(t *testing.T) map[string][]string {
	t.Helper()
	_, tif := tileRasterFile(t, 380, 300, 4, "-a_srs", "EPSG:32617", "-a_ullr", "404211.37", "3285123.91", "404249.37", "3285093.91")
	dir := filepath.Dir(tif)
	ann, err := os.ReadFile(filepath.Join(dir, "annotations.csv"))
	if err != nil {
		t.Fatal(err)
	}
	truthPNG := filepath.Join(dir, "annotations.csv")
	truthTIF := filepath.Join(dir, "truth_tif.csv")
	os.WriteFile(truthTIF, bytes.ReplaceAll(ann, []byte("img_0000.png"), []byte("raster.tif")), 0o644)
	model := []string{"--model", demoModelDir, "--threads", "1"}
	tileArgs := append([]string{"--tile", "--patch-size", "300", "--patch-overlap", "0.15"}, model...)
	cmds := map[string][]string{
		"eval":         append([]string{"eval", "--csv", truthPNG}, model...),
		"predict":      append([]string{"predict", "--csv", truthPNG}, model...),
		"predict-tile": append([]string{"predict", "--raster", tif}, tileArgs...),
		"eval-tile":    append([]string{"eval", "--csv", truthTIF}, tileArgs...),
		"eval-crops":   {"eval-crops", cropTestFolder, "--crop-model", "fake"}, // useFakeCrops
	}
	return cmds
}

// canopy doctor --out checks a published run against the sha256s its
// report.json records, for each run kind: complete (naming only the
// outputs the run wrote: no results.csv for predict), then a deleted
// output, a byte appended to one, and a canopy output the run did not
// write, each named, exit 1.
func TestDoctorOutVerifiesOutputs(t *testing.T) {
	useFakeCrops(t)
	cmds := fourCommands(t)
	for _, name := range []string{"predict", "eval", "predict-tile", "eval-tile", "eval-crops"} {
		out := filepath.Join(t.TempDir(), "out")
		if code, stderr := runArgs(t, append(cmds[name], "--out", out)...); code != 0 {
			t.Fatalf("%s: exit %d\n%s", name, code, stderr)
		}
		code, msg := outState(out)
		if code != ExitOK || !strings.Contains(msg, "sha256 verified") || strings.Contains(msg, "results.csv") != (name == "eval" || name == "eval-tile") {
			t.Fatalf("%s complete: exit %d %q", name, code, msg)
		}
		victim := map[string]string{"eval": "results.csv", "eval-tile": "results.csv", "eval-crops": cropsFile}[name] // appended to
		if victim == "" {
			victim = "predictions.csv"
		}
		f, _ := os.OpenFile(filepath.Join(out, victim), os.O_APPEND|os.O_WRONLY, 0)
		f.Write([]byte("x"))
		f.Close()
		if code, msg := outState(out); code != ExitInternal || !strings.Contains(msg, "changed since the run wrote them (sha256 differs from report.json's): "+victim) {
			t.Fatalf("%s with a byte appended to %s: exit %d %q", name, victim, code, msg)
		}
		gone := map[string]string{"predict-tile": tilerun.GPKGFile, "eval-tile": tilerun.GPKGFile, "eval-crops": "report.html"}[name]
		if gone == "" {
			gone = "predictions.csv"
		}
		os.Remove(filepath.Join(out, gone))
		if code, msg := outState(out); code != ExitInternal || !strings.Contains(msg, "missing: "+gone) {
			t.Fatalf("%s without %s: exit %d %q", name, gone, code, msg)
		}
		stray := tilerun.GPKGFile // a file of another run kind
		if strings.HasSuffix(name, "tile") {
			stray = output.COCOPredFile
		}
		os.WriteFile(filepath.Join(out, stray), []byte("{}"), 0o644)
		if code, msg := outState(out); code != ExitInternal || !strings.Contains(msg, "report.json does not record them): "+stray) {
			t.Fatalf("%s with a stray %s: exit %d %q", name, stray, code, msg)
		}
		// a FIFO in an output's place is named, not read (a read would block)
		os.Remove(filepath.Join(out, victim))
		if err := syscall.Mkfifo(filepath.Join(out, victim), 0o644); err != nil {
			t.Fatal(err)
		}
		if code, msg := outState(out); code != ExitInternal || !strings.Contains(msg, victim+" (not a regular file)") {
			t.Fatalf("%s with a FIFO for %s: exit %d %q", name, victim, code, msg)
		}
	}
}

// predict --tile over rasters whose image paths GDAL refuses as layer
// names (find's ./x.tif, X.tif beside x.tif, a gpkg_ prefix) writes
// predictions.gpkg with a valid, unique layer for each, recorded in
// report.json's tile.rasters[].layer; a raster whose geotransform is NaN
// or overflows (a .aux.xml) is refused with exit 3 naming it, before any
// window is detected, and nothing is written.
func TestTileLayerNamesAndGeoTransformAtPreflight(t *testing.T) {
	_, tif := tileRasterFile(t, 320, 240, 5, "-a_srs", "EPSG:32617", "-a_ullr", "404211.37", "3285123.91", "404243.37", "3285099.91")
	dir := t.TempDir()
	data, _ := os.ReadFile(tif)
	for _, n := range []string{"x.tif", "X.tif", "gpkg_y.tif"} {
		os.WriteFile(filepath.Join(dir, n), data, 0o644)
	}
	list := filepath.Join(dir, "list.csv")
	os.WriteFile(list, []byte("image_path\n./x.tif\nX.tif\ngpkg_y.tif\n"), 0o644)
	out := filepath.Join(t.TempDir(), "out")
	args := []string{"predict", "--tile", "--model", demoModelDir, "--threads", "1", "--patch-size", "300"}
	if code, stderr := runArgs(t, append(args, "--csv", list, "--out", out)...); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	var rep struct {
		Tile struct {
			Rasters []struct {
				Path  string `json:"image_path"`
				Layer string `json:"layer"`
			}
		}
	}
	b, _ := os.ReadFile(filepath.Join(out, "report.json"))
	if err := json.Unmarshal(b, &rep); err != nil || len(rep.Tile.Rasters) != 3 {
		t.Fatalf("report.json: %v %s", err, b)
	}
	want := []string{"x.tif_2", "X.tif", "layer_gpkg_y.tif"} // X.tif is valid as it is
	for i, r := range rep.Tile.Rasters {
		if r.Layer != want[i] {
			t.Errorf("%s: layer %q, want %q", r.Path, r.Layer, want[i])
		}
	}
	info, err := exec.Command("ogrinfo", "-q", filepath.Join(out, tilerun.GPKGFile)).CombinedOutput()
	if err != nil || strings.Count(string(info), "(Polygon)") != 3 {
		t.Fatalf("ogrinfo: %v\n%s", err, info)
	}

	for name, gt := range map[string]string{"nan": "nan, 1, 0, 0, 0, -1", "overflow": "1e308, 1e308, 0, 0, 0, -1"} {
		bad := filepath.Join(dir, name+".tif")
		os.WriteFile(bad, data, 0o644)
		os.WriteFile(bad+".aux.xml", []byte("<PAMDataset><GeoTransform>"+gt+"</GeoTransform></PAMDataset>\n"), 0o644)
		os.WriteFile(list, []byte("image_path\nx.tif\n"+name+".tif\n"), 0o644)
		out := filepath.Join(t.TempDir(), "out")
		code, stderr := runArgs(t, append(args, "--csv", list, "--out", out)...)
		if code != ExitInput || !strings.Contains(stderr, bad) || !strings.Contains(stderr, "geotransform") || strings.Contains(stderr, "windows") {
			t.Errorf("%s geotransform: exit %d, want %d naming %s before any window:\n%s", name, code, ExitInput, bad, stderr)
		}
		if _, err := os.Stat(filepath.Join(out, "report.json")); err == nil {
			t.Errorf("%s: a report was written", name)
		}
	}
}

// A damaged journal or list of a set-aside run (a corrupt disk, a hand
// edit) is named with what to do, by the next start (exit 1) and by
// canopy doctor --out, which does not promise the next run will mend it.
func TestDamagedSafetyFilesNamed(t *testing.T) {
	for _, c := range []struct{ path, what string }{
		{outdir.JournalName, outdir.JournalName + " is damaged"},
		{filepath.Join(outdir.PreviousDir, outdir.MovedList), "unreadable " + outdir.MovedList},
	} {
		out := t.TempDir()
		os.MkdirAll(filepath.Join(out, outdir.PreviousDir), 0o755)
		os.WriteFile(filepath.Join(out, c.path), []byte("{{{"), 0o644)
		if code, msg := outState(out); code != ExitInternal || !strings.Contains(msg, "damaged") || !strings.Contains(msg, c.what) || strings.Contains(msg, "the next canopy run") {
			t.Errorf("%s: doctor: exit %d %q", c.path, code, msg)
		}
		if _, err := outdir.Open(out, outNames); err == nil || Code(err) != ExitInternal || !strings.Contains(err.Error(), "is damaged") || !strings.Contains(err.Error(), "remove") {
			t.Errorf("%s: start: %v", c.path, err)
		}
	}
}
