package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/infer/cuda/cudnn/fake"
	"github.com/canopy-hpc/canopy/infer/treeformer"
	"github.com/canopy-hpc/canopy/internal/testsupport/pointmatch"
	"github.com/canopy-hpc/canopy/internal/testsupport/tftol"
)

// pointRows reads a point predictions.csv, each row keyed by its image
// and label.
func pointRows(t *testing.T, csv []byte) []pointmatch.P {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(string(csv)), "\n")
	if lines[0] != "image_path,x,y,label,score" {
		t.Fatalf("header %q", lines[0])
	}
	var out []pointmatch.P
	for _, l := range lines[1:] {
		f := strings.Split(l, ",")
		if len(f) != 5 {
			t.Fatalf("row %q", l)
		}
		p := pointmatch.P{Key: f[0] + "," + f[3]}
		var errs [3]error
		p.X, errs[0] = strconv.ParseFloat(f[1], 64)
		p.Y, errs[1] = strconv.ParseFloat(f[2], 64)
		p.Score, errs[2] = strconv.ParseFloat(f[4], 64)
		for _, err := range errs {
			if err != nil {
				t.Fatalf("row %q: %v", l, err)
			}
		}
		out = append(out, p)
	}
	return out
}

// gpuPointScoreTol bounds |a score of predict --device cuda − the CPU
// engine's| for the one-block TreeFormer (treeformer.Tiny) at --precision
// exact and fp32. The GPU side (canopy's kernels, or the fake cuDNN's
// convolutions, at fp32 on the host shim) and the CPU engine are two
// float32 computations of the same network in their own summation orders:
// their density maps differ by at most tftol.StageTol's τ = 4·√2·u·√ΣK of
// the map's maximum (four standard deviations of the two sides' rounding
// walks, ΣK ≈ 5.0·10⁴ the reduction lengths along the deepest path; no
// TF32 at these precisions). A score is the cell's value over the map's
// maximum (a float32 division on each side), so tftol.ScoreTol: 2τ/(1 −
// τ) + 2u ≈ 1.5·10⁻⁴. The CSV writes a float32 score's shortest repr,
// which reads back exactly: no printing error on top.
var gpuPointScoreTol = tftol.ScoreTol(tftol.StageTol(tftol.Arch(treeformer.Tiny)))

// TestMPIPointPredictGPU: predict --device cuda with the one-block
// TreeFormer, on host-shim GPUs (-tags hostkerngpu, one per rank) under
// the real mpirun: canopy's kernels (--precision exact) give the same
// bytes on 1 and 3 ranks, and the points of exact and of the cuDNN path
// (fp32 on the fake libcudnn.so.9) are the CPU engine's by issue 46's
// rule (at least 99% within 0.5 px, same label; at most 1% extra) with
// the scores within gpuPointScoreTol, not the 1e-3; report.json
// names the device and precision.
func TestMPIPointPredictGPU(t *testing.T) {
	model, all := pointSet(t)
	images := t.TempDir() // two images, so the shim runs it in seconds
	for _, n := range []string{"img_a.png", "img_c.png"} {
		b, err := os.ReadFile(filepath.Join(all, n))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(images, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	bin := hostkernBin(t, dir)
	lib, err := fake.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"CANOPY_TEST_HOSTKERN_GPUS=3"}
	predict := func(np int, extra ...string) ([]byte, string) {
		t.Helper()
		out := filepath.Join(t.TempDir(), "out")
		args := append([]string{"predict", "--model", model, "--images", images, "--out", out, "--threads", "1"}, extra...)
		r := mpirunBin(t, bin, np, env, args...)
		if r.code != 0 {
			t.Fatalf("np %d %v: exit %d\n%s", np, extra, r.code, r.stderr)
		}
		csv, err := os.ReadFile(filepath.Join(out, "predictions.csv"))
		if err != nil {
			t.Fatal(err)
		}
		rep, err := os.ReadFile(filepath.Join(out, "report.json"))
		if err != nil {
			t.Fatal(err)
		}
		return csv, string(rep)
	}
	cpuCSV, cpuRep := predict(1, "--device", "cpu")
	if !strings.Contains(cpuRep, `"device": "cpu"`) || !strings.Contains(cpuRep, `"precision": "exact"`) {
		t.Fatalf("CPU report:\n%s", cpuRep)
	}
	want := pointRows(t, cpuCSV)
	if len(want) == 0 {
		t.Fatal("the CPU run found no points: nothing to compare")
	}
	exact1, rep := predict(1, "--device", "cuda", "--precision", "exact")
	if !strings.Contains(rep, `"device": "cuda:0"`) || !strings.Contains(rep, "GPU-hostkern-0") || !strings.Contains(rep, `"precision": "exact"`) {
		t.Fatalf("exact report names no host-shim GPU:\n%s", rep)
	}
	exact3, _ := predict(3, "--device", "cuda", "--precision", "exact")
	if !bytes.Equal(exact1, exact3) {
		t.Fatalf("--device cuda --precision exact: np 3 differs from np 1:\n%s\nvs\n%s", exact3, exact1)
	}
	fp32, rep := predict(1, "--device", "cuda", "--cudnn", lib)
	if !strings.Contains(rep, `"precision": "fp32"`) || !strings.Contains(rep, `"cudnn"`) {
		t.Fatalf("the default GPU precision is not fp32 on cuDNN:\n%s", rep)
	}
	r := mpirunBin(t, bin, 1, env, "predict", "--model", model, "--images", images, "--out", filepath.Join(t.TempDir(), "out"), "--device", "cuda", "--precision", "bf16")
	if r.code != 2 || !strings.Contains(r.stderr, "bf16 is the box detectors'") {
		t.Fatalf("--precision bf16: exit %d: %s", r.code, r.stderr)
	}
	for name, csv := range map[string][]byte{"exact": exact1, "fp32": fp32} {
		got := pointRows(t, csv)
		n, extra, worst := pointmatch.Match(got, want, 0.5, gpuPointScoreTol)
		if 100*n < 99*len(want) || 100*extra > len(want) {
			t.Fatalf("%s: %d of the CPU's %d points matched, %d extra:\n%s\nvs\n%s", name, n, len(want), extra, csv, cpuCSV)
		}
		t.Logf("%s: %d of %d points, %d extra, largest score difference %.3g", name, n, len(want), extra, worst)
	}
}

// TestPointPredictDeviceRefusals: in the default build (no cuda backend)
// --device cuda and a cuDNN precision are exit 5, saying why, and the box
// detectors' GPU flags are usage errors for a point model.
func TestPointPredictDeviceRefusals(t *testing.T) {
	model, images := pointSet(t)
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--device", "cuda"}, 5, "built without the cuda backend"},
		{[]string{"--precision", "fp32"}, 5, "needs a GPU"},
		{[]string{"--plan", "p.json"}, 2, "--plan is not yet available for a point model"},
		{[]string{"--device", "tpu"}, 2, "want auto, cpu, cuda or cuda:N"},
	} {
		args := append([]string{"predict", "--model", model, "--images", images, "--out", filepath.Join(t.TempDir(), "out")}, c.args...)
		if r := run1(t, args...); r.code != c.code || !strings.Contains(r.stderr, c.says) {
			t.Errorf("%v: exit %d (want %d): %s", c.args, r.code, c.code, r.stderr)
		}
	}
}
