package dataset

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// FolderExts are torchvision's IMG_EXTENSIONS: the files ImageFolder takes
// (the name, lower-cased, ends with one). Others are skipped unread.
var FolderExts = []string{".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"}

// folderDecodable are the extensions canopy decodes (infer/imagefile).
var folderDecodable = map[string]bool{".jpg": true, ".jpeg": true, ".png": true, ".tif": true, ".tiff": true}

// MaxFolderFiles bounds the files an ImageFolder may list (images and
// skipped files together).
const MaxFolderFiles = 10_000_000

// FolderSample is one image of an ImageFolder: its path relative to the
// root (slash-separated, through the folders as listed, symlinks kept) and
// its class name.
type FolderSample struct {
	Path, Class string
}

// ImageFolder is what DeepForest's CropModel.load_from_disk reads from a
// validation folder: torchvision's ImageFolder listing, relabelled by
// FixedClassImageFolder.
type ImageFolder struct {
	// Classes are the root's class folders, sorted by name.
	Classes []string
	// Samples are the images in ImageFolder's order: classes in sorted
	// order; within each, the folders of its tree in sorted order of their
	// paths (sorted(os.walk(...))), the files of each in name order.
	Samples []FolderSample
	// Skipped are files whose extension is not an image's (ImageFolder
	// skips them; never opened), relative to the root.
	Skipped []string
	// Dropped are images in a sub-folder whose name is not a label:
	// FixedClassImageFolder labels a file by its parent folder's name and
	// drops it when that names no class.
	Dropped []string
}

// ReadImageFolder lists root as DeepForest 2.1.0's
// CropModel.load_from_disk lists its val_dir (torchvision 0.29
// datasets/folder.py ImageFolder: find_classes, make_dataset with
// IMG_EXTENSIONS and followlinks=True; deepforest/datasets/training.py
// FixedClassImageFolder): classes are the root's entries that are folders
// (symlinks followed); each class's tree is walked, every file whose
// lower-cased name ends with an image extension is a sample, labelled by
// its parent folder's name when isLabel takes it (a file in a class
// folder: that class; in a sub-folder named as another label: that label)
// and dropped otherwise. A class folder that isLabel refuses is an error.
//
// Errors (all wrap ErrInput): root not a folder, no class folder, a class
// with no image file (torchvision's "Found no valid file for the
// classes"), an image-named entry that is not a regular file (a FIFO, a
// socket, a device, a broken symlink: never opened), an extension canopy
// does not decode (.ppm .bmp .pgm .webp), a folder or file reached through
// a symlink that leaves root (unless outside), a symlink cycle, more than
// MaxFolderFiles files. Names are compared as bytes, which is Python's
// code-point order for UTF-8 names.
func ReadImageFolder(root string, isLabel func(string) bool, outside bool) (*ImageFolder, error) {
	fail := func(format string, a ...any) (*ImageFolder, error) {
		return nil, fmt.Errorf("dataset: image folder %s: "+format+": %w", append(append([]any{root}, a...), ErrInput)...)
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return fail("%v", err)
	}
	if st, err := os.Stat(real); err != nil || !st.IsDir() {
		return fail("not a folder")
	}
	w := folderWalk{root: root, real: real, outside: outside}
	ents, err := os.ReadDir(root)
	if err != nil {
		return fail("%v", err)
	}
	f := &ImageFolder{}
	for _, e := range ents {
		if dir, _ := w.isDir(e, e.Name()); dir {
			f.Classes = append(f.Classes, e.Name())
		}
	}
	if len(f.Classes) == 0 {
		return fail("no class folder (ImageFolder wants one sub-folder per class)")
	}
	var empty []string
	for _, class := range f.Classes {
		if !isLabel(class) {
			return fail("class folder %q is not a label of the crop model", class)
		}
		dirs, err := w.tree(class)
		if err != nil {
			return nil, fmt.Errorf("dataset: image folder %s: %w: %w", root, err, ErrInput)
		}
		sort.Slice(dirs, func(i, j int) bool { return dirs[i].rel < dirs[j].rel })
		n := 0
		for _, d := range dirs {
			for _, name := range d.files {
				rel := d.rel + "/" + name
				if !hasFolderExt(name) {
					f.Skipped = append(f.Skipped, rel)
					continue
				}
				n++
				if err := w.checkFile(rel); err != nil {
					return nil, fmt.Errorf("dataset: image folder %s: %w: %w", root, err, ErrInput)
				}
				if label := filepath.Base(d.rel); isLabel(label) {
					f.Samples = append(f.Samples, FolderSample{Path: rel, Class: label})
				} else {
					f.Dropped = append(f.Dropped, rel)
				}
			}
		}
		if n == 0 {
			empty = append(empty, class)
		}
		if w.files > MaxFolderFiles {
			return fail("more than %d files", MaxFolderFiles)
		}
	}
	if len(empty) > 0 {
		return fail("no image file in the class folders %s (ImageFolder takes %s)", strings.Join(empty, ", "), strings.Join(FolderExts, " "))
	}
	return f, nil
}

func hasFolderExt(name string) bool {
	l := strings.ToLower(name)
	for _, e := range FolderExts {
		if strings.HasSuffix(l, e) {
			return true
		}
	}
	return false
}

// folderWalk walks class trees as os.walk(followlinks=True) does, inside
// root unless outside.
type folderWalk struct {
	root, real string
	outside    bool
	files      int
}

type walkDir struct {
	rel   string // slash-separated, from root
	files []string
}

// isDir is DirEntry.is_dir(): a folder, or a symlink to one (a broken
// symlink is not).
func (w *folderWalk) isDir(e fs.DirEntry, rel string) (bool, error) {
	if e.Type()&fs.ModeSymlink == 0 {
		return e.IsDir(), nil
	}
	st, err := os.Stat(filepath.Join(w.root, filepath.FromSlash(rel)))
	if err != nil {
		return false, nil
	}
	return st.IsDir(), nil
}

// tree lists the folders of class's tree (class itself first) with their
// non-folder entries; a folder met again below itself is a cycle.
func (w *folderWalk) tree(class string) ([]walkDir, error) {
	var out []walkDir
	var visit func(rel string, chain []string) error
	visit = func(rel string, chain []string) error {
		abs := filepath.Join(w.root, filepath.FromSlash(rel))
		real, err := filepath.EvalSymlinks(abs)
		if err != nil {
			return err
		}
		if !w.outside && !within(w.real, real) {
			return fmt.Errorf("%s leads outside the folder (to %s; --allow-outside-root allows it)", rel, real)
		}
		for _, c := range chain {
			if c == real {
				return fmt.Errorf("%s: a symlink cycle (it is %s again)", rel, real)
			}
		}
		ents, err := os.ReadDir(abs)
		if err != nil {
			return err
		}
		d := walkDir{rel: rel}
		var subs []string
		for _, e := range ents {
			sub := rel + "/" + e.Name()
			if dir, _ := w.isDir(e, sub); dir {
				subs = append(subs, sub)
				continue
			}
			if w.files++; w.files > MaxFolderFiles {
				return fmt.Errorf("more than %d files", MaxFolderFiles)
			}
			d.files = append(d.files, e.Name())
		}
		out = append(out, d)
		for _, s := range subs {
			if err := visit(s, append(chain, real)); err != nil {
				return err
			}
		}
		return nil
	}
	return out, visit(class, nil)
}

// checkFile refuses an image-named entry canopy must not open: not a
// regular file once symlinks are followed (a FIFO would block the reader),
// outside root, or of a format canopy does not decode. It stats; it never
// opens.
func (w *folderWalk) checkFile(rel string) error {
	abs := filepath.Join(w.root, filepath.FromSlash(rel))
	st, err := os.Stat(abs)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: a broken symlink", rel)
		}
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%s): not opened", rel, kindOf(st.Mode()))
	}
	if !w.outside {
		real, err := filepath.EvalSymlinks(abs)
		if err != nil {
			return err
		}
		if !within(w.real, real) {
			return fmt.Errorf("%s leads outside the folder (to %s; --allow-outside-root allows it)", rel, real)
		}
	}
	if ext := strings.ToLower(filepath.Ext(rel)); !folderDecodable[ext] {
		return fmt.Errorf("%s: canopy reads PNG, JPEG and TIFF images, not %s (ImageFolder would take it: convert it)", rel, ext)
	}
	return nil
}

func kindOf(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a folder"
	}
	return "not a file"
}

// within reports whether path is dir or inside it (both resolved).
func within(dir, path string) bool {
	if path == dir {
		return true
	}
	return strings.HasPrefix(path, strings.TrimSuffix(dir, string(filepath.Separator))+string(filepath.Separator))
}
