package imagesrun

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/detect"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/runkind"
	"github.com/canopy-hpc/canopy/internal/wire"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// wantCode fails t unless err carries code and its message holds every
// one of want.
func wantCode(t *testing.T, what string, err error, code int, want ...string) {
	t.Helper()
	if err == nil || errkind.Code(err) != code {
		t.Fatalf("%s: %v (exit %d), want exit %d", what, err, errkind.Code(err), code)
	}
	for _, s := range want {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: %q lacks %q", what, err, s)
		}
	}
}

// TestOpenNewAndResume: a new run writes its manifest and a probe; a
// --resume with the same manifest reads the part files and numbers the
// next attempt; a --resume whose inputs differ, or into another kind's
// folder, or where no run is, is refused with exit 2 naming why.
func TestOpenNewAndResume(t *testing.T) {
	dir := t.TempDir()
	cur := EvalRun{CSV: []byte("x"), RootDir: dir}.Manifest()
	folder := Folder{Dir: dir}
	_, _, err := Open(Folder{Dir: dir, Resume: true}, cur)
	wantCode(t, "resume of nothing", err, errkind.ExitUsage, "no run to resume")

	o, saved, err := Open(folder, cur)
	if err != nil {
		t.Fatal(err)
	}
	if saved.Probe == "" || saved.Attempt != 0 || saved.Parts != nil {
		t.Errorf("a new run's saved run: %+v", saved)
	}
	if b, err := os.ReadFile(filepath.Join(dir, outdir.ManifestFile)); err != nil || runkind.Of(b) != runkind.Eval {
		t.Fatalf("the new run's manifest: %q, %v", b, err)
	}
	rec, err := OpenRecorder(o, dir, saved, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Record([]wire.Image{{Index: 1}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := rec.Close(nil); err != nil {
		t.Fatal(err)
	}
	o.Finish(nil)

	folder.Resume = true
	o, saved, err = Open(folder, cur)
	if err != nil {
		t.Fatal(err)
	}
	o.Finish(nil)
	if saved.Attempt != 1 || len(saved.Parts) != 1 {
		t.Errorf("resumed: attempt %d, %d part file(s); want 1, 1", saved.Attempt, len(saved.Parts))
	}
	other := EvalRun{CSV: []byte("y"), RootDir: dir}.Manifest()
	_, _, err = Open(folder, other)
	wantCode(t, "other inputs", err, errkind.ExitUsage, "the inputs differ", "csv sha256")
	pred := PredictRun{RootDir: dir}.Manifest()
	_, _, err = Open(folder, pred)
	wantCode(t, "another kind", err, errkind.ExitUsage, "holds "+runkind.Describe(runkind.Eval))

	// the folder is free again after each refusal
	if o, err := outdir.Open(dir, output.Names); err != nil {
		t.Fatalf("a refused Open kept the folder: %v", err)
	} else {
		o.Finish(nil)
	}
}

// TestOpenRefusesPreviousRun: a new run over a published one is refused
// without --force; with it, the previous run is set aside, and a run
// interrupted before it saved anything puts it back and says so (Finish).
func TestOpenRefusesPreviousRun(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, output.ReportJSON)
	if err := os.WriteFile(report, []byte("previous"), 0o644); err != nil {
		t.Fatal(err)
	}
	cur := EvalRun{CSV: []byte("x"), RootDir: dir}.Manifest()
	_, _, err := Open(Folder{Dir: dir}, cur)
	wantCode(t, "no --force", err, errkind.ExitUsage, "holds a previous run")

	o, _, err := Open(Folder{Dir: dir, Force: true}, cur)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(report); !os.IsNotExist(err) {
		t.Fatalf("--force left the previous report in place: %v", err)
	}
	ferr := error(&errkind.Error{Code: errkind.ExitResumable, Collective: true, Err: errkind.ErrInterrupted})
	Finish(o, dir, &ferr)
	wantCode(t, "interrupted --force run", ferr, errkind.ExitResumable, "the previous run in "+dir+" is back")
	if !errors.Is(ferr, errkind.ErrInterrupted) {
		t.Errorf("Finish lost the interruption: %v", ferr)
	}
	if b, err := os.ReadFile(report); err != nil || string(b) != "previous" {
		t.Errorf("the previous report: %q, %v", b, err)
	}

	// another rank (no hold on the folder) keeps its error as it was
	kept := error(errkind.ErrInterrupted)
	Finish(nil, dir, &kept)
	if kept != errkind.ErrInterrupted {
		t.Errorf("Finish without a hold changed the error to %v", kept)
	}
}

// TestSavedPacket: a saved run survives its broadcast fields after the
// packet's own; fields too few or an attempt not 8 bytes are a malformed
// broadcast (exit 1 on every rank).
func TestSavedPacket(t *testing.T) {
	s := Saved{Probe: "nonce", Attempt: 3, Parts: []parts.File{{Name: "part 0", Data: []byte("a")}, {Name: "part 1", Data: []byte("bc")}}}
	f := PackSaved([][]byte{[]byte("head")}, s)
	if string(f[0]) != "head" {
		t.Fatalf("PackSaved changed the packet's own fields: %q", f)
	}
	back, err := UnpackSaved(f[1:])
	if err != nil || !reflect.DeepEqual(back, s) {
		t.Fatalf("round trip: %+v, %v; want %+v", back, err, s)
	}
	for _, bad := range [][][]byte{nil, {[]byte("p")}, {[]byte("p"), []byte("1234567")}} {
		_, err := UnpackSaved(bad)
		var e *errkind.Error
		if !errors.As(err, &e) || e.Code != errkind.ExitInternal || !e.Collective {
			t.Errorf("UnpackSaved(%q): %v, want a collective exit 1", bad, err)
		}
	}
}

// TestRecorderCreateFails: a part file that cannot be created is a local
// error of canopy's own files, exit 1.
func TestRecorderCreateFails(t *testing.T) {
	old := CreateParts
	defer func() { CreateParts = old }()
	CreateParts = func(out, run string, attempt, rank int, every time.Duration) (*parts.Writer, error) {
		return nil, errors.New("no space left on device")
	}
	_, err := OpenRecorder(nil, t.TempDir(), Saved{}, 1)
	var e *errkind.Error
	if !errors.As(err, &e) || e.Code != errkind.ExitInternal || e.Collective || !strings.Contains(err.Error(), "no space left") {
		t.Errorf("OpenRecorder: %v, want a local exit 1", err)
	}
}

// TestRecorderCloseKeepsDetectorCode: a part file whose close fails
// after the detector failed keeps the detector's error and its code (a
// model error, exit 4, as detect.Err gives an error that carries none),
// with the close's error joined; alone, the close's error is exit 1.
func TestRecorderCloseKeepsDetectorCode(t *testing.T) {
	closed := func() *Recorder {
		dir := t.TempDir()
		o, saved, err := Open(Folder{Dir: dir}, EvalRun{CSV: []byte("x"), RootDir: dir}.Manifest())
		if err != nil {
			t.Fatal(err)
		}
		o.Finish(nil)
		rec, err := OpenRecorder(nil, dir, saved, 1)
		if err != nil {
			t.Fatal(err)
		}
		rec.pw.Close() // the recorder's own close now fails (file already closed)
		return rec
	}
	err := detect.Err(closed().Close(errors.New("forward failed")), "")
	wantCode(t, "a detector error, then a failed close", err, errkind.ExitModel, "forward failed", "already closed")
	if !errors.Is(err, os.ErrClosed) {
		t.Errorf("the close's cause is lost from %v", err)
	}
	err = detect.Err(closed().Close(nil), "")
	wantCode(t, "a failed close alone", err, errkind.ExitInternal, "already closed")
}

// TestSavedImages keeps image order, whatever the map's.
func TestSavedImages(t *testing.T) {
	done := map[int]parts.Done{4: {Image: wire.Image{Index: 4}}, 0: {Image: wire.Image{Index: 0}}, 2: {Image: wire.Image{Index: 2}}, 5: {Image: wire.Image{Index: 5}}}
	var got []int
	for _, im := range SavedImages(done, 5) {
		got = append(got, im.Index)
	}
	if !reflect.DeepEqual(got, []int{0, 2, 4}) {
		t.Errorf("SavedImages: %v, want [0 2 4] (index 5 is past the 5 images)", got)
	}
}

// TestCheckResumedImage names what changed in an image since its record:
// the size, the modification time, the content with both kept; and a
// record with no identity.
func TestCheckResumedImage(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "a.png")
	if err := os.WriteFile(p, []byte("pixels"), 0o644); err != nil {
		t.Fatal(err)
	}
	rec, err := detect.Identify(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkResumedImage(root, "a.png", &rec); err != nil {
		t.Fatalf("unchanged: %v", err)
	}
	if err := checkResumedImage(root, "a.png", nil); err == nil || !strings.Contains(err.Error(), "keep no identity") {
		t.Errorf("no identity: %v", err)
	}
	mtime := time.Unix(0, rec.MtimeNS)
	for _, c := range []struct {
		data string
		when time.Time
		want []string
	}{
		{"PIXELS", mtime, []string{"sha256 "}},
		{"pixels", mtime.Add(time.Second), []string{"modified "}},
		{"pixels!", mtime, []string{"size 6 bytes then, 7 now", "sha256 "}},
	} {
		if err := os.WriteFile(p, []byte(c.data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, c.when, c.when); err != nil {
			t.Fatal(err)
		}
		err := checkResumedImage(root, "a.png", &rec)
		if err == nil || !strings.Contains(err.Error(), `image "a.png" changed since it was detected`) {
			t.Fatalf("%q at %v: %v", c.data, c.when, err)
		}
		for _, s := range c.want {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%q at %v: %q lacks %q", c.data, c.when, err, s)
			}
		}
	}
	os.Remove(p)
	if err := checkResumedImage(root, "a.png", &rec); err == nil || !strings.Contains(err.Error(), "of the run to resume") {
		t.Errorf("a missing image: %v", err)
	}
}

// TestResumed over 3 ranks: the part files of a run are decoded and every
// saved image is checked, wherever the rank that checks it; one changed
// image refuses the resume on every rank (exit 2); a replay checks none.
func TestResumed(t *testing.T) {
	dir := t.TempDir()
	var images []box.Image
	var ids []parts.Identity
	var ims []wire.Image
	for i := 0; i < 5; i++ {
		name := fmt.Sprintf("im%d.png", i)
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		id, err := detect.Identify(p)
		if err != nil {
			t.Fatal(err)
		}
		images = append(images, box.Image{Path: name})
		ids = append(ids, id)
		ims = append(ims, wire.Image{Index: i})
	}
	cur := PredictRun{Paths: []string{"x"}, RootDir: dir}.Manifest()
	o, saved, err := Open(Folder{Dir: dir}, cur)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := OpenRecorder(o, dir, saved, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Record(ims[:4], ids[:4]); err != nil { // image 4 not done
		t.Fatal(err)
	}
	if err := rec.Close(nil); err != nil {
		t.Fatal(err)
	}
	o.Finish(nil)

	resume := func(identify bool) []error {
		o, saved, err := Open(Folder{Dir: dir, Resume: true}, cur)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Finish(nil)
		return local.Run(3, func(c mpi.Comm) error {
			done, _, err := Resumed(c, Resumption{Out: dir, RootDir: dir, Saved: saved, Images: images, Identify: identify})
			if err == nil && len(done) != 4 {
				return fmt.Errorf("rank %d: %d images done, want 4", c.Rank(), len(done))
			}
			return err
		})
	}
	for r, err := range resume(true) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	// image 3 is rank 0's second check (images 0..3 dealt over 3 ranks)
	if err := os.WriteFile(filepath.Join(dir, "im3.png"), []byte("IM3.PNG"), 0o644); err != nil {
		t.Fatal(err)
	}
	for r, err := range resume(true) {
		wantCode(t, fmt.Sprintf("rank %d, a changed image", r), err, errkind.ExitUsage, `--resume refused, image "im3.png" changed`)
	}
	for r, err := range resume(false) {
		if err != nil {
			t.Errorf("rank %d, a replay: %v", r, err)
		}
	}
}
