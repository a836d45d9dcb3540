package imagesrun

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/confine"
	"github.com/canopy-hpc/canopy/internal/detect"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/wire"
	"github.com/canopy-hpc/canopy/mpi"
)

// Resumption is what Resumed checks of a run, once every rank knows its
// images.
type Resumption struct {
	Out     string // the output folder, where the probe is read back
	RootDir string // the image paths' folder
	Saved   Saved
	Images  []box.Image // the run's images, in order
	// Identify: the images are read (a model run), so every image taken
	// from the part files is checked against its recorded identity. A
	// replay reads no image: nothing to check.
	Identify bool
}

// Resumed is a collective of a run over whole images: the probe is read
// back (outdir.CheckShared), the part files decoded, and the images they
// hold checked against their recorded identity (checkResumedImages).
func Resumed(c mpi.Comm, r Resumption) (map[int]parts.Done, parts.Stats, error) {
	if err := outdir.CheckShared(c, r.Out, r.Saved.Probe); err != nil {
		return nil, parts.Stats{}, err
	}
	done, pst, err := parts.Decode(r.Saved.Parts, len(r.Images))
	if err != nil {
		return nil, pst, errkind.Collective(errkind.ExitInput, "jobs: --resume: %w", err)
	}
	return done, pst, checkResumedImages(c, r.RootDir, r.Images, done, r.Identify)
}

// checkResumedImages is a collective: for a model run, every image taken
// from the part files is compared with the identity its record keeps
// (size, modification time, sha256), the checks spread over the ranks. An
// image that changed, or a record that keeps no identity (a part file of a
// canopy before identities), refuses the resume: exit 2, naming the image
// and what changed. A replay never reads the images: nothing to check.
func checkResumedImages(c mpi.Comm, rootDir string, images []box.Image, done map[int]parts.Done, model bool) error {
	var err error
	if model {
		idx := make([]int, 0, len(done))
		for i := range done {
			idx = append(idx, i)
		}
		sort.Ints(idx)
		for k := c.Rank(); k < len(idx) && err == nil; k += c.Size() {
			i := idx[k]
			err = checkResumedImage(rootDir, images[i].Path, done[i].Ident)
		}
	}
	if err != nil {
		err = errkind.Usage("jobs: --resume refused, %w; the finished images would not be the ones this run reads: start again with --force (or another --out)", err)
	}
	return collective.AgreeErr(c, errkind.ExitUsage, err)
}

func checkResumedImage(rootDir, p string, rec *parts.Identity) error {
	if rec == nil {
		return fmt.Errorf("the part files keep no identity for image %q (written by an older canopy), so it cannot be checked", p)
	}
	cur, err := detect.Identify(confine.ImageFile(rootDir, p))
	if err != nil {
		return fmt.Errorf("image %q of the run to resume: %w", p, err)
	}
	var what []string
	if cur.Size != rec.Size {
		what = append(what, fmt.Sprintf("size %d bytes then, %d now", rec.Size, cur.Size))
	}
	if cur.MtimeNS != rec.MtimeNS {
		what = append(what, fmt.Sprintf("modified %s then, %s now", time.Unix(0, rec.MtimeNS).UTC().Format(time.RFC3339Nano), time.Unix(0, cur.MtimeNS).UTC().Format(time.RFC3339Nano)))
	}
	if cur.SHA256 != rec.SHA256 {
		what = append(what, fmt.Sprintf("sha256 %x then, %x now", rec.SHA256[:8], cur.SHA256[:8]))
	}
	if len(what) > 0 {
		return fmt.Errorf("image %q changed since it was detected: %s", p, strings.Join(what, ", "))
	}
	return nil
}

// SavedImages are the images done holds, in image order (n images).
func SavedImages(done map[int]parts.Done, n int) []wire.Image {
	prev := make([]wire.Image, 0, len(done))
	for i := 0; i < n; i++ {
		if d, ok := done[i]; ok {
			prev = append(prev, d.Image)
		}
	}
	return prev
}
