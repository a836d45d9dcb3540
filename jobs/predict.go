package jobs

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/gemm"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/plan"
	"github.com/canopy-hpc/canopy/internal/wire"
	"github.com/canopy-hpc/canopy/mpi"
)

// PredictConfig is the configuration of one `canopy predict` run.
type PredictConfig struct {
	CSV       string // images by image_path (other columns ignored)
	Images    string // or: every image file in this folder
	RootDir   string // default: the CSV's folder, or Images
	Out       string
	Force     bool
	BatchSize int
	Model     ModelConfig
	Command   []string
	Stdout    io.Writer
	Progress  io.Writer // rank 0's progress lines (nil: none)
	// CollectiveTimeout: as EvalConfig's.
	CollectiveTimeout time.Duration
}

// imageExts are the files --images takes (any case).
var imageExts = map[string]bool{".png": true, ".jpg": true, ".jpeg": true, ".tif": true, ".tiff": true}

// listImages is the --images rule: the folder's image files, not
// recursive, sorted by name.
func listImages(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("jobs: --images: %w", err)
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() && imageExts[strings.ToLower(filepath.Ext(e.Name()))] {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return nil, fmt.Errorf("jobs: --images %s holds no .png, .jpg, .jpeg, .tif or .tiff files: %w", dir, dataset.ErrInput)
	}
	return out, nil
}

// csvImagePaths reads the unique image_path values of a CSV in order of
// first appearance.
func csvImagePaths(name string, data []byte) ([]string, error) {
	r := csv.NewReader(bytes.NewReader(data))
	r.FieldsPerRecord = -1
	head, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("jobs: %s: no header: %v: %w", name, err, dataset.ErrInput)
	}
	col := -1
	for i, h := range head {
		if strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")) == "image_path" {
			col = i
		}
	}
	if col < 0 {
		return nil, fmt.Errorf("jobs: %s: no image_path column in %q: %w", name, head, dataset.ErrInput)
	}
	seen := map[string]bool{}
	var out []string
	for line := 2; ; line++ {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("jobs: %s: %v: %w", name, err, dataset.ErrInput)
		}
		if col >= len(rec) || rec[col] == "" {
			return nil, fmt.Errorf("jobs: %s:%d: empty image_path: %w", name, line, dataset.ErrInput)
		}
		if p := rec[col]; !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("jobs: %s lists no images: %w", name, dataset.ErrInput)
	}
	return out, nil
}

// predictInputs is rank 0's packet: the image list and the model.
func packPredict(cfg PredictConfig) []byte {
	fail := func(code int, err error) []byte { return append([]byte{byte(code)}, err.Error()...) }
	var paths []string
	var err error
	if cfg.CSV != "" {
		var data []byte
		if data, err = os.ReadFile(cfg.CSV); err != nil {
			return fail(ExitInput, fmt.Errorf("jobs: %w", err))
		}
		paths, err = csvImagePaths(cfg.CSV, data)
	} else {
		paths, err = listImages(cfg.Images)
	}
	if err != nil {
		return fail(ExitInput, err)
	}
	dir, digest, config, err := resolveModel(cfg.Model.Spec)
	if err != nil {
		return fail(ExitModel, err)
	}
	if err := prepareOutSimple(cfg.Out, cfg.Force); err != nil {
		return fail(ExitUsage, err)
	}
	fields := [][]byte{[]byte(dir), []byte(digest), []byte(config)}
	for _, p := range paths {
		fields = append(fields, []byte(p))
	}
	return packFields([]byte{0}, fields...)
}

// prepareOutSimple makes the output folder, refusing one that holds
// predictions unless force.
func prepareOutSimple(dir string, force bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("jobs: --out: %w", err)
	}
	for _, f := range []string{"predictions.csv", "report.json"} {
		p := filepath.Join(dir, f)
		if _, err := os.Stat(p); err == nil {
			if !force {
				return fmt.Errorf("jobs: --out %s holds a previous run (%s); use --force to replace it", dir, f)
			}
			if err := os.Remove(p); err != nil {
				return fmt.Errorf("jobs: --force: %w", err)
			}
		}
	}
	return nil
}

type predictReport struct {
	Canopy   string      `json:"canopy"`
	Git      string      `json:"git"`
	MPI      string      `json:"mpi"`
	Command  []string    `json:"command"`
	Ranks    int         `json:"ranks"`
	Images   int         `json:"images"`
	Boxes    int         `json:"detections"`
	Model    *modelInfo  `json:"model"`
	PerRank  []rankStats `json:"per_rank"`
	Detector string      `json:"detector"`
}

// Predict runs the predict job on this rank: every rank detects its shard,
// the detections are gathered, rank 0 writes OUT/predictions.csv (DeepForest
// prediction columns) and OUT/report.json.
func Predict(ctx context.Context, c mpi.Comm, cfg PredictConfig) error {
	if cfg.BatchSize < 1 {
		cfg.BatchSize = 1
	}
	if cfg.RootDir == "" {
		if cfg.CSV != "" {
			cfg.RootDir = filepath.Dir(cfg.CSV)
		} else {
			cfg.RootDir = cfg.Images
		}
	}
	stats := rankStats{Rank: c.Rank(), Host: c.Host(), LocalRank: c.LocalRank(), LocalSize: c.LocalSize(), Seconds: map[string]float64{}, SGEMM: gemm.Backend() + " " + gemm.Core()}
	t0 := time.Now()
	var pkt []byte
	if c.Rank() == 0 {
		pkt = packPredict(cfg)
	}
	pkt, err := c.Bcast(pkt, 0)
	if err != nil {
		return localErr(ExitMPI, "jobs: broadcast inputs: %w", err)
	}
	if len(pkt) == 0 {
		return collective(ExitInternal, "jobs: empty input broadcast")
	}
	if pkt[0] != 0 {
		return &Error{Code: int(pkt[0]), Collective: true, Err: errors.New(string(pkt[1:]))}
	}
	f, err := unpackFields(pkt[1:])
	if err != nil || len(f) < 4 {
		return collective(ExitInternal, "jobs: malformed input broadcast")
	}
	paths := make([]string, len(f)-3)
	for i, b := range f[3:] {
		paths[i] = string(b)
	}
	model, err := loadModel(c, cfg.Model, string(f[0]), string(f[1]), string(f[2]))
	if err != nil {
		return err
	}
	labels := model.labels()
	images := make([]box.Image, len(paths))
	costs := make([]int64, len(paths))
	for i, p := range paths {
		images[i] = box.Image{Path: p}
		costs[i] = 1
	}
	p, err := plan.Balance(costs, c.Size())
	if err != nil {
		return collective(ExitInternal, "jobs: %w", err)
	}
	shard := p.Shards[c.Rank()]
	stats.Images = len(shard)
	files := make([]string, len(shard))
	for k, i := range shard {
		files[k] = imageFile(cfg.RootDir, paths[i])
	}
	if err := preflight(c, files); err != nil {
		return err
	}
	stats.Seconds["load"] = since(t0)

	t1 := time.Now()
	det, err := model.openDetector(c, labels, cfg.Progress)
	if err != nil {
		return err
	}
	defer det.Close()
	ecfg := EvalConfig{RootDir: cfg.RootDir, BatchSize: cfg.BatchSize, Progress: cfg.Progress}
	mine, derr := detectShard(ctx, det, ecfg, images, shard, c.Rank(), func([]wire.Image) error { return nil })
	if err := detectErr(derr, "predict keeps no part files, run it again: "); err != nil {
		return err
	}
	for _, im := range mine {
		stats.Detections += len(im.Dets)
	}
	stats.Seconds["detect"] = since(t1)
	printLayerTimes(cfg.Progress, det)

	t2 := time.Now()
	gathered, err := sendDetections(c, cfg.CollectiveTimeout, time.Since(t1), mine, &stats)
	if err != nil {
		return err
	}
	dets, err := wire.Merge(gathered, len(images))
	if err != nil {
		return collective(ExitInternal, "jobs: merge: %w", err)
	}
	stats.Seconds["gather"] = since(t2)
	sb, _ := json.Marshal(stats)
	allStats, err := mpi.AllgatherBytes(c, sb)
	if err != nil {
		return localErr(ExitMPI, "jobs: gather stats: %w", err)
	}
	var werr error
	if c.Rank() == 0 {
		rep := predictReport{Canopy: Version, Git: gitRevision(), MPI: c.Implementation(), Command: cfg.Command,
			Ranks: c.Size(), Images: len(images), Model: &model.info, Detector: det.Name()}
		for _, d := range dets {
			rep.Boxes += len(d)
		}
		for _, b := range allStats {
			var s rankStats
			if json.Unmarshal(b, &s) == nil {
				rep.PerRank = append(rep.PerRank, s)
			}
		}
		werr = writeAtomic(cfg.Out, "predictions.csv", func(w io.Writer) error {
			return writePredictions(w, images, dets, labels)
		})
		if werr == nil {
			werr = writeAtomic(cfg.Out, "report.json", func(w io.Writer) error {
				e := json.NewEncoder(w)
				e.SetIndent("", "  ")
				return e.Encode(rep)
			})
		}
		if werr == nil && cfg.Stdout != nil {
			fmt.Fprintf(cfg.Stdout, "%d detections on %d images: %s\n", rep.Boxes, len(images), filepath.Join(cfg.Out, "predictions.csv"))
		}
	}
	return finalStatus(c, werr, "predictions")
}
