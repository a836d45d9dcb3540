// Package parts is canopy's preemption-safe record of finished images:
// every rank appends the detections of each finished batch to its own part
// file under OUT/parts/, as length-prefixed wire-format records (each
// carrying its own checksum), and syncs them at a bounded interval. A
// resumed run reads every part file and skips the images found there; a
// record cut short by a crash is detected and dropped, so at most the
// records in flight are lost.
package parts

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/canopy-hpc/canopy/internal/wire"
)

// Dir is the folder of part files inside the output folder.
const Dir = "parts"

// Writer appends records to one part file. Each record reaches the
// operating system in one write as soon as it is appended, so a killed
// process loses nothing it appended; fsync, which protects against losing
// the machine, runs at most every interval.
type Writer struct {
	f        *os.File
	every    time.Duration
	lastSync time.Time
	buf      []byte
}

// RunFile, inside the parts folder, names the run that owns the folder.
// A rank opens its part file only in a folder its own run owns: a --force
// run that fails puts the previous run's folder back under the same name,
// and a rank that reached Create a moment later must not add records to it.
const RunFile = ".canopy-run"

// Prepare makes OUT/parts (if missing) the folder of run: rank 0 calls it
// before any rank calls Create with the same run.
func Prepare(out, run string) error {
	dir := filepath.Join(out, Dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("parts: %w", err)
	}
	tmp := filepath.Join(dir, RunFile+".tmp")
	if err := os.WriteFile(tmp, []byte(run), 0o644); err != nil {
		return fmt.Errorf("parts: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, RunFile)); err != nil {
		return fmt.Errorf("parts: %w", err)
	}
	return nil
}

// ErrNotOwner is returned by Create when OUT/parts belongs to another run.
var ErrNotOwner = errors.New("parts: the parts folder belongs to another run (the run was set aside or replaced)")

// Create opens OUT/parts/part-<attempt>-<rank>.part of run (Prepare) for
// appending; every is the longest time between fsyncs. The folder is
// opened once and both the run file and the part file are opened through
// it, so the part file lands in the folder whose run file was checked even
// if the folder is renamed meanwhile.
func Create(out, run string, attempt, rank int, every time.Duration) (*Writer, error) {
	dir := filepath.Join(out, Dir)
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("parts: %s: %w", dir, err)
	}
	defer unix.Close(dfd)
	owner, err := readAt(dfd, RunFile)
	switch {
	case errors.Is(err, unix.ENOENT) || err == nil && owner != run:
		return nil, fmt.Errorf("%w: %s", ErrNotOwner, dir)
	case err != nil:
		return nil, fmt.Errorf("parts: %s: %w", filepath.Join(dir, RunFile), err)
	}
	name := fmt.Sprintf("part-%03d-%05d.part", attempt, rank)
	fd, err := unix.Openat(dfd, name, unix.O_CREAT|unix.O_WRONLY|unix.O_APPEND|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("parts: %s: %w", filepath.Join(dir, name), err)
	}
	return &Writer{f: os.NewFile(uintptr(fd), filepath.Join(dir, name)), every: every, lastSync: time.Now()}, nil
}

// readAt reads a small file relative to the folder dfd.
func readAt(dfd int, name string) (string, error) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 256))
	return string(b), err
}

// Append writes one record holding images and syncs when the interval has
// passed.
func (w *Writer) Append(images []wire.Image) error {
	var err error
	w.buf, err = wire.Encode(append(w.buf[:0], make([]byte, 8)...), images)
	if err != nil {
		return fmt.Errorf("parts: %w", err)
	}
	binary.LittleEndian.PutUint64(w.buf, uint64(len(w.buf)-8))
	if _, err := w.f.Write(w.buf); err != nil {
		return fmt.Errorf("parts: %w", err)
	}
	if time.Since(w.lastSync) >= w.every {
		return w.Sync()
	}
	return nil
}

// Sync fsyncs the file.
func (w *Writer) Sync() error {
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("parts: %w", err)
	}
	w.lastSync = time.Now()
	return nil
}

// Close syncs and closes the file.
func (w *Writer) Close() error {
	err := w.Sync()
	if cerr := w.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("parts: %w", cerr)
	}
	return err
}

// File is one part file's bytes, as rank 0 reads and broadcasts them.
type File struct {
	Name string
	Data []byte
}

// ReadAll reads every part file of out, in name order.
func ReadAll(out string) ([]File, error) {
	names, err := filepath.Glob(filepath.Join(out, Dir, "*.part"))
	if err != nil {
		return nil, fmt.Errorf("parts: %w", err)
	}
	sort.Strings(names)
	files := make([]File, 0, len(names))
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return nil, fmt.Errorf("parts: %w", err)
		}
		files = append(files, File{Name: filepath.Base(n), Data: b})
	}
	return files, nil
}

// Stats describes what Decode found.
type Stats struct {
	Records, Images, Duplicates int
	// Dropped counts files whose tail was cut short or corrupt.
	Dropped int
}

// Decode returns, for every image found in the files (first valid record
// wins), its detections, keyed by global image index; images at or above
// nImages are an error (the manifest check makes them impossible).
func Decode(files []File, nImages int) (map[int]wire.Image, Stats, error) {
	done := map[int]wire.Image{}
	var st Stats
	for _, f := range files {
		b := f.Data
		for len(b) > 0 {
			if len(b) < 8 {
				st.Dropped++
				break
			}
			n := binary.LittleEndian.Uint64(b)
			if n > uint64(len(b)-8) {
				st.Dropped++
				break
			}
			imgs, err := wire.Decode(b[8 : 8+n])
			if err != nil {
				if errors.Is(err, wire.ErrCorrupt) {
					st.Dropped++
					break
				}
				return nil, st, err
			}
			st.Records++
			for _, im := range imgs {
				if im.Index < 0 || im.Index >= nImages {
					return nil, st, fmt.Errorf("parts: %s holds image %d of %d", f.Name, im.Index, nImages)
				}
				if err := checkDets(im); err != nil {
					return nil, st, fmt.Errorf("parts: %s: %w", f.Name, err)
				}
				if _, dup := done[im.Index]; dup {
					st.Duplicates++
					continue
				}
				done[im.Index] = im
			}
			b = b[8+n:]
		}
	}
	st.Images = len(done)
	return done, st, nil
}

// checkDets refuses a detection no detector makes: a non-finite value or
// an inverted box (a record whose checksum holds cannot be torn, so such a
// record was written so).
func checkDets(im wire.Image) error {
	for _, d := range im.Dets {
		b := d.Box
		if !(b.Xmin <= b.Xmax && b.Ymin <= b.Ymax) || math.IsInf(b.Xmin, 0) || math.IsInf(b.Ymin, 0) ||
			math.IsInf(b.Xmax, 0) || math.IsInf(b.Ymax, 0) || math.IsNaN(d.Score) || math.IsInf(d.Score, 0) {
			return fmt.Errorf("image %d: a non-finite or inverted box %+v, score %v", im.Index, b, d.Score)
		}
	}
	return nil
}

// NextAttempt is one more than the highest attempt number among files.
func NextAttempt(files []File) int {
	next := 0
	for _, f := range files {
		var a, r int
		if _, err := fmt.Sscanf(f.Name, "part-%d-%d.part", &a, &r); err == nil && a+1 > next {
			next = a + 1
		}
	}
	return next
}
