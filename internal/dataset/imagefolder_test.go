package dataset

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cropFolder is the ImageFolder of tools/cropmodel/validate.py.
const cropFolder = "../../jobs/testdata/cropfolder/val"

func labelSet(names ...string) func(string) bool {
	return func(s string) bool {
		for _, n := range names {
			if n == s {
				return true
			}
		}
		return false
	}
}

// TestImageFolderDeepForest: the committed folder lists as DeepForest
// 2.1.0's load_from_disk lists it (metrics/testdata/croptable.json, made
// by the real torchvision and DeepForest): torchvision's ImageFolder order
// of every image file (all names taken as labels), and
// FixedClassImageFolder's samples and targets with the model's four
// labels: nested files dropped unless their folder names a label
// (Pinus/Picea/q9.png is a Picea), notes.txt skipped.
func TestImageFolderDeepForest(t *testing.T) {
	b, err := os.ReadFile("../../metrics/testdata/croptable.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		LabelDict   map[string]int `json:"label_dict"`
		Samples     [][2]any
		ImageFolder []string `json:"imagefolder_samples"`
	}
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	all, err := ReadImageFolder(cropFolder, func(string) bool { return true }, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Samples) != len(fx.ImageFolder) || len(fx.ImageFolder) < 20 {
		t.Fatalf("%d images, torchvision's ImageFolder %d", len(all.Samples), len(fx.ImageFolder))
	}
	for i, s := range all.Samples {
		if s.Path != fx.ImageFolder[i] {
			t.Errorf("image %d: %s, torchvision %s", i, s.Path, fx.ImageFolder[i])
		}
	}
	f, err := ReadImageFolder(cropFolder, labelSet("Abies", "Picea", "Pinus", "Tsuga"), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Samples) != len(fx.Samples) {
		t.Fatalf("%d samples, DeepForest %d", len(f.Samples), len(fx.Samples))
	}
	for i, s := range f.Samples {
		want := fx.Samples[i]
		if s.Path != want[0].(string) || fx.LabelDict[s.Class] != int(want[1].(float64)) {
			t.Errorf("sample %d: %s (%s), DeepForest %v", i, s.Path, s.Class, want)
		}
	}
	if len(f.Dropped) != len(all.Samples)-len(f.Samples) || len(f.Skipped) != 1 || f.Skipped[0] != "Pinus/notes.txt" {
		t.Errorf("dropped %v, skipped %v", f.Dropped, f.Skipped)
	}
	if strings.Join(f.Classes, ",") != "Abies,Picea,Pinus" {
		t.Errorf("classes %v", f.Classes)
	}
}

// writeFolder makes a folder of class sub-folders holding the given files
// (relative path → content).
func writeFolder(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for rel, data := range files {
		p := filepath.Join(root, rel)
		if strings.HasSuffix(rel, "/") {
			os.MkdirAll(p, 0o755)
			continue
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestImageFolderBadInput: each bad folder is a clear error wrapping
// ErrInput (exit 3), found without opening any image, and a FIFO is never
// opened (the listing returns while nothing writes to it).
func TestImageFolderBadInput(t *testing.T) {
	labels := labelSet("a", "b")
	type tc struct {
		name  string
		setup func(t *testing.T) string
		want  string
	}
	cases := []tc{
		{"missing", func(t *testing.T) string { return filepath.Join(t.TempDir(), "none") }, "no such file"},
		{"not a folder", func(t *testing.T) string { return writeFolder(t, map[string]string{"x.png": "x"}) + "/x.png" }, "not a folder"},
		{"no class", func(t *testing.T) string { return writeFolder(t, map[string]string{"x.png": "x"}) }, "no class folder"},
		{"empty class", func(t *testing.T) string {
			return writeFolder(t, map[string]string{"a/x.png": "x", "b/": "", "b/readme.txt": "x"})
		}, "no image file in the class folders b"},
		{"unknown class", func(t *testing.T) string { return writeFolder(t, map[string]string{"a/x.png": "x", "c/y.png": "y"}) }, `class folder "c" is not a label`},
		{"bmp", func(t *testing.T) string { return writeFolder(t, map[string]string{"a/x.png": "x", "b/y.BMP": "y"}) }, "not .bmp"},
		{"fifo", func(t *testing.T) string {
			root := writeFolder(t, map[string]string{"a/x.png": "x", "b/": ""})
			if err := syscall.Mkfifo(filepath.Join(root, "b", "pipe.png"), 0o644); err != nil {
				t.Fatalf("mkfifo: %v", err)
			}
			return root
		}, "b/pipe.png is not a regular file (a FIFO)"},
		{"broken symlink", func(t *testing.T) string {
			root := writeFolder(t, map[string]string{"a/x.png": "x", "b/": ""})
			mustLink(t, filepath.Join(root, "nowhere.png"), filepath.Join(root, "b", "y.png"))
			return root
		}, "b/y.png: a broken symlink"},
		{"file symlink outside", func(t *testing.T) string {
			out := writeFolder(t, map[string]string{"o.png": "x"})
			root := writeFolder(t, map[string]string{"a/x.png": "x", "b/": ""})
			mustLink(t, filepath.Join(out, "o.png"), filepath.Join(root, "b", "y.png"))
			return root
		}, "b/y.png leads outside the folder"},
		{"folder symlink outside", func(t *testing.T) string {
			out := writeFolder(t, map[string]string{"o.png": "x"})
			root := writeFolder(t, map[string]string{"a/x.png": "x"})
			mustLink(t, out, filepath.Join(root, "b"))
			return root
		}, "b leads outside the folder"},
		{"cycle", func(t *testing.T) string {
			root := writeFolder(t, map[string]string{"a/x.png": "x", "b/y.png": "y"})
			mustLink(t, filepath.Join(root, "b"), filepath.Join(root, "b", "loop"))
			return root
		}, "symlink cycle"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := c.setup(t)
			done := make(chan error, 1)
			go func() { _, err := ReadImageFolder(root, labels, false); done <- err }()
			select {
			case err := <-done:
				if err == nil || !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("got %v; want an input error containing %q", err, c.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("ReadImageFolder hangs")
			}
		})
	}
}

// TestImageFolderAllowed: a FIFO of another extension is skipped unopened,
// symlinks inside the folder are followed (a linked class, a linked
// file), and with outside a folder linked from elsewhere is read.
func TestImageFolderAllowed(t *testing.T) {
	out := writeFolder(t, map[string]string{"o/z.png": "x"})
	root := writeFolder(t, map[string]string{"a/x.png": "x", "c/y.jpg": "y"})
	if err := syscall.Mkfifo(filepath.Join(root, "a", "pipe.txt"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustLink(t, filepath.Join(root, "c"), filepath.Join(root, "b"))
	mustLink(t, filepath.Join(root, "a", "x.png"), filepath.Join(root, "a", "w.PNG"))
	mustLink(t, filepath.Join(out, "o"), filepath.Join(root, "d"))
	f, err := ReadImageFolder(root, labelSet("a", "b", "c", "d"), true)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range f.Samples {
		got = append(got, s.Class+":"+s.Path)
	}
	if want := "a:a/w.PNG a:a/x.png b:b/y.jpg c:c/y.jpg d:d/z.png"; strings.Join(got, " ") != want {
		t.Errorf("samples %q, want %q", strings.Join(got, " "), want)
	}
	if len(f.Skipped) != 1 || f.Skipped[0] != "a/pipe.txt" {
		t.Errorf("skipped %v", f.Skipped)
	}
	if _, err := ReadImageFolder(root, labelSet("a", "b", "c", "d"), false); err == nil || !strings.Contains(err.Error(), "d leads outside") {
		t.Errorf("without outside: %v", err)
	}
}

func mustLink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
