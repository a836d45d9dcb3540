package tilerun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/crop"
	"github.com/canopy-hpc/canopy/infer/gdal"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/cropstage"
	"github.com/canopy-hpc/canopy/internal/detect"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/plan"
	"github.com/canopy-hpc/canopy/internal/testhook"
	"github.com/canopy-hpc/canopy/internal/wire"
	"github.com/canopy-hpc/canopy/mpi"
)

// The streaming of a tile run: the global window list (rasters in input
// order, each in DeepForest's order) is arithmetic (tileIndex); it is
// walked in rounds of at most roundWindows windows still to detect. In a
// round every rank detects its share, saving each batch in its part file;
// the round's detections are gathered; a raster whose windows are all in
// is merged and published by its owner (raster i: rank i mod ranks). So a
// rank holds one round's detections and the windows of the rasters not yet
// complete, whatever the number of rasters, and a raster's outputs are
// written as soon as its last window is in.

// tileIndex is the global window list as arithmetic.
type tileIndex struct {
	grids  []tile.Grid
	offset []int // offset[r]: raster r's first global window; offset[n]: all
}

func newTileIndex(rasters []tileRaster, s tile.Settings) (tileIndex, error) {
	x := tileIndex{grids: make([]tile.Grid, len(rasters)), offset: make([]int, len(rasters)+1)}
	for i, r := range rasters {
		g, err := tile.NewGrid(r.Width, r.Height, s)
		if err != nil {
			return x, fmt.Errorf("%s: %w", r.File, err)
		}
		x.grids[i] = g
		x.offset[i+1] = x.offset[i] + g.Len()
	}
	return x, nil
}

func (x tileIndex) total() int { return x.offset[len(x.offset)-1] }

// rasterOf is the raster of global window g.
func (x tileIndex) rasterOf(g int) int { return sort.SearchInts(x.offset[1:], g+1) }

// window is global window g: its raster and the window.
func (x tileIndex) window(g int) (int, tile.Window) {
	r := x.rasterOf(g)
	return r, x.grids[r].At(g - x.offset[r])
}

// rasterSet opens this rank's rasters when first needed and reads
// windows; a raster is closed once all its windows are detected.
type rasterSet struct {
	mu    sync.Mutex
	files []string
	open  map[int]*gdal.Raster
}

func (s *rasterSet) read(r int, w tile.Window) (imagefile.Image, error) {
	px, err := s.pixels(r, w)
	if err != nil {
		return imagefile.Image{}, err
	}
	return imagefile.FromPlanes(px.W, px.H, px.Pix)
}

// raster is raster r, opened on first use.
func (s *rasterSet) raster(r int) (*gdal.Raster, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ras, ok := s.open[r]
	if !ok {
		var err error
		if ras, err = gdal.Open(s.files[r]); err != nil {
			return nil, err
		}
		s.open[r] = ras
	}
	return ras, nil
}

// pixels reads window w of raster r as 8-bit R, G and B planes.
func (s *rasterSet) pixels(r int, w tile.Window) (gdal.RGB8, error) {
	ras, err := s.raster(r)
	if err != nil {
		return gdal.RGB8{}, err
	}
	return ras.Read(w.X, w.Y, w.W, w.H)
}

// empty reads window w of raster r as stored and says whether
// --skip-empty skips it (tile.EmptyWindow: all nodata, alpha 0, or one
// value); when not, img is the window as the detector takes it.
func (s *rasterSet) empty(r int, w tile.Window) (bool, imagefile.Image, error) {
	ras, err := s.raster(r)
	if err != nil {
		return false, imagefile.Image{}, err
	}
	px, err := ras.ReadSamples(w.X, w.Y, w.W, w.H)
	if err != nil {
		return false, imagefile.Image{}, err
	}
	in := ras.Info()
	nd := tile.NoData{Has: in.HasNoData, Value: in.NoData}
	var empty bool
	if px.Pix16 != nil {
		empty = tile.EmptyWindow(px.W, px.H, px.Pix16, px.Alpha, nd)
	} else {
		empty = tile.EmptyWindow(px.W, px.H, px.Pix8, px.Alpha, nd)
	}
	if empty {
		return true, imagefile.Image{}, nil
	}
	rgb := px.RGB8()
	img, err := imagefile.FromPlanes(rgb.W, rgb.H, rgb.Pix)
	return false, img, err
}

// closeRaster closes raster r if this rank opened it.
func (s *rasterSet) closeRaster(r int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ras, ok := s.open[r]; ok {
		ras.Close()
		delete(s.open, r)
	}
}

// closeDone closes the open rasters done says this rank has read for
// the last time.
func (s *rasterSet) closeDone(done func(r int) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for r, ras := range s.open {
		if done(r) {
			ras.Close()
			delete(s.open, r)
		}
	}
}

func (s *rasterSet) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for r, ras := range s.open {
		ras.Close()
		delete(s.open, r)
	}
}

// tileRun is one rank's state of the streaming.
type tileRun struct {
	c       mpi.Comm
	cfg     Config
	ix      tileIndex
	rasters []tileRaster
	labels  box.LabelMap
	crops   *cropstage.Set // --crop-model (nil: none)
	det     infer.Detector
	model   *modelsel.Model
	global  bool // whole global batches (the cuDNN path)
	rs      *rasterSet
	pw      *parts.Writer
	out     *outdir.Run // rank 0
	aside   bool        // a --force run set a previous run aside (every rank knows)
	stats   *collective.RankStats
	round   int           // windows per round
	slow    time.Duration // a test's delay per window (testhook.SlowWindow)

	left     []int // windows of raster r not detected yet (every rank)
	finished []bool
	nDone    int
	held     map[int]*heldRaster // rasters this rank owns, until merged
	resumed  map[int]bool        // windows from the part files
	cursor   int
	batches  int // detector calls of this rank (the interrupt hook counts them)
	rounds   int // rounds gathered
	detected int // windows detected by all ranks in this run
	todo     int // windows to detect in this run
	start    time.Time
	detect   time.Duration // this rank's detection time
	gather   time.Duration
	merge    time.Duration
	crop     time.Duration
}

func (t *tileRun) owner(r int) bool { return r%t.c.Size() == t.c.Rank() }

// place files gathered windows: each counts down its raster, and the
// raster's owner keeps the windows with detections.
func (t *tileRun) place(ims []wire.Image, touched map[int]bool) error {
	for _, im := range ims {
		if im.Index < 0 || im.Index >= t.ix.total() {
			return errkind.Collective(errkind.ExitInternal, "jobs: window %d of %d gathered", im.Index, t.ix.total())
		}
		r := t.ix.rasterOf(im.Index)
		if t.finished[r] {
			continue
		}
		if t.left[r]--; t.left[r] < 0 {
			return errkind.Collective(errkind.ExitInternal, "jobs: raster %d: a window came twice", r)
		}
		touched[r] = true
		if len(im.Dets) > 0 && t.owner(r) {
			h := t.held[r]
			if h == nil {
				h = &heldRaster{}
				t.held[r] = h
			}
			h.wins = append(h.wins, im)
		}
	}
	return nil
}

// nextRound is the next round's windows: the next roundWindows windows
// of unfinished rasters that the part files do not hold.
func (t *tileRun) nextRound() []int {
	var round []int
	for t.cursor < t.ix.total() && len(round) < t.round {
		r := t.ix.rasterOf(t.cursor)
		if t.finished[r] {
			t.cursor = t.ix.offset[r+1]
			continue
		}
		if !t.resumed[t.cursor] {
			round = append(round, t.cursor)
		}
		t.cursor++
	}
	return round
}

// input is the detector's input for global window g.
func (t *tileRun) input(g int) infer.Input {
	r, w := t.ix.window(g)
	name := fmt.Sprintf("%s window %d (%d,%d %dx%d)", t.rasters[r].Path, g-t.ix.offset[r], w.X, w.Y, w.W, w.H)
	return infer.Input{Index: g, Path: name, File: name, Pixels: func() (imagefile.Image, error) {
		time.Sleep(t.slow)
		return t.rs.read(r, w)
	}}
}

// share is this rank's windows of a round: contiguous blocks (GDAL's block
// cache serves the overlap), or on the cuDNN path whole global batches.
func (t *tileRun) share(round []int) ([]int, error) {
	var p plan.Plan
	var err error
	if t.global {
		p, err = t.model.Plan(round, nil, detect.BatchOrOne(t.cfg.BatchSize), t.c.Size())
	} else {
		p, err = plan.Blocks(len(round), t.c.Size())
	}
	if err != nil {
		return nil, errkind.Collective(errkind.ExitInternal, "jobs: %w", err)
	}
	mine := make([]int, len(p.Shards[t.c.Rank()]))
	for k, j := range p.Shards[t.c.Rank()] {
		mine[k] = round[j]
	}
	return mine, nil
}

// detectWindows runs the detector over this rank's windows, saving each
// batch in the part file; with --skip-empty each batch's windows are read
// first and the empty ones get no detections without the model.
func (t *tileRun) detectWindows(ctx context.Context, shard []int) ([]wire.Image, error) {
	batch := detect.BatchOrOne(t.cfg.BatchSize)
	if len(shard) > 0 {
		// A rank takes its windows in increasing order, round after
		// round: a raster that ends before this shard is never read
		// again by it, so its dataset (and its cached blocks) go now.
		first := shard[0]
		t.rs.closeDone(func(r int) bool { return t.ix.offset[r+1] <= first })
	}
	if !t.cfg.SkipEmpty {
		return t.detectInputs(ctx, shard, t.input)
	}
	var mine []wire.Image
	for start := 0; start < len(shard); start += batch {
		piece := shard[start:min(start+batch, len(shard))]
		var keep []int
		var skipped []wire.Image
		imgs := map[int]imagefile.Image{}
		for _, g := range piece {
			r, w := t.ix.window(g)
			empty, img, err := t.rs.empty(r, w)
			if err != nil {
				return mine, err
			}
			if empty {
				skipped = append(skipped, wire.Image{Index: g})
				continue
			}
			imgs[g] = img
			keep = append(keep, g)
		}
		if len(skipped) > 0 {
			if err := t.pw.Append(skipped, nil); err != nil {
				return mine, &errkind.Error{Code: errkind.ExitInternal, Err: err}
			}
			t.stats.Skipped += len(skipped)
			mine = append(mine, skipped...)
		}
		got, err := t.detectInputs(ctx, keep, func(g int) infer.Input {
			in := t.input(g)
			in.Pixels = func() (imagefile.Image, error) { return imgs[g], nil }
			return in
		})
		mine = append(mine, got...)
		if err != nil {
			return mine, err
		}
	}
	return mine, nil
}

// detectInputs runs the detector over windows (input makes each one's
// input), saving each batch in the part file.
func (t *tileRun) detectInputs(ctx context.Context, shard []int, input func(int) infer.Input) ([]wire.Image, error) {
	if len(shard) == 0 {
		return nil, nil
	}
	record := func(ims []wire.Image, _ []parts.Identity) error {
		if err := t.pw.Append(ims, nil); err != nil {
			return &errkind.Error{Code: errkind.ExitInternal, Err: err}
		}
		return nil
	}
	t0 := time.Now()
	mine, err := detect.Shard(ctx, t.det, detect.Options{BatchSize: detect.BatchOrOne(t.cfg.BatchSize), Input: input, Unit: "windows", Global: t.global, BatchBase: t.batches},
		nil, shard, t.c.Rank(), record)
	t.batches += len(detect.BatchBounds(shard, detect.BatchOrOne(t.cfg.BatchSize), t.global))
	t.detect += time.Since(t0)
	t.stats.Images += len(mine)
	for _, im := range mine {
		t.stats.Detections += len(im.Dets)
	}
	return mine, err
}

// dealt says whether a round's windows are dealt at run time (the
// shared counter): always but on the cuDNN path, whose global batches
// are fixed by window index (share), and where CANOPY_TILE_DEAL=static
// asks for the fixed blocks (the balance benchmark's "before").
func (t *tileRun) dealt() bool { return !t.global && !testhook.StaticDeal() }

// dealWindows detects chunks of the round taken from the shared counter
// until none is left: a rank that finishes early takes more. A chunk is
// one detector call (--batch-size windows), contiguous in the round, so
// neighbouring windows still share GDAL blocks.
func (t *tileRun) dealWindows(ctx context.Context, k mpi.Counter, round []int) ([]wire.Image, error) {
	chunk := detect.BatchOrOne(t.cfg.BatchSize)
	var mine []wire.Image
	for {
		start, err := k.FetchAdd(int64(chunk))
		if err != nil {
			return mine, errkind.Local(errkind.ExitMPI, "jobs: deal windows: %w", err)
		}
		if start >= int64(len(round)) {
			return mine, nil
		}
		got, err := t.detectWindows(ctx, round[start:min(int(start)+chunk, len(round))])
		mine = append(mine, got...)
		if err != nil {
			return mine, err
		}
	}
}

// run walks the rounds until every raster is published.
func (t *tileRun) run(ctx context.Context) error {
	t.start = time.Now()
	touched := map[int]bool{}
	for r := range t.rasters {
		if !t.finished[r] && t.left[r] == 0 {
			touched[r] = true // every window in the part files: merge it
		}
	}
	if err := t.flush(ctx, touched); err != nil {
		return err
	}
	for {
		round := t.nextRound()
		if len(round) == 0 {
			return nil
		}
		var counter mpi.Counter
		var mine []wire.Image
		var derr error
		if t.dealt() {
			var err error
			if counter, err = t.c.NewCounter(); err != nil {
				return errkind.Local(errkind.ExitMPI, "jobs: %w", err)
			}
			mine, derr = t.dealWindows(ctx, counter, round)
		} else {
			shard, err := t.share(round)
			if err != nil {
				return err
			}
			mine, derr = t.detectWindows(ctx, shard)
		}
		if derr != nil {
			return t.stopped(derr)
		}
		tg := time.Now()
		bufs, err := collective.SendDetections(t.c, t.cfg.CollectiveTimeout, t.detect, mine, t.stats)
		if err != nil {
			return err
		}
		if counter != nil {
			if err := counter.Free(); err != nil {
				return errkind.Local(errkind.ExitMPI, "jobs: %w", err)
			}
		}
		touched = map[int]bool{}
		for _, b := range bufs {
			ims, err := wire.Decode(b)
			if err != nil {
				return errkind.Collective(errkind.ExitInternal, "jobs: gathered detections: %w", err)
			}
			if err := t.place(ims, touched); err != nil {
				return err
			}
		}
		t.gather += time.Since(tg)
		t.detected += len(round)
		t.rounds++
		if err := t.flush(ctx, touched); err != nil {
			return err
		}
		if t.rounds == 1 {
			// every rank saved its share of a round: a --force run
			// commits (the previous run goes)
			if err := collective.AgreeErr(t.c, errkind.ExitInternal, t.out.Commit()); err != nil {
				return err
			}
		}
		t.progress()
	}
}

// stopped is the job's error for a detection that did not finish: a
// signal (exit 8 when a resume can continue), or the detector's error.
func (t *tileRun) stopped(derr error) error {
	cerr := t.pw.Close()
	t.pw = nil
	if errors.Is(derr, gdal.ErrRaster) {
		derr = &errkind.Error{Code: errkind.ExitInput, Err: derr}
	}
	cmd := "predict"
	if t.cfg.Eval != nil {
		cmd = "eval"
	}
	if !errors.Is(derr, errkind.ErrInterrupted) {
		if cerr != nil { // the part file is what --resume reads: not dropped
			return errkind.Join(detect.Err(derr, ""), errkind.Local(errkind.ExitInternal, "jobs: %s --tile: this rank's part file could not be saved: %w", cmd, cerr))
		}
		return detect.Err(derr, "")
	}
	if cerr != nil {
		return errkind.Local(errkind.ExitInternal, "jobs: %s --tile: interrupted by a signal, and this rank's part file could not be saved: %w", cmd, cerr)
	}
	if t.rounds == 0 && t.aside {
		return errkind.Local(errkind.ExitInternal, "jobs: %s --tile --force: interrupted by a signal before the first round was saved: the previous run in %s comes back at the next start; run again with --force", cmd, t.cfg.Out)
	}
	return errkind.Local(errkind.ExitResumable, "jobs: %s --tile: interrupted by a signal; the finished rasters and the detected windows are saved in %s: run the same command with --resume to continue (any rank count)", cmd, t.cfg.Out)
}

// flush merges and publishes the rasters of touched whose windows are all
// in (each by its owner), with the crop models' stage over them when
// given, then agrees on the outcome.
func (t *tileRun) flush(ctx context.Context, touched map[int]bool) error {
	tm := time.Now()
	var complete []int
	for r := range touched {
		if !t.finished[r] && t.left[r] == 0 {
			complete = append(complete, r)
		}
	}
	sort.Ints(complete)
	merged := make([][]box.Detection, len(complete))
	windowDets := make([]int, len(complete))
	for k, r := range complete {
		if !t.owner(r) {
			continue
		}
		h := t.held[r]
		if h == nil {
			h = &heldRaster{}
		}
		merged[k], windowDets[k] = mergeHeld(t.ix.grids[r], t.ix.offset[r], h, t.cfg.IoU)
		delete(t.held, r)
	}
	t.merge += time.Since(tm)
	var table *cropstage.Table
	if t.crops != nil && len(complete) > 0 {
		var err error
		if table, err = t.classify(ctx, complete, merged); err != nil {
			return err
		}
		if t.cfg.Eval == nil { // predict drops zero-size boxes, as DeepForest
			merged = table.DropZero(merged)
		}
	}
	var werr error
	for k, r := range complete {
		if !t.owner(r) || werr != nil {
			continue
		}
		var rows *cropstage.Table
		if table != nil {
			rows = &cropstage.Table{Set: table.Set, Rows: [][][]cropstage.Result{table.Rows[k]}}
		}
		werr = publishRaster(t.cfg.Out, r, t.rasters[r], merged[k], windowDets[k], rows, t.labels)
	}
	if err := collective.AgreeErr(t.c, errkind.ExitInternal, werr); err != nil {
		return err
	}
	for _, r := range complete {
		t.finished[r] = true
		t.nDone++
		t.rs.closeRaster(r)
	}
	return nil
}

// classify is the crop stage over the rasters completed in a round: the
// owners' merged rows are shared (every rank then holds them, as
// cropstage.Classify wants), their crops dealt to the ranks and gathered.
func (t *tileRun) classify(ctx context.Context, complete []int, merged [][]box.Detection) (*cropstage.Table, error) {
	tc := time.Now()
	defer func() { t.crop += time.Since(tc) }()
	var mine []wire.Image
	for k, r := range complete {
		if t.owner(r) {
			mine = append(mine, wire.Image{Index: k, Dets: merged[k]})
		}
	}
	buf, err := wire.Encode(nil, mine)
	if err != nil {
		return nil, errkind.Local(errkind.ExitInternal, "jobs: encode merged rows: %w", err)
	}
	all, err := mpi.AllgatherBytes(t.c, buf)
	if err != nil {
		return nil, errkind.Local(errkind.ExitMPI, "jobs: gather merged rows: %w", err)
	}
	for _, b := range all {
		ims, err := wire.Decode(b)
		if err != nil {
			return nil, errkind.Collective(errkind.ExitInternal, "jobs: gathered merged rows: %w", err)
		}
		for _, im := range ims {
			if im.Index < 0 || im.Index >= len(complete) {
				return nil, errkind.Collective(errkind.ExitInternal, "jobs: merged rows of raster %d of %d", im.Index, len(complete))
			}
			merged[im.Index] = im.Dets
		}
	}
	before := t.crops.Stats.Classified
	table, err := cropstage.Classify(ctx, t.c, t.crops, &roundCrops{rs: t.rs, rasters: t.rasters, ids: complete, ix: t.ix}, merged)
	// The completed rasters' windows are done with (the crop stage and
	// the detector never read them again).
	done := map[int]bool{}
	for _, r := range complete {
		done[r] = true
	}
	t.crops.DropWindows(func(g int) bool { return done[t.ix.rasterOf(g)] })
	t.crops.Stats.Classified += before // cropstage.Classify counts one call's
	return table, err
}

// roundCrops reads the crops of a round's completed rasters (cropstage.Classify's
// image k is raster ids[k]); on the GPU engine a crop is cut from a
// window of the raster the detector holds there (Windows).
type roundCrops struct {
	rs      *rasterSet
	rasters []tileRaster
	ids     []int
	ix      tileIndex
}

// HeldWindowBytes is how much of the device a GPU detector keeps of the
// windows it detected, for the crops cut from them (--crop-model on
// --device cuda): each window's 8-bit samples (3·patch² bytes: 480 KB at
// 400 pixels, so about 2,200 windows), oldest dropped first, each dropped
// once its raster's crops are done. 0 keeps none: every crop is read from
// the raster and uploaded (the path before; tests compare the two).
var HeldWindowBytes int64 = 1 << 30

// Windows are raster ids[k]'s windows that hold r whole
// (cropstage.Windowed): their global index and origin.
func (s *roundCrops) Windows(k int, r crop.Rect) []cropstage.Window {
	ras := s.ids[k]
	g := s.ix.grids[ras]
	var out []cropstage.Window
	for _, j := range g.Containing(r.X, r.Y, r.W, r.H) {
		w := g.At(j)
		out = append(out, cropstage.Window{Key: s.ix.offset[ras] + j, X: w.X, Y: w.Y})
	}
	return out
}

func (s *roundCrops) Open(k int) (int, int, error) {
	r := s.rasters[s.ids[k]]
	return r.Width, r.Height, nil
}

func (s *roundCrops) Read(k int, r crop.Rect) (imagefile.Image, error) {
	return (&rasterCrops{rs: s.rs, rasters: s.rasters}).Read(s.ids[k], r)
}

func (s *roundCrops) Release(int) {}

// progress is rank 0's line after a round: rasters published of all,
// windows detected, windows per second and the ETA of the whole job.
func (t *tileRun) progress() {
	w := t.cfg.Progress
	if w == nil || t.c.Rank() != 0 {
		return
	}
	tileProgressLine(w, t.nDone, len(t.rasters), t.detected, t.todo, time.Since(t.start))
}

func tileProgressLine(w io.Writer, done, rasters, detected, todo int, el time.Duration) {
	line := fmt.Sprintf("canopy: tile: %d/%d rasters, %d/%d windows, %.1f s", done, rasters, detected, todo, el.Seconds())
	if detected > 0 && el > 0 {
		rate := float64(detected) / el.Seconds()
		line += fmt.Sprintf(", %.2f windows/s", rate)
		if detected < todo {
			line += fmt.Sprintf(", ETA %s", (time.Duration(float64(todo-detected)/rate) * time.Second).Round(time.Second))
		}
	}
	fmt.Fprintln(w, line)
}
