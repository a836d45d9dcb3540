package jobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/internal/testsupport/torchckpt"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// runMain runs canopy ARGS on n in-process ranks and returns each rank's
// exit code, rank 0's stdout and every rank's stderr.
func runMain(n int, args ...string) ([]int, string, string) {
	var stdout, stderr bytes.Buffer
	lw := &lockedWriter{w: &stderr}
	codes := make([]int, n)
	local.Run(n, func(c mpi.Comm) error {
		out := &bytes.Buffer{}
		codes[c.Rank()] = MainWith(context.Background(), append([]string{"canopy"}, args...), out, lw,
			func() (mpi.Comm, func() error, error) { return c, func() error { return nil }, nil })
		if c.Rank() == 0 {
			stdout = *out
		}
		return nil
	})
	return codes, stdout.String(), stderr.String()
}

// TestTileLabelDict: --label-dict and a config's label_dict reach
// predict --tile and eval --tile on every rank. A bare .pt state dict (the
// R50 test weights, which hold no labels) takes its class name from them:
// predictions.csv names every box "Crown", the same bytes at 1 rank (file)
// and 3 ranks (config), report.json records the map as inputs.label_dict
// (path, sha256) and the model's labels_from; eval --tile at 3 ranks scores
// truth labelled "Crown". Without a map the .pt is a model error (exit 4);
// a map that differs from a model folder's own labels is exit 4.
func TestTileLabelDict(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the R50 network on 9 windows")
	}
	pngFile, _ := tileRasterFile(t, 600, 300, 11) // patch 300: 3 windows
	dir := t.TempDir()
	pt := filepath.Join(dir, "model.pt")
	if err := torchckpt.RebuildFile(filepath.Join("..", torchckpt.Skeletons), "model.pt", pt); err != nil {
		t.Fatal(err)
	}
	dict := filepath.Join(dir, "classes.csv")
	dictBytes := []byte("label,id\nCrown,0\n")
	yaml := filepath.Join(dir, "config.yaml")
	wrong := filepath.Join(dir, "wrong.csv")
	for name, b := range map[string]string{dict: string(dictBytes), yaml: "label_dict: {Crown: 0}\n", wrong: "label,id\nTree,0\nBird,1\n"} {
		if err := os.WriteFile(name, []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base := []string{"--tile", "--patch-size", "300", "--model", pt, "--device", "cpu"}
	type tileRep struct {
		Inputs map[string]struct{ Path, SHA256 string }
		Model  struct {
			LabelDict  map[string]int `json:"label_dict"`
			LabelsFrom string         `json:"labels_from"`
		}
		Metrics  map[string]any
		Settings map[string]setting
		Tile     struct{ Windows int }
	}
	run := func(n int, args ...string) ([]byte, tileRep) {
		t.Helper()
		out := filepath.Join(t.TempDir(), "out")
		codes, _, stderr := runMain(n, append(args, "--out", out)...)
		for r, code := range codes {
			if code != 0 {
				t.Fatalf("%d ranks %v: rank %d exit %d\n%s", n, args, r, code, stderr)
			}
		}
		p, err := os.ReadFile(filepath.Join(out, "predictions.csv"))
		if err != nil {
			t.Fatal(err)
		}
		var rep tileRep
		b, _ := os.ReadFile(filepath.Join(out, "report.json"))
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		return p, rep
	}
	labelsOf := func(p []byte) map[string]int {
		rows, err := csv.NewReader(bytes.NewReader(p)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, r := range rows[1:] {
			got[r[5]]++
		}
		return got
	}

	p1, rep1 := run(1, append([]string{"predict", "--raster", pngFile, "--threads", "2", "--label-dict", dict}, base...)...)
	if got := labelsOf(p1); len(got) != 1 || got["Crown"] < 3 {
		t.Errorf("1 rank, --label-dict: labels %v, want only Crown on at least 3 boxes", got)
	}
	sum := sha256.Sum256(dictBytes)
	if in := rep1.Inputs["label_dict"]; in.Path != dict || in.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("report inputs.label_dict %+v, want %s with its sha256", in, dict)
	}
	if rep1.Model.LabelsFrom != "--label-dict" || len(rep1.Model.LabelDict) != 1 || rep1.Model.LabelDict["Crown"] != 0 || rep1.Tile.Windows != 3 {
		t.Errorf("report model %+v, %d windows; want labels {Crown: 0} from --label-dict, 3 windows", rep1.Model, rep1.Tile.Windows)
	}
	p3, rep3 := run(3, append([]string{"predict", "--raster", pngFile, "--threads", "1", "--config", yaml}, base...)...)
	if !bytes.Equal(p1, p3) {
		t.Errorf("3 ranks with the config's label_dict: predictions.csv differs from 1 rank with --label-dict:\n%s\n%s", p3, p1)
	}
	if s := rep3.Settings["label_dict"]; s.Source != "config" || s.Value != string(dictBytes) || rep3.Inputs["label_dict"].Path != yaml+": label_dict" {
		t.Errorf("3 ranks: settings.label_dict %+v, inputs %+v; want the config's map", s, rep3.Inputs)
	}

	// eval --tile: the truth's boxes, all named "Crown", are the model's
	// class 0.
	truth := filepath.Join(filepath.Dir(pngFile), "crown.csv")
	ann, err := os.ReadFile(filepath.Join(filepath.Dir(pngFile), "annotations.csv"))
	if err != nil {
		t.Fatal(err)
	}
	crowns := strings.NewReplacer(",Tree\n", ",Crown\n", ",Dead\n", ",Crown\n").Replace(string(ann))
	os.WriteFile(truth, []byte(crowns), 0o644)
	pe, repe := run(3, append([]string{"eval", "--csv", truth, "--html=false", "--threads", "1", "--label-dict", dict}, base...)...)
	if !bytes.Equal(pe, p1) || repe.Metrics == nil || repe.Inputs["label_dict"].Path != dict {
		t.Errorf("eval --tile at 3 ranks: predictions equal %v, metrics %v, inputs %+v", bytes.Equal(pe, p1), repe.Metrics != nil, repe.Inputs)
	}

	// No map: the .pt has no labels. A map other than the folder's own.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"predict", "--raster", pngFile, "--tile", "--model", pt}, "holds no labels"},
		{[]string{"predict", "--raster", pngFile, "--tile", "--model", demoModelDir, "--label-dict", wrong}, "contradicts the model's own label_dict"},
		{[]string{"eval", "--csv", truth, "--tile", "--model", demoModelDir, "--label-dict", wrong, "--html=false"}, "contradicts the model's own label_dict"},
	} {
		codes, _, stderr := runMain(3, append(c.args, "--out", filepath.Join(t.TempDir(), "o"), "--threads", "1")...)
		for r, code := range codes {
			if code != ExitModel || !strings.Contains(stderr, c.want) {
				t.Errorf("%v: rank %d exit %d, want %d with %q: %s", c.args, r, code, ExitModel, c.want, stderr)
			}
		}
	}
}
