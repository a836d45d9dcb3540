package jobs

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/canopy-hpc/canopy/box"
)

// rasterStems names each raster's own files in OUT/rasters/ (<stem>.parquet
// and the like): the file name of its image_path without the extension,
// every character but letters, digits, '.', '_' and '-' as '_' (no path
// separator, control character or space), no leading '.' or '-' (no
// hidden file, nothing read as an option), at most 200 bytes, "raster"
// when nothing is left; unique ignoring case, as on a case-insensitive
// filesystem (box.UniqueNames, in list order: "a/x.tif", "b/X.png" and
// "x_2.tif" give x, X_2 and x_2_2).
// The same list always gives the same stems, so a resumed run finds its
// files again.
func rasterStems(paths []string) []string {
	return box.UniqueNames(paths, rasterStem)
}

func rasterStem(p string) string {
	if i := strings.LastIndexAny(p, `/\`); i >= 0 {
		p = p[i+1:]
	}
	if i := strings.LastIndexByte(p, '.'); i > 0 {
		p = p[:i]
	}
	s := strings.Map(func(r rune) rune {
		if unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '_' || r == '-' {
			return r
		}
		return '_'
	}, strings.ToValidUTF8(p, "_"))
	s = strings.TrimLeft(s, ".-")
	for len(s) > 200 {
		_, n := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-n]
	}
	if s == "" {
		return "raster"
	}
	return s
}
