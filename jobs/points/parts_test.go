package points

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/testsupport/forest"
	"github.com/canopy-hpc/canopy/internal/testsupport/testweights"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// TestPartFileFullDisk: a point run whose part file is on a full disk
// (/dev/full): the record's write fails (no space left on device) and so
// does the file's close (its fsync: invalid argument). The run exits 1
// (canopy's own file) with both errors, the close's not dropped.
func TestPartFileFullDisk(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full on this system")
	}
	dir := t.TempDir()
	model, images := filepath.Join(dir, "model"), filepath.Join(dir, "images")
	os.Mkdir(model, 0o755)
	os.Mkdir(images, 0o755)
	if err := testweights.TreeFormerFolder(model, "canopy-test/pvt_v2_b3", [4]int{1, 1, 1, 1}, 46); err != nil {
		t.Fatal(err)
	}
	im, _ := forest.Generate(9, 0, 120, 100)
	var b bytes.Buffer
	if err := png.Encode(&b, im); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(images, "a.png"), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	prev := createParts
	createParts = func(out, run string, attempt, rank int, every time.Duration) (*parts.Writer, error) {
		os.MkdirAll(filepath.Join(out, parts.Dir), 0o755)
		os.Symlink("/dev/full", filepath.Join(out, parts.Dir, fmt.Sprintf("part-%03d-%05d.part", attempt, rank)))
		return parts.Create(out, run, attempt, rank, every)
	}
	defer func() { createParts = prev }()
	dev, err := cuda.ParseDevice("cpu")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Model: model, RootDir: images, Out: filepath.Join(dir, "out"), Threads: 1, Device: Device{Request: dev},
		List: func() ([]string, error) { return []string{"a.png"}, nil }}
	errs := local.Run(1, func(c mpi.Comm) error { return Predict(context.Background(), c, cfg) })
	if err := errs[0]; errkind.Code(err) != errkind.ExitInternal || !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("exit %d (%v); want %d with the write's (ENOSPC) and the close's (EINVAL) errors", errkind.Code(err), err, errkind.ExitInternal)
	}
}
