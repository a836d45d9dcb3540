// Package confine keeps the paths canopy reads where they belong: image
// paths inside the root folder (Confiner, ImageFile), the files a report
// records read with a deadline (RecordedReader), and named inputs read
// with a size cap (ReadNamedInput).
package confine

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/canopy-hpc/canopy/infer/imagefile"

	"github.com/canopy-hpc/canopy/internal/dataset"
)

// Confiner checks that image paths stay inside the root folder: no
// absolute path, no ".." element, and a path that goes through a symlink
// only when its target is inside the root too (--allow-outside-root lifts
// all three). The checks before the symlink one look at the text alone, so
// a refused path is never opened or even looked up.
type Confiner struct {
	root string // --root-dir as given
	real string // its symlinks resolved ("" when it cannot be resolved)
}

// New is the Confiner of root (--root-dir).
func New(root string) Confiner {
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		real = ""
	}
	if abs, err := filepath.Abs(real); err == nil && real != "" {
		real = abs
	}
	return Confiner{root: root, real: real}
}

// Check returns an input error when the image path p leaves the root.
func (c Confiner) Check(p string) error {
	refuse := func(why string) error {
		return fmt.Errorf("image %q: %s; image paths must resolve inside --root-dir %s (--allow-outside-root lifts this): %w", p, why, c.root, dataset.ErrInput)
	}
	if filepath.IsAbs(p) {
		return refuse("an absolute path")
	}
	for _, e := range strings.Split(filepath.ToSlash(p), "/") {
		if e == ".." {
			return refuse(`a ".." element`)
		}
	}
	if c.real == "" {
		return nil // a missing --root-dir: opening the image says so
	}
	target, err := filepath.EvalSymlinks(filepath.Join(c.root, p))
	if err != nil {
		return nil // a missing file or a dangling link: opening it says so
	}
	if abs, err := filepath.Abs(target); err == nil {
		target = abs
	}
	if rel, err := filepath.Rel(c.real, target); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(os.PathSeparator)) {
		return refuse("a symlink to " + target)
	}
	return nil
}

// RecordedFileTimeout bounds each read of a file a report records.
var RecordedFileTimeout = 60 * time.Second

// RecordedReader is compare --html's reader of the files a report records
// (htmlreport.Options.Read): a path only inside root (symlinks resolved;
// a relative path is relative to root, for the check and the read alike),
// a regular file opened without blocking (imagefile.OpenRegular, as eval
// opens images), its size under limit before anything is read, and the
// read ended by recordedFileTimeout or by ctx (SIGTERM), whichever comes
// first: a read stuck on a stalled filesystem is then left behind.
func RecordedReader(ctx context.Context) func(root, p string, limit int64) ([]byte, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	return func(root, p string, limit int64) ([]byte, error) {
		if err := insideRoot(root, p); err != nil {
			return nil, err
		}
		p = ImageFile(root, p) // read the file checked, not p in the working folder
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%q not read: interrupted", p)
		}
		type result struct {
			b   []byte
			err error
		}
		ch := make(chan result, 1)
		go func() {
			b, err := readCapped(p, limit)
			ch <- result{b, err}
		}()
		t := time.NewTimer(RecordedFileTimeout)
		defer t.Stop()
		select {
		case r := <-ch:
			return r.b, r.err
		case <-ctx.Done():
			return nil, fmt.Errorf("%q not read: interrupted", p)
		case <-t.C:
			return nil, fmt.Errorf("%q not read within %v", p, RecordedFileTimeout)
		}
	}
}

// insideRoot refuses a path (absolute, or relative to root) that resolves
// outside root, or a root that is not recorded or not found.
func insideRoot(root, p string) error {
	if root == "" {
		return fmt.Errorf("%q not read: the report records no root folder", p)
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return fmt.Errorf("%q not read: root folder %q: %w", p, root, err)
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(root, p)
	}
	target, err := filepath.EvalSymlinks(p)
	if err != nil {
		return fmt.Errorf("%q not read: %w", p, err)
	}
	ra, _ := filepath.Abs(real)
	ta, _ := filepath.Abs(target)
	if rel, err := filepath.Rel(ra, ta); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(os.PathSeparator)) {
		return fmt.Errorf("%q not read: it is outside the report's root folder %q", p, root)
	}
	return nil
}

// readCapped reads a regular file of at most limit bytes (checked on the
// open file before reading; the read is bounded too, for a file that
// grows meanwhile).
func readCapped(p string, limit int64) ([]byte, error) {
	ReadHook(p)
	f, err := imagefile.OpenRegular(p)
	if err != nil {
		return nil, fmt.Errorf("%q not read: %w", p, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%q not read: %w", p, err)
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%q not read: %d bytes, over the cap of %d", p, st.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("over the cap of %d bytes", limit)
	}
	if err != nil {
		return nil, fmt.Errorf("%q not read: %w", p, err)
	}
	return b, nil
}

// ReadNamedInput reads a file named on the command line (--csv,
// --predictions, --label-dict): a regular file, or a pipe (a FIFO, process
// substitution). It is opened without blocking, so a FIFO nobody writes
// to reads as empty instead of hanging in open(), deaf to SIGTERM; a
// device (/dev/zero) or a socket is refused.
func ReadNamedInput(p string) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if m := st.Mode(); !m.IsRegular() && m&os.ModeNamedPipe == 0 {
		return nil, fmt.Errorf("%s: not a regular file or a pipe (%v)", p, m.Type())
	}
	return io.ReadAll(f)
}

// ImageFile resolves a CSV image_path against the root folder.
func ImageFile(root, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(root, p)
}

// ReadHook runs before compare --html reads a file a report
// records; tests make it block, as a stalled filesystem would.
var ReadHook = func(path string) {}
