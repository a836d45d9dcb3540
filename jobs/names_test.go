package jobs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rasterStems: every stem is a plain file name (no separator, control
// character, leading '.' or '-'), unique ignoring case, the same for the
// same list, and each one can be created in one folder.
func TestRasterStemsAreSafeUniqueFileNames(t *testing.T) {
	paths := []string{"a/x.tif", "b/X.png", "x_2.tif", "./.hidden.tif", "-rf.tif", ".tif", "", "c:\\w\\y.tif",
		"r\x1b[2J\nz.tif", "bad\xff.tif", "../../etc/passwd", strings.Repeat("é", 300) + ".tif", "ok name.tif"}
	stems := rasterStems(paths)
	seen := map[string]bool{}
	dir := t.TempDir()
	for i, s := range stems {
		if seen[strings.ToLower(s)] || s == "" || strings.ContainsAny(s, "/\\ \x00\n\x1b") || strings.HasPrefix(s, ".") || strings.HasPrefix(s, "-") || len(s) > 200 {
			t.Fatalf("%q: stem %q", paths[i], s)
		}
		seen[strings.ToLower(s)] = true
		f, err := os.OpenFile(filepath.Join(dir, s+".parquet"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatalf("%q: %v", paths[i], err)
		}
		f.Close()
	}
	if stems[0] != "x" || stems[1] != "X_2" || stems[2] != "x_2_2" {
		t.Errorf("stems %q", stems[:3])
	}
	if again := rasterStems(paths); strings.Join(again, "|") != strings.Join(stems, "|") {
		t.Fatalf("not deterministic: %q, %q", stems, again)
	}
	t.Logf("%q", stems)
}
