package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/cudnn"
	"github.com/canopy-hpc/canopy/infer/cuda/cudnn/fake"
	"github.com/canopy-hpc/canopy/infer/cuda/hostkern"
	"github.com/canopy-hpc/canopy/internal/modelsel"
)

var fakeLib struct {
	once      sync.Once
	dir, path string
	err       error
}

// fakeCUDNN builds the fake libcudnn.so.9 once per test binary (each run
// loads it by path, so its folder lives until TestMain removes it).
func fakeCUDNN(t *testing.T) string {
	t.Helper()
	fakeLib.once.Do(func() {
		fakeLib.dir, fakeLib.err = os.MkdirTemp("", "canopy-fakecudnn-")
		if fakeLib.err == nil {
			fakeLib.path, fakeLib.err = fake.Build(fakeLib.dir)
		}
	})
	if fakeLib.err != nil {
		t.Fatal(fakeLib.err)
	}
	return fakeLib.path
}

// The GPU path of eval, end to end in process: device placement, the GPU
// detector, the report's devices, on fake GPUs that are the host shim
// (kernels.cu compiled for the CPU). The images are the model set's, at
// min_size 128 so that the shim runs them in seconds.

// wrapFakeGPUs makes each device OpenDevice opens (after withFakeGPUs)
// wrap's of it: a test's counting device.
func wrapFakeGPUs(wrap func(cuda.Device) cuda.Device) {
	open := modelsel.OpenDevice
	modelsel.OpenDevice = func(i int) (cuda.Device, error) {
		d, err := open(i)
		if err != nil {
			return nil, err
		}
		return wrap(d), nil
	}
}

// withFakeGPUs makes this build look like a cuda build on a node with n
// GPUs (UUIDs GPU-fake-0…), seen through CUDA_VISIBLE_DEVICES as the
// driver does.
func withFakeGPUs(t *testing.T, n int) {
	h, c, o, f := modelsel.HaveCUDA, modelsel.CountDevices, modelsel.OpenDevice, modelsel.FindCUDNN
	modelsel.HaveCUDA = true
	lib := fakeCUDNN(t)
	// The fake cuDNN stands in for the library's search: --cudnn (the
	// tests of the search itself are infer/cuda/cudnn's) or else the fake.
	modelsel.FindCUDNN = func(s cudnn.Search) (*cudnn.Lib, error) {
		if s.Flag == "" {
			s.Flag = lib
		}
		return cudnn.Find(s)
	}
	visible := func() []string {
		v, set := os.LookupEnv("CUDA_VISIBLE_DEVICES")
		return cuda.Visible(v, set, n)
	}
	modelsel.CountDevices = func() (int, error) { return len(visible()), nil }
	modelsel.OpenDevice = func(i int) (cuda.Device, error) {
		vis := visible()
		if i >= len(vis) {
			return nil, fmt.Errorf("cuda: device %d: this process sees %d", i, len(vis))
		}
		return hostkern.NewAs(cuda.Info{Index: i, Name: "Fake GPU", UUID: "GPU-fake-" + vis[i], SM: "9.0"}), nil
	}
	t.Cleanup(func() { modelsel.HaveCUDA, modelsel.CountDevices, modelsel.OpenDevice, modelsel.FindCUDNN = h, c, o, f })
}

var smallModel struct {
	once sync.Once
	dir  string
	err  error
}

// gpuCfg is modelCfg with the test model at min_size 128.
func gpuCfg(t *testing.T, out string) EvalConfig {
	cfg := modelCfg(t, out)
	s := &smallModel
	s.once.Do(func() {
		s.dir, s.err = os.MkdirTemp("", "canopy-small-model-")
		if s.err == nil {
			s.err = writeTestModel(s.dir, "F32")
		}
		if s.err == nil {
			c := strings.ReplaceAll(testModelConfig, `"min_size": 400, "max_size": 400`, `"min_size": 128, "max_size": 128`)
			s.err = os.WriteFile(filepath.Join(s.dir, "config.json"), []byte(c), 0o644)
		}
	})
	if s.err != nil {
		t.Fatal(s.err)
	}
	cfg.Model.Spec = s.dir
	cfg.Model.Device = device("cuda")
	return cfg
}

// Under mpirun -np 2 or 3 on a node with as many GPUs each rank has its
// own GPU, and the metrics and predictions are byte-identical to one
// rank's: exact and kernel-tf32 at batch 1, 4 or 2 (the device transform,
// postprocess and CUDA-graph replays of the GPU engine); the cuDNN modes
// (the fake cuDNN, whose tensor-core engine's bits depend on an image's
// slot and the batch size) at --batch-size 4, with 1, 2 and 3 ranks (bf16:
// 1 and 3; global batches; the second batch mixes two resized sizes).
func TestGPUEvalIdenticalAcrossRanks(t *testing.T) {
	withFakeGPUs(t, 3)
	for _, prec := range gpuEvalPrecisions {
		var refMetrics, refPreds []byte
		variants := []struct{ ranks, batch int }{{1, 1}, {2, 4}, {3, 2}}
		if prec == "tf32" {
			variants = []struct{ ranks, batch int }{{1, 4}, {2, 4}, {3, 4}}
		} else if precision(prec).Cudnn() {
			variants = []struct{ ranks, batch int }{{1, 4}, {3, 4}}
		}
		for _, v := range variants {
			out := t.TempDir()
			cfg := gpuCfg(t, out)
			cfg.BatchSize, cfg.Model.Precision, cfg.Model.PrecisionSet = v.batch, precision(prec), true
			if codes := runLocal(t, v.ranks, cfg); codes[0] != 0 {
				t.Fatalf("%s %+v: exit codes %v", prec, v, codes)
			}
			m, _ := reportMetrics(t, out)
			preds, err := os.ReadFile(filepath.Join(out, "predictions.csv"))
			if err != nil {
				t.Fatal(err)
			}
			var rep struct {
				Run struct {
					Detector string
					Model    modelsel.Info
				}
			}
			b, _ := os.ReadFile(filepath.Join(out, "report.json"))
			if err := json.Unmarshal(b, &rep); err != nil {
				t.Fatal(err)
			}
			run := rep.Run
			if !strings.HasPrefix(run.Detector, "retinanet-hostkern "+prec) || run.Model.Precision != prec || len(run.Model.Devices) != v.ranks {
				t.Fatalf("%s %+v: detector %q, precision %q, devices %+v", prec, v, run.Detector, run.Model.Precision, run.Model.Devices)
			}
			if c := run.Model.CUDNN; precision(prec).Cudnn() != (c != nil) || c != nil && (c.Plan != "heuristic" || c.Version != 91900 || len(c.Layers) == 0) {
				t.Errorf("%s: report's cudnn %+v", prec, c)
			}
			if b := run.Model.Batching; precision(prec).Cudnn() != (b != nil) || b != nil && b.N != v.batch {
				t.Errorf("%s: report's batching %+v", prec, b)
			}
			for r, d := range run.Model.Devices {
				if d.Rank != r || d.Device != fmt.Sprintf("cuda:%d", r) || d.UUID != fmt.Sprintf("GPU-fake-%d", r) || d.Shared != 1 {
					t.Errorf("%s %+v: rank %d ran on %+v", prec, v, r, d)
				}
			}
			if refMetrics == nil {
				if n := bytes.Count(preds, []byte("\n")) - 1; n < 10 {
					t.Fatalf("%s: only %d detections", prec, n)
				}
				refMetrics, refPreds = m, preds
				continue
			}
			if !bytes.Equal(m, refMetrics) || !bytes.Equal(preds, refPreds) {
				t.Errorf("%s %+v: metrics or predictions differ from 1 rank, batch 1", prec, v)
			}
		}
	}
}

// CUDA_VISIBLE_DEVICES=3,1 on a 4-GPU node: rank 0 runs on the process's
// device 0, physical GPU 3; rank 1 on physical GPU 1. The report names them.
func TestGPUVisibleDevices(t *testing.T) {
	withFakeGPUs(t, 4)
	t.Setenv("CUDA_VISIBLE_DEVICES", "3,1")
	out := t.TempDir()
	if codes := runLocal(t, 2, gpuCfg(t, out)); codes[0] != 0 {
		t.Fatalf("exit %v", codes)
	}
	b, _ := os.ReadFile(filepath.Join(out, "report.json"))
	var rep struct{ Run struct{ Model modelsel.Info } }
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	want := []string{"cuda:0 GPU-fake-3", "cuda:1 GPU-fake-1"}
	for r, d := range rep.Run.Model.Devices {
		if got := d.Device + " " + d.UUID; got != want[r] {
			t.Errorf("rank %d: %s, want %s", r, got, want[r])
		}
	}
	t.Setenv("CUDA_VISIBLE_DEVICES", "")
	var stderr bytes.Buffer
	codes := runLocalCtx(t, 2, gpuCfg(t, t.TempDir()), func(int) context.Context { return context.Background() }, &stderr)
	if codes[0] != ExitMPI || !strings.Contains(stderr.String(), "no CUDA device is visible") {
		t.Errorf("CUDA_VISIBLE_DEVICES empty: exit %v, stderr:\n%s", codes, stderr.String())
	}
}

// Two ranks on one GPU: a warning naming the GPU; with --exclusive-gpu,
// exit 5 on every rank. --device cuda:1 with one GPU visible, and
// --precision tf32, --plan, --cudnn or --exclusive-gpu on the CPU, are
// refused (5).
func TestGPUPlacementErrors(t *testing.T) {
	withFakeGPUs(t, 1)
	cfg := gpuCfg(t, t.TempDir())
	var progress bytes.Buffer
	cfg.Progress = &progress
	if codes := runLocal(t, 2, cfg); codes[0] != 0 || codes[1] != 0 {
		t.Fatalf("shared GPU: exit %v", codes)
	}
	if !strings.Contains(progress.String(), "ranks [0 1] share GPU GPU-fake-0") {
		t.Errorf("no sharing warning; rank 0 wrote:\n%s", progress.String())
	}
	for _, c := range []struct {
		name string
		edit func(*EvalConfig)
		code int
		msg  string
	}{
		{"exclusive", func(c *EvalConfig) { c.Model.ExclusiveGPU = true }, ExitMPI, "--exclusive-gpu: 2 ranks"},
		{"index", func(c *EvalConfig) { c.Model.Device = device("cuda:1") }, ExitMPI, "sees 1 device"},
		{"tf32 on cpu", func(c *EvalConfig) {
			c.Model.Device, c.Model.Precision, c.Model.PrecisionSet = device("cpu"), precision("tf32"), true
		}, ExitMPI, "--precision tf32 needs a GPU; this rank runs on the CPU"},
		// issue 35: the GPU-only flags on a CPU rank are exit 5 too, never
		// ignored
		{"plan on cpu", func(c *EvalConfig) { c.Model.Device, c.Model.Plan = device("cpu"), "fifo" }, ExitMPI, "--plan fifo needs a GPU"},
		{"cudnn on cpu", func(c *EvalConfig) { c.Model.Device, c.Model.CUDNN = device("cpu"), "/x" }, ExitMPI, "--cudnn /x needs a GPU"},
		{"exclusive on cpu", func(c *EvalConfig) { c.Model.Device, c.Model.ExclusiveGPU = device("cpu"), true }, ExitMPI, "--exclusive-gpu needs a GPU"},
		{"no cudnn", func(c *EvalConfig) { c.Model.CUDNN = "/nonexistent/cudnn" }, ExitMPI, "--cudnn: /nonexistent/cudnn: no such file"},
		{"plan on exact", func(c *EvalConfig) {
			c.Model.Precision, c.Model.PrecisionSet, c.Model.Plan = precision("exact"), true, "x.json"
		}, ExitUsage, "--plan is for --precision fp32, tf32 or bf16"},
	} {
		cfg := gpuCfg(t, t.TempDir())
		c.edit(&cfg)
		var stderr bytes.Buffer
		codes := runLocalCtx(t, 2, cfg, func(int) context.Context { return context.Background() }, &stderr)
		if codes[0] != c.code || codes[1] != c.code || !strings.Contains(stderr.String(), c.msg) {
			t.Errorf("%s: exit %v, want %d; stderr:\n%s", c.name, codes, c.code, stderr.String())
		}
	}
}

// doctor shows where --device auto puts each rank: the CPU without GPUs,
// local rank mod the visible GPUs with them, and the sharing.
func TestDoctorDevice(t *testing.T) {
	if got := doctorDevice(0, 2); got != "cpu" {
		t.Errorf("no GPUs: %q", got)
	}
	withFakeGPUs(t, 2)
	for _, c := range []struct {
		rank, size int
		want       string
	}{{0, 2, "cuda:0"}, {1, 2, "cuda:1"}, {2, 3, "cuda:0(x2)"}} {
		if got := doctorDevice(c.rank, c.size); got != c.want {
			t.Errorf("local rank %d of %d on 2 GPUs: %q, want %q", c.rank, c.size, got, c.want)
		}
	}
}

// gpuEvalPrecisions are TestGPUEvalIdenticalAcrossRanks' modes: canopy's
// kernels on the host shim, and cuDNN's TF32 and BF16 through the fake
// (fp32 differs from them only in the engine filter: infer/cuda/cudnn).
var gpuEvalPrecisions = []string{"exact", "kernel-tf32", "tf32", "bf16"}

// TestGPUFlagsOnCPUBuild (issue 35, item 11): on a build without the cuda
// backend every GPU-only flag is refused before any work with exit 5, the
// code gpu-plan gives for the same missing GPU: --plan naming a missing
// file, a FIFO or "{}" (it was silently ignored, exit 0), --cudnn,
// --exclusive-gpu, --precision tf32 (it was exit 2) and --device cuda.
func TestGPUFlagsOnCPUBuild(t *testing.T) {
	if modelsel.HaveCUDA {
		t.Skip("a build with the cuda backend places ranks on GPUs: TestGPUPlacementErrors")
	}
	model, csv, imgDir := testModelSet(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.json")
	os.WriteFile(empty, []byte("{}"), 0o644)
	for i, flag := range [][]string{
		{"--plan", filepath.Join(dir, "missing.json")}, {"--plan", fifo}, {"--plan", empty},
		{"--cudnn", dir}, {"--exclusive-gpu"}, {"--precision", "tf32"}, {"--precision", "bf16"}, {"--device", "cuda:0"},
	} {
		for _, cmd := range []string{"eval", "predict"} {
			out := filepath.Join(dir, fmt.Sprintf("o%d%s", i, cmd))
			args := []string{cmd, "--model", model, "--out", out}
			if cmd == "eval" {
				args = append(args, "--csv", csv)
			} else {
				args = append(args, "--images", imgDir)
			}
			code, msg := cliRun(t, append(args, flag...)...)
			if code != ExitMPI || !strings.Contains(msg, flag[0]) || !strings.Contains(msg, "without the cuda backend") {
				t.Errorf("%s %v: exit %d, want %d naming the flag: %s", cmd, flag, code, ExitMPI, msg)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("%s %v: %s was made", cmd, flag, out)
			}
		}
	}
}
