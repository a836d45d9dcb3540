package box

import (
	"fmt"
	"strings"
)

// UniqueNames gives each of paths a name made by base, unique ignoring
// case (SQLite's table names and the file names of case-insensitive
// filesystems ignore it), whatever the paths: a path whose base is itself
// keeps it (the first of those that differ only in case); the others take
// their base, then sep+"2", sep+"3", … after it until it is unique. The
// same paths in the same order always give the same names. base must
// return a non-empty name.
func UniqueNames(paths []string, base func(string) string, sep string) []string {
	names := make([]string, len(paths))
	taken := map[string]bool{}
	fold := strings.ToLower
	for i, p := range paths {
		if n := base(p); n == p && !taken[fold(n)] {
			names[i], taken[fold(n)] = n, true
		}
	}
	next := map[string]int{} // the next suffix to try for a base: n paths of one base cost O(n), not O(n²)
	for i, p := range paths {
		if names[i] != "" {
			continue
		}
		b := base(p)
		n, k := b, max(next[fold(b)], 2)
		for taken[fold(n)] {
			n, k = fmt.Sprintf("%s%s%d", b, sep, k), k+1
		}
		next[fold(b)] = k
		names[i], taken[fold(n)] = n, true
	}
	return names
}
