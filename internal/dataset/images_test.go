package dataset

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestListImages: the folder's image files by extension in any case, not
// recursive, sorted by name; a folder without one is an input error.
func TestListImages(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"b.TIF", "a.png", "c.jpeg", "notes.txt", "d.tiff.bak", "e.JPG"} {
		os.WriteFile(filepath.Join(dir, n), nil, 0o644)
	}
	os.MkdirAll(filepath.Join(dir, "sub.png"), 0o755)
	os.WriteFile(filepath.Join(dir, "sub.png", "f.png"), nil, 0o644)
	got, err := ListImages(dir)
	if err != nil || strings.Join(got, " ") != "a.png b.TIF c.jpeg e.JPG" {
		t.Fatalf("ListImages: %q, %v", got, err)
	}
	empty := filepath.Join(dir, "sub.png")
	os.Remove(filepath.Join(empty, "f.png"))
	if _, err := ListImages(empty); !errors.Is(err, ErrInput) {
		t.Errorf("a folder without images: %v, want an input error", err)
	}
	if _, err := ListImages(filepath.Join(dir, "missing")); err == nil || errors.Is(err, ErrInput) {
		t.Errorf("a missing folder: %v, want a read error", err)
	}
}
