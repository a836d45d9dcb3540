package box

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Printable returns s with what a terminal would act on written as
// escapes: C0 controls (ESC, BEL, CR, LF, TAB…), DEL and C1 controls as
// \xNN, the bidirectional overrides and isolates (U+202A–U+202E,
// U+2066–U+2069) as \uNNNN, and bytes that are not UTF-8 as \xNN. A label
// holding "ESC]0;…BEL" or "ESC[2J" thus cannot retitle or clear the
// terminal of whoever reads a table canopy prints. Other text is kept.
func Printable(s string) string {
	clean := true
	for i, r := range s {
		if unsafeRune(r) || r == utf8.RuneError && !validAt(s, i) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x20 || r >= 0x7f && r <= 0x9f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func unsafeRune(r rune) bool {
	return r < 0x20 || r >= 0x7f && r <= 0x9f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069
}

// validAt reports whether the RuneError at s[i] was spelled in s (U+FFFD
// itself) rather than produced by a byte that is not UTF-8.
func validAt(s string, i int) bool {
	_, n := utf8.DecodeRuneInString(s[i:])
	return n == 3
}
