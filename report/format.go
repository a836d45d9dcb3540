package report

import (
	"encoding/xml"
	"fmt"
	"image"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/htmlreport"
)

func (r Row) deltaString() string {
	if !r.HasDelta {
		return ""
	}
	return strconv.FormatFloat(r.Delta, 'g', 6, 64)
}

func (r Row) deltaSigned() string {
	d := r.deltaString()
	if d != "" && !strings.HasPrefix(d, "-") {
		d = "+" + d
	}
	return d
}

// WriteText prints the header block, the table and the summary.
func WriteText(w io.Writer, res *Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "baseline\t%s\n", box.Printable(res.Base.Path))
	fmt.Fprintf(tw, "current\t%s\n", box.Printable(res.Cur.Path))
	truth := DescribeInput(res.Base.Inputs["csv"]) + " (same)"
	if res.TruthDiffers {
		truth = DescribeInput(res.Base.Inputs["csv"]) + " → " + DescribeInput(res.Cur.Inputs["csv"]) + " (differs, allowed by --allow-different-truth)"
	}
	fmt.Fprintf(tw, "truth\t%s\n", box.Printable(truth))
	for _, d := range res.Diffs {
		fmt.Fprintf(tw, "%s\t%s → %s (differs)\n", box.Printable(d.Field), box.Printable(d.Base), box.Printable(d.Cur))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "metric\tbaseline\tcurrent\tdelta\tverdict")
	for _, r := range res.Rows {
		v := r.Verdict
		if r.Regression {
			v += " !"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", box.Printable(r.Key), r.Base, r.Cur, r.deltaSigned(), v)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%s\n", box.Printable(res.Summary()))
	return err
}

func mdCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// WriteMarkdown writes a GitHub-flavoured markdown table (one row
// per metric), a summary line and the run differences.
func WriteMarkdown(w io.Writer, res *Result) error {
	var b strings.Builder
	b.WriteString("| metric | baseline | current | delta | verdict |\n")
	b.WriteString("|:---|---:|---:|---:|:---|\n")
	for _, r := range res.Rows {
		v := r.Verdict
		if r.Regression {
			v = "**" + v + "**"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", mdCell(r.Key), r.Base, r.Cur, r.deltaSigned(), v)
	}
	fmt.Fprintf(&b, "\n**canopy compare:** %s\n", mdCell(res.Summary()))
	if res.TruthDiffers || len(res.Diffs) > 0 {
		b.WriteString("\nRun differences:\n\n")
		if res.TruthDiffers {
			fmt.Fprintf(&b, "- truth: %s → %s (allowed by --allow-different-truth)\n", DescribeInput(res.Base.Inputs["csv"]), DescribeInput(res.Cur.Inputs["csv"]))
		}
		for _, d := range res.Diffs {
			fmt.Fprintf(&b, "- %s: `%s` → `%s`\n", d.Field, d.Base, d.Cur)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// JUnitSuite is JUnit XML, the subset canopy emits
// (report/testdata/compare/junit.xsd): one testsuite.
type JUnitSuite struct {
	XMLName  xml.Name    `xml:"testsuite"`
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []JUnitCase `xml:"testcase"`
}

// JUnitCase is one metric row.
type JUnitCase struct {
	Classname string        `xml:"classname,attr"`
	Name      string        `xml:"name,attr"`
	Failure   *JUnitFailure `xml:"failure"`
}

// JUnitFailure is a regression.
type JUnitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// WriteJUnit writes one testsuite, canopy.compare, with a testcase
// per metric and a failure on each regression.
func WriteJUnit(w io.Writer, res *Result) error {
	s := JUnitSuite{Name: "canopy.compare", Tests: len(res.Rows), Time: fmt.Sprintf("%.3f", res.Elapsed.Seconds())}
	for _, r := range res.Rows {
		c := JUnitCase{Classname: "metrics", Name: r.Key}
		if r.Regression {
			s.Failures++
			msg := fmt.Sprintf("%s %s: baseline %s, current %s", r.Key, r.Verdict, r.Base, r.Cur)
			if r.HasDelta {
				msg += fmt.Sprintf(", delta %s (tolerance %s)", r.deltaSigned(), strconv.FormatFloat(r.Tol, 'g', -1, 64))
			}
			c.Failure = &JUnitFailure{Message: msg, Type: "regression",
				Text: fmt.Sprintf("%s (--fail-on %s)\nbaseline: %s\ncurrent:  %s", msg, res.FailOn, res.Base.Path, res.Cur.Path)}
		}
		s.Cases = append(s.Cases, c)
	}
	b, err := xml.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteHTML renders `canopy compare --html`; open, when set, opens the
// images drawn (htmlreport.Options.Open).
func WriteHTML(w io.Writer, res *Result, open func(root, path string) (image.Image, error), read func(root, path string, limit int64) ([]byte, error)) error {
	c := htmlreport.Compare{Summary: res.Summary(), Options: htmlreport.DefaultOptions}
	c.Options.Open, c.Options.Read = open, read
	for _, r := range res.Rows {
		c.Rows = append(c.Rows, htmlreport.CompareRow{Metric: r.Key, Baseline: r.Base.String(), Current: r.Cur.String(),
			Delta: r.deltaSigned(), Verdict: r.Verdict, Regression: r.Regression})
	}
	side := func(rep *Report) htmlreport.Side {
		s := htmlreport.Side{Name: rep.Path}
		if filepath.Base(rep.Path) == "report.json" {
			s.Name, s.Dir = filepath.Dir(rep.Path), filepath.Dir(rep.Path)
		}
		return s
	}
	c.Baseline, c.Current = side(res.Base), side(res.Cur)
	return htmlreport.WriteCompare(w, c)
}
