package jobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/internal/imagesrun"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/pipeline/predict"
	"github.com/canopy-hpc/canopy/internal/tilerun"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// snapshot reads every regular file under dir (relative name -> bytes),
// the lock file aside.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() || fi.Name() == outdir.LockName {
			return nil
		}
		b, _ := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		m[rel] = string(b)
		return nil
	})
	return m
}

func names(m map[string]string) []string {
	var n []string
	for k := range m {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

func sameTree(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	if fmt.Sprint(names(before)) != fmt.Sprint(names(after)) {
		t.Fatalf("%s: files %v, want %v", what, names(after), names(before))
	}
	for k, v := range before {
		if after[k] != v {
			t.Fatalf("%s: %s changed", what, k)
		}
	}
}

func runLocalErr(t *testing.T, n int, cfg EvalConfig) ([]int, string) {
	t.Helper()
	var stderr bytes.Buffer
	codes := runLocalCtx(t, n, cfg, func(int) context.Context { return context.Background() }, &stderr)
	return codes, stderr.String()
}

// --force with a broken new input keeps the previous run, byte for byte,
// for a bad CSV (exit 3), an unknown label dictionary file (exit 3) and a
// bad model (exit 4); a good --force run then replaces it and leaves no
// set-aside copy.
func TestForceKeepsPreviousRunUntilTheNewOneCommits(t *testing.T) {
	out := t.TempDir()
	if codes := runLocal(t, 2, setCfg("three", out)); codes[0] != 0 {
		t.Fatal(codes)
	}
	before := snapshot(t, out)
	bad := filepath.Join(t.TempDir(), "bad.csv")
	os.WriteFile(bad, []byte("image_path,xmin,ymin,xmax,ymax,label\na.png,1,2,3,4,Tree\na.png,5,2,3,4,Tree\n"), 0o644)
	for name, c := range map[string]struct {
		mod  func(*EvalConfig)
		code int
	}{
		"bad csv":        {func(c *EvalConfig) { c.CSV = bad }, ExitInput},
		"bad label dict": {func(c *EvalConfig) { c.LabelDict = bad }, ExitInput},
		"missing model": {func(c *EvalConfig) {
			c.Predictions = ""
			c.Model = ModelConfig{Spec: filepath.Join(out, "nope"), Device: device("cpu")}
		}, ExitModel},
	} {
		cfg := setCfg("three", out)
		cfg.Force = true
		c.mod(&cfg)
		codes, stderr := runLocalErr(t, 2, cfg)
		wantCodes(t, codes, c.code, stderr)
		sameTree(t, name, before, snapshot(t, out))
	}
	// a model that loads but whose pre-flight fails (an image that does not
	// open) after the previous run was set aside
	cfg := modelCfg(t, out)
	cfg.Force = true
	cfg.CSV = filepath.Join(t.TempDir(), "missing.csv")
	os.WriteFile(cfg.CSV, []byte("image_path,xmin,ymin,xmax,ymax,label\nnope.png,1,1,5,5,Tree\n"), 0o644)
	codes, stderr := runLocalErr(t, 2, cfg)
	wantCodes(t, codes, ExitInput, stderr)
	sameTree(t, "pre-flight failure", before, snapshot(t, out))

	cfg = setCfg("single", out)
	cfg.Force = true
	if codes := runLocal(t, 2, cfg); codes[0] != 0 {
		t.Fatal(codes)
	}
	after := snapshot(t, out)
	if after["report.json"] == before["report.json"] {
		t.Fatal("--force did not replace the report")
	}
	for n := range after {
		if strings.HasPrefix(n, ".canopy") {
			t.Fatalf("left behind: %s", n)
		}
	}
}

// A --force run killed before it committed leaves the previous run set
// aside; the next start, whatever it is, puts it back first. restorePrevious
// finishes when it is itself cut short, at any step.
func TestSetAsideRunRestoredAtNextStart(t *testing.T) {
	out := t.TempDir()
	if codes := runLocal(t, 1, setCfg("three", out)); codes[0] != 0 {
		t.Fatal(codes)
	}
	before := snapshot(t, out)
	present := []string{"report.json", "predictions.csv", "results.csv", outdir.ManifestFile, parts.Dir}
	if err := outdir.SetAside(out, present); err != nil {
		t.Fatal(err)
	}
	// the new run got as far as its manifest and an empty part file
	os.WriteFile(filepath.Join(out, outdir.ManifestFile), []byte(`{"canopy": "new"}`), 0o644)
	os.MkdirAll(filepath.Join(out, parts.Dir), 0o755)
	os.WriteFile(filepath.Join(out, parts.Dir, "part-000-00000.part"), nil, 0o644)
	// a restore cut short after putting back two entries
	os.Remove(filepath.Join(out, outdir.ManifestFile))
	os.Rename(filepath.Join(out, outdir.PreviousDir, outdir.ManifestFile), filepath.Join(out, outdir.ManifestFile))
	os.Rename(filepath.Join(out, outdir.PreviousDir, "report.json"), filepath.Join(out, "report.json"))
	// the next run without --force: refused (the previous run is back), intact
	codes, stderr := runLocalErr(t, 1, setCfg("three", out))
	wantCodes(t, codes, ExitUsage, stderr)
	sameTree(t, "restored", before, snapshot(t, out))
}

// The lock: a run holding --out makes a second one exit 2 naming the
// holder (job, host, pid); the folder is untouched. A lock file left by a
// dead process is taken over.
func TestSecondRunRefusedWhileLocked(t *testing.T) {
	out := t.TempDir()
	l, err := outdir.TakeLock(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLURM_JOB_ID", "4242")
	codes, stderr := runLocalErr(t, 2, setCfg("three", out))
	wantCodes(t, codes, ExitUsage, stderr)
	host, _ := os.Hostname()
	for _, want := range []string{"in use by another canopy run", "job none", "host " + host, fmt.Sprintf("pid %d", os.Getpid())} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(out, outdir.ManifestFile)); err == nil {
		t.Fatal("the refused run wrote a manifest")
	}
	l.Release()
	if codes := runLocal(t, 2, setCfg("three", out)); codes[0] != 0 {
		t.Fatal(codes)
	}
	// a lock file naming a process that has ended: stale, taken over
	b, _ := json.Marshal(outdir.Holder{Job: "1", Host: host, PID: deadPID(t), Started: "then"})
	os.WriteFile(filepath.Join(out, outdir.LockName), b, 0o644)
	cfg := setCfg("three", out)
	cfg.Force = true
	if codes, stderr := runLocalErr(t, 1, cfg); codes[0] != 0 {
		t.Fatalf("stale lock: %v\n%s", codes, stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(out, outdir.LockName)); len(b) != 0 {
		t.Fatalf("the lock file still names a holder after the run: %s", b)
	}
}

func deadPID(t *testing.T) int {
	t.Helper()
	for pid := 4000000; pid > 3000000; pid-- {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return pid
		}
	}
	t.Fatal("no free pid")
	return 0
}

// Leftovers of a killed run (temporary outputs, probe files, a discard
// folder, a fault marker) are removed by the next start; an input error
// leaves no probe file.
func TestLeftoversRemovedAtNextStart(t *testing.T) {
	out := t.TempDir()
	cfg := setCfg("three", out)
	cfg.CSV = filepath.Join(t.TempDir(), "absent.csv")
	bad := filepath.Join(t.TempDir(), "bad.csv")
	os.WriteFile(bad, []byte("image_path,xmin\n"), 0o644)
	cfg.CSV = bad
	codes, stderr := runLocalErr(t, 2, cfg)
	wantCodes(t, codes, ExitInput, stderr)
	if left, _ := filepath.Glob(filepath.Join(out, ".canopy-probe-*")); len(left) > 0 {
		t.Fatalf("probe left after an input error: %v", left)
	}
	junk := []string{".predictions.csv.tmp123", ".results.csv.tmp9", ".report.json.tmp1", ".canopy-probe-abc", outdir.DiscardPrefix + "x/y", outdir.FaultPrefix + "-1"}
	for _, j := range junk {
		os.MkdirAll(filepath.Dir(filepath.Join(out, j)), 0o755)
		os.WriteFile(filepath.Join(out, j), []byte("junk"), 0o644)
	}
	os.WriteFile(filepath.Join(out, "keep.txt"), []byte("mine"), 0o644)
	if codes := runLocal(t, 2, setCfg("three", out)); codes[0] != 0 {
		t.Fatal(codes)
	}
	got := names(snapshot(t, out))
	for _, n := range got {
		if strings.HasPrefix(n, ".") {
			t.Fatalf("leftover %s in %v", n, got)
		}
	}
	if !strings.Contains(fmt.Sprint(got), "keep.txt") {
		t.Fatal("a file that is not canopy's was removed")
	}
}

// Publication as one set: at every step of a publication a reader that
// finds report.json finds the predictions.csv and results.csv whose sha256
// it records; a publication cut after its first rename is finished by the
// next start.
func TestOutputsPublishedAsOneSet(t *testing.T) {
	out := t.TempDir()
	check := func(step string) {
		var rep struct {
			Run struct{ Outputs map[string]string }
		}
		b, err := os.ReadFile(filepath.Join(out, "report.json"))
		if err != nil {
			return // no report: an incomplete run, as documented
		}
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		for name, sum := range rep.Run.Outputs {
			d, _ := os.ReadFile(filepath.Join(out, name))
			s := sha256.Sum256(d)
			if hex.EncodeToString(s[:]) != sum {
				t.Fatalf("after %s: report.json beside a %s it did not publish", step, name)
			}
		}
	}
	steps := 0
	outdir.PublishHook = func(name string) { steps++; check("renaming " + name) }
	defer func() { outdir.PublishHook = nil }()
	for _, set := range []string{"three", "single", "three"} {
		cfg := setCfg(set, out)
		cfg.Force = true
		if codes := runLocal(t, 1, cfg); codes[0] != 0 {
			t.Fatal(codes)
		}
	}
	if steps != 9 {
		t.Fatalf("%d renames observed, want 9", steps)
	}
	want := snapshot(t, out)
	// a new set over a complete old one (what predict --force does)
	for k := 0; k < 2; k++ {
		var set []outdir.Staged
		sums := map[string]string{}
		for _, n := range []string{"predictions.csv", "results.csv"} {
			s, err := outdir.Stage(out, n, func(w io.Writer) error { _, err := fmt.Fprintf(w, "%s %d\n", n, k); return err })
			if err != nil {
				t.Fatal(err)
			}
			set, sums[n] = append(set, s), s.SHA256
		}
		rep, _ := json.Marshal(map[string]any{"run": map[string]any{"outputs": sums}})
		s, _ := outdir.Stage(out, "report.json", func(w io.Writer) error { _, err := w.Write(rep); return err })
		if err := outdir.Publish(out, append(set, s)); err != nil {
			t.Fatal(err)
		}
	}
	outdir.PublishHook = nil
	for n, v := range want {
		os.WriteFile(filepath.Join(out, n), []byte(v), 0o644)
	}

	// a publication killed after its first rename: the journal and two
	// staged files remain, the old report is gone
	s1, _ := outdir.Stage(out, "predictions.csv", func(w io.Writer) error { _, err := io.WriteString(w, want["predictions.csv"]); return err })
	s2, _ := outdir.Stage(out, "results.csv", func(w io.Writer) error { _, err := io.WriteString(w, want["results.csv"]); return err })
	s3, _ := outdir.Stage(out, "report.json", func(w io.Writer) error { _, err := io.WriteString(w, want["report.json"]); return err })
	os.WriteFile(filepath.Join(out, "report.json"), []byte("old"), 0o644)
	os.WriteFile(filepath.Join(out, "results.csv"), []byte("old"), 0o644)
	b, _ := json.Marshal([]outdir.Staged{s1, s2, s3})
	os.WriteFile(filepath.Join(out, outdir.JournalName), b, 0o644)
	os.Remove(filepath.Join(out, "report.json"))
	os.Rename(filepath.Join(out, s1.Tmp), filepath.Join(out, s1.Name))
	l, err := outdir.Open(out, output.Names)
	if err != nil {
		t.Fatal(err)
	}
	l.Finish(nil)
	sameTree(t, "rolled forward", want, snapshot(t, out))
}

// Two runs at once into one folder through the lock's own API: the
// second openOut fails until the first finishes (flock is per open file,
// so this holds within one process as across hosts).
func TestLockExclusiveAndReleased(t *testing.T) {
	out := t.TempDir()
	a, err := outdir.Open(out, output.Names)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outdir.Open(out, output.Names); Code(err) != ExitUsage {
		t.Fatalf("second lock: %v", err)
	}
	a.Finish(nil)
	deadline := time.Now().Add(time.Second)
	b, err := outdir.Open(out, output.Names)
	if err != nil || time.Now().After(deadline) {
		t.Fatalf("after release: %v", err)
	}
	b.Finish(nil)
}

// A part file on a full disk (/dev/full): the first record's write fails
// (no space left on device), and so does the file's close (its fsync:
// invalid argument), which is not dropped: eval (over whole images, two
// ranks) and predict --tile exit 1 (canopy's own file), not 4, with both
// errors on the failing rank's one line.
func TestFullDiskOnPartFileExits1(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full on this system")
	}
	failRank := 1 // one rank fails, so one line is said
	full := func(out, run string, attempt, rank int, every time.Duration) (*parts.Writer, error) {
		if rank == failRank {
			os.MkdirAll(filepath.Join(out, parts.Dir), 0o755)
			os.Symlink("/dev/full", filepath.Join(out, parts.Dir, fmt.Sprintf("part-%03d-%05d.part", attempt, rank)))
		}
		return parts.Create(out, run, attempt, rank, every)
	}
	oldImages, oldTile := imagesrun.CreateParts, tilerun.CreateParts
	imagesrun.CreateParts, tilerun.CreateParts = full, full
	defer func() { imagesrun.CreateParts, tilerun.CreateParts = oldImages, oldTile }()
	check := func(name string, codes []int, stderr string) {
		t.Helper()
		if codes[failRank] != ExitInternal {
			t.Fatalf("%s: codes %v, want %d\n%s", name, codes, ExitInternal, stderr)
		}
		for _, c := range codes {
			if c == ExitModel {
				t.Fatalf("%s: a full disk gave exit 4: %v\n%s", name, codes, stderr)
			}
		}
		if n := strings.Count(stderr, "no space left on device"); n != 1 || !strings.Contains(stderr, "invalid argument") {
			t.Errorf("%s: the write error said %d times (want once), or the close's error dropped:\n%s", name, n, stderr)
		}
	}
	codes, stderr := runLocalErr(t, 2, setCfg("three", t.TempDir()))
	check("eval", codes, stderr)
	failRank = 0
	_, tif := tileRasterFile(t, 260, 200, 7)
	cfg := tileCfg(filepath.Join(t.TempDir(), "out"), tif)
	var buf bytes.Buffer
	codes = runLocalJob(t, 1, func(int) context.Context { return context.Background() }, &buf,
		func(ctx context.Context, c mpi.Comm) error { return tilerun.Run(ctx, c, cfg) })
	check("predict --tile", codes, buf.String())
}

// predict --force keeps the previous predictions until the new ones
// replace them: a bad image list (exit 3), a missing model (exit 4) or an
// image that does not open (exit 3) leaves them byte for byte; a second
// predict while one holds the folder is refused (exit 2).
func TestPredictForceKeepsPreviousPredictions(t *testing.T) {
	_, csv, _ := testModelSet(t)
	out := t.TempDir()
	cfg := PredictConfig{Out: out, BatchSize: 2, CSV: csv, Model: modelCfg(t, out).Model}
	runPredict := func(cfg PredictConfig) []int {
		codes := make([]int, 2)
		errs := local.Run(2, func(c mpi.Comm) error {
			codes[c.Rank()] = Code(predict.Run(context.Background(), c, cfg))
			return nil
		})
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		return codes
	}
	if codes := runPredict(cfg); codes[0] != 0 {
		t.Fatal(codes)
	}
	before := snapshot(t, out)
	if got := " " + strings.Join(names(before), " ") + " "; !strings.Contains(got, " manifest.json ") || !strings.Contains(got, " predictions.csv ") ||
		!strings.Contains(got, " report.json ") || !strings.Contains(got, " parts/part-000-00000.part ") {
		t.Fatalf("predict wrote %v, want its manifest, part files, predictions.csv and report.json", names(before))
	}
	badCSV := filepath.Join(t.TempDir(), "bad.csv")
	os.WriteFile(badCSV, []byte("path\nx.png\n"), 0o644)
	missing := filepath.Join(t.TempDir(), "missing.csv")
	os.WriteFile(missing, []byte("image_path\nnope.png\n"), 0o644)
	for name, c := range map[string]struct {
		mod  func(*PredictConfig)
		code int
	}{
		"bad csv":         {func(c *PredictConfig) { c.CSV = badCSV }, ExitInput},
		"missing model":   {func(c *PredictConfig) { c.Model.Spec = filepath.Join(out, "nope") }, ExitModel},
		"missing image":   {func(c *PredictConfig) { c.CSV = missing }, ExitInput},
		"without --force": {func(c *PredictConfig) { c.Force = false }, ExitUsage},
	} {
		cfg := cfg
		cfg.Force = true
		c.mod(&cfg)
		if codes := runPredict(cfg); codes[0] != c.code || codes[1] != c.code {
			t.Fatalf("%s: codes %v, want %d", name, codes, c.code)
		}
		sameTree(t, name, before, snapshot(t, out))
	}
	l, err := outdir.TakeLock(out)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Force = true
	if codes := runPredict(cfg); codes[0] != ExitUsage {
		t.Fatalf("while locked: %v", codes)
	}
	l.Release()
	if codes := runPredict(cfg); codes[0] != 0 {
		t.Fatalf("--force: %v", codes)
	}
}

// predict --force over an eval run replaces the whole run: refused without
// --force, put back byte for byte when the new run fails, and once the
// predictions are published no results.csv, report.html, manifest or part
// file of the eval is left to pass for the new run's.
func TestPredictForceReplacesEvalRun(t *testing.T) {
	_, csv, _ := testModelSet(t)
	out := t.TempDir()
	if codes := runLocal(t, 2, setCfg("three", out)); codes[0] != 0 {
		t.Fatal(codes)
	}
	before := snapshot(t, out)
	missing := filepath.Join(t.TempDir(), "missing.csv")
	os.WriteFile(missing, []byte("image_path\nnope.png\n"), 0o644)
	runPredict := func(cfg PredictConfig) int {
		codes := make([]int, 2)
		local.Run(2, func(c mpi.Comm) error {
			codes[c.Rank()] = Code(predict.Run(context.Background(), c, cfg))
			return nil
		})
		if codes[0] != codes[1] {
			t.Fatalf("ranks disagree: %v", codes)
		}
		return codes[0]
	}
	cfg := PredictConfig{Out: out, BatchSize: 2, CSV: csv, Model: modelCfg(t, out).Model}
	if code := runPredict(cfg); code != ExitUsage {
		t.Fatalf("without --force: exit %d, want %d", code, ExitUsage)
	}
	sameTree(t, "without --force", before, snapshot(t, out))
	cfg.Force = true
	bad := cfg
	bad.CSV = missing
	if code := runPredict(bad); code != ExitInput {
		t.Fatalf("missing image: exit %d, want %d", code, ExitInput)
	}
	sameTree(t, "failed --force", before, snapshot(t, out))
	if code := runPredict(cfg); code != ExitOK {
		t.Fatalf("--force: exit %d", code)
	}
	got := names(snapshot(t, out))
	for _, n := range got {
		if n == "results.csv" || n == "report.html" {
			t.Fatalf("after predict --force the folder holds %v: the eval's %s is left", got, n)
		}
	}
	var m imagesrun.Manifest
	if b, err := os.ReadFile(filepath.Join(out, outdir.ManifestFile)); err != nil || json.Unmarshal(b, &m) != nil || m.Job != "predict" {
		t.Fatalf("after predict --force the folder holds %v and a manifest that is not predict's (%v)", got, err)
	}
}

// canopy doctor --out: complete, resumable, stopped before it saved any
// image (resumable: --resume starts it over), a failed start, no run, and a
// folder in use.
func TestDoctorOutStates(t *testing.T) {
	out := t.TempDir()
	if code, msg := outState(out); code != ExitInternal || !strings.Contains(msg, "no canopy run") {
		t.Fatalf("empty: %d %s", code, msg)
	}
	if codes := runLocal(t, 2, setCfg("three", out)); codes[0] != 0 {
		t.Fatal(codes)
	}
	if code, msg := outState(out); code != ExitOK || !strings.Contains(msg, "complete") {
		t.Fatalf("complete: %d %s", code, msg)
	}
	l, err := outdir.TakeLock(out)
	if err != nil {
		t.Fatal(err)
	}
	if _, msg := outState(out); !strings.Contains(msg, fmt.Sprintf("in use by a running canopy job (job none on host")) {
		t.Fatalf("locked: %s", msg)
	}
	l.Release()
	os.Remove(filepath.Join(out, "report.json"))
	if code, msg := outState(out); code != ExitResumable || !strings.Contains(msg, "3 image(s) saved") {
		t.Fatalf("resumable: %d %s", code, msg)
	}
	os.RemoveAll(filepath.Join(out, parts.Dir))
	if code, msg := outState(out); code != ExitResumable || !strings.Contains(msg, "saved no work") {
		t.Fatalf("stopped before it saved any image: %d %s", code, msg)
	}
	os.WriteFile(filepath.Join(out, outdir.FaultPrefix+"-0"), []byte("4 jobs: --model: not a model"), 0o644)
	if code, msg := outState(out); code != ExitInternal || !strings.Contains(msg, "a run that failed (exit 4") {
		t.Fatalf("failed start: %d %s", code, msg)
	}
}

// The --force restore race: rank 0's new run fails and puts the previous
// run back while another rank is about to open its part file. That rank
// must not append to the previous run's part files (they are named the
// same, part-000-RANK): its Create is refused and the previous run stays
// byte for byte.
func TestForceRestoreRefusesLatePartFile(t *testing.T) {
	out := t.TempDir()
	if codes := runLocal(t, 2, setCfg("three", out)); codes[0] != 0 {
		t.Fatal(codes)
	}
	before := snapshot(t, out)
	// rank 0's start of the new --force run (eval's, as eval.Run opens it)
	o, saved, err := imagesrun.Open(imagesrun.Folder{Dir: out, Force: true}, imagesrun.EvalRun{}.Manifest())
	if err != nil {
		t.Fatal(err)
	}
	if !o.Finish(errors.New("rank 0 failed")) { // rank 0: the previous run is back
		t.Fatal("the previous run was not restored")
	}
	if _, err := parts.Create(out, saved.Probe, saved.Attempt, 1, time.Second); !errors.Is(err, parts.ErrNotOwner) {
		t.Fatalf("a late rank's part file: %v, want parts.ErrNotOwner", err)
	}
	sameTree(t, "after the restore", before, snapshot(t, out))
}

// A --force run whose publication failed half way (its journal and staged
// files left) and whose previous run was then put back: the next start
// must not roll that publication forward over the previous run.
func TestRestoreAbandonsFailedPublication(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"predictions.csv", "report.json"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("previous "+f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := snapshot(t, dir)
	if err := outdir.SetAside(dir, output.Names.Present(dir)); err != nil {
		t.Fatal(err)
	}
	var set []outdir.Staged
	for _, f := range []string{"predictions.csv", "report.json"} {
		s, err := outdir.Stage(dir, f, func(w io.Writer) error { _, err := io.WriteString(w, "new "+f); return err })
		if err != nil {
			t.Fatal(err)
		}
		set = append(set, s)
	}
	b, _ := json.Marshal(set)
	if err := outdir.WriteAtomic(dir, outdir.JournalName, func(w io.Writer) error { _, err := w.Write(b); return err }); err != nil {
		t.Fatal(err)
	}
	if err := outdir.RestorePrevious(dir, output.Names); err != nil { // the failed run's way out
		t.Fatal(err)
	}
	if err := outdir.Tidy(dir, output.Names); err != nil { // the next start
		t.Fatal(err)
	}
	sameTree(t, "after the restore and the next start", before, snapshot(t, dir))
}

// --out naming an existing file, or a path through one, is a usage error
// (exit 2, it was 1), for eval and predict alike; the file is untouched.
func TestOutNamingAFileIsUsage(t *testing.T) {
	file := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(file, []byte("mine"), 0o644)
	for _, out := range []string{file, filepath.Join(file, "sub")} {
		var stderr bytes.Buffer
		codes := runLocalCtx(t, 2, setCfg("three", out), func(int) context.Context { return context.Background() }, &stderr)
		if codes[0] != ExitUsage || codes[1] != ExitUsage || !strings.Contains(stderr.String(), "not a folder") {
			t.Errorf("eval --out %s: codes %v\n%s", out, codes, stderr.String())
		}
		if _, err := outdir.Open(out, output.Names); Code(err) != ExitUsage {
			t.Errorf("openOut(%s): %v", out, err)
		}
	}
	if b, _ := os.ReadFile(file); string(b) != "mine" {
		t.Fatalf("the file became %q", b)
	}
}

// canopy doctor --out says what --resume will do, and --resume does it:
// an empty or truncated manifest.json is not "resumable" (--resume exits
// 2); a run whose rank failed on bad input (its fault marker records exit
// 3) is not "interrupted" (--resume fails the same way, exit 3), so a job
// script does not resubmit it.
func TestDoctorTellsWhatResumeDoes(t *testing.T) {
	for _, m := range []string{"", `{"canopy": "`} {
		out := t.TempDir()
		if codes := runLocal(t, 1, setCfg("three", out)); codes[0] != 0 {
			t.Fatal(codes)
		}
		os.Remove(filepath.Join(out, "report.json"))
		os.WriteFile(filepath.Join(out, outdir.ManifestFile), []byte(m), 0o644)
		if code, msg := outState(out); code != ExitInternal || !strings.Contains(msg, "--resume refuses it (exit 2)") {
			t.Errorf("manifest %q: doctor %d %s", m, code, msg)
		}
		cfg := setCfg("three", out)
		cfg.Resume = true
		if codes := runLocal(t, 1, cfg); codes[0] != ExitUsage {
			t.Errorf("manifest %q: --resume exit %v", m, codes)
		}
	}

	// a model run whose image f4.png is cut short (its header passes the
	// pre-flight, its pixels do not decode): 4 images saved, then exit 3
	_, _, setDir := testModelSet(t)
	root := copyDir(t, setDir)
	b, _ := os.ReadFile(filepath.Join(root, "f4.png"))
	os.WriteFile(filepath.Join(root, "f4.png"), b[:200], 0o644)
	out := t.TempDir()
	cfg := modelCfg(t, out)
	cfg.CSV, cfg.BatchSize = filepath.Join(root, "annotations.csv"), 1
	run := func(cfg EvalConfig) int {
		var code int
		errs := local.Run(1, func(c mpi.Comm) error {
			code = runJob(context.Background(), func() (mpi.Comm, func() error, error) { return c, func() error { return nil }, nil },
				&bytes.Buffer{}, jobOptions{out: cfg.Out}, func(c mpi.Comm) error { return Eval(context.Background(), c, cfg) })
			return nil
		})
		if ac, ok := local.AbortCode(errs[0]); ok {
			code = ac
		}
		return code
	}
	if code := run(cfg); code != ExitInput {
		t.Fatalf("the cut image: exit %d", code)
	}
	code, msg := outState(out)
	if code != ExitInternal || !strings.Contains(msg, "a run that failed (exit 3: ") || !strings.Contains(msg, "f4.png") || !strings.Contains(msg, "fails the same way") {
		t.Fatalf("after a failure on bad input: doctor %d %s", code, msg)
	}
	cfg.Resume = true
	if code := run(cfg); code != ExitInput {
		t.Fatalf("--resume after the failure: exit %d, doctor promised it fails the same way", code)
	}
	os.WriteFile(filepath.Join(root, "f4.png"), b, 0o644) // the cause fixed
	if code := run(cfg); code != 0 {
		t.Fatalf("--resume after the fix: exit %d", code)
	}
}
