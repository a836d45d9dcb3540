package jobs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/canopy-hpc/canopy/internal/dataset"
)

// confiner checks that image paths stay inside the root folder: no
// absolute path, no ".." element, and a path that goes through a symlink
// only when its target is inside the root too (--allow-outside-root lifts
// all three). The checks before the symlink one look at the text alone, so
// a refused path is never opened or even looked up.
type confiner struct {
	root string // --root-dir as given
	real string // its symlinks resolved ("" when it cannot be resolved)
}

func newConfiner(root string) confiner {
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		real = ""
	}
	if abs, err := filepath.Abs(real); err == nil && real != "" {
		real = abs
	}
	return confiner{root: root, real: real}
}

// check returns an input error when the image path p leaves the root.
func (c confiner) check(p string) error {
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
