package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/cudnn"
	"github.com/canopy-hpc/canopy/internal/modelsel"
)

// canopy gpu-plan on a fake GPU (the host shim) with the fake cuDNN: the
// plan file it writes pins every layer of an eval --plan run at the same
// batch size (the report records its sha256 and "plan file" per layer);
// a plan file of another stack is refused with exit 5, naming what
// differs.
func TestGPUPlanRoundTrip(t *testing.T) {
	withFakeGPUs(t, 1)
	cfg := gpuCfg(t, t.TempDir())
	planPath := filepath.Join(t.TempDir(), "plans.json")
	var out bytes.Buffer
	err := gpuPlan(gpuPlanConfig{Spec: cfg.Model.Spec, Batch: 4, Precision: cuda.TF32, Sizes: [][2]int{{400, 400}, {500, 300}},
		CUDNN: "", Out: planPath, Repeat: 1}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "layer shapes") {
		t.Errorf("gpu-plan printed:\n%s", out.String())
	}
	pf, sum, err := cudnn.ReadPlanFile(planPath)
	if err != nil {
		t.Fatal(err)
	}
	if pf.Key.GPU != "Fake GPU" || pf.Key.CUDNN != 91900 || pf.Batch != 4 || pf.Precision != "tf32" || len(pf.Plans) == 0 {
		t.Fatalf("plan file %+v", pf)
	}
	run := func(edit func(*EvalConfig)) ([]int, string, *modelsel.Info) {
		c := gpuCfg(t, t.TempDir())
		c.BatchSize, c.Model.Precision, c.Model.PrecisionSet, c.Model.Plan = 4, cuda.TF32, true, planPath
		if edit != nil {
			edit(&c)
		}
		var stderr bytes.Buffer
		codes := runLocalCtx(t, 1, c, func(int) context.Context { return context.Background() }, &stderr)
		if codes[0] != 0 {
			return codes, stderr.String(), nil
		}
		var rep struct{ Run struct{ Model modelsel.Info } }
		b, _ := os.ReadFile(filepath.Join(c.Out, "report.json"))
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		return codes, stderr.String(), &rep.Run.Model
	}
	codes, stderr, info := run(nil)
	if codes[0] != 0 {
		t.Fatalf("eval --plan: exit %v\n%s", codes, stderr)
	}
	if info.CUDNN == nil || info.CUDNN.Plan != sum || len(info.CUDNN.Layers) == 0 {
		t.Fatalf("report's cudnn: %+v", info.CUDNN)
	}
	for name, le := range info.CUDNN.Layers {
		if le.From != "plan file" || le.Engine != pf.Plans[le.Shape].Engine.String() {
			t.Errorf("layer %s: %+v", name, le)
		}
	}
	// Another GPU, another precision, another batch size: exit 5, named.
	for _, c := range []struct {
		edit func(*cudnn.PlanFile)
		cfg  func(*EvalConfig)
		want string
	}{
		{func(p *cudnn.PlanFile) { p.Key.GPU = "NVIDIA H200" }, nil, `GPU "NVIDIA H200" in the file, "Fake GPU" here`},
		{func(p *cudnn.PlanFile) { p.Key.CUDNN = 91000 }, nil, "cuDNN 91000 in the file, 91900 here"},
		{nil, func(e *EvalConfig) { e.Model.Precision = cuda.BF16 }, "precision tf32 in the file, bf16 here"},
		{nil, func(e *EvalConfig) { e.BatchSize = 2 }, "batch size 4 in the file, 2 here"},
	} {
		path := planPath
		if c.edit != nil {
			p2 := *pf
			c.edit(&p2)
			path = filepath.Join(t.TempDir(), "other.json")
			os.WriteFile(path, p2.Marshal(), 0o644)
		}
		codes, stderr, _ := run(func(e *EvalConfig) {
			e.Model.Plan = path
			if c.cfg != nil {
				c.cfg(e)
			}
		})
		if codes[0] != ExitMPI || !strings.Contains(stderr, c.want) {
			t.Errorf("want exit 5 naming %q: exit %v\n%s", c.want, codes, stderr)
		}
	}
}

// TestGPUPlanCloseError: gpu-plan whose GPU fails to close (a late CUDA
// fault: the timings are not to be trusted) exits 5 naming the close's
// error, and writes no plan file.
func TestGPUPlanCloseError(t *testing.T) {
	withFakeGPUs(t, 1)
	wrapFakeGPUs(func(d cuda.Device) cuda.Device { return closeFails{d} })
	cfg := gpuCfg(t, t.TempDir())
	planPath := filepath.Join(t.TempDir(), "plans.json")
	err := gpuPlan(gpuPlanConfig{Spec: cfg.Model.Spec, Batch: 1, Precision: cuda.TF32, Sizes: [][2]int{{128, 128}},
		Out: planPath, Repeat: 1}, io.Discard)
	if Code(err) != ExitMPI || !strings.Contains(fmt.Sprint(err), "close the GPU: the device did not close") {
		t.Fatalf("exit %d (%v); want %d naming the failed close", Code(err), err, ExitMPI)
	}
	if _, err := os.Stat(planPath); err == nil {
		t.Error("a gpu-plan whose GPU failed to close wrote its plan file")
	}
}
