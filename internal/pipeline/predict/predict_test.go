package predict

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/imagesrun"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// TestRefusedBeforeAnyWork: what rank 0 finds wrong before the output
// folder is touched (the image list, --images, the model) ends every rank
// with the same collective error and exit code, and leaves --out empty.
func TestRefusedBeforeAnyWork(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "list.csv")
	if err := os.WriteFile(list, []byte("image_path\na.png\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noHeader := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(noHeader, []byte("path\na.png\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		cfg  Config
		code int
		want string
	}{
		"missing csv":    {Config{CSV: filepath.Join(dir, "none.csv")}, errkind.ExitInput, "none.csv"},
		"csv header":     {Config{CSV: noHeader}, errkind.ExitInput, "image_path"},
		"missing folder": {Config{Images: filepath.Join(dir, "none")}, errkind.ExitInput, "none"},
		"missing model":  {Config{CSV: list}, errkind.ExitModel, "nomodel"},
	} {
		out := filepath.Join(t.TempDir(), "out")
		c.cfg.Out, c.cfg.BatchSize = out, 1
		c.cfg.Model.Spec = filepath.Join(dir, "nomodel")
		errs := local.Run(2, func(comm mpi.Comm) error { return Run(context.Background(), comm, c.cfg) })
		for r, err := range errs {
			var e *errkind.Error
			if !errors.As(err, &e) || e.Code != c.code || !e.Collective || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s, rank %d: %v, want a collective exit %d naming %q", name, r, err, c.code, c.want)
			}
		}
		if errs[0] != nil && errs[1] != nil && errs[0].Error() != errs[1].Error() {
			t.Errorf("%s: the ranks differ: %q, %q", name, errs[0], errs[1])
		}
		if ents, err := os.ReadDir(out); err == nil && len(ents) > 0 {
			t.Errorf("%s: --out holds %d entries", name, len(ents))
		}
	}
}

// TestPacket: the inputs every rank reads back are rank 0's, field for
// field; an image count past the packet's fields, or one not 8 bytes, is a
// malformed broadcast (exit 1), and rank 0's error packet keeps its code.
func TestPacket(t *testing.T) {
	count := func(n uint64) []byte { return binary.LittleEndian.AppendUint64(nil, n) }
	saved := imagesrun.Saved{Probe: "nonce", Attempt: 2, Parts: []parts.File{{Name: "part 0", Data: []byte("p")}}}
	fields := [][]byte{[]byte("/m"), []byte("ab"), []byte("cd"), []byte("Tree,0\n"), count(2), []byte("a.png"), []byte("b.png")}
	c := local.New(1)[0]
	in, err := unpack(c, collective.PackFields([]byte{0}, imagesrun.PackSaved(fields, saved)...))
	want := inputs{modelDir: "/m", modelDigest: "ab", modelConfig: "cd", labels: []byte("Tree,0\n"), paths: []string{"a.png", "b.png"}, saved: saved}
	if err != nil || !reflect.DeepEqual(in, want) {
		t.Fatalf("unpack: %+v, %v; want %+v", in, err, want)
	}
	for name, f := range map[string][][]byte{
		"count past the fields": {nil, nil, nil, nil, count(3), []byte("a.png"), []byte("nonce"), count(0)},
		// past the end of the packet: read unchecked, the paths would run
		// off the fields (the case above leaves the saved run short only)
		"count past the packet": {nil, nil, nil, nil, count(100), []byte("a.png"), []byte("nonce"), count(0)},
		"count of 7 bytes":      {nil, nil, nil, nil, count(1)[:7], []byte("a.png"), []byte("nonce"), count(0)},
	} {
		_, err := unpack(c, collective.PackFields([]byte{0}, f...))
		if e := (*errkind.Error)(nil); !errors.As(err, &e) || e.Code != errkind.ExitInternal || !strings.Contains(err.Error(), "malformed input broadcast") {
			t.Errorf("%s: %v, want exit 1, a malformed broadcast", name, err)
		}
	}
	if _, err := unpack(c, append([]byte{byte(errkind.ExitModel)}, "jobs: no model"...)); errkind.Code(err) != errkind.ExitModel {
		t.Errorf("rank 0's error packet: %v (exit %d), want exit %d", err, errkind.Code(err), errkind.ExitModel)
	}
}
