package jobs

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/infer/safetensors"
	"github.com/canopy-hpc/canopy/internal/limits"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// hostileSet writes a truth CSV and predictions (the "three" set) with the
// given rows appended or rewritten, and returns a replay config.
func hostileSet(t *testing.T, truth, preds string) (EvalConfig, *bytes.Buffer) {
	t.Helper()
	dir := t.TempDir()
	var warn bytes.Buffer
	cfg := EvalConfig{CSV: writeFile(t, dir, "truth.csv", truth), Predictions: writeFile(t, dir, "predictions.csv", preds),
		Out: filepath.Join(dir, "out"), IoUThreshold: 0.4, BatchSize: 2, Warnings: &warn}
	return cfg, &warn
}

func readSet(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "sets", "three", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// rewritePaths applies f to the image_path column (the last) of the
// "three" set's predictions.
func rewritePaths(t *testing.T, f func(line int, p string) string) string {
	lines := strings.Split(strings.TrimSuffix(readSet(t, "predictions.csv"), "\n"), "\n")
	for i := 1; i < len(lines); i++ {
		k := strings.LastIndexByte(lines[i], ',')
		lines[i] = lines[i][:k+1] + f(i, lines[i][k+1:])
	}
	return strings.Join(lines, "\n") + "\n"
}

// The "no silent zero" cases of a replay: each the exit code, what rank 0
// warns on stderr, and what --strict makes of it.
func TestNoSilentZero(t *testing.T) {
	truth, preds := readSet(t, "truth.csv"), readSet(t, "predictions.csv")
	ref, _ := hostileSet(t, truth, preds)
	if codes := runLocal(t, 2, ref); codes[0] != 0 {
		t.Fatalf("clean set: %v", codes)
	}
	refMetrics, _ := reportMetrics(t, ref.Out)
	cases := []struct {
		name, truth, preds string
		code               int    // without --strict
		warn               string // rank 0's warning, "" for none
		sameMetrics        bool   // metrics equal the clean set's
	}{
		{"paths with blanks around them join", truth, rewritePaths(t, func(_ int, p string) string { return "\" " + p + "\t\"" }), 0, "", true},
		{"no prediction joins", truth, rewritePaths(t, func(_ int, p string) string { return "x/" + p }), 0, "none of the 3 predictions", false},
		{"over 10% ignored", truth, rewritePaths(t, func(i int, p string) string {
			if i == 3 {
				return "other.png"
			}
			return p
		}), 0, "1 of the 3 predictions", false},
		{"truth appended to itself", truth + strings.SplitN(truth, "\n", 2)[1], preds, 0, "3 rows repeat an earlier row", false},
		{"predictions appended to themselves", truth, preds + strings.SplitN(preds, "\n", 2)[1], 0, "3 rows repeat an earlier row", false},
		{"header-only truth", "image_path,xmin,ymin,xmax,ymax,label\n", preds, ExitInput, "", false},
		{"score above 1", truth, preds + "1,1,2,2,Tree,1.5,a.png\n", ExitInput, "", false},
		{"hex coordinate", truth, preds + "0x1p4,1,20,20,Tree,0.5,a.png\n", ExitInput, "", false},
	}
	for _, c := range cases {
		for _, strict := range []bool{false, true} {
			cfg, warn := hostileSet(t, c.truth, c.preds)
			cfg.Strict = strict
			codes := runLocal(t, 2, cfg)
			want := c.code
			if strict && c.warn != "" {
				want = ExitInput
			}
			if codes[0] != want || codes[1] != want {
				t.Errorf("%s (strict %v): codes %v, want %d", c.name, strict, codes, want)
				continue
			}
			if !strict && (!strings.Contains(warn.String(), c.warn) || c.warn != "" && !strings.HasPrefix(warn.String(), "canopy: warning: ")) {
				t.Errorf("%s: stderr %q lacks %q", c.name, warn.String(), c.warn)
			}
			if c.warn == "" && warn.Len() > 0 {
				t.Errorf("%s: unexpected warning %q", c.name, warn.String())
			}
			_, err := os.Stat(filepath.Join(cfg.Out, "report.json"))
			if (err == nil) != (want == 0) {
				t.Errorf("%s (strict %v): report.json written: %v, exit %d", c.name, strict, err == nil, want)
			}
			if want != 0 {
				continue
			}
			m, _ := reportMetrics(t, cfg.Out)
			if bytes.Equal(m, refMetrics) != c.sameMetrics {
				t.Errorf("%s: metrics equal to the clean set's: %v, want %v", c.name, !c.sameMetrics, c.sameMetrics)
			}
			rep, _ := os.ReadFile(filepath.Join(cfg.Out, "report.json"))
			if c.warn != "" && !bytes.Contains(rep, []byte(`"warnings": [`)) {
				t.Errorf("%s: the report does not record the warning", c.name)
			}
		}
	}
	cfg, _ := hostileSet(t, truth, preds+"1,1,2,2,Tree,1.5,a.png\n")
	cfg.AllowAnyScore = true
	if codes := runLocal(t, 1, cfg); codes[0] != 0 {
		t.Errorf("--allow-any-score: exit %v", codes)
	}
}

// runPreflight runs the pre-flight on one in-process rank.
func runPreflight(root string, paths []string, outside bool) error {
	var got error
	local.Run(1, func(c mpi.Comm) error {
		got = limits.Preflight(c, root, paths, outside, nil, ModelConfig{}, 1)
		return nil
	})
	return got
}

// Image paths stay inside --root-dir unless --allow-outside-root; files
// that are not regular are refused at once, a FIFO without blocking.
func TestConfinement(t *testing.T) {
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	os.MkdirAll(filepath.Join(root, "sub"), 0o755)
	os.MkdirAll(outside, 0o755)
	writePNG(t, filepath.Join(root, "a.png"), 4, 3)
	writePNG(t, filepath.Join(root, "sub", "b.png"), 4, 3)
	writePNG(t, filepath.Join(outside, "x.png"), 4, 3)
	os.Symlink(filepath.Join(outside, "x.png"), filepath.Join(root, "out-link.png"))
	os.Symlink("sub/b.png", filepath.Join(root, "in-link.png"))
	os.Symlink(outside, filepath.Join(root, "outdir"))
	os.Mkdir(filepath.Join(root, "dir.png"), 0o755)
	if err := syscall.Mkfifo(filepath.Join(root, "fifo.png"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path          string
		inside, other string // the error inside the root and with --allow-outside-root, "" for none
	}{
		{"a.png", "", ""},
		{"sub/b.png", "", ""},
		{"in-link.png", "", ""},
		{"../outside/x.png", `a ".." element`, ""},
		{"sub/../a.png", `a ".." element`, ""},
		{filepath.Join(outside, "x.png"), "an absolute path", ""},
		{"/etc/passwd", "an absolute path", "unknown format"},
		{"/dev/zero", "an absolute path", "not a regular file (a character device)"},
		{"out-link.png", "a symlink to " + filepath.Join(outside, "x.png"), ""},
		{"outdir/x.png", "a symlink to", ""},
		{"dir.png", "not a regular file (a directory)", "not a regular file (a directory)"},
		{"fifo.png", "not a regular file (a named pipe)", "not a regular file (a named pipe)"},
		{"missing.png", "no such file", "no such file"},
	}
	for _, c := range cases {
		for _, allow := range []bool{false, true} {
			want := c.inside
			if allow {
				want = c.other
			}
			done := make(chan error, 1)
			go func() { done <- runPreflight(root, []string{"a.png", c.path}, allow) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: pre-flight blocked", c.path)
			}
			switch {
			case want == "" && err != nil:
				t.Errorf("%s (allow %v): %v", c.path, allow, err)
			case want != "" && (err == nil || !strings.Contains(err.Error(), want) || Code(err) != ExitInput):
				t.Errorf("%s (allow %v): got %v (exit %d), want %q, exit %d", c.path, allow, err, Code(err), want, ExitInput)
			}
		}
	}
}

// End to end with the detector: a path out of --root-dir is exit 3 before
// any inference, and --allow-outside-root runs it and says so in the
// report.
func TestConfinementEval(t *testing.T) {
	_, _, dir := testModelSet(t)
	base := t.TempDir()
	csv := writeFile(t, base, "t.csv", fmt.Sprintf("image_path,xmin,ymin,xmax,ymax,label\n%s,1,1,20,20,Tree\n", filepath.Join("..", filepath.Base(dir), "f0.png")))
	cfg := modelCfg(t, filepath.Join(base, "out"))
	cfg.CSV, cfg.RootDir = csv, dir
	var stderr bytes.Buffer
	codes := runLocalCtx(t, 2, cfg, func(int) context.Context { return context.Background() }, &stderr)
	if codes[0] != ExitInput || !strings.Contains(stderr.String(), `a ".." element`) {
		t.Fatalf("codes %v, stderr %q", codes, stderr.String())
	}
	// with a 16-bit RGB PNG (read as Pillow reads it) beside the ".." path
	rgb16, err := filepath.Abs(filepath.Join("..", "infer", "imagefile", "testdata", "rgb16.png"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.CSV = writeFile(t, base, "t16.csv", fmt.Sprintf("image_path,xmin,ymin,xmax,ymax,label\n%s,1,1,20,20,Tree\n%s,1,1,5,2,Tree\n", filepath.Join("..", filepath.Base(dir), "f0.png"), rgb16))
	cfg.AllowOutsideRoot, cfg.Force = true, true
	if codes := runLocal(t, 1, cfg); codes[0] != 0 {
		t.Fatalf("--allow-outside-root: %v", codes)
	}
	rep, _ := os.ReadFile(filepath.Join(cfg.Out, "report.json"))
	if !bytes.Contains(rep, []byte(`"allow_outside_root": true`)) {
		t.Fatal("the report does not say --allow-outside-root")
	}
}

// The flags reach the job through the command line: --strict, --allow-any-score
// (replay only) and --allow-outside-root, each in --help.
func TestHostileFlags(t *testing.T) {
	truth, preds := readSet(t, "truth.csv"), readSet(t, "predictions.csv")
	dir := t.TempDir()
	csv := writeFile(t, dir, "t.csv", truth)
	nojoin := writeFile(t, dir, "nojoin.csv", rewritePaths(t, func(_ int, p string) string { return "x/" + p }))
	score := writeFile(t, dir, "score.csv", preds+"1,1,2,2,Tree,1.5,a.png\n")
	cli := func(args ...string) (int, string) {
		var code int
		var stdout, stderr bytes.Buffer
		local.Run(1, func(c mpi.Comm) error {
			code = MainWith(context.Background(), append([]string{"canopy"}, args...), &stdout, &stderr,
				func() (mpi.Comm, func() error, error) { return c, func() error { return nil }, nil })
			return nil
		})
		return code, stdout.String() + stderr.String()
	}
	out := func(n string) string { return filepath.Join(dir, n) }
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"eval", csv, "--predictions", nojoin, "--out", out("a")}, 0, "canopy: warning: none of the 3 predictions"},
		{[]string{"eval", csv, "--predictions", nojoin, "--out", out("b"), "--strict"}, ExitInput, "--strict: none of the 3"},
		{[]string{"eval", csv, "--predictions", score, "--out", out("c")}, ExitInput, "score 1.5 is not in [0, 1]"},
		{[]string{"eval", csv, "--predictions", score, "--out", out("d"), "--allow-any-score"}, 0, "report:"},
		{[]string{"eval", csv, "--model", "m", "--allow-any-score"}, ExitUsage, "--allow-any-score goes with --predictions"},
		{[]string{"eval", "--help"}, 0, "--allow-outside-root"},
		{[]string{"eval", "--help"}, 0, "--strict"},
		{[]string{"predict", "--help"}, 0, "--allow-outside-root"},
	} {
		code, text := cli(c.args...)
		if code != c.code || !strings.Contains(text, c.want) {
			t.Errorf("%v: exit %d, want %d; output lacks %q:\n%s", c.args, code, c.code, c.want, text)
		}
	}
}

// Weights holding NaN are a model error (exit 4) on every rank, before any
// inference.
func TestNaNWeightsExit4(t *testing.T) {
	k := "head.classification_head.cls_logits.bias"
	codes, stderr, _ := runEditedModel(t, k, func(d []float32) { d[0] = float32(math.NaN()) })
	if codes[0] != ExitModel || codes[1] != ExitModel || !strings.Contains(stderr, "tensor "+k+" holds NaN at index 0") {
		t.Fatalf("codes %v, stderr %q", codes, stderr)
	}
}

// runEditedModel runs the 2-rank model eval of modelCfg with the test
// model's tensor key changed by edit: the exit codes, stderr and --out.
func runEditedModel(t *testing.T, key string, edit func([]float32)) ([]int, string, string) {
	t.Helper()
	model, _, _ := testModelSet(t)
	ts, _, err := safetensors.Read(filepath.Join(model, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	v := ts[key]
	v.Data = append([]float32(nil), v.Data...)
	edit(v.Data)
	ts[key] = v
	bad := filepath.Join(t.TempDir(), "edited")
	os.MkdirAll(bad, 0o755)
	if err := safetensors.Write(filepath.Join(bad, "model.safetensors"), ts, "F32", nil); err != nil {
		t.Fatal(err)
	}
	cfgJSON, _ := os.ReadFile(filepath.Join(model, "config.json"))
	os.WriteFile(filepath.Join(bad, "config.json"), cfgJSON, 0o644)
	cfg := modelCfg(t, t.TempDir())
	cfg.Model.Spec = bad
	var stderr bytes.Buffer
	codes := runLocalCtx(t, 2, cfg, func(int) context.Context { return context.Background() }, &stderr)
	return codes, stderr.String(), cfg.Out
}

// TestHugeWeightsExit4 (issue 35, item 10): finite weights of ±3e38 in
// the classification head overflow float32: every rank stops with exit 4
// naming the head output, the level and the first layer that overflowed,
// and nothing is published (it was exit 0, no detections, and val_loss,
// val_classification and box_precision written as null).
func TestHugeWeightsExit4(t *testing.T) {
	codes, stderr, out := runEditedModel(t, "head.classification_head.cls_logits.weight", func(d []float32) {
		for i := range d {
			d[i] = float32(3e38 * (1 - 2*float64(i%2)))
		}
	})
	if codes[0] != ExitModel || codes[1] != ExitModel || !strings.Contains(stderr, "head.classification_head.cls_logits output is") ||
		!strings.Contains(stderr, "head.classification_head.cls_logits is the first layer whose output is not finite") {
		t.Fatalf("codes %v, stderr %q", codes, stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "report.json")); err == nil {
		t.Fatal("a report was published")
	}
}

// A label holding terminal controls (retitle, clear screen) is printed
// escaped in eval's metrics table on stdout; report.json keeps it as is.
func TestMetricsTableEscapesControls(t *testing.T) {
	dir := t.TempDir()
	label := "\x1b]0;pwned\x07\x1b[2JTree"
	truth, preds := filepath.Join(dir, "t.csv"), filepath.Join(dir, "p.csv")
	os.WriteFile(truth, []byte("image_path,xmin,ymin,xmax,ymax,label\na.png,0,0,10,10,"+label+"\na.png,20,20,30,30,Dead\n"), 0o644)
	os.WriteFile(preds, []byte("image_path,xmin,ymin,xmax,ymax,label,score\na.png,0,0,10,10,"+label+",0.9\na.png,20,20,30,30,Dead,0.8\n"), 0o644)
	var stdout bytes.Buffer
	cfg := EvalConfig{CSV: truth, Predictions: preds, Out: filepath.Join(dir, "out"), IoUThreshold: 0.4, Stdout: &stdout}
	if codes := runLocal(t, 1, cfg); codes[0] != 0 {
		t.Fatal(codes)
	}
	if bytes.ContainsAny(stdout.Bytes(), "\x1b\x07") || !strings.Contains(stdout.String(), `\x1b]0;pwned\x07\x1b[2JTree_Recall`) {
		t.Fatalf("%q", stdout.String())
	}
	if _, m := reportMetrics(t, cfg.Out); m[label+"_Recall"] == nil {
		t.Fatalf("report.json lost the label: %v", m)
	}
}

// A FIFO named as --csv that nobody writes to reads as empty (exit 3 at
// once; the open blocked, deaf to SIGTERM); one with a writer (process
// substitution) is read; a device is refused.
func TestCommandLineFIFOAndDevice(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "truth.csv")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	preds := filepath.Join("..", "testdata", "sets", "three", "predictions.csv")
	done := make(chan []int, 1)
	go func() {
		done <- runLocal(t, 1, EvalConfig{CSV: fifo, Predictions: preds, Out: filepath.Join(dir, "o1"), IoUThreshold: 0.4})
	}()
	select {
	case codes := <-done:
		if codes[0] != ExitInput {
			t.Fatalf("a FIFO without a writer: exit %v", codes)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("a FIFO without a writer blocked the run")
	}
	truth, _ := os.ReadFile(filepath.Join("..", "testdata", "sets", "three", "truth.csv"))
	// The writer holds the FIFO open before canopy opens it, as a shell's
	// process substitution does: a reader of the test's own (which reads
	// nothing) lets the writer's open return at once, instead of a sleep
	// that hoped the writer's goroutine got there first. The writer then
	// sends the file in two parts with a pause between, and closes; canopy
	// must read it all however its open and reads fall between them.
	hold, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		w.Write(truth[:len(truth)/2])
		time.Sleep(100 * time.Millisecond)
		w.Write(truth[len(truth)/2:])
		w.Close()
	}()
	if codes := runLocal(t, 1, EvalConfig{CSV: fifo, Predictions: preds, Out: filepath.Join(dir, "o2"), IoUThreshold: 0.4}); codes[0] != 0 {
		t.Fatalf("a FIFO with a writer: exit %v", codes)
	}
	var stderr bytes.Buffer
	codes := runLocalCtx(t, 1, EvalConfig{CSV: "/dev/zero", Predictions: preds, Out: filepath.Join(dir, "o3"), IoUThreshold: 0.4},
		func(int) context.Context { return context.Background() }, &stderr)
	if codes[0] != ExitInput || !strings.Contains(stderr.String(), "not a regular file or a pipe") {
		t.Fatalf("/dev/zero: exit %v %s", codes, stderr.String())
	}
}
