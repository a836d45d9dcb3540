package jobs

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/replay"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/plan"
	"github.com/canopy-hpc/canopy/internal/wire"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/mpi"
)

// EvalConfig is the configuration of one `canopy eval` run. Every rank
// passes the same values.
type EvalConfig struct {
	CSV          string
	RootDir      string // default: the CSV's folder
	Predictions  string
	LabelDict    string
	Out          string
	Force        bool
	IoUThreshold float64
	Semantics    metrics.Semantics
	Families     metrics.Family // 0 means all
	ClassMetrics bool
	BatchSize    int
	Command      []string
	Stdout       io.Writer
}

// PerturbEnv is a test hook: the rank it names perturbs its metric digest,
// so the agreement check must fail with exit 6.
const PerturbEnv = "CANOPY_TEST_PERTURB_RANK"

// StopEnv is a test hook: the rank it names freezes itself with SIGSTOP
// before the gather, so the collective watchdog must fire on the others.
const StopEnv = "CANOPY_TEST_STOP_RANK"

func stopForTest(rank int) {
	if v, ok := os.LookupEnv(StopEnv); ok && v == strconv.Itoa(rank) {
		syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	}
}

// reportFiles are the files a run writes; any of them in --out marks a
// previous run.
var reportFiles = []string{"report.json", "predictions.csv", "results.csv"}

type rankStats struct {
	Rank       int                `json:"rank"`
	Host       string             `json:"host"`
	Images     int                `json:"images"`
	Detections int                `json:"detections"`
	BytesSent  int                `json:"bytes_sent"`
	Seconds    map[string]float64 `json:"seconds"`
}

// inputs is what rank 0 reads and broadcasts: the files' bytes.
type inputs struct {
	csv, preds, labels []byte
}

// Eval runs the eval job on this rank. It returns an *Error whose
// Collective flag says whether every rank returns the same error.
func Eval(ctx context.Context, c mpi.Comm, cfg EvalConfig) error {
	if cfg.BatchSize < 1 {
		cfg.BatchSize = 1
	}
	if cfg.RootDir == "" {
		cfg.RootDir = filepath.Dir(cfg.CSV)
	}
	stats := rankStats{Rank: c.Rank(), Host: c.Host(), Seconds: map[string]float64{}}
	t0 := time.Now()

	// 1. Read once, agree everywhere.
	in, err := loadInputs(c, cfg)
	if err != nil {
		return err
	}
	truth, err := dataset.ParseTruth(cfg.CSV, in.csv)
	if err != nil {
		return &Error{Code: ExitInput, Collective: true, Err: err}
	}
	predRows, err := dataset.ParsePredictions(cfg.Predictions, in.preds)
	if err != nil {
		return &Error{Code: ExitInput, Collective: true, Err: err}
	}
	labels, err := chooseLabels(cfg, in, truth, predRows)
	if err != nil {
		return &Error{Code: ExitInput, Collective: true, Err: err}
	}
	images, err := truth.Resolve(cfg.CSV, labels)
	if err != nil {
		return &Error{Code: ExitInput, Collective: true, Err: err}
	}
	byPath, ignored, err := joinPredictions(cfg.Predictions, truth, predRows, labels)
	if err != nil {
		return &Error{Code: ExitInput, Collective: true, Err: err}
	}
	stats.Seconds["load"] = since(t0)

	// 2. Plan: a pure function of (dataset, ranks).
	costs := make([]int64, len(images))
	for i, im := range images {
		costs[i] = 1 + int64(len(truth.Images[i].Rows)) + int64(len(byPath[im.Path]))
	}
	p, err := plan.Balance(costs, c.Size())
	if err != nil {
		return collective(ExitInternal, "jobs: %w", err)
	}
	shard := p.Shards[c.Rank()]
	stats.Images = len(shard)

	// 3. Detect this rank's shard.
	t1 := time.Now()
	det := replay.New(byPath)
	det.InjectFailure(c.Rank())
	defer det.Close()
	mine, err := detectShard(ctx, det, cfg, images, shard)
	if err != nil {
		return localErr(ExitModel, "jobs: detect: %w", err)
	}
	for _, im := range mine {
		stats.Detections += len(im.Dets)
	}
	stats.Seconds["detect"] = since(t1)

	// 4-5. Encode, gather, merge.
	stopForTest(c.Rank())
	t2 := time.Now()
	buf, err := wire.Encode(nil, mine)
	if err != nil {
		return localErr(ExitInternal, "jobs: encode: %w", err)
	}
	stats.BytesSent = len(buf)
	parts, err := mpi.AllgatherBytes(c, buf)
	if err != nil {
		return localErr(ExitMPI, "jobs: gather detections: %w", err)
	}
	dets, err := wire.Merge(parts, len(images))
	if err != nil {
		return collective(ExitInternal, "jobs: merge: %w", err)
	}
	stats.Seconds["gather"] = since(t2)

	// 6. Score.
	t3 := time.Now()
	fam := cfg.Families
	if fam == 0 {
		fam = metrics.All
	}
	res, err := metrics.Compute(metrics.Input{Images: images, Dets: dets, Labels: labels},
		metrics.Options{IoUThreshold: cfg.IoUThreshold, Semantics: cfg.Semantics}, fam, cfg.ClassMetrics)
	if err != nil {
		return collective(ExitInternal, "jobs: %w", err)
	}
	metricJSON := MetricsJSON(res.Values)
	stats.Seconds["metrics"] = since(t3)

	// 7. Agree.
	if err := agree(c, metricJSON); err != nil {
		return err
	}

	// 8. Report: gather per-rank stats; rank 0 writes; all learn the outcome.
	sb, _ := json.Marshal(stats)
	allStats, err := mpi.AllgatherBytes(c, sb)
	if err != nil {
		return localErr(ExitMPI, "jobs: gather stats: %w", err)
	}
	var werr error
	if c.Rank() == 0 {
		rep := report{
			metrics: metricJSON,
			run:     buildRun(c, cfg, in, labels, allStats, len(images), ignored),
		}
		werr = writeOutputs(cfg, rep, images, dets, labels, res)
		if werr == nil && cfg.Stdout != nil {
			printTable(cfg.Stdout, res.Values)
			fmt.Fprintf(cfg.Stdout, "report: %s\n", filepath.Join(cfg.Out, "report.json"))
		}
	}
	code := int64(0)
	if werr != nil {
		code = ExitInternal
	}
	st, err := c.AllreduceInt64([]int64{code}, mpi.Max)
	if err != nil {
		return localErr(ExitMPI, "jobs: final status: %w", err)
	}
	if st[0] != 0 {
		if werr == nil {
			werr = errors.New("rank 0 could not write the report")
		}
		return &Error{Code: int(st[0]), Collective: true, Err: fmt.Errorf("jobs: write report: %w", werr)}
	}
	return nil
}

func since(t time.Time) float64 { return time.Since(t).Seconds() }

// loadInputs: rank 0 checks the output folder and reads the inputs, then
// broadcasts either the bytes or its error, so every rank fails alike.
func loadInputs(c mpi.Comm, cfg EvalConfig) (inputs, error) {
	var pkt []byte
	if c.Rank() == 0 {
		pkt = packInputs(cfg)
	}
	pkt, err := c.Bcast(pkt, 0)
	if err != nil {
		return inputs{}, localErr(ExitMPI, "jobs: broadcast inputs: %w", err)
	}
	return unpackInputs(pkt)
}

func packInputs(cfg EvalConfig) []byte {
	fail := func(code int, err error) []byte {
		return append([]byte{byte(code)}, err.Error()...)
	}
	if err := checkOut(cfg.Out, cfg.Force); err != nil {
		return fail(ExitUsage, err)
	}
	pkt := []byte{0}
	for _, f := range []string{cfg.CSV, cfg.Predictions, cfg.LabelDict} {
		var data []byte
		if f != "" {
			var err error
			data, err = os.ReadFile(f)
			if err != nil {
				return fail(ExitInput, fmt.Errorf("jobs: %w", err))
			}
		}
		pkt = binary.LittleEndian.AppendUint64(pkt, uint64(len(data)))
		pkt = append(pkt, data...)
	}
	return pkt
}

func unpackInputs(pkt []byte) (inputs, error) {
	if len(pkt) == 0 {
		return inputs{}, collective(ExitInternal, "jobs: empty input broadcast")
	}
	if pkt[0] != 0 {
		return inputs{}, &Error{Code: int(pkt[0]), Collective: true, Err: errors.New(string(pkt[1:]))}
	}
	pkt = pkt[1:]
	var out [3][]byte
	for i := range out {
		if len(pkt) < 8 {
			return inputs{}, collective(ExitInternal, "jobs: truncated input broadcast")
		}
		n := binary.LittleEndian.Uint64(pkt)
		pkt = pkt[8:]
		if uint64(len(pkt)) < n {
			return inputs{}, collective(ExitInternal, "jobs: truncated input broadcast")
		}
		out[i], pkt = pkt[:n:n], pkt[n:]
	}
	return inputs{csv: out[0], preds: out[1], labels: out[2]}, nil
}

// checkOut refuses an output folder that holds a previous run, unless
// force, and creates it.
func checkOut(dir string, force bool) error {
	if dir == "" {
		return errors.New("jobs: --out is empty")
	}
	if !force {
		for _, f := range reportFiles {
			if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
				return fmt.Errorf("jobs: output folder %s holds a previous run (%s); choose another --out or pass --force", dir, f)
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("jobs: output folder: %w", err)
	}
	return nil
}

// chooseLabels: --label-dict when given, else the sorted unique labels of
// the truth rows and the predictions that join the truth.
func chooseLabels(cfg EvalConfig, in inputs, truth *dataset.Truth, preds []dataset.Row) (box.LabelMap, error) {
	if cfg.LabelDict != "" {
		return dataset.ParseLabelDict(cfg.LabelDict, in.labels)
	}
	var names []string
	for _, im := range truth.Images {
		names = append(names, im.Labels...)
	}
	for _, r := range preds {
		if _, ok := truth.Index(r.Path); ok {
			names = append(names, r.Label)
		}
	}
	return box.SortedLabelMap(names), nil
}

func joinPredictions(name string, truth *dataset.Truth, rows []dataset.Row, labels box.LabelMap) (map[string][]box.Detection, int, error) {
	byPath := make(map[string][]box.Detection)
	ignored := 0
	for _, r := range rows {
		if _, ok := truth.Index(r.Path); !ok {
			ignored++
			continue
		}
		id, ok := labels.ID(r.Label)
		if !ok {
			return nil, 0, fmt.Errorf("jobs: %s:%d: label %q is not in the label map: %w", name, r.Line, r.Label, dataset.ErrInput)
		}
		byPath[r.Path] = append(byPath[r.Path], box.Detection{Box: r.Box, Label: id, Score: r.Score})
	}
	return byPath, ignored, nil
}

func detectShard(ctx context.Context, d infer.Detector, cfg EvalConfig, images []box.Image, shard []int) ([]wire.Image, error) {
	out := make([]wire.Image, 0, len(shard))
	for start := 0; start < len(shard); start += cfg.BatchSize {
		end := min(start+cfg.BatchSize, len(shard))
		batch := make([]infer.Input, 0, end-start)
		for _, i := range shard[start:end] {
			file := images[i].Path
			if !filepath.IsAbs(file) {
				file = filepath.Join(cfg.RootDir, file)
			}
			batch = append(batch, infer.Input{Index: i, Path: images[i].Path, File: file})
		}
		got, err := d.Detect(ctx, batch)
		if err != nil {
			return nil, err
		}
		if len(got) != len(batch) {
			return nil, fmt.Errorf("detector %s returned %d results for %d images: %w", d.Name(), len(got), len(batch), infer.ErrModel)
		}
		for k, in := range batch {
			out = append(out, wire.Image{Index: in.Index, Dets: got[k]})
		}
	}
	return out, nil
}

// agree compares a 64-bit digest of the metric bytes across ranks.
func agree(c mpi.Comm, metricJSON []byte) error {
	h := fnv.New64a()
	h.Write(metricJSON)
	if v, ok := os.LookupEnv(PerturbEnv); ok && v == strconv.Itoa(c.Rank()) {
		h.Write([]byte{1})
	}
	d := h.Sum64()
	lo, err := c.AllreduceUint64([]uint64{d}, mpi.Min)
	if err != nil {
		return localErr(ExitMPI, "jobs: agreement check: %w", err)
	}
	hi, err := c.AllreduceUint64([]uint64{d}, mpi.Max)
	if err != nil {
		return localErr(ExitMPI, "jobs: agreement check: %w", err)
	}
	if lo[0] == hi[0] {
		return nil
	}
	all, err := c.AllgatherInt64(int64(d))
	if err != nil {
		return localErr(ExitMPI, "jobs: agreement check: %w", err)
	}
	var differ []int
	for r, v := range all {
		if v != all[0] {
			differ = append(differ, r)
		}
	}
	return collective(ExitDisagree, "jobs: ranks disagree on the metrics: ranks %v differ from rank 0", differ)
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
