package jobs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/mpi"
)

// DefaultMaxImagePixels is the pre-flight pixel cap: PIL's Image.open
// raises DecompressionBombError above 2 × Image.MAX_IMAGE_PIXELS
// (MAX_IMAGE_PIXELS = 1024·1024·1024 // 4 // 3 = 89,478,485), so canopy
// refuses exactly the images DeepForest's PIL refuses. --max-image-pixels
// changes it (0: no cap, as MAX_IMAGE_PIXELS = None).
const DefaultMaxImagePixels = 2 * 89478485

// Bytes per pixel of the memory estimate (measured with VmHWM on this
// project's ResNet-18 and ResNet-50 models, rounded up: docs/reliability.md).
const (
	// decodeBytesPerPixel: a decoded image (the Go image, 4 B/px, and its
	// float32 RGB planes, 12 B/px) and the normalised plane (4 B/px).
	decodeBytesPerPixel = 20
	// networkBytesPerPixel: the feature maps, im2col and Winograd buffers
	// per pixel of the padded network input (measured 150-290 B with
	// ResNet-50-FPN256 at 800² and 1600², with the garbage collector's
	// slack).
	networkBytesPerPixel = 400
)

// memoryEstimate is the memory a rank needs to run an image of w×h pixels
// whose padded network input is pw×ph: what the rank holds now (the
// weights, the runtime) plus copies decoded images (the one being run and
// the next one decoded meanwhile; a GPU decodes whole batches) plus the
// network's maps.
func memoryEstimate(resident int64, w, h, pw, ph, copies int) int64 {
	return resident + int64(copies)*decodeBytesPerPixel*int64(w)*int64(h) + networkBytesPerPixel*int64(pw)*int64(ph)
}

// preflight checks, on every rank, that its images open as supported
// images, hold at most the pixel cap, and fit the rank's memory, before any
// inference: a --root-dir missing on one node, a decompression bomb or an
// image too large for the node is one clear error (exit 3), not a half-run
// or a Go runtime crash.
func preflight(c mpi.Comm, root string, paths []string, outside bool, lm *loadedModel, mc ModelConfig, batch int) error {
	var err error
	largest, lw, lh := int64(-1), 0, 0
	var lfile string
	conf := newConfiner(root)
	for _, p := range paths {
		if !outside {
			if err = conf.check(p); err != nil {
				err = fmt.Errorf("jobs: pre-flight: %w", err)
				break
			}
		}
		f := imageFile(root, p)
		w, h, e := imagefile.Check(f)
		if e != nil {
			err = fmt.Errorf("jobs: pre-flight: %w", e)
			break
		}
		if px := int64(w) * int64(h); mc.MaxImagePixels > 0 && px > mc.MaxImagePixels {
			err = fmt.Errorf("jobs: pre-flight: %s: %dx%d is %d pixels, over the limit of %d (PIL's decompression-bomb limit; --max-image-pixels raises it): %w",
				f, w, h, px, mc.MaxImagePixels, imagefile.ErrImage)
			break
		}
		if lm == nil {
			continue // no model (a pre-flight of the paths alone): no estimate
		}
		pw, ph := lm.m.PaddedSize(w, h)
		if e := memoryEstimate(0, w, h, pw, ph, 1); e > largest {
			largest, lw, lh, lfile = e, w, h, f
		}
	}
	if err == nil && lfile != "" {
		err = checkMemory(lfile, lw, lh, lm, mc, batch, c.LocalSize())
	}
	return agreeErr(c, ExitInput, err)
}

// checkMemory compares the estimate for the rank's largest image with the
// rank's share of the node's memory.
func checkMemory(file string, w, h int, lm *loadedModel, mc ModelConfig, batch, localRanks int) error {
	budget, from, ok := rankBudget(mc, localRanks)
	if !ok {
		return nil // unknown: no check rather than a false refusal
	}
	copies := 2
	if lm.place.Kind == "cuda" {
		copies = 2 * batch
	}
	pw, ph := lm.m.PaddedSize(w, h)
	resident := residentBytes()
	if lm.place.Kind != "cuda" {
		resident += lm.m.CPUFilterBytes() // made by the detector, after this check
	}
	need := memoryEstimate(resident, w, h, pw, ph, copies)
	if need <= budget {
		return nil
	}
	return &Error{Code: ExitInput, Err: fmt.Errorf("jobs: pre-flight: %s: a %dx%d image (network input %dx%d) needs about %s on this rank, which may use %s (%s); "+
		"run fewer ranks per node, lower --batch-size on a GPU, shrink the image, or set --rank-memory: %w",
		file, w, h, pw, ph, gib(need), gib(budget), from, imagefile.ErrImage)}
}

// rankBudget is the memory one rank may use: --rank-memory, else the
// node's memory (or its cgroup limit) over the ranks of the node; ok is
// false when it cannot be known. from says where it came from.
func rankBudget(mc ModelConfig, localRanks int) (budget int64, from string, ok bool) {
	if mc.RankMemory > 0 {
		return mc.RankMemory, "--rank-memory", true
	}
	node, src, err := nodeMemory()
	if err != nil {
		return 0, "", false
	}
	return node / int64(max(localRanks, 1)), fmt.Sprintf("%s over %d rank(s) of this node", src, max(localRanks, 1)), true
}

// checkMetricsMemory is a collective, before the metrics allocate: every
// rank computes every metric, so each needs what the matching will hold
// (the boxes and their overlapping pairs, counted) and what the COCO stage
// will hold (estimated from the class, image and box counts) on top of
// what it holds now. Over the rank's budget: exit 3 with the estimate and
// what to do.
func checkMetricsMemory(c mpi.Comm, in metrics.Input, fam metrics.Family, mc ModelConfig) error {
	budget, from, ok := rankBudget(mc, c.LocalSize())
	if !ok {
		return agreeErr(c, ExitInput, nil)
	}
	var err error
	resident := residentBytes()
	var match int64
	if fam&(metrics.Recall|metrics.IoUMean) != 0 {
		// The matching holds the boxes and the overlapping pairs only;
		// counting them stops as soon as the budget is passed.
		cost := metrics.MatchMemory(in, max(1, budget-resident))
		match = cost.Bytes
		if need := resident + cost.Bytes; need > budget {
			pairs := fmt.Sprintf("%d overlapping pairs", cost.Pairs)
			if cost.Partial {
				pairs = "more than " + pairs
			}
			err = &Error{Code: ExitInput, Err: fmt.Errorf("jobs: matching %d boxes over %d images (%s) needs about %s on this rank, which may use %s (%s); "+
				"split the tiles into smaller images, run fewer ranks per node, or set --rank-memory: %w",
				cost.Boxes, cost.Images, pairs, gib(need), gib(budget), from, dataset.ErrInput)}
		}
	}
	if err == nil && fam&metrics.COCOmAP != 0 {
		cost := metrics.COCOMemory(in)
		if need := resident + match + cost.Bytes; need > budget {
			err = &Error{Code: ExitInput, Err: fmt.Errorf("jobs: the COCO metrics of %d classes over %d images and %d boxes need about %s on this rank, which may use %s (%s); "+
				"leave them out with --metrics recall,iou (and --class-metrics off), run fewer ranks per node, or set --rank-memory: %w",
				cost.Classes, cost.Images, cost.Boxes, gib(need), gib(budget), from, dataset.ErrInput)}
		}
	}
	return agreeErr(c, ExitInput, err)
}

func gib(b int64) string {
	if b < 1<<30 {
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
}

// nodeMemory is the memory of this node canopy's ranks may use: MemTotal,
// or the cgroup's limit (Slurm's, a container's) when lower.
func nodeMemory() (int64, string, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, "", err
	}
	var total int64
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				total = kb * 1024
			}
		}
	}
	if total <= 0 {
		return 0, "", errors.New("no MemTotal in /proc/meminfo")
	}
	src := "MemTotal"
	cg, _ := os.ReadFile("/proc/self/cgroup")
	if n, p := cgroupMemoryLimit("/sys/fs/cgroup", cg); n > 0 && n < total {
		total, src = n, "the cgroup limit "+p
	}
	return total, src, nil
}

// cgroupMemoryLimit is the lowest memory limit on the way from this
// process's own cgroup (as /proc/self/cgroup names it, under the hierarchy
// mounted at sys) up to the root, and the file that sets it; 0 if none.
// Slurm puts a job's limit on the job's or the step's cgroup, not on the
// root a container sees, so the whole path is read: cgroup v2's memory.max
// and v1's memory controller's memory.limit_in_bytes.
func cgroupMemoryLimit(sys string, procCgroup []byte) (int64, string) {
	var best int64
	var from string
	look := func(dir, rel, file string) {
		rel = filepath.Clean("/" + rel)
		for {
			p := filepath.Join(dir, rel, file)
			if b, err := os.ReadFile(p); err == nil {
				if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && (best == 0 || n < best) {
					best, from = n, p
				}
			}
			if rel == "/" {
				return
			}
			rel = filepath.Dir(rel)
		}
	}
	seen := false
	for _, l := range strings.Split(string(procCgroup), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		seen = true
		switch {
		case f[0] == "0" && f[1] == "":
			look(sys, f[2], "memory.max")
		case slices.Contains(strings.Split(f[1], ","), "memory"):
			look(filepath.Join(sys, "memory"), f[2], "memory.limit_in_bytes")
		}
	}
	if !seen { // no /proc/self/cgroup: the roots alone
		look(sys, "/", "memory.max")
		look(filepath.Join(sys, "memory"), "/", "memory.limit_in_bytes")
	}
	return best, from
}

// residentBytes is this process's resident memory (VmRSS), 0 if unknown.
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}

// parseBytes reads a size such as 512M, 2GiB or 1500000000 (K, M, G, T in
// powers of 1024, an optional iB or B).
func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	u := strings.ToUpper(t)
	u = strings.TrimSuffix(strings.TrimSuffix(u, "IB"), "B")
	mult := int64(1)
	if n := len(u); n > 0 {
		switch u[n-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			u = u[:n-1]
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(u), 64)
	if err != nil || !(v >= 0) || v*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("%q is not a size such as 512M or 4GiB", s)
	}
	return int64(v * float64(mult)), nil
}

// Bytes a round holds per window at most: a window's detections (up to
// maxWindowDets, as this rank's result, the gathered buffer and the
// decoded copy) and its bookkeeping.
const (
	maxWindowDets   = 300 // torchvision's detections_per_img ceiling
	roundWindowCost = maxWindowDets * 3 * 56
)

// tileMemory fixes the round size and checks, on every rank, that a
// round, the largest window and the rasters' bookkeeping fit the rank's
// memory before anything is allocated for them: over the budget is exit
// 3, naming the raster and the need.
func tileMemory(c mpi.Comm, cfg TileConfig, model *loadedModel, t *tileRun) error {
	t.round = cfg.RoundWindows
	if t.round <= 0 {
		// 32 detector calls per rank: a round's end (the gather, the
		// slowest chunk) costs a few per cent, and the first rasters
		// are published after 32·ranks·batch windows
		t.round = max(64, 32*c.Size()*cfg.BatchSize)
	}
	var err error
	largest, lr := 0, -1
	for i, g := range t.ix.grids {
		if w := g.At(0); w.W*w.H > largest {
			largest, lr = w.W*w.H, i
		}
	}
	budget, from, ok := rankBudget(cfg.Model, c.LocalSize())
	if ok && cfg.RoundWindows <= 0 {
		t.round = int(max(int64(c.Size()*cfg.BatchSize), min(int64(t.round), budget/8/roundWindowCost)))
	}
	if t.global && cfg.RoundWindows <= 0 { // whole global batches per round
		t.round = (t.round + cfg.BatchSize - 1) / cfg.BatchSize * cfg.BatchSize
	}
	if ok {
		book := int64(len(t.rasters))*512 + int64(len(t.resumed))*64
		need := residentBytes() + book + int64(t.round)*roundWindowCost
		if need > budget {
			err = &Error{Code: ExitInput, Err: fmt.Errorf("jobs: the job's %d rasters (%d windows; the largest, %s, %d) need about %s on this rank for their bookkeeping and a round of %d windows, which may use %s (%s): "+
				"run fewer ranks per node, give fewer rasters, a smaller --round-windows, or set --rank-memory: %w",
				len(t.rasters), t.ix.total(), t.rasters[lr].File, t.ix.grids[lr].Len(), gib(need), t.round, gib(budget), from, dataset.ErrInput)}
		}
	}
	if err == nil && lr >= 0 {
		w := t.ix.grids[lr].At(0)
		err = checkMemory(t.rasters[lr].File, w.W, w.H, model, cfg.Model, cfg.BatchSize, c.LocalSize())
	}
	return agreeErr(c, ExitInput, err)
}
