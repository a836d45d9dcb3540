package dataset

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// imageExts are the files --images takes (any case).
var imageExts = map[string]bool{".png": true, ".jpg": true, ".jpeg": true, ".tif": true, ".tiff": true}

// ListImages is the --images rule: the folder's image files, not
// recursive, sorted by name.
func ListImages(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("jobs: --images: %w", err)
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() && imageExts[strings.ToLower(filepath.Ext(e.Name()))] {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return nil, fmt.Errorf("jobs: --images %s holds no .png, .jpg, .jpeg, .tif or .tiff files: %w", dir, ErrInput)
	}
	return out, nil
}
