package box

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// UniqueNames: valid names kept, the rest suffixed in order, unique
// ignoring case; 200 000 paths of one base take linear time (a tile set's
// a/tile.tif, b/tile.tif, …).
func TestUniqueNames(t *testing.T) {
	base := func(p string) string { return strings.TrimPrefix(p, "./") }
	got := UniqueNames([]string{"./x", "x", "X", "x_2", "./x"}, base, "_")
	if want := "x_3 x X_4 x_2 x_5"; strings.Join(got, " ") != want {
		t.Fatalf("%q, want %s", got, want)
	}
	paths := make([]string, 200000)
	for i := range paths {
		paths[i] = fmt.Sprintf("d%d/tile", i)
	}
	start := time.Now()
	names := UniqueNames(paths, func(p string) string { return p[strings.IndexByte(p, '/')+1:] }, "_")
	if names[0] != "tile" || names[1] != "tile_2" || names[len(names)-1] != fmt.Sprintf("tile_%d", len(names)) {
		t.Fatalf("%q … %q", names[:2], names[len(names)-1])
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("%d paths of one base took %v", len(paths), d)
	}
}
