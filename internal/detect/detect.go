// Package detect runs a rank's shard of images (or windows) through the
// detector in batches (Shard): the batch cuts, global batches of the cuDNN
// path, part records of finished images, the interrupt check between
// batches, and rank 0's progress lines (Progress). The gathers that follow
// are internal/collective's.
package detect

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/internal/confine"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/testhook"
	"github.com/canopy-hpc/canopy/internal/wire"
)

// BatchOrOne is a job config's batch size: the CLI passes --batch-size,
// checked there (batchSize); a config built in code that leaves it 0 gets
// one image per detector call.
func BatchOrOne(n int) int { return max(n, 1) }

// Options are what Shard needs of a job's settings.
type Options struct {
	RootDir   string    // image paths are relative to it
	BatchSize int       // images per detector call, at least 1
	Progress  io.Writer // progress lines, nil for none
	Losses    bool      // a model run: each image's validation losses too
	// global: batches are global batches (the cuDNN path): images
	// kN…kN+N−1 of the input order, N = batchSize, never mixed in one
	// detector call (a rank takes whole batches: plan.BalanceBatches).
	Global bool
	// input, when set, makes item i's detector input (predict --tile: a
	// raster window read through GDAL) instead of the image file; unit
	// names the items in the progress line (default "images").
	Input func(i int) infer.Input
	Unit  string
	// identify: record each image file's identity (size, mtime, sha256)
	// beside its detections, so --resume can check the file is the same.
	Identify bool
	// batchBase: detector calls this rank made before this shard (the
	// interrupt hook counts them all; a tile run calls once per round).
	BatchBase int
}

// BatchBounds cuts a shard into detector calls: batchSize images at a
// time, or, global, the runs of one global batch (index / batchSize).
func BatchBounds(shard []int, batchSize int, global bool) [][2]int {
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

// Shard runs the detector over the shard in batches, hands each
// finished batch to record (the part file) and stops between batches when
// ctx is cancelled (SIGTERM, SIGUSR1, SIGINT), returning errkind.ErrInterrupted.
// With o.losses, each image's validation losses against its
// truth come with its detections.
func Shard(ctx context.Context, d infer.Detector, o Options, images []box.Image, shard []int, rank int,
	record func([]wire.Image, []parts.Identity) error) ([]wire.Image, error) {
	out := make([]wire.Image, 0, len(shard))
	var ld infer.LossDetector
	if o.Losses {
		var ok bool
		if ld, ok = d.(infer.LossDetector); !ok {
			return nil, fmt.Errorf("detector %s computes no losses: %w", d.Name(), infer.ErrModel)
		}
	}
	stopAfter := testhook.InterruptAfter(rank)
	prog := NewProgress(o.Progress, len(shard))
	if prog != nil && o.Unit != "" {
		prog.Unit = o.Unit
	}
	bounds := BatchBounds(shard, o.BatchSize, o.Global)
	batchAt := func(b int) []infer.Input {
		start, end := bounds[b][0], bounds[b][1]
		batch := make([]infer.Input, 0, end-start)
		for _, i := range shard[start:end] {
			if o.Input != nil {
				batch = append(batch, o.Input(i))
				continue
			}
			batch = append(batch, infer.Input{Index: i, Path: images[i].Path, File: confine.ImageFile(o.RootDir, images[i].Path)})
		}
		return batch
	}
	pf, _ := d.(infer.Prefetcher)
	var next []infer.Input
	for batches := 0; batches < len(bounds); batches++ {
		if o.BatchBase+batches == stopAfter {
			testhook.InterruptSelf(rank)
		}
		if ctx.Err() != nil {
			return out, errkind.ErrInterrupted
		}
		batch := next
		if batch == nil {
			batch = batchAt(batches)
		}
		var ids []parts.Identity
		if o.Identify {
			ids = make([]parts.Identity, len(batch))
			for k, in := range batch {
				var err error
				if ids[k], err = Identify(in.File); err != nil {
					return nil, &errkind.Error{Code: errkind.ExitInput, Err: err}
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
			return out, errkind.ErrInterrupted // the batch in flight is dropped
		}
		if err != nil {
			if errors.Is(err, imagefile.ErrImage) {
				return nil, &errkind.Error{Code: errkind.ExitInput, Err: err}
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
		prog.Add(len(batch))
	}
	return out, nil
}

// Identify is the identity a part record keeps of an image file.
func Identify(file string) (parts.Identity, error) {
	size, mtime, sum, err := imagefile.Identify(file)
	return parts.Identity{Size: size, MtimeNS: mtime, SHA256: sum}, err
}
