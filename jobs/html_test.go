package jobs

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	stdhtml "html"
	"image"
	"image/png"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/htmlreport"
	"github.com/canopy-hpc/canopy/internal/pipeline/eval"
	"github.com/canopy-hpc/canopy/internal/testsupport/forest"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// ScreenshotEnv names the PNG file the browser test writes its screenshot
// to (the Makefile keeps it in bin/); unset, it goes to a temporary folder.
const ScreenshotEnv = "CANOPY_SCREENSHOT"

// forestSet writes n generated w×h forest images with their truth CSV and a
// prediction CSV made from the truth (jittered boxes, misses, false
// positives, seeded scores), so a replayed eval has real images to draw.
func forestSet(t testing.TB, dir string, n, w, h int, seed uint64) (truthCSV, predCSV string) {
	t.Helper()
	var truth, pred strings.Builder
	truth.WriteString("image_path,xmin,ymin,xmax,ymax,label\n")
	pred.WriteString("image_path,xmin,ymin,xmax,ymax,label,score\n")
	rng := rand.New(rand.NewPCG(19, seed))
	for i := 0; i < n; i++ {
		img, boxes := forest.Generate(11, i, w, h)
		name := fmt.Sprintf("img_%04d.png", i)
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := png.Encode(f, img); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if len(boxes) == 0 {
			fmt.Fprintf(&truth, "%s,0,0,0,0,Tree\n", name)
		}
		for _, b := range boxes {
			fmt.Fprintf(&truth, "%s,%d,%d,%d,%d,%s\n", name, b.XMin, b.YMin, b.XMax, b.YMax, b.Label)
			if rng.Float64() < 0.25*float64(i%4) { // later images miss more
				continue
			}
			j := float64(b.XMax-b.XMin) * 0.2 * (rng.Float64() - 0.5)
			fmt.Fprintf(&pred, "%s,%.2f,%.2f,%.2f,%.2f,%s,%.4f\n", name, float64(b.XMin)+j, float64(b.YMin)-j,
				float64(b.XMax)+j, float64(b.YMax), b.Label, 0.3+0.7*rng.Float64())
		}
		for k := rng.IntN(4); k > 0; k-- {
			x, y := rng.Float64()*float64(w-30), rng.Float64()*float64(h-30)
			fmt.Fprintf(&pred, "%s,%.2f,%.2f,%.2f,%.2f,Tree,%.4f\n", name, x, y, x+25, y+20, 0.1+0.5*rng.Float64())
		}
	}
	truthCSV, predCSV = filepath.Join(dir, "truth.csv"), filepath.Join(dir, fmt.Sprintf("predictions-%d.csv", seed))
	if err := os.WriteFile(truthCSV, []byte(truth.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(predCSV, []byte(pred.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return truthCSV, predCSV
}

// findChromium returns the browser the test drives. make test installs
// Debian's chromium (make test-deps); without one the test fails.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: `make test-deps` installs Debian's chromium")
	return ""
}

// browse opens page in headless chromium and returns the DOM after load
// and the console messages chromium logged (any message is a failure: the
// report logs nothing).
func browse(t *testing.T, chromium, page string, extra ...string) (dom string, console []string) {
	t.Helper()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir(), "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000"}, extra...)
	if len(extra) == 0 {
		args = append(args, "--dump-dom")
	}
	cmd := exec.Command(chromium, append(args, "file://"+page)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("chromium: %v\n%s", err, stderr.String())
		}
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("chromium did not finish in 2 minutes\n%s", stderr.String())
	}
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(l, ":CONSOLE") {
			console = append(console, l)
		}
	}
	return stdout.String(), console
}

func domAttr(dom, name string) string {
	m := regexp.MustCompile(`<html[^>]*\b` + name + `="([^"]*)"`).FindStringSubmatch(dom)
	if m == nil {
		return ""
	}
	return m[1]
}

// TestReportHTMLInChromium runs a replayed eval on 2 ranks over 30
// generated forest images, opens OUT/report.html in headless chromium and
// fails on a console message, a plot that did not render or an image that
// did not load; checks the PR curves in the page against the COCO
// precision arrays, the thumbnails, the size, and takes the screenshot.
func TestReportHTMLInChromium(t *testing.T) {
	chromium := findChromium(t)
	dir, out := t.TempDir(), t.TempDir()
	truthCSV, predCSV := forestSet(t, dir, 30, 256, 256, 5)
	opt := htmlreport.Options{Worst: 12, Thumb: 200}
	cfg := EvalConfig{CSV: truthCSV, Predictions: predCSV, Out: out, IoUThreshold: 0.4, BatchSize: 4, HTML: &opt}
	if codes := runLocal(t, 2, cfg); codes[0] != 0 || codes[1] != 0 {
		t.Fatalf("eval exit codes %v", codes)
	}
	page := filepath.Join(out, "report.html")
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if len(html) > 10<<20 {
		t.Errorf("report.html is %d bytes, over 10 MB", len(html))
	}
	for _, ref := range []string{`src="http`, `href="http`, `src="//`, `@import`} {
		if bytes.Contains(html, []byte(ref)) {
			t.Errorf("report.html refers to the network (%s)", ref)
		}
	}

	// The PR curves the page carries are the COCO precision arrays.
	d, err := htmlreport.ReadData(html)
	if err != nil || d == nil {
		t.Fatalf("data block: %v %v", d, err)
	}
	tb, _ := os.ReadFile(truthCSV)
	pb, _ := os.ReadFile(predCSV)
	truth, err := dataset.ParseTruth(truthCSV, tb)
	if err != nil {
		t.Fatal(err)
	}
	rows, _ := dataset.ParsePredictions(predCSV, pb, dataset.Options{})
	labels, _ := eval.ChooseLabels(cfg, eval.Inputs{}, truth, rows)
	images, _ := truth.Resolve(truthCSV, labels)
	byPath, _, _ := eval.JoinPredictions(predCSV, truth, rows, labels)
	var in metrics.Input
	in.Images, in.Labels = images, labels
	for _, im := range images {
		in.Dets = append(in.Dets, byPath[im.Path])
	}
	res, err := metrics.Compute(in, metrics.Options{IoUThreshold: 0.4}, metrics.All, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.PR) != len(res.PR) || len(res.PR) < 2 {
		t.Fatalf("page has %d curves, metrics %d", len(d.PR), len(res.PR))
	}
	for i, c := range res.PR {
		g := d.PR[i]
		if g.LabelID != c.Label || g.IoU != c.IoU || g.Label != labels.Name(c.Label) || len(g.Precision) != len(c.Precision) {
			t.Fatalf("curve %d: page %v/%v/%q, metrics %v/%v", i, g.LabelID, g.IoU, g.Label, c.Label, c.IoU)
		}
		for r := range c.Precision {
			if g.Precision[r] != c.Precision[r] {
				t.Fatalf("curve %d point %d: page %v, precision array %v", i, r, g.Precision[r], c.Precision[r])
			}
		}
	}
	for r, v := range metrics.RecallThresholds() {
		if d.Recall[r] != v {
			t.Fatalf("recall threshold %d: page %v, COCO %v", r, d.Recall[r], v)
		}
	}

	// Thumbnails: 12 JPEGs whose longer side is --html-thumb.
	uris := regexp.MustCompile(`src="data:image/jpeg;base64,([^"]+)"`).FindAllSubmatch(html, -1)
	if len(uris) != opt.Worst || d.Images != opt.Worst {
		t.Fatalf("%d images drawn (data block %d), want %d", len(uris), d.Images, opt.Worst)
	}
	for _, u := range uris {
		b, err := base64.StdEncoding.DecodeString(stdhtml.UnescapeString(string(u[1])))
		if err != nil {
			t.Fatal(err)
		}
		cfg, _, err := image.DecodeConfig(bytes.NewReader(b))
		if err != nil || max(cfg.Width, cfg.Height) != opt.Thumb {
			t.Fatalf("thumbnail %dx%d (%v), want longer side %d", cfg.Width, cfg.Height, err, opt.Thumb)
		}
	}
	if !bytes.Contains(html, []byte(`<a href="results.csv">results.csv lines `)) {
		t.Error("worst images are not linked to their results.csv rows")
	}

	// In the browser: the page's check, the plots, the images, the console.
	dom, console := browse(t, chromium, page)
	if len(console) > 0 {
		t.Errorf("console messages:\n%s", strings.Join(console, "\n"))
	}
	if got := domAttr(dom, "data-check"); got != "ok" {
		t.Errorf("page check: %q", got)
	}
	if got := domAttr(dom, "data-plots"); got != "5" { // 2 PR, scores, sizes, timeline
		t.Errorf("%s plots rendered, want 5", got)
	}
	if got := domAttr(dom, "data-images"); got != strconv.Itoa(opt.Worst) {
		t.Errorf("%s images in the DOM, want %d", got, opt.Worst)
	}

	shot := os.Getenv(ScreenshotEnv)
	if shot == "" {
		shot = filepath.Join(t.TempDir(), "report.png")
	} else if shot, err = filepath.Abs(shot); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Dir(shot), 0o755)
	browse(t, chromium, page, "--window-size=1280,2000", "--screenshot="+shot)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	if c, err := png.DecodeConfig(f); err != nil || c.Width != 1280 || c.Height != 2000 {
		t.Fatalf("screenshot: %+v %v", c, err)
	}
	t.Logf("screenshot: %s", shot)
}

// TestBrowserCheckCatchesFaults: the same checks fail on a page with a
// broken image, a script error, a console error and an empty plot.
func TestBrowserCheckCatchesFaults(t *testing.T) {
	chromium := findChromium(t)
	var b bytes.Buffer
	if err := htmlreport.WriteEval(&b, htmlreport.Eval{ReportJSON: []byte(`{"metrics": {"map": 0.5}, "run": {}}`)}, htmlreport.Options{}); err != nil {
		t.Fatal(err)
	}
	good := b.String()
	faults := map[string]string{
		"broken image": `<img src="data:image/jpeg;base64,AAAA" alt="broken">`,
		"script error": `<script>notDefined();</script>`,
		"console":      `<script>console.error("boom");</script>`,
		"empty plot":   `<svg class="plot" width="10" height="10"></svg>`,
	}
	for name, f := range faults {
		page := filepath.Join(t.TempDir(), "bad.html")
		if err := os.WriteFile(page, []byte(strings.Replace(good, "</body>", f+"</body>", 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		dom, console := browse(t, chromium, page)
		if domAttr(dom, "data-check") == "ok" && len(console) == 0 {
			t.Errorf("%s: not caught", name)
		}
	}
	page := filepath.Join(t.TempDir(), "good.html")
	os.WriteFile(page, []byte(good), 0o644)
	if dom, console := browse(t, chromium, page); domAttr(dom, "data-check") != "ok" || len(console) > 0 {
		t.Errorf("a page without faults fails: %q %v", domAttr(dom, "data-check"), console)
	}
}

// TestCompareHTMLInChromium: two replayed runs on the same images, then
// canopy compare --html: every metric row with its verdict, both runs' PR
// curves (the very points of each run's report.html), the images whose
// recall changed most drawn for both runs, and a clean load in chromium.
func TestCompareHTMLInChromium(t *testing.T) {
	chromium := findChromium(t)
	dir := t.TempDir()
	var outs [2]string
	var data [2]*htmlreport.Data
	for k, seed := range []uint64{5, 6} {
		truthCSV, predCSV := forestSet(t, dir, 16, 200, 200, seed)
		outs[k] = filepath.Join(t.TempDir(), "out")
		opt := htmlreport.Options{Worst: 4, Thumb: 120}
		cfg := EvalConfig{CSV: truthCSV, Predictions: predCSV, Out: outs[k], IoUThreshold: 0.4, BatchSize: 4, HTML: &opt}
		if codes := runLocal(t, 2, cfg); codes[0] != 0 {
			t.Fatalf("eval exit codes %v", codes)
		}
		b, err := os.ReadFile(filepath.Join(outs[k], "report.html"))
		if err != nil {
			t.Fatal(err)
		}
		if data[k], err = htmlreport.ReadData(b); err != nil || data[k] == nil {
			t.Fatalf("data block: %v", err)
		}
	}
	page := filepath.Join(t.TempDir(), "compare.html")
	var stdout bytes.Buffer
	code, err := runCompare(CompareOptions{Baseline: outs[0], Current: outs[1], HTML: page, FailOn: FailOnChange}, &stdout)
	if err != nil || code != ExitRegression {
		t.Fatalf("compare: exit %d %v (the runs differ: want %d)", code, err, ExitRegression)
	}
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && (strings.HasPrefix(f[0], "box_") || strings.HasPrefix(f[0], "map")) &&
			!bytes.Contains(html, []byte("<td>"+f[0]+"</td><td class=\"num\">"+f[1]+"</td><td class=\"num\">"+f[2]+"</td>")) {
			t.Errorf("metric row %q is not in the page", line)
		}
	}
	d, err := htmlreport.ReadData(html)
	if err != nil || d == nil {
		t.Fatal(err)
	}
	want := len(data[0].PR) + len(data[1].PR)
	if len(d.PR) != want {
		t.Fatalf("%d curves, want %d", len(d.PR), want)
	}
	for i, c := range d.PR {
		k, j := 0, i
		if i >= len(data[0].PR) {
			k, j = 1, i-len(data[0].PR)
		}
		ref := data[k].PR[j]
		if c.Side != [2]string{"baseline", "current"}[k] || c.LabelID != ref.LabelID || fmt.Sprint(c.Precision) != fmt.Sprint(ref.Precision) {
			t.Fatalf("curve %d (%s) differs from the %d run's", i, c.Side, k)
		}
	}
	if d.Images != 2*htmlreport.DefaultOptions.Worst {
		t.Errorf("%d images drawn, want %d (both sides of the %d whose recall changed most)", d.Images, 2*htmlreport.DefaultOptions.Worst, htmlreport.DefaultOptions.Worst)
	}
	dom, console := browse(t, chromium, page)
	if len(console) > 0 {
		t.Errorf("console messages:\n%s", strings.Join(console, "\n"))
	}
	if got := domAttr(dom, "data-check"); got != "ok" {
		t.Errorf("page check: %q", got)
	}
	if got := domAttr(dom, "data-plots"); got != "2" {
		t.Errorf("%s plots rendered, want 2", got)
	}
	if got := domAttr(dom, "data-images"); got != strconv.Itoa(d.Images) {
		t.Errorf("%s images in the DOM, want %d", got, d.Images)
	}
}

// TestHTMLFlags: report.html is written by default, --html=false turns it
// off, and out-of-range --html-worst/--html-thumb are usage errors.
func TestHTMLFlags(t *testing.T) {
	one := func() (mpi.Comm, func() error, error) { return local.New(1)[0], func() error { return nil }, nil }
	d := filepath.Join("..", "testdata", "sets", "single")
	run := func(extra ...string) (int, string) {
		out := filepath.Join(t.TempDir(), "out")
		args := append([]string{"canopy", "eval", "--csv", filepath.Join(d, "truth.csv"), "--predictions",
			filepath.Join(d, "predictions.csv"), "--out", out}, extra...)
		var so, se bytes.Buffer
		return MainWith(context.Background(), args, &so, &se, one), out
	}
	for _, c := range []struct {
		args []string
		code int
		html bool
	}{
		{nil, ExitOK, true},
		{[]string{"--html=false"}, ExitOK, false},
		{[]string{"--html-worst", "0", "--html-thumb", "64"}, ExitOK, true},
		{[]string{"--html-thumb", "8"}, ExitUsage, false},
		{[]string{"--html-worst", "-1"}, ExitUsage, false},
	} {
		code, out := run(c.args...)
		_, err := os.Stat(filepath.Join(out, "report.html"))
		if code != c.code || (err == nil) != c.html {
			t.Errorf("%v: exit %d (want %d), report.html written %v (want %v)", c.args, code, c.code, err == nil, c.html)
		}
	}
}

// TestReportHTMLOpensOnlyAdmittedImages: report.html draws no image the
// pre-flight would refuse. A replay opens no image, so its page is the
// only reader of the CSV's paths: an absolute path, a ".." path and a
// symlink out of --root-dir are drawn grey unless --allow-outside-root;
// an image whose header is over the pixel cap is never decoded, a named
// pipe never waited on, a missing file said so.
func TestReportHTMLOpensOnlyAdmittedImages(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	writePNG := func(path string, w, h int) {
		var b bytes.Buffer
		if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writePNG(filepath.Join(base, "outside.png"), 40, 30)
	writePNG(filepath.Join(root, "inside.png"), 40, 30)
	if err := os.Symlink(filepath.Join(base, "outside.png"), filepath.Join(root, "link.png")); err != nil {
		t.Fatal(err)
	}
	// A bomb: a 20000×20000 PNG header (400 M pixels, over PIL's cap) with
	// no pixel data; decoding it would fail anyway, its header says enough.
	bomb := pngHeader(20000, 20000)
	if err := os.WriteFile(filepath.Join(root, "bomb.png"), bomb, 0o644); err != nil {
		t.Fatal(err)
	}
	// A named pipe: opened without blocking and refused, never waited on.
	if err := syscall.Mkfifo(filepath.Join(root, "fifo.png"), 0o644); err != nil {
		t.Fatal(err)
	}
	abs := filepath.Join(base, "outside.png")
	names := []string{"inside.png", "../outside.png", abs, "link.png", "bomb.png", "fifo.png", "missing.png"}
	var truth, pred strings.Builder
	truth.WriteString("image_path,xmin,ymin,xmax,ymax,label\n")
	pred.WriteString("image_path,xmin,ymin,xmax,ymax,label,score\n")
	for _, n := range names {
		fmt.Fprintf(&truth, "%s,1,1,20,20,Tree\n", n)
		fmt.Fprintf(&pred, "%s,30,20,39,29,Tree,0.5\n", n) // every image misses: all drawn
	}
	csv, preds := filepath.Join(base, "truth.csv"), filepath.Join(base, "preds.csv")
	if err := os.WriteFile(csv, []byte(truth.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(preds, []byte(pred.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	one := func() (mpi.Comm, func() error, error) { return local.New(1)[0], func() error { return nil }, nil }
	page := func(extra ...string) map[string]string {
		out := filepath.Join(t.TempDir(), "out")
		args := append([]string{"canopy", "eval", "--csv", csv, "--root-dir", root, "--predictions", preds, "--out", out}, extra...)
		var so, se bytes.Buffer
		if code := MainWith(context.Background(), args, &so, &se, one); code != ExitOK {
			t.Fatalf("%v: exit %d: %s", extra, code, se.String())
		}
		b, err := os.ReadFile(filepath.Join(out, "report.html"))
		if err != nil {
			t.Fatal(err)
		}
		notes := map[string]string{}
		fig := regexp.MustCompile(`(?s)<figure><img [^>]*alt="([^"]*)">.*?</figure>`)
		for _, m := range fig.FindAllStringSubmatch(string(b), -1) {
			n := stdhtml.UnescapeString(m[1])
			note := ""
			if i := strings.Index(m[0], `<span class="note">`); i >= 0 {
				note = stdhtml.UnescapeString(m[0][i:])
			}
			notes[n] = note
		}
		if len(notes) != len(names) {
			t.Fatalf("%v: %d images drawn, want %d", extra, len(notes), len(names))
		}
		return notes
	}
	refused := map[string]string{"../outside.png": `a ".." element`, abs: "an absolute path", "link.png": "a symlink to",
		"bomb.png": "400000000 pixels, over the limit of 178956970", "fifo.png": "not a regular file (a named pipe)",
		"missing.png": "image not drawn (not found)"}
	for n, note := range page() {
		want, bad := refused[n]
		switch {
		case !bad && note != "":
			t.Errorf("%s: drawn with note %q, want the image", n, note)
		case bad && !strings.Contains(note, "image not drawn") || bad && !strings.Contains(note, want):
			t.Errorf("%s: note %q, want it refused: %q", n, note, want)
		}
	}
	for n, note := range page("--allow-outside-root") {
		if n == "bomb.png" || n == "fifo.png" || n == "missing.png" {
			if !strings.Contains(note, refused[n]) {
				t.Errorf("--allow-outside-root: %s: note %q, want the pixel cap", n, note)
			}
		} else if note != "" {
			t.Errorf("--allow-outside-root: %s: drawn with note %q, want the image", n, note)
		}
	}
}

// report.html does not grow with the class count: the same boxes labelled
// with 10 and with 4,000 classes give pages within 1 MB of each other
// (4,000 classes drew a 16 MB page before), the data block carries at most
// MaxCurveClasses classes' curves, and notes say what report.json holds
// instead.
func TestReportHTMLBoundedInClassCount(t *testing.T) {
	size := map[int]int64{}
	for _, k := range []int{10, 4000} {
		truth, preds := writeManyClasses(t, 200, 20, k)
		out := t.TempDir()
		cfg := EvalConfig{CSV: truth, Predictions: preds, Out: out, IoUThreshold: 0.4, BatchSize: 50,
			HTML: &htmlreport.Options{Worst: 2, Thumb: 64}}
		if codes := runLocal(t, 1, cfg); codes[0] != 0 {
			t.Fatalf("%d classes: %v", k, codes)
		}
		b, err := os.ReadFile(filepath.Join(out, "report.html"))
		if err != nil {
			t.Fatal(err)
		}
		size[k] = int64(len(b))
		d, err := htmlreport.ReadData(b)
		if err != nil || d == nil {
			t.Fatalf("%d classes: data block %v", k, err)
		}
		labels := map[int32]bool{}
		for _, c := range d.PR {
			labels[c.LabelID] = true
		}
		if len(labels) != min(k, htmlreport.MaxCurveClasses) {
			t.Errorf("%d classes: curves of %d classes on the page", k, len(labels))
		}
		if k > htmlreport.MaxCurveClasses && (!bytes.Contains(b, []byte("the curves of the other 3990 classes are left out")) ||
			!bytes.Contains(b, []byte("(per-class values) are in report.json"))) {
			t.Errorf("%d classes: no note on what was left out", k)
		}
	}
	if size[4000] > size[10]+1<<20 || size[4000] > 10<<20 {
		t.Fatalf("report.html: %d bytes at 10 classes, %d at 4000", size[10], size[4000])
	}
}
