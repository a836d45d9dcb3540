package report

import (
	"bytes"
	"strings"
	"testing"
)

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

// compare's text table prints a hostile label's key escaped.
func TestWriteTextEscapesControls(t *testing.T) {
	key := "\x1b]0;pwned\x07\x1b[2JTree_Recall"
	res := &Result{Base: &Report{Path: "a/report.json"}, Cur: &Report{Path: "b\x1b[2J/report.json"},
		Rows: []Row{{Key: key, Base: Cell{Present: true, V: 0.5}, Cur: Cell{Present: true, V: 0.5}, Verdict: VerdictSame}}}
	var b bytes.Buffer
	if err := WriteText(&b, res); err != nil {
		t.Fatal(err)
	}
	if bytes.ContainsAny(b.Bytes(), "\x1b\x07") || !strings.Contains(b.String(), `\x1b]0;pwned\x07\x1b[2JTree_Recall`) || !strings.Contains(b.String(), `b\x1b[2J/report.json`) {
		t.Fatalf("%q", b.String())
	}
}
