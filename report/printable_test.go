package report

import (
	"bytes"
	"strings"
	"testing"
)

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
