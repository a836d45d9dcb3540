package cropstage

import (
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/testsupport/torchckpt"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// fixture writes the crop parity models (the seeded ResNet-18 state dict,
// 2 classes), a label dict for it and two 64×48 PNG images with a
// gradient, so that crops differ.
func fixture(t *testing.T) (cc CropConfig, root string, paths []string) {
	t.Helper()
	dir := t.TempDir()
	pf, err := torchckpt.CropPlanted("../..", dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	dict := filepath.Join(dir, "two.csv")
	if err := os.WriteFile(dict, []byte("label,id\nalive,0\ndead,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root = filepath.Join(dir, "images")
	os.MkdirAll(root, 0o755)
	for k := range 2 {
		im := image.NewRGBA(image.Rect(0, 0, 64, 48))
		for y := range 48 {
			for x := range 64 {
				im.Set(x, y, color.RGBA{uint8(4 * x), uint8(5 * y), uint8(100 * k), 255})
			}
		}
		p := fmt.Sprintf("img%d.png", k)
		f, err := os.Create(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		png.Encode(f, im)
		f.Close()
		paths = append(paths, p)
	}
	return CropConfig{Models: []string{pf.R18, pf.R18}, LabelDicts: []string{dict}}, root, paths
}

var dets = [][]box.Detection{
	{{Box: box.Box{Xmin: 2, Ymin: 3, Xmax: 30, Ymax: 40}}, {Box: box.Box{Xmin: 10, Ymin: 10, Xmax: 10, Ymax: 20}}, {Box: box.Box{Xmin: 30, Ymin: 0, Xmax: 64, Ymax: 20}}},
	{},
	{{Box: box.Box{Xmin: 0, Ymin: 0, Xmax: 64, Ymax: 48}}},
}

// classify runs the stage on n ranks and returns rank 0's table (every
// rank's must be the same).
func classify(t *testing.T, n int, cc CropConfig, root string, paths []string) *Table {
	t.Helper()
	tables := make([]*Table, n)
	errs := local.Run(n, func(c mpi.Comm) error {
		cs, err := Open(c, cc, 1)
		if err != nil {
			return err
		}
		tables[c.Rank()], err = Classify(context.Background(), c, cs, NewImageCrops(root, paths, false), dets)
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%d ranks, rank %d: %v", n, r, err)
		}
	}
	for r := range tables {
		if fmt.Sprint(tables[r].Rows) != fmt.Sprint(tables[0].Rows) {
			t.Fatalf("%d ranks: rank %d's table %v, rank 0's %v", n, r, tables[r].Rows, tables[0].Rows)
		}
	}
	return tables[0]
}

// The crops are dealt over the ranks and gathered in crop order: every
// rank holds the same table at any rank count; a zero-size box is dropped
// (nil row, counted) and gets empty cells; each model has its columns.
func TestClassifyAnyRankCount(t *testing.T) {
	cc, root, paths := fixture(t)
	paths = append(paths[:1], "missing.png", paths[1]) // image 1 has no boxes: never opened
	one := classify(t, 1, cc, root, paths)
	three := classify(t, 3, cc, root, paths)
	if fmt.Sprint(one.Rows) != fmt.Sprint(three.Rows) {
		t.Fatalf("1 rank %v, 3 ranks %v", one.Rows, three.Rows)
	}
	if one.Rows[0][1] != nil || one.Rows[0][0] == nil || one.Rows[2][0] == nil || len(one.Rows[1]) != 0 {
		t.Fatalf("rows %v: want the zero-size box (0, 1) alone dropped", one.Rows)
	}
	if st := one.Set.Stats; st.Classified != 3 || st.DroppedZeroSize != 1 || st.Workers != 1 {
		t.Fatalf("stats %+v", st)
	}
	for _, r := range [][]Result{one.Rows[0][0], one.Rows[0][2], one.Rows[2][0]} {
		if len(r) != 2 || r[0] != r[1] || r[0].Label < 0 || r[0].Label > 1 || !(r[0].Score >= 0.5 && r[0].Score <= 1) {
			t.Fatalf("result %+v: want one per model, the same model twice giving the same, a class of 2 with its top probability", r)
		}
	}
	if got := strings.Join(one.Columns(), ","); got != "cropmodel_label_0,cropmodel_score_0,cropmodel_label_1,cropmodel_score_1" {
		t.Fatalf("columns %s", got)
	}
	if got := string(one.AppendCells([]byte("x"), 0, 1)); got != "x,,,," {
		t.Fatalf("a dropped box's cells %q", got)
	}
	want := fmt.Sprintf("x,%s,", []string{"alive", "dead"}[one.Rows[2][0][0].Label])
	if got := string(one.AppendCells([]byte("x"), 2, 0)); !strings.HasPrefix(got, want) || strings.Count(got, ",") != 4 {
		t.Fatalf("cells %q, want %q…", got, want)
	}
	if cells := one.CellsOf(0, 3); len(cells) != 3 || cells[1].Labels != nil || len(cells[0].Scores) != 2 || cells[0].Scores[0] != float64(one.Rows[0][0][0].Score) {
		t.Fatalf("CellsOf %+v", cells)
	}
	kept := one.DropZero(dets)
	if len(kept[0]) != 2 || kept[0][1] != dets[0][2] || len(one.Rows[0]) != 2 || one.Rows[0][1] == nil {
		t.Fatalf("DropZero: %v, rows %v", kept, one.Rows)
	}
}

// Errors are collective: a model that does not load is exit 4 on every
// rank, a label dict that does not parse exit 3, an image path that leaves
// the root exit 3.
func TestStageErrors(t *testing.T) {
	cc, root, paths := fixture(t)
	check := func(name string, cc CropConfig, paths []string, want int, says string) {
		t.Helper()
		for r, err := range local.Run(2, func(c mpi.Comm) error {
			cs, err := Open(c, cc, 1)
			if err != nil {
				return err
			}
			_, err = Classify(context.Background(), c, cs, NewImageCrops(root, paths, false), dets)
			return err
		}) {
			if errkind.Code(err) != want || !strings.Contains(fmt.Sprint(err), says) {
				t.Errorf("%s, rank %d: %v (exit %d), want exit %d saying %q", name, r, err, errkind.Code(err), want, says)
			}
		}
	}
	check("no such model", CropConfig{Models: []string{filepath.Join(root, "none.pt")}}, paths, errkind.ExitModel, "--crop-model")
	bad := filepath.Join(root, "bad.csv")
	os.WriteFile(bad, []byte("no header here\n"), 0o644)
	check("bad label dict", CropConfig{Models: cc.Models[:1], LabelDicts: []string{bad}}, paths, errkind.ExitInput, "bad.csv")
	check("outside the root", cc, []string{"../img0.png", paths[0], paths[1]}, errkind.ExitInput, `a ".." element`)
	if cs, err := Open(local.New(1)[0], CropConfig{}, 1); cs != nil || err != nil || cs.Columns() != nil {
		t.Fatalf("no crop models: %v %v", cs, err)
	}
}
