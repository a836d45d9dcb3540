package jobs

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/testhook"
	"github.com/canopy-hpc/canopy/internal/testsupport/testfile"
	"github.com/canopy-hpc/canopy/internal/wire"
)

// runLocalInterrupt is runLocal with a context per rank, so the interrupt
// hook can cancel one rank's context as a SIGTERM would.
func runLocalInterrupt(t *testing.T, n int, cfg EvalConfig, stderr *bytes.Buffer) []int {
	t.Helper()
	ctxs := make([]context.Context, n)
	cancels := make([]context.CancelFunc, n)
	for r := range ctxs {
		ctxs[r], cancels[r] = context.WithCancel(context.Background())
		defer cancels[r]()
	}
	old := testhook.InterruptSelf
	testhook.InterruptSelf = func(rank int) { cancels[rank]() }
	defer func() { testhook.InterruptSelf = old }()
	return runLocalCtx(t, n, cfg, func(r int) context.Context { return ctxs[r] }, stderr)
}

func resumeOf(t *testing.T, out string) output.ResumeInfo {
	t.Helper()
	var rep struct {
		Run struct{ Resume output.ResumeInfo }
	}
	testfile.ReadJSON(t, filepath.Join(out, "report.json"), &rep)
	return rep.Run.Resume
}

// An interrupted run (rank 1 stops after 2 batches, as after SIGTERM)
// exits 8 on every rank; --resume on another rank count computes only the
// images missing from the part files and gives the uninterrupted metrics,
// byte for byte.
func TestInterruptAndResume(t *testing.T) {
	ref := t.TempDir()
	if codes := runLocal(t, 1, setCfg("multi", ref)); codes[0] != 0 {
		t.Fatal(codes)
	}
	want, _ := reportMetrics(t, ref)

	out := t.TempDir()
	cfg := setCfg("multi", out)
	cfg.BatchSize = 5
	t.Setenv(testhook.InterruptEnv, "1:2")
	var stderr bytes.Buffer
	codes := runLocalInterrupt(t, 3, cfg, &stderr)
	for r, c := range codes {
		if c != ExitResumable {
			t.Fatalf("rank %d exit %d, want %d\n%s", r, c, ExitResumable, stderr.String())
		}
	}
	if !strings.Contains(stderr.String(), "rank 1/3") || !strings.Contains(stderr.String(), "--resume") {
		t.Errorf("stderr: %s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(out, "report.json")); err == nil {
		t.Fatal("an interrupted run wrote a report")
	}
	os.Unsetenv(testhook.InterruptEnv)

	cfg.Resume = true
	if codes := runLocal(t, 2, cfg); codes[0] != 0 {
		t.Fatalf("resume: %v", codes)
	}
	got, _ := reportMetrics(t, out)
	if !bytes.Equal(got, want) {
		t.Fatalf("resumed metrics\n%s\ndiffer from an uninterrupted run\n%s", got, want)
	}
	ri := resumeOf(t, out)
	// rank 1 saved its first 2 batches (10 images) and ranks 0 and 2 their
	// whole shards (about 100 each); only rank 1's unfinished images remain.
	if ri.Attempt != 1 || ri.FromParts+ri.Computed != 300 || ri.FromParts < 200 || ri.Computed > 100-10 {
		t.Fatalf("resume info %+v", ri)
	}
}

// A part file whose last record was cut by a crash: that record's images
// are recomputed and the metrics are unchanged.
func TestResumeAfterTornRecord(t *testing.T) {
	ref := t.TempDir()
	runLocal(t, 1, setCfg("three", ref))
	want, _ := reportMetrics(t, ref)
	out := t.TempDir()
	cfg := setCfg("three", out)
	cfg.BatchSize = 1
	if codes := runLocal(t, 1, cfg); codes[0] != 0 {
		t.Fatal(codes)
	}
	files, _ := parts.ReadAll(out)
	name := filepath.Join(out, parts.Dir, files[0].Name)
	os.WriteFile(name, files[0].Data[:len(files[0].Data)-5], 0o644)
	cfg.Resume = true
	if codes := runLocal(t, 2, cfg); codes[0] != 0 {
		t.Fatal(codes)
	}
	if got, _ := reportMetrics(t, out); !bytes.Equal(got, want) {
		t.Fatalf("%s vs %s", got, want)
	}
	if ri := resumeOf(t, out); ri.RecordsDropped != 1 || ri.Computed != 1 || ri.FromParts != 2 {
		t.Fatalf("%+v", ri)
	}
}

func TestResumeRefusedWhenInputsDiffer(t *testing.T) {
	out := t.TempDir()
	if codes := runLocal(t, 1, setCfg("three", out)); codes[0] != 0 {
		t.Fatal(codes)
	}
	cfg := setCfg("three", out)
	cfg.Resume = true
	cfg.Predictions = filepath.Join("..", "testdata", "sets", "edge", "predictions.csv")
	var stderr bytes.Buffer
	codes := runLocalCtx(t, 2, cfg, func(int) context.Context { return context.Background() }, &stderr)
	if codes[0] != ExitUsage || codes[1] != ExitUsage || !strings.Contains(stderr.String(), "predictions sha256") {
		t.Fatalf("codes %v, stderr %s", codes, stderr.String())
	}
	if codes := runLocal(t, 1, EvalConfig{CSV: cfg.CSV, Predictions: cfg.Predictions, Out: t.TempDir(), Resume: true}); codes[0] != ExitUsage {
		t.Fatalf("resume without a run: %v", codes)
	}
}

// copyDir copies the regular files of src into a new folder.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// interruptedModelRun runs a --model eval over a copy of the model set
// that stops after 3 images (one rank, batch 1) and returns its config
// (with --resume set) and the copy's folder.
func interruptedModelRun(t *testing.T) (EvalConfig, string) {
	t.Helper()
	_, _, setDir := testModelSet(t)
	root := copyDir(t, setDir)
	cfg := modelCfg(t, t.TempDir())
	cfg.CSV = filepath.Join(root, "annotations.csv")
	cfg.BatchSize = 1
	t.Setenv(testhook.InterruptEnv, "0:3")
	var stderr bytes.Buffer
	if codes := runLocalInterrupt(t, 1, cfg, &stderr); codes[0] != ExitResumable {
		t.Fatalf("exit %v\n%s", codes, stderr.String())
	}
	os.Unsetenv(testhook.InterruptEnv)
	cfg.Resume = true
	return cfg, root
}

func resumeStderr(t *testing.T, ranks int, cfg EvalConfig) ([]int, string) {
	var stderr bytes.Buffer
	codes := runLocalCtx(t, ranks, cfg, func(int) context.Context { return context.Background() }, &stderr)
	return codes, stderr.String()
}

// A resume never mixes two image sets: a run interrupted over one folder
// and resumed with another --root-dir holding the same names (other
// pictures) is refused, naming the root folder; an image edited in place
// is refused naming it, even with its size and modification time kept
// (the sha256 differs); part records without identities (an older
// canopy's) are refused for a model run. Each refusal is exit 2 on every
// rank and writes no report.
func TestResumeRefusesOtherImages(t *testing.T) {
	cfg, root := interruptedModelRun(t)
	if _, err := os.Stat(filepath.Join(cfg.Out, "report.json")); err == nil {
		t.Fatal("the interrupted run wrote a report")
	}

	// another root folder with the same file names, other pictures
	other := copyDir(t, root)
	for _, n := range []string{"f0.png", "f1.png", "f2.png", "f3.png"} {
		os.Rename(filepath.Join(other, n), filepath.Join(other, n+".x"))
	}
	for i, n := range []string{"f0.png", "f1.png", "f2.png", "f3.png"} {
		os.Rename(filepath.Join(other, n+".x"), filepath.Join(other, []string{"f1.png", "f2.png", "f3.png", "f0.png"}[i]))
	}
	c := cfg
	c.RootDir = other
	codes, msg := resumeStderr(t, 2, c)
	if codes[0] != ExitUsage || codes[1] != ExitUsage || !strings.Contains(msg, "root folder") || !strings.Contains(msg, other) {
		t.Fatalf("another --root-dir: codes %v\n%s", codes, msg)
	}

	// an image detected before the interruption, edited in place with its
	// size and modification time kept
	files, _ := parts.ReadAll(cfg.Out)
	done, _, err := parts.Decode(files, 7)
	if err != nil || len(done) != 3 {
		t.Fatalf("%d images in the part files: %v", len(done), err)
	}
	var edited string
	for i := range done {
		edited = filepath.Join(root, fmt.Sprintf("f%d.png", i))
		break
	}
	st, _ := os.Stat(edited)
	b, _ := os.ReadFile(edited)
	b[len(b)/2] ^= 0x55
	os.WriteFile(edited, b, 0o644)
	os.Chtimes(edited, st.ModTime(), st.ModTime())
	codes, msg = resumeStderr(t, 2, cfg)
	if codes[0] != ExitUsage || codes[1] != ExitUsage || !strings.Contains(msg, filepath.Base(edited)) || !strings.Contains(msg, "sha256") || strings.Contains(msg, "size ") {
		t.Fatalf("an image edited in place: codes %v\n%s", codes, msg)
	}
	b[len(b)/2] ^= 0x55
	os.WriteFile(edited, b, 0o644)
	os.Chtimes(edited, st.ModTime(), st.ModTime())

	// part records of an older canopy: no identities
	for _, f := range files {
		d, _, err := parts.Decode([]parts.File{f}, 7)
		if err != nil {
			t.Fatal(err)
		}
		var old []byte
		for _, im := range d {
			rec, err := wire.Encode(make([]byte, 8), []wire.Image{im.Image})
			if err != nil {
				t.Fatal(err)
			}
			binary.LittleEndian.PutUint64(rec, uint64(len(rec)-8))
			old = append(old, rec...)
		}
		os.WriteFile(filepath.Join(cfg.Out, parts.Dir, f.Name), old, 0o644)
	}
	codes, msg = resumeStderr(t, 1, cfg)
	if codes[0] != ExitUsage || !strings.Contains(msg, "older canopy") {
		t.Fatalf("part records without identities: codes %v\n%s", codes, msg)
	}
	if _, err := os.Stat(filepath.Join(cfg.Out, "report.json")); err == nil {
		t.Fatal("a refused resume wrote a report")
	}
	// restored: the same run resumes
	for _, f := range files {
		os.WriteFile(filepath.Join(cfg.Out, parts.Dir, f.Name), f.Data, 0o644)
	}
	if codes, msg := resumeStderr(t, 2, cfg); codes[0] != 0 {
		t.Fatalf("the untouched run did not resume: %v\n%s", codes, msg)
	}
	if ri := resumeOf(t, cfg.Out); ri.FromParts != 3 || ri.Computed != 4 {
		t.Fatalf("%+v", ri)
	}
}
