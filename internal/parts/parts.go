// Package parts is canopy's preemption-safe record of finished images:
// every rank appends the detections of each finished batch to its own part
// file under OUT/parts/, as length-prefixed wire-format records (each
// carrying its own checksum), and syncs them at a bounded interval. A
// resumed run reads every part file and skips the images found there; a
// record cut short by a crash is detected and dropped, so at most the
// records in flight are lost.
//
// A record is a u64 length and a payload. Two payload kinds exist:
//
//	"CNPY…"  a wire-format buffer alone (canopy before identities; no
//	         identity for its images)
//	"CNPI"   | u16 version (1) | u16 flags (0) | u32 n |
//	         n × (u32 image index | i64 size | i64 mtime ns | 32-byte sha256)
//	         | u32 CRC-32C of the identity section | the wire-format buffer
//
// n is 0 (the images were not read: a replay) or the wire buffer's image
// count, the identities in the buffer's image order. A resumed model run
// compares every image it takes from the part files with its recorded
// identity, so a different --root-dir or an image edited in place is
// refused rather than mixed into the result.
package parts

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
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

// Identity is what a part record keeps of the image file a detection was
// computed from: its size, modification time and content hash.
type Identity struct {
	Size    int64
	MtimeNS int64
	SHA256  [32]byte
}

const (
	identMagic   = "CNPI"
	identVersion = 1
	identHeader  = 4 + 2 + 2 + 4
	identEntry   = 4 + 8 + 8 + 32
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Append writes one record holding images, with ids (nil when the images
// were not read, else one per image, in order), and syncs when the
// interval has passed.
func (w *Writer) Append(images []wire.Image, ids []Identity) error {
	if ids != nil && len(ids) != len(images) {
		return fmt.Errorf("parts: %d identities for %d images", len(ids), len(images))
	}
	le := binary.LittleEndian
	b := append(w.buf[:0], make([]byte, 8)...)
	b = append(b, identMagic...)
	b = le.AppendUint16(b, identVersion)
	b = le.AppendUint16(b, 0)
	b = le.AppendUint32(b, uint32(len(ids)))
	for k, id := range ids {
		b = le.AppendUint32(b, uint32(images[k].Index))
		b = le.AppendUint64(b, uint64(id.Size))
		b = le.AppendUint64(b, uint64(id.MtimeNS))
		b = append(b, id.SHA256[:]...)
	}
	b = le.AppendUint32(b, crc32.Checksum(b[8:], castagnoli))
	var err error
	w.buf, err = wire.Encode(b, images)
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

// Done is one finished image of the part files: its detections, and the
// identity of the file they were computed from (nil when the record holds
// none: a replay, or a part file of a canopy before identities).
type Done struct {
	wire.Image
	Ident *Identity
}

// splitIdent separates a record's identity section from its wire buffer.
// A payload without one (the first kind) gives no identities.
func splitIdent(p []byte) ([]int, []Identity, []byte, error) {
	if len(p) < 4 || string(p[:4]) != identMagic {
		return nil, nil, p, nil
	}
	le := binary.LittleEndian
	if len(p) < identHeader+4 {
		return nil, nil, nil, fmt.Errorf("%w: identity section cut short", wire.ErrCorrupt)
	}
	n := uint64(le.Uint32(p[8:]))
	if n > uint64(len(p)-identHeader-4)/identEntry {
		return nil, nil, nil, fmt.Errorf("%w: identity section claims %d images in %d bytes", wire.ErrCorrupt, n, len(p))
	}
	end := identHeader + int(n)*identEntry
	if crc32.Checksum(p[:end], castagnoli) != le.Uint32(p[end:]) {
		return nil, nil, nil, fmt.Errorf("%w: identity section checksum", wire.ErrCorrupt)
	}
	if v := le.Uint16(p[4:]); v != identVersion {
		return nil, nil, nil, fmt.Errorf("parts: identity section version %d, this canopy reads version %d", v, identVersion)
	}
	if f := le.Uint16(p[6:]); f != 0 {
		return nil, nil, nil, fmt.Errorf("parts: identity section flags %#x unknown", f)
	}
	idx := make([]int, n)
	ids := make([]Identity, n)
	for k := range ids {
		e := p[identHeader+k*identEntry:]
		idx[k] = int(le.Uint32(e))
		ids[k].Size = int64(le.Uint64(e[4:]))
		ids[k].MtimeNS = int64(le.Uint64(e[12:]))
		copy(ids[k].SHA256[:], e[20:52])
	}
	return idx, ids, p[end+4:], nil
}

// Decode returns, for every image found in the files (first valid record
// wins), its detections and recorded identity, keyed by global image
// index; images at or above nImages are an error (the manifest check makes
// them impossible).
func Decode(files []File, nImages int) (map[int]Done, Stats, error) {
	done := map[int]Done{}
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
			torn, err := decodeRecord(f.Name, b[8:8+n], nImages, nil, done, &st)
			if err != nil {
				return nil, st, err
			}
			if torn {
				break
			}
			b = b[8+n:]
		}
	}
	st.Images = len(done)
	return done, st, nil
}

// Scan is Decode over the part files of out read one record at a time,
// keeping only the images keep accepts: what it holds is the images kept,
// never a whole file. names are the files read, in name order (for
// NextAttempt).
func Scan(out string, nImages int, keep func(index int) bool) (map[int]Done, Stats, []File, error) {
	paths, err := filepath.Glob(filepath.Join(out, Dir, "*.part"))
	if err != nil {
		return nil, Stats{}, nil, fmt.Errorf("parts: %w", err)
	}
	sort.Strings(paths)
	done := map[int]Done{}
	var st Stats
	var names []File
	for _, p := range paths {
		names = append(names, File{Name: filepath.Base(p)})
		if err := scanFile(p, nImages, keep, done, &st); err != nil {
			return nil, st, nil, err
		}
	}
	st.Images = len(done)
	return done, st, names, nil
}

func scanFile(path string, nImages int, keep func(int) bool, done map[int]Done, st *Stats) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("parts: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("parts: %w", err)
	}
	left := fi.Size()
	r := bufio.NewReaderSize(f, 1<<20)
	var head [8]byte
	var payload []byte
	for left > 0 {
		if left < 8 {
			st.Dropped++
			return nil
		}
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return fmt.Errorf("parts: %s: %w", path, err)
		}
		left -= 8
		n := binary.LittleEndian.Uint64(head[:])
		if n > uint64(left) { // a length no record of this file can have: cut short
			st.Dropped++
			return nil
		}
		payload = append(payload[:0], make([]byte, n)...)
		if _, err := io.ReadFull(r, payload); err != nil {
			return fmt.Errorf("parts: %s: %w", path, err)
		}
		left -= int64(n)
		torn, err := decodeRecord(filepath.Base(path), payload, nImages, keep, done, st)
		if err != nil || torn {
			return err
		}
	}
	return nil
}

// decodeRecord files one record's images in done (those keep accepts,
// all when keep is nil); torn is a record whose checksum fails (the rest
// of its file is dropped).
func decodeRecord(name string, payload []byte, nImages int, keep func(int) bool, done map[int]Done, st *Stats) (torn bool, err error) {
	idx, ids, wb, err := splitIdent(payload)
	var imgs []wire.Image
	if err == nil {
		imgs, err = wire.Decode(wb)
	}
	if err == nil && len(ids) > 0 && len(ids) != len(imgs) {
		err = fmt.Errorf("parts: %s: a record with %d identities for %d images", name, len(ids), len(imgs))
	}
	if err != nil {
		if errors.Is(err, wire.ErrCorrupt) {
			st.Dropped++
			return true, nil
		}
		return false, err
	}
	st.Records++
	for k, im := range imgs {
		if im.Index < 0 || im.Index >= nImages {
			return false, fmt.Errorf("parts: %s holds image %d of %d", name, im.Index, nImages)
		}
		if err := checkDets(im); err != nil {
			return false, fmt.Errorf("parts: %s: %w", name, err)
		}
		if keep != nil && !keep(im.Index) {
			continue
		}
		if _, dup := done[im.Index]; dup {
			st.Duplicates++
			continue
		}
		d := Done{Image: im}
		if len(ids) > 0 {
			if idx[k] != im.Index {
				return false, fmt.Errorf("parts: %s: identity of image %d recorded for image %d", name, idx[k], im.Index)
			}
			d.Ident = &ids[k]
		}
		done[im.Index] = d
	}
	return false, nil
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
