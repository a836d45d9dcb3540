package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/shardmetrics"
	"github.com/canopy-hpc/canopy/internal/wire"
	"github.com/canopy-hpc/canopy/mpi"
)

// The pipeline eval and predict share: detect this rank's shard in
// batches (detectShard), then encode, gather and merge every rank's
// detections (gatherMerge), with the per-rank statistics both report.

// batchOrOne is a job config's batch size: the CLI passes --batch-size,
// checked there (batchSize); a config built in code that leaves it 0 gets
// one image per detector call.
func batchOrOne(n int) int { return max(n, 1) }

// shardOptions are what detectShard needs of a job's settings.
type shardOptions struct {
	rootDir   string    // image paths are relative to it
	batchSize int       // images per detector call, at least 1
	progress  io.Writer // progress lines, nil for none
	losses    bool      // a model run: each image's validation losses too
	// global: batches are global batches (the cuDNN path): images
	// kN…kN+N−1 of the input order, N = batchSize, never mixed in one
	// detector call (a rank takes whole batches: plan.BalanceBatches).
	global bool
	// input, when set, makes item i's detector input (predict --tile: a
	// raster window read through GDAL) instead of the image file; unit
	// names the items in the progress line (default "images").
	input func(i int) infer.Input
	unit  string
	// identify: record each image file's identity (size, mtime, sha256)
	// beside its detections, so --resume can check the file is the same.
	identify bool
	// batchBase: detector calls this rank made before this shard (the
	// interrupt hook counts them all; a tile run calls once per round).
	batchBase int
}

// batchBounds cuts a shard into detector calls: batchSize images at a
// time, or, global, the runs of one global batch (index / batchSize).
func batchBounds(shard []int, batchSize int, global bool) [][2]int {
	var out [][2]int
	for start := 0; start < len(shard); {
		end := min(start+batchSize, len(shard))
		if global {
			end = start + 1
			for end < len(shard) && shard[end]/batchSize == shard[start]/batchSize {
				end++
			}
		}
		out = append(out, [2]int{start, end})
		start = end
	}
	return out
}

// gatherMerge encodes this rank's detections, gathers every rank's (plus
// prev, images computed by an earlier attempt, from the part files) and
// places them at their global image index, checking that each of the n
// images comes exactly once: the result is the same on every rank. detect
// is the rank's detection time (sendDetections' watchdog); the time spent
// here is stats.Seconds["gather"].
func gatherMerge(c mpi.Comm, timeout, detect time.Duration, mine, prev []wire.Image, n int, stats *rankStats) ([][]box.Detection, []*box.Loss, error) {
	t := time.Now()
	gathered, err := sendDetections(c, timeout, detect, mine, stats)
	if err != nil {
		return nil, nil, err
	}
	// Resumed records go in as two buffers, those with losses and those
	// without (part files of an older canopy): a buffer holds one kind, and
	// an image without losses makes the loss rows null (lossValues).
	var with, without []wire.Image
	for _, im := range prev {
		if im.Loss != nil {
			with = append(with, im)
		} else {
			without = append(without, im)
		}
	}
	for _, set := range [][]wire.Image{with, without} {
		if len(set) == 0 {
			continue
		}
		pb, err := wire.Encode(nil, set)
		if err != nil {
			return nil, nil, collective(ExitInternal, "jobs: %w", err)
		}
		gathered = append(gathered, pb)
	}
	dets, losses, err := wire.Merge(gathered, n)
	if err != nil {
		return nil, nil, collective(ExitInternal, "jobs: merge: %w", err)
	}
	stats.Seconds["gather"] = since(t)
	return dets, losses, nil
}

type rankStats struct {
	Rank int    `json:"rank"`
	Host string `json:"host"`
	// LocalRank and LocalSize: the rank's place among the ranks of its
	// node (MPI_COMM_TYPE_SHARED), which also picks its GPU.
	LocalRank int `json:"local_rank"`
	LocalSize int `json:"local_size"`
	// SGEMM names the matrix kernels (float32 rounding differs between
	// kernel sets, so ranks on different CPUs may differ in the last bits).
	SGEMM      string `json:"sgemm,omitempty"`
	Images     int    `json:"images"`
	Detections int    `json:"detections"`
	// Skipped: a tile run's windows --skip-empty gave no detections
	// without the model (not in Images).
	Skipped   int                `json:"skipped_windows,omitempty"`
	BytesSent int                `json:"bytes_sent"`
	Seconds   map[string]float64 `json:"seconds"`
	// MetricsImages and MetricsBytesSent: the images this rank matched and
	// the bytes of match records it sent (eval, eval --tile).
	MetricsImages    int               `json:"metrics_images,omitempty"`
	MetricsBytesSent int               `json:"metrics_bytes_sent,omitempty"`
	MetricsCPU       *shardmetrics.CPU `json:"metrics_cpu_seconds,omitempty"`
}

// sendDetections encodes this rank's detections and gathers every rank's.
// It is the first collective after detection: ranks that finished their
// shard wait there for the slowest, which may take hours on a CPU. The plan
// gives ranks equal work, so a rank waits up to the watchdog's limit plus
// twice its own detection time before it calls the others hung (ranks
// other than 0 one limit more, so that rank 0, which knows who is missing,
// speaks first); then the limit is restored.
func sendDetections(c mpi.Comm, timeout, detect time.Duration, mine []wire.Image, stats *rankStats) ([][]byte, error) {
	buf, err := wire.Encode(nil, mine)
	if err != nil {
		return nil, localErr(ExitInternal, "jobs: encode: %w", err)
	}
	stats.BytesSent = len(buf)
	if timeout > 0 {
		limit := timeout + 2*detect // ranks but 0 wait twice this (cmpi)
		if err := setTimeout(c, limit); err != nil {
			return nil, err
		}
	}
	g, err := mpi.AllgatherBytes(c, buf)
	if err == nil && timeout > 0 {
		err = setTimeout(c, timeout)
	}
	if err != nil {
		return nil, localErr(ExitMPI, "jobs: gather detections: %w", err)
	}
	return g, nil
}

// detectShard runs the detector over the shard in batches, hands each
// finished batch to record (the part file) and stops between batches when
// ctx is cancelled (SIGTERM, SIGUSR1, SIGINT), returning errInterrupted.
// With o.losses, each image's validation losses against its
// truth come with its detections.
func detectShard(ctx context.Context, d infer.Detector, o shardOptions, images []box.Image, shard []int, rank int,
	record func([]wire.Image, []parts.Identity) error) ([]wire.Image, error) {
	out := make([]wire.Image, 0, len(shard))
	var ld infer.LossDetector
	if o.losses {
		var ok bool
		if ld, ok = d.(infer.LossDetector); !ok {
			return nil, fmt.Errorf("detector %s computes no losses: %w", d.Name(), infer.ErrModel)
		}
	}
	stopAfter := interruptAfter(rank)
	prog := newProgress(o.progress, len(shard))
	if prog != nil && o.unit != "" {
		prog.unit = o.unit
	}
	bounds := batchBounds(shard, o.batchSize, o.global)
	batchAt := func(b int) []infer.Input {
		start, end := bounds[b][0], bounds[b][1]
		batch := make([]infer.Input, 0, end-start)
		for _, i := range shard[start:end] {
			if o.input != nil {
				batch = append(batch, o.input(i))
				continue
			}
			batch = append(batch, infer.Input{Index: i, Path: images[i].Path, File: imageFile(o.rootDir, images[i].Path)})
		}
		return batch
	}
	pf, _ := d.(infer.Prefetcher)
	var next []infer.Input
	for batches := 0; batches < len(bounds); batches++ {
		if o.batchBase+batches == stopAfter {
			interruptSelf(rank)
		}
		if ctx.Err() != nil {
			return out, errInterrupted
		}
		batch := next
		if batch == nil {
			batch = batchAt(batches)
		}
		var ids []parts.Identity
		if o.identify {
			ids = make([]parts.Identity, len(batch))
			for k, in := range batch {
				var err error
				if ids[k], err = identify(in.File); err != nil {
					return nil, &Error{Code: ExitInput, Err: err}
				}
			}
		}
		next = nil
		if n := batches + 1; pf != nil && n < len(bounds) {
			next = batchAt(n)
			pf.Prefetch(next)
		}
		var got [][]box.Detection
		var losses []box.Loss
		var err error
		if ld != nil {
			truth := make([][]box.Truth, len(batch))
			for k, in := range batch {
				truth[k] = images[in.Index].Truth
			}
			got, losses, err = ld.DetectLoss(ctx, batch, truth)
			if err == nil && len(losses) != len(batch) {
				err = fmt.Errorf("detector %s returned %d losses for %d images: %w", d.Name(), len(losses), len(batch), infer.ErrModel)
			}
		} else {
			got, err = d.Detect(ctx, batch)
		}
		if err != nil && ctx.Err() != nil {
			return out, errInterrupted // the batch in flight is dropped
		}
		if err != nil {
			if errors.Is(err, imagefile.ErrImage) {
				return nil, &Error{Code: ExitInput, Err: err}
			}
			return nil, err
		}
		if len(got) != len(batch) {
			return nil, fmt.Errorf("detector %s returned %d results for %d images: %w", d.Name(), len(got), len(batch), infer.ErrModel)
		}
		n := len(out)
		for k, in := range batch {
			im := wire.Image{Index: in.Index, Dets: got[k]}
			if losses != nil {
				im.Loss = &losses[k]
			}
			out = append(out, im)
		}
		if err := record(out[n:], ids); err != nil {
			return nil, err
		}
		prog.add(len(batch))
	}
	return out, nil
}

// writeReport ends a job: it gathers every rank's statistics (the
// report's per_rank, in rank order; a record that does not decode is left
// out), rank 0 writes the outputs with them, and every rank learns whether
// that worked (finalStatus; what names the outputs in its message).
func writeReport(c mpi.Comm, stats rankStats, what string, write func(allStats []rankStats) error) error {
	sb, _ := json.Marshal(stats)
	all, err := mpi.AllgatherBytes(c, sb)
	if err != nil {
		return localErr(ExitMPI, "jobs: gather stats: %w", err)
	}
	var werr error
	if c.Rank() == 0 {
		decoded := make([]rankStats, 0, len(all))
		for _, b := range all {
			var s rankStats
			if json.Unmarshal(b, &s) == nil {
				decoded = append(decoded, s)
			}
		}
		werr = write(decoded)
	}
	return finalStatus(c, werr, what)
}

// identify is the identity a part record keeps of an image file.
func identify(file string) (parts.Identity, error) {
	size, mtime, sum, err := imagefile.Identify(file)
	return parts.Identity{Size: size, MtimeNS: mtime, SHA256: sum}, err
}

// imageFile resolves a CSV image_path against the root folder.
func imageFile(root, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(root, p)
}

func since(t time.Time) float64 { return time.Since(t).Seconds() }

// bcastFields broadcasts rank 0's input packet (packFields after a zero
// status byte, or a non-zero exit code and its error text) and returns its
// fields on every rank: rank 0's error, the same on every rank, or at least
// min fields. Eval, predict and predict --tile read their inputs this way.
func bcastFields(c mpi.Comm, pkt []byte, min int) ([][]byte, error) {
	pkt, err := c.Bcast(pkt, 0)
	if err != nil {
		return nil, localErr(ExitMPI, "jobs: broadcast inputs: %w", err)
	}
	return unpackPacket(pkt, min)
}

// unpackPacket is bcastFields' reading of the packet.
func unpackPacket(pkt []byte, min int) ([][]byte, error) {
	if len(pkt) == 0 {
		return nil, collective(ExitInternal, "jobs: empty input broadcast")
	}
	if pkt[0] != 0 {
		return nil, &Error{Code: int(pkt[0]), Collective: true, Err: errors.New(string(pkt[1:]))}
	}
	f, err := unpackFields(pkt[1:])
	if err != nil || len(f) < min {
		return nil, collective(ExitInternal, "jobs: malformed input broadcast")
	}
	return f, nil
}
