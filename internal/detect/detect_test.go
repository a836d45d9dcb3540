package detect

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/wire"
)

func TestBatchBounds(t *testing.T) {
	for _, c := range []struct {
		shard  []int
		n      int
		global bool
		want   string
	}{
		{[]int{0, 1, 2, 3, 4}, 2, false, "[[0 2] [2 4] [4 5]]"},
		{[]int{7}, 4, false, "[[0 1]]"},
		{nil, 3, false, "[]"},
		// global batches of 4: 2,3 | 4,5,7 | 8 — never two in one call
		{[]int{2, 3, 4, 5, 7, 8}, 4, true, "[[0 2] [2 5] [5 6]]"},
	} {
		if got := fmt.Sprint(BatchBounds(c.shard, c.n, c.global)); got != c.want {
			t.Errorf("BatchBounds(%v, %d, %v) = %s, want %s", c.shard, c.n, c.global, got, c.want)
		}
	}
}

// fake gives image i one detection of score i/100 and records the batches
// it was called with; fail makes the call with that image fail.
type fake struct {
	calls  [][]int
	fail   map[int]error
	cancel func() // called after the second call
	short  bool   // return one result too few
}

func (f *fake) Detect(ctx context.Context, batch []infer.Input) ([][]box.Detection, error) {
	var idx []int
	out := make([][]box.Detection, 0, len(batch))
	for _, in := range batch {
		idx = append(idx, in.Index)
		if err := f.fail[in.Index]; err != nil {
			return nil, err
		}
		if !strings.HasSuffix(in.File, "/root/"+in.Path) {
			return nil, fmt.Errorf("image %d: file %q not under the root", in.Index, in.File)
		}
		out = append(out, []box.Detection{{Score: float64(in.Index) / 100}})
	}
	f.calls = append(f.calls, idx)
	if len(f.calls) == 2 && f.cancel != nil {
		f.cancel()
	}
	if f.short {
		out = out[1:]
	}
	return out, nil
}
func (f *fake) Name() string { return "fake" }
func (f *fake) Close() error { return nil }

func images(n int) []box.Image {
	ims := make([]box.Image, n)
	for i := range ims {
		ims[i].Path = fmt.Sprintf("img%d.png", i)
	}
	return ims
}

// The shard runs in batches, in shard order; each finished batch is
// recorded once, and the progress line counts the shard.
func TestShard(t *testing.T) {
	f := &fake{}
	var recorded []int
	var prog bytes.Buffer
	o := Options{RootDir: "/data/root", BatchSize: 2, Progress: &prog}
	out, err := Shard(context.Background(), f, o, images(10), []int{1, 4, 5, 8, 9}, 0, func(ims []wire.Image, ids []parts.Identity) error {
		for _, im := range ims {
			recorded = append(recorded, im.Index)
		}
		if ids != nil {
			t.Errorf("identities %v without Identify", ids)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(f.calls) != "[[1 4] [5 8] [9]]" || fmt.Sprint(recorded) != "[1 4 5 8 9]" {
		t.Fatalf("calls %v, recorded %v", f.calls, recorded)
	}
	for k, im := range out {
		if im.Index != []int{1, 4, 5, 8, 9}[k] || len(im.Dets) != 1 || im.Dets[0].Score != float64(im.Index)/100 {
			t.Fatalf("out[%d] = %+v", k, im)
		}
	}
	if !strings.HasPrefix(prog.String(), "canopy: rank 0: 5/5 images, ") || strings.Count(prog.String(), "\n") != 1 {
		t.Fatalf("progress %q", prog.String())
	}
}

// A cancelled context stops the shard between batches: the batches done
// are returned and recorded, and the error is ErrInterrupted.
func TestShardInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &fake{cancel: cancel}
	n := 0
	out, err := Shard(ctx, f, Options{RootDir: "/root", BatchSize: 1}, images(5), []int{0, 1, 2, 3, 4}, 0, func(ims []wire.Image, _ []parts.Identity) error {
		n += len(ims)
		return nil
	})
	if !errors.Is(err, errkind.ErrInterrupted) || len(out) != 2 || n != 2 || len(f.calls) != 2 {
		t.Fatalf("err %v, %d out, %d recorded, %d calls; want ErrInterrupted after 2", err, len(out), n, len(f.calls))
	}
}

// A bad image is an input error (exit 3); a detector that returns too few
// results is a model error; a failed record stops the shard.
func TestShardErrors(t *testing.T) {
	noop := func([]wire.Image, []parts.Identity) error { return nil }
	run := func(f *fake, record func([]wire.Image, []parts.Identity) error) error {
		_, err := Shard(context.Background(), f, Options{RootDir: "/root", BatchSize: 2}, images(4), []int{0, 1, 2, 3}, 0, record)
		return err
	}
	bad := fmt.Errorf("img2.png: %w", imagefile.ErrImage)
	if err := run(&fake{fail: map[int]error{2: bad}}, noop); errkind.Code(err) != errkind.ExitInput || !errors.Is(err, imagefile.ErrImage) {
		t.Errorf("a bad image: %v (exit %d), want exit 3", err, errkind.Code(err))
	}
	if err := run(&fake{short: true}, noop); !errors.Is(err, infer.ErrModel) || !strings.Contains(err.Error(), "1 results for 2 images") {
		t.Errorf("too few results: %v, want a model error", err)
	}
	disk := errors.New("disk full")
	if err := run(&fake{}, func([]wire.Image, []parts.Identity) error { return disk }); !errors.Is(err, disk) {
		t.Errorf("a failed record: %v", err)
	}
	// a losses run needs a detector that computes them
	_, err := Shard(context.Background(), &fake{}, Options{BatchSize: 1, Losses: true}, images(1), []int{0}, 0, noop)
	if !errors.Is(err, infer.ErrModel) {
		t.Errorf("losses from a detector without them: %v", err)
	}
}

// Not on a terminal: a line at most every interval, and always the last.
func TestProgressLines(t *testing.T) {
	var b bytes.Buffer
	if NewProgress(&b, 0) != nil || NewProgress(nil, 5) != nil {
		t.Fatal("a progress for nothing to count")
	}
	p := NewProgress(&b, 4)
	p.Unit = "windows"
	for range 4 {
		p.Add(1)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "canopy: rank 0: 4/4 windows, ") {
		t.Fatalf("lines %q, want only the last", lines)
	}
	p = NewProgress(&b, 4)
	p.interval = 0
	b.Reset()
	p.Add(1)
	if !strings.HasPrefix(b.String(), "canopy: rank 0: 1/4 images, ") || !strings.Contains(b.String(), " s/image, ETA ") {
		t.Fatalf("a line with interval 0: %q", b.String())
	}
	if !slices.Equal([]int{BatchOrOne(0), BatchOrOne(3)}, []int{1, 3}) {
		t.Fatal("BatchOrOne")
	}
}
