package cudnn

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/cudnn/fake"
	"github.com/canopy-hpc/canopy/infer/cuda/hostkern"
	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
)

// The binding against the fake libcudnn.so.9 (built here with cc), which
// checks what the real library checks at finalization and computes over
// host memory (the host shim's allocations).

var (
	fakeOnce sync.Once
	fakeDir  string
	fakeErr  error
)

func fakePath(t *testing.T) string {
	t.Helper()
	fakeOnce.Do(func() {
		fakeDir, fakeErr = os.MkdirTemp("", "fakecudnn")
		if fakeErr == nil {
			_, fakeErr = fake.Build(fakeDir)
		}
	})
	if fakeErr != nil {
		t.Fatal(fakeErr)
	}
	return filepath.Join(fakeDir, Soname)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fakeDir != "" {
		os.RemoveAll(fakeDir)
	}
	os.Exit(code)
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// systemHas says whether this machine's loader path has a libcudnn.so.9
// (then it comes first, as it should).
func systemHas() bool {
	l, err := Open(Soname, "")
	if err == nil {
		l.Close()
	}
	return err == nil
}

func TestFindSearchOrder(t *testing.T) {
	venv, conda, home, cudaHome := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	for _, d := range []string{venv, conda, home + "/.local"} {
		os.MkdirAll(filepath.Join(d, "lib/python3.12/site-packages/nvidia/cu13/lib"), 0o755)
	}
	os.WriteFile(filepath.Join(venv, "lib/python3.12/site-packages/nvidia/cu13/lib", Soname), nil, 0o644)
	s := Search{Getenv: env(map[string]string{"VIRTUAL_ENV": venv, "CONDA_PREFIX": conda, "CUDA_HOME": cudaHome}), Home: home}
	var where []string
	for _, p := range s.Places() {
		where = append(where, p.Where+" "+strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(p.Path, venv), conda), home), cudaHome))
	}
	want := []string{
		"system loader path libcudnn.so.9",
		"VIRTUAL_ENV /lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9",
		"VIRTUAL_ENV /lib/python3.12/site-packages/nvidia/cu13/lib/libcudnn.so.9",
		"CONDA_PREFIX /lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9",
		"user site-packages /.local/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9",
		"CUDA_HOME /lib64/libcudnn.so.9",
		"CUDA_HOME /lib/libcudnn.so.9",
	}
	if strings.Join(where, "\n") != strings.Join(want, "\n") {
		t.Errorf("places:\n%s\nwant:\n%s", strings.Join(where, "\n"), strings.Join(want, "\n"))
	}
	// The flag, then CANOPY_CUDNN, replace the search.
	s.Flag = "/x/libcudnn.so.9"
	if p := s.Places(); len(p) != 1 || p[0].Where != "--cudnn" {
		t.Errorf("with --cudnn: %v", p)
	}
	s.Flag = ""
	s.Getenv = env(map[string]string{"CANOPY_CUDNN": "/y", "VIRTUAL_ENV": venv})
	if p := s.Places(); len(p) != 1 || p[0].Where != "CANOPY_CUDNN" || p[0].Path != "/y" {
		t.Errorf("with CANOPY_CUDNN: %v", p)
	}
}

func TestFindInVirtualEnv(t *testing.T) {
	venv := t.TempDir()
	dir := filepath.Join(venv, "lib/python3.11/site-packages/nvidia/cudnn/lib")
	os.MkdirAll(dir, 0o755)
	if _, err := fake.Build(dir); err != nil {
		t.Fatal(err)
	}
	l, err := Find(Search{Getenv: env(map[string]string{"VIRTUAL_ENV": venv}), Home: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if systemHas() {
		if l.Where != "system loader path" {
			t.Errorf("found in %s, but this machine's loader path has one, which comes first", l.Where)
		}
		return
	}
	if l.Where != "VIRTUAL_ENV" || l.Path != filepath.Join(dir, Soname) || l.Version != 91900 || l.VersionString() != "9.19.0" {
		t.Errorf("found %+v", *l)
	}
}

func TestFindNothing(t *testing.T) {
	if systemHas() {
		t.Skip("this machine's loader path has a libcudnn.so.9")
	}
	venv := t.TempDir()
	_, err := Find(Search{Getenv: env(map[string]string{"VIRTUAL_ENV": venv}), Home: "/nonexistent-home"})
	var nf *NotFoundError
	if !errors.As(err, &nf) || !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"system loader path: libcudnn.so.9", "VIRTUAL_ENV: " + venv, "user site-packages: /nonexistent-home/.local", "CONDA_PREFIX", "CUDA_HOME: (unset)", "--cudnn PATH"} {
		if want == "CONDA_PREFIX" {
			continue // unset: not a place (no prefix)
		}
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
}

func TestWrongLibraries(t *testing.T) {
	for _, c := range []struct {
		def, want string
	}{
		{"FAKE_VERSION=8907", "cudnnGetVersion() is 8907: not cuDNN 9.x"},
		{"FAKE_VERSION=100100", "cudnnGetVersion() is 100100: not cuDNN 9.x"},
		{"FAKE_OMIT_EXECUTE", "no symbol cudnnBackendExecute"},
	} {
		dir := t.TempDir()
		if _, err := fake.Build(dir, c.def); err != nil {
			t.Fatal(err)
		}
		// --cudnn takes the folder or the file.
		for _, flag := range []string{dir, filepath.Join(dir, Soname)} {
			_, err := Find(Search{Flag: flag})
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--cudnn: "+flag) {
				t.Errorf("%s via %s: err = %v", c.def, flag, err)
			}
		}
	}
	dir := t.TempDir()
	if _, err := fake.Build(dir); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "libcudnn_graph.so.9"))
	if _, err := Find(Search{Flag: dir}); err == nil || !strings.Contains(err.Error(), "sub-library libcudnn_graph.so.9") {
		t.Errorf("without libcudnn_graph.so.9: %v", err)
	}
	_, err := Find(Search{Flag: "/nonexistent/libcudnn.so.9"})
	if err == nil || !strings.Contains(err.Error(), "--cudnn: /nonexistent/libcudnn.so.9: no such file") {
		t.Errorf("missing file: %v", err)
	}
}

func openFake(t *testing.T) (*Lib, *Handle) {
	t.Helper()
	l, err := Find(Search{Flag: fakePath(t)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := l.NewHandle(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(); l.Close() })
	return l, h
}

func TestEngineFilter(t *testing.T) {
	_, h := openFake(t)
	c := Conv{N: 2, C: 8, H: 9, W: 7, M: 4, KH: 3, KW: 3, Stride: 1, Pad: 1, Relu: true}
	for _, m := range []Math{FP32, TF32, BF16} {
		c.Math = m
		cands, err := h.Candidates(c)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, cd := range cands {
			v := "no"
			if cd.Eligible {
				v = "yes"
			}
			got = append(got, cd.Engine.String()+":"+v)
		}
		want := map[Math]string{
			FP32: "eng3:no eng2 k17=2:no eng1 k2=1:no eng0:yes",
			TF32: "eng3:no eng2 k17=2:no eng1 k2=1:yes eng0:yes",
			BF16: "eng3:no eng2 k17=2:no eng1 k2=1:yes",
		}[m]
		if strings.Join(got, " ") != want {
			t.Errorf("%s: candidates %q, want %q", m, strings.Join(got, " "), want)
		}
		p, err := h.NewPlan(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantEng := map[Math]string{FP32: "eng0", TF32: "eng1 k2=1", BF16: "eng1 k2=1"}[m]
		if p.Engine.String() != wantEng {
			t.Errorf("%s: heuristic plan %s, want %s", m, p.Engine, wantEng)
		}
		p.Close()
	}
	// Pinned engines go through the same filter; the fake checks the
	// index range and the knobs.
	c.Math = TF32
	for _, pin := range []struct {
		e    Engine
		want string
	}{
		{Engine{Index: 3}, "not allowed: NONDETERMINISTIC"},
		{Engine{Index: 2, Knobs: []Knob{{KnobSplitKSlc, 2}}}, "not allowed: split reduction"},
		{Engine{Index: 9}, "OUT_OF_BOUND"},
		{Engine{Index: 1, Knobs: []Knob{{2, 5}}}, "out of its range"},
		{Engine{Index: 0, Knobs: []Knob{{2, 1}}}, "knob type this engine does not have"},
		{Engine{Index: 2, Knobs: []Knob{{KnobSplitKSlc, 1}}}, ""},
		{Engine{Index: 0}, ""},
	} {
		p, err := h.NewPlan(c, &pin.e)
		if pin.want == "" {
			if err != nil {
				t.Errorf("pin %s: %v", pin.e, err)
			} else {
				p.Close()
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), pin.want) {
			t.Errorf("pin %s: err = %v, want %q", pin.e, err, pin.want)
		}
	}
	if ok, _ := Eligible(TF32, nil, []Knob{{KnobStreamK, 1}}); ok {
		t.Error("stream-K let through")
	}
	if ok, _ := Eligible(TF32, nil, []Knob{{KnobSplitPSlc, 3}}); ok {
		t.Error("split-P let through")
	}
}

// The fake enforces what the real library documents; the binding's own
// descriptors pass (the other tests), and these do not.
func TestFakeFinalizeChecks(t *testing.T) {
	l, h := openFake(t)
	_ = h
	b := &builder{l: l, where: "test"}
	defer b.free()
	try := func(name string, f func(), want string) {
		t.Helper()
		b.err = nil
		f()
		if b.err == nil || !strings.Contains(b.err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", name, b.err, want)
		}
	}
	try("NCHW strides", func() {
		x := b.create(descTensor)
		b.setI32(x, attrTensorDataType, typeDataType, dataFloat)
		b.setI64(x, attrTensorDims, 1, 3, 4, 5)
		b.setI64(x, attrTensorStrides, 60, 20, 5, 1)
		b.setI64(x, attrTensorUID, 1)
		b.setI64(x, attrTensorAlignment, 16)
		b.finalize(x, "tensor")
	}, "NOT_SUPPORTED_LAYOUT")
	try("no alignment", func() {
		x := b.create(descTensor)
		b.setI32(x, attrTensorDataType, typeDataType, dataFloat)
		b.setI64(x, attrTensorDims, 1, 3, 4, 5)
		b.setI64(x, attrTensorStrides, 60, 1, 15, 3)
		b.setI64(x, attrTensorUID, 1)
		b.finalize(x, "tensor")
	}, "TENSOR_BYTE_ALIGNMENT not set")
	try("alignment 12", func() {
		x := b.create(descTensor)
		b.setI32(x, attrTensorDataType, typeDataType, dataFloat)
		b.setI64(x, attrTensorDims, 1, 3, 4, 5)
		b.setI64(x, attrTensorStrides, 60, 1, 15, 3)
		b.setI64(x, attrTensorUID, 1)
		b.setI64(x, attrTensorAlignment, 12)
		b.finalize(x, "tensor")
	}, "power of two")
	try("set after finalize", func() {
		x := b.tensor(1, dataFloat, 1, 3, 4, 5, false)
		b.setI64(x, attrTensorUID, 2)
	}, "already finalized")
	try("knob type as INT64", func() {
		k := b.create(descKnobChoice)
		b.setI64(k, attrKnobChoiceType, KnobSplitKSlc)
	}, "wrong type")
	try("engine before graph", func() {
		e := b.create(descEngine)
		b.setI64(e, attrEngineIndex, 0)
		b.finalize(e, "engine")
	}, "ENGINE_OPERATION_GRAPH not set")
}

// conv64 is the reference: float64 sums, NHWC.
func conv64(c Conv, x, w, bias, res []float32) []float64 {
	oh, ow := c.Out()
	y := make([]float64, c.N*oh*ow*c.M)
	for n := 0; n < c.N; n++ {
		for oy := 0; oy < oh; oy++ {
			for ox := 0; ox < ow; ox++ {
				for m := 0; m < c.M; m++ {
					s := float64(bias[m])
					for kh := 0; kh < c.KH; kh++ {
						for kw := 0; kw < c.KW; kw++ {
							iy, ix := oy*c.Stride-c.Pad+kh, ox*c.Stride-c.Pad+kw
							if iy < 0 || iy >= c.H || ix < 0 || ix >= c.W {
								continue
							}
							for ci := 0; ci < c.C; ci++ {
								s += float64(x[((n*c.H+iy)*c.W+ix)*c.C+ci]) * float64(w[((m*c.KH+kh)*c.KW+kw)*c.C+ci])
							}
						}
					}
					i := ((n*oh+oy)*ow+ox)*c.M + m
					if res != nil {
						s += float64(res[i])
					}
					if c.Relu && s < 0 {
						s = 0
					}
					y[i] = s
				}
			}
		}
	}
	return y
}

// BF16 rounds v to bfloat16 (nearest even), as the engine converts.
func bf16(v float32) float32 {
	u := math.Float32bits(v)
	u += 0x7fff + (u>>16)&1
	return math.Float32frombits(u &^ 0xffff)
}

// pack16 packs bf16 values two to a float32 slot (little-endian), as a
// device buffer of BF16 holds them.
func pack16(v []float32) []float32 {
	out := make([]float32, (len(v)+1)/2)
	u := unsafe.Slice((*uint16)(unsafe.Pointer(&out[0])), 2*len(out))
	for i, f := range v {
		u[i] = uint16(math.Float32bits(bf16(f)) >> 16)
	}
	return out
}

func unpack16(p []float32, n int) []float32 {
	u := unsafe.Slice((*uint16)(unsafe.Pointer(&p[0])), 2*len(p))
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(uint32(u[i]) << 16)
	}
	return out
}

// TestExecuteNumerics runs fused convolutions (bias, residual, ReLU;
// stride and padding; 1×1 and 3×3) through the fake in each arithmetic
// and compares with float64 sums, within each arithmetic's rounding.
func TestExecuteNumerics(t *testing.T) {
	_, h := openFake(t)
	dev := hostkern.New()
	defer dev.Close()
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []Conv{
		{N: 2, C: 5, H: 9, W: 7, M: 6, KH: 3, KW: 3, Stride: 1, Pad: 1, Relu: true, Residual: true},
		{N: 3, C: 4, H: 8, W: 8, M: 3, KH: 3, KW: 3, Stride: 2, Pad: 1},
		{N: 1, C: 16, H: 5, W: 6, M: 8, KH: 1, KW: 1, Stride: 1, Pad: 0, Relu: true},
		{N: 2, C: 3, H: 11, W: 10, M: 4, KH: 7, KW: 7, Stride: 2, Pad: 3, Relu: true},
	} {
		for _, m := range []Math{FP32, TF32, BF16} {
			c.Math = m
			c.OutFP32 = m == BF16 && !c.Residual
			oh, ow := c.Out()
			x, w, bias, res := make([]float32, c.N*c.H*c.W*c.C), make([]float32, c.M*c.KH*c.KW*c.C), make([]float32, c.M), make([]float32, c.N*oh*ow*c.M)
			for _, s := range [][]float32{x, w, bias, res} {
				for i := range s {
					s[i] = float32(r.NormFloat64())
				}
			}
			if !c.Residual {
				res = nil
			}
			in := func(v []float32) []float32 {
				if m == BF16 {
					return pack16(v)
				}
				return v
			}
			// The reference sees the operands as the engine reads them.
			xr, wr, rr := x, w, res
			if m == BF16 {
				xr, wr = unpack16(pack16(x), len(x)), unpack16(pack16(w), len(w))
				if res != nil {
					rr = unpack16(pack16(res), len(res))
				}
			}
			want := conv64(c, xr, wr, bias, rr)
			p, err := h.NewPlan(c, nil)
			if err != nil {
				t.Fatal(err)
			}
			up := func(v []float32) cuda.Ptr {
				if v == nil {
					return 0
				}
				d, _ := dev.Alloc(len(v))
				dev.Upload(d, v)
				return d
			}
			ny := len(want)
			outBF := m == BF16 && !c.OutFP32
			yn := ny
			if outBF {
				yn = (ny + 1) / 2
			}
			dx, dw, db, dr := up(in(x)), up(in(w)), up(bias), up(func() []float32 {
				if res == nil {
					return nil
				}
				return in(res)
			}())
			dy, _ := dev.Alloc(yn)
			ws, _ := dev.Alloc(int(p.Workspace/4) + 1)
			if err := p.Execute(uintptr(dx), uintptr(dw), uintptr(db), uintptr(dr), uintptr(dy), uintptr(ws)); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, yn)
			dev.Download(got, dy)
			if outBF {
				got = unpack16(got, ny)
			}
			// Derived bound (internal/testsupport/bound): the engine sums
			// K = C·KH·KW products, the bias and the residual in some
			// order, γ_{K+2} of Σ|terms| (the float64 reference is exact
			// to ~1e-16 of it); TF32 rounds x and w first (2⁻¹¹ each,
			// chained on); BF16 reads operands the reference also reads
			// (xr, wr, rr) and, with a BF16 output, rounds it once more
			// (2⁻⁸ of |y|).
			k := c.C * c.KH * c.KW
			u := 0.0
			if m == TF32 {
				u = approx.UTF32
			}
			rel := approx.Chain(u, u, approx.Gamma32(k+2))
			abs := func(v []float32) []float32 {
				if v == nil {
					return nil
				}
				a := make([]float32, len(v))
				for i, e := range v {
					a[i] = float32(math.Abs(float64(e)))
				}
				return a
			}
			terms := conv64(c, abs(xr), abs(wr), abs(bias), abs(rr))
			worst := 0.0
			for i := range want {
				d := math.Abs(float64(got[i]) - want[i])
				lim := rel * terms[i]
				if outBF {
					lim += approx.UBF16 * (math.Abs(want[i]) + lim)
				}
				if !(d <= lim) {
					t.Fatalf("%s %s: y[%d] = %v, want %v (bound %.3g)", c.Key(), m, i, got[i], want[i], lim)
				}
				worst = max(worst, d)
			}
			// TF32 rounding moves y by ~2⁻¹¹·√K of O(1) values, far above
			// 1e-4; FP32 keeps it below.
			if (m == FP32 && worst >= 1e-4) || (m == TF32 && worst < 1e-4) {
				t.Errorf("%s: worst |Δ| %.3g: the operands' rounding is not as the arithmetic says", c.Key(), worst)
			}
			t.Logf("%s: worst |Δ| %.3g, engine %s", c.Key(), worst, p.Engine)
			p.Close()
		}
	}
}

func TestExecuteChecksPointers(t *testing.T) {
	_, h := openFake(t)
	dev := hostkern.New()
	defer dev.Close()
	c := Conv{N: 1, C: 4, H: 4, W: 4, M: 4, KH: 1, KW: 1, Stride: 1, Math: TF32}
	p, err := h.NewPlan(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Workspace == 0 {
		t.Fatal("the fake's engine 1 declares a workspace")
	}
	buf, _ := dev.Alloc(256)
	a := uintptr(buf)
	if err := p.Execute(a, a, a, 0, a, 0); err == nil || !strings.Contains(err.Error(), "workspace") {
		t.Errorf("no workspace: %v", err)
	}
	if err := p.Execute(a+4, a, a, 0, a, a); err == nil || !strings.Contains(err.Error(), "MISALIGNED") {
		t.Errorf("misaligned X: %v", err)
	}
	if err := p.Execute(a, a, a, 0, a, a); err != nil {
		t.Errorf("aligned: %v", err)
	}
}

func TestPlanFileRoundTrip(t *testing.T) {
	pf := &PlanFile{Format: PlanFormat, Key: PlanKey{CUDNN: 91900, GPU: "NVIDIA H200", CC: "9.0", SMs: 132}, Model: "m", Batch: 8, Precision: "tf32",
		Plans: map[string]LayerPlan{"n8 c3": {Layer: "stem", Engine: Engine{Index: 2, Knobs: []Knob{{KnobSplitKSlc, 1}}}, Millis: 0.5, Tried: 3}}}
	path := filepath.Join(t.TempDir(), "plans.json")
	os.WriteFile(path, pf.Marshal(), 0o644)
	got, sum, err := ReadPlanFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Marshal()) != string(pf.Marshal()) || len(sum) != 64 {
		t.Errorf("round trip:\n%s\nvs\n%s", got.Marshal(), pf.Marshal())
	}
	if d := got.Key.Mismatch(PlanKey{CUDNN: 91900, GPU: "NVIDIA H100 80GB HBM3", CC: "9.0", SMs: 132}); !strings.Contains(d, `GPU "NVIDIA H200" in the file, "NVIDIA H100 80GB HBM3" here`) {
		t.Errorf("mismatch: %q", d)
	}
	if d := got.Key.Mismatch(got.Key); d != "" {
		t.Errorf("self mismatch %q", d)
	}
	for _, bad := range []string{`{}`, `{"format":"canopy-cudnn-plans/1","batch_size":0}`, `{"format":"canopy-cudnn-plans/1","batch_size":1,"extra":1}`,
		`{"format":"canopy-cudnn-plans/1","batch_size":1,"plans":{"a":{"engine":{"index":-1}}}}`} {
		if _, err := ParsePlanFile([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// FuzzParsePlanFile: a plan file comes from a stranger's disk; whatever
// the bytes, ParsePlanFile returns an error or a file that marshals and
// parses back to the same bytes, never panics.
func FuzzParsePlanFile(f *testing.F) {
	pf := &PlanFile{Format: PlanFormat, Key: PlanKey{CUDNN: 91900, GPU: "NVIDIA H200", CC: "9.0", SMs: 132}, Model: "m", Batch: 8, Precision: "tf32",
		Plans: map[string]LayerPlan{"n8 c3": {Layer: "stem", Engine: Engine{Index: 2, Knobs: []Knob{{KnobSplitKSlc, 1}}}, Millis: 0.5, Tried: 3}}}
	f.Add(pf.Marshal())
	f.Add([]byte(`{"format":"canopy-cudnn-plans/1","batch_size":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePlanFile(b)
		if err != nil {
			return
		}
		q, err := ParsePlanFile(p.Marshal())
		if err != nil {
			t.Fatalf("a parsed plan file does not parse back: %v", err)
		}
		if !bytes.Equal(q.Marshal(), p.Marshal()) {
			t.Fatal("round trip changed the plan file")
		}
	})
}

// TestNotARegularFile: --cudnn naming a FIFO, a device or a link to one is
// refused at once with the reason (dlopen of a FIFO would block in open()
// forever), and the search reports it like any other unusable place.
func TestNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "libcudnn.so.9")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "lib.so")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, dir, link, "/dev/zero"} {
		done := make(chan error, 1)
		go func() {
			_, err := Find(Search{Flag: p, Getenv: func(string) string { return "" }})
			done <- err
		}()
		select {
		case err := <-done:
			var nf *NotFoundError
			if !errors.As(err, &nf) || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("--cudnn %s: %v, want a NotFoundError saying not a regular file", p, err)
			}
		case <-time.After(10 * time.Second):
			// Unblock the reader (a writer opens and closes the FIFO) so the
			// test binary can end.
			if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
			<-done
			t.Fatalf("--cudnn %s: still loading after 10 s (dlopen blocked)", p)
		}
	}
}

// TestPlanFileNotRegular: --plan naming a FIFO or a device is refused at
// once, never waited on (a FIFO without a writer blocks a plain open).
func TestPlanFileNotRegular(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "plans.json")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, "/dev/zero", t.TempDir()} {
		done := make(chan error, 1)
		go func() { _, _, err := ReadPlanFile(p); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("--plan %s: %v, want not a regular file", p, err)
			}
		case <-time.After(10 * time.Second):
			if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
			<-done
			t.Fatalf("--plan %s: still reading after 10 s", p)
		}
	}
}
