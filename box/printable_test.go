package box

import "testing"

// Terminal controls are written as escapes, other text is kept.
func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"map_50":                  "map_50",
		"Bäume/Tree ✓ \ufffd":     "Bäume/Tree ✓ \ufffd",
		"\x1b]0;pwned\x07\x1b[2J": `\x1b]0;pwned\x07\x1b[2J`,
		"a\tb\nc\rd\x7f":          `a\x09b\x0ac\x0dd\x7f`,
		"\u009b31m":               `\x9b31m`,
		"abc\u202eexe.txt":        `abc\u202eexe.txt`,
		"bad\xffbyte":             `bad\xffbyte`,
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
}
