package jobs

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/internal/limits"
	"github.com/canopy-hpc/canopy/metrics"
)

// pngHeader is a PNG of only its signature, IHDR (8-bit RGB, w×h) and
// IEND: 45 bytes that claim any size, as a decompression bomb's header does.
func pngHeader(w, h uint32) []byte {
	b := []byte("\x89PNG\r\n\x1a\n")
	chunk := func(typ string, data []byte) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
		c := append([]byte(typ), data...)
		b = append(b, c...)
		b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(c))
	}
	ihdr := binary.BigEndian.AppendUint32(nil, w)
	ihdr = binary.BigEndian.AppendUint32(ihdr, h)
	chunk("IHDR", append(ihdr, 8, 2, 0, 0, 0))
	chunk("IEND", nil)
	return b
}

// limitRun runs eval --model on 2 in-process ranks over one image and
// returns the exit codes and stderr.
func limitRun(t *testing.T, img string, mc func(*ModelConfig)) ([]int, string) {
	t.Helper()
	dir := filepath.Dir(img)
	csv := filepath.Join(dir, "truth.csv")
	os.WriteFile(csv, []byte("image_path,xmin,ymin,xmax,ymax,label\n"+filepath.Base(img)+",1,1,10,10,Tree\n"), 0o644)
	cfg := modelCfg(t, t.TempDir())
	cfg.CSV = csv
	cfg.Model.MaxImagePixels = limits.DefaultMaxImagePixels
	if mc != nil {
		mc(&cfg.Model)
	}
	var stderr bytes.Buffer
	codes := runLocalCtx(t, 2, cfg, func(int) context.Context { return context.Background() }, &stderr)
	return codes, stderr.String()
}

func wantCodes(t *testing.T, codes []int, want int, stderr string) {
	t.Helper()
	for r, c := range codes {
		if c != want {
			t.Fatalf("rank %d exit %d, want %d\n%s", r, c, want, stderr)
		}
	}
}

// A 50000×50000 PNG header (45 bytes) is refused at pre-flight from its
// header, exit 3, naming the file and its size, under PIL's default cap;
// with the cap lifted, the memory estimate refuses it (exit 3), never a Go
// runtime crash.
func TestPixelCapAndMemoryEstimate(t *testing.T) {
	dir := t.TempDir()
	bomb := filepath.Join(dir, "bomb.png")
	os.WriteFile(bomb, pngHeader(50000, 50000), 0o644)
	codes, stderr := limitRun(t, bomb, nil)
	wantCodes(t, codes, ExitInput, stderr)
	for _, want := range []string{"bomb.png", "50000x50000", "2500000000 pixels", "178956970", "--max-image-pixels"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Count(stderr, "\n") != 1 {
		t.Errorf("want one line:\n%s", stderr)
	}

	// the cap raised: the estimate (50000² decoded twice is ~93 GiB) refuses
	codes, stderr = limitRun(t, bomb, func(m *ModelConfig) { m.MaxImagePixels = 0; m.RankMemory = 8 << 30 })
	wantCodes(t, codes, ExitInput, stderr)
	for _, want := range []string{"bomb.png", "50000x50000", "needs about", "may use 8.00 GiB", "--rank-memory"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}

	// a cap of exactly the image's pixels passes the cap (PIL refuses only
	// above it), and the next check speaks
	small := filepath.Join(t.TempDir(), "small.png")
	writePNG(t, small, 300, 200)
	codes, stderr = limitRun(t, small, func(m *ModelConfig) { m.MaxImagePixels = 300 * 200; m.RankMemory = 1 << 20 })
	wantCodes(t, codes, ExitInput, stderr)
	if !strings.Contains(stderr, "needs about") || strings.Contains(stderr, "over the limit") {
		t.Errorf("300x200 under a cap of 60000 pixels and 1 MiB per rank:\n%s", stderr)
	}
	codes, stderr = limitRun(t, small, func(m *ModelConfig) { m.MaxImagePixels = 300*200 - 1 })
	wantCodes(t, codes, ExitInput, stderr)
	if !strings.Contains(stderr, "60000 pixels, over the limit of 59999") {
		t.Errorf("cap 59999:\n%s", stderr)
	}
	// the same image with the defaults runs
	codes, stderr = limitRun(t, small, nil)
	wantCodes(t, codes, ExitOK, stderr)
}

func writePNG(t *testing.T, path string, w, h int) {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = byte(i * 7)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	png.Encode(f, img)
	f.Close()
}

// min_size / max_size beyond retinanet.MaxSide in config.json are a model
// error (exit 4), not a 120 GB allocation.
func TestConfigSizeBounds(t *testing.T) {
	model, _, _ := testModelSet(t)
	for _, key := range []string{"min_size", "max_size"} {
		dir := filepath.Join(t.TempDir(), "m")
		os.MkdirAll(dir, 0o755)
		os.Symlink(filepath.Join(model, "model.safetensors"), filepath.Join(dir, "model.safetensors"))
		cfgJSON := strings.Replace(testModelConfig, `"`+key+`": 400`, `"`+key+`": 100000`, 1)
		os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfgJSON), 0o644)
		cfg := modelCfg(t, t.TempDir())
		cfg.Model.Spec = dir
		var stderr bytes.Buffer
		codes := runLocalCtx(t, 2, cfg, func(int) context.Context { return context.Background() }, &stderr)
		wantCodes(t, codes, ExitModel, stderr.String())
		if !strings.Contains(stderr.String(), key) || !strings.Contains(stderr.String(), "at most 8192") {
			t.Errorf("%s: %s", key, stderr.String())
		}
	}
}

// writeManyClasses writes a truth and a prediction CSV of n images with
// per boxes each, labels cycling over k names.
func writeManyClasses(t *testing.T, n, per, k int) (truth, preds string) {
	t.Helper()
	dir := t.TempDir()
	var tb, pb strings.Builder
	tb.WriteString("image_path,xmin,ymin,xmax,ymax,label\n")
	pb.WriteString("image_path,xmin,ymin,xmax,ymax,label,score\n")
	row := 0
	for i := 0; i < n; i++ {
		for j := 0; j < per; j++ {
			x, y := j*7%300, j*13%300
			fmt.Fprintf(&tb, "img%d.png,%d,%d,%d,%d,c%05d\n", i, x, y, x+20, y+30, row%k)
			fmt.Fprintf(&pb, "img%d.png,%d,%d,%d,%d,c%05d,0.%d\n", i, x+1, y, x+21, y+30, row%k, j%10)
			row++
		}
	}
	truth, preds = filepath.Join(dir, "truth.csv"), filepath.Join(dir, "preds.csv")
	os.WriteFile(truth, []byte(tb.String()), 0o644)
	os.WriteFile(preds, []byte(pb.String()), 0o644)
	return truth, preds
}

// The COCO stage's memory is estimated from the class, image and box
// counts and checked against the rank's budget before it allocates: over
// it, exit 3 on every rank with the estimate and the way out, and nothing
// published; the same budget suffices without the COCO family.
func TestMetricsMemoryRefusedBeforeAllocating(t *testing.T) {
	truth, preds := writeManyClasses(t, 200, 20, 4000)
	out := t.TempDir()
	cfg := EvalConfig{CSV: truth, Predictions: preds, Out: out, IoUThreshold: 0.4, BatchSize: 50}
	// Settle the resident set first: garbage the tests before this one left
	// resident, returned to the system during the run, would leave the
	// budget more than the COCO estimate above what the rank then holds
	// (seen in make test: codes [0 0]).
	debug.FreeOSMemory()
	cfg.Model.RankMemory = limits.ResidentBytes() + 32<<20 // the estimate is about 140 MiB
	var stderr bytes.Buffer
	codes := runLocalCtx(t, 2, cfg, func(int) context.Context { return context.Background() }, &stderr)
	msg := stderr.String()
	if codes[0] != ExitInput || codes[1] != ExitInput || !strings.Contains(msg, "COCO metrics of 4000 classes over 200 images and 8000 boxes need about") ||
		!strings.Contains(msg, "--metrics recall,iou") || !strings.Contains(msg, "--rank-memory") {
		t.Fatalf("codes %v\n%s", codes, msg)
	}
	if _, err := os.Stat(filepath.Join(out, "report.json")); err == nil {
		t.Fatal("a refused run published a report")
	}
	cfg.Out = t.TempDir()
	cfg.Families = metrics.Recall | metrics.IoUMean
	// 32 MiB over what the process holds now: the refused run above (and,
	// in the whole package, the tests before it) grew the resident set,
	// which the matching's check counts (resident + the matching's pairs).
	debug.FreeOSMemory()
	cfg.Model.RankMemory = limits.ResidentBytes() + 32<<20
	if codes := runLocal(t, 2, cfg); codes[0] != 0 || codes[1] != 0 {
		t.Fatalf("without COCO: %v (budget %s, resident now %s)", codes, limits.GiB(cfg.Model.RankMemory), limits.GiB(limits.ResidentBytes()))
	}
}

// config.json's num_classes must be a positive integer: -1, 0, 1.5 or a
// string is a model error (exit 4) naming the key (-1 was accepted).
func TestConfigNumClassesRefused(t *testing.T) {
	model, _, _ := testModelSet(t)
	for _, v := range []string{"-1", "0", "1.5", `"2"`} {
		dir := filepath.Join(t.TempDir(), "m")
		os.MkdirAll(dir, 0o755)
		os.Symlink(filepath.Join(model, "model.safetensors"), filepath.Join(dir, "model.safetensors"))
		os.WriteFile(filepath.Join(dir, "config.json"), []byte(strings.Replace(testModelConfig, `"num_classes": 2`, `"num_classes": `+v, 1)), 0o644)
		cfg := modelCfg(t, t.TempDir())
		cfg.Model.Spec = dir
		var stderr bytes.Buffer
		codes := runLocalCtx(t, 1, cfg, func(int) context.Context { return context.Background() }, &stderr)
		if codes[0] != ExitModel || !strings.Contains(stderr.String(), `"num_classes" is `+v) {
			t.Errorf("num_classes %s: exit %v\n%s", v, codes, stderr.String())
		}
	}
}
