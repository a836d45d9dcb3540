package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/canopy-hpc/canopy/internal/confine"
	"github.com/canopy-hpc/canopy/internal/limits"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/report"
	"github.com/urfave/cli/v2"
)

// Fail-on modes: which verdicts make canopy compare exit 7.
const (
	FailOnWorse  = report.FailOnWorse  // worse or vanished
	FailOnChange = report.FailOnChange // anything but same
)

// DefaultCompareTolerance is the absolute tolerance of every metric unless
// --tolerance says otherwise.
const DefaultCompareTolerance = report.DefaultTolerance

// CompareOptions are canopy compare's settings.
type CompareOptions struct {
	Baseline string // report.json, or a folder holding one
	Current  string // report.json, or a folder holding one
	// Tolerance holds "metric=abs" specs (comma lists allowed);
	// "default=abs" sets the tolerance of every other metric. A per-class
	// row such as map_per_class[3] takes its own tolerance if given, else
	// that of map_per_class.
	Tolerance           []string
	FailOn              string // FailOnWorse (when empty) or FailOnChange
	AllowDifferentTruth bool   // compare reports on different truth CSVs
	JUnit               string // JUnit XML file to write, "" for none
	Markdown            string // GitHub markdown file to write, "-" for stdout instead of the text table
	HTML                string // self-contained HTML page to write, "" for none
	Stderr              io.Writer
	// Ctx ends the reads of --html's recorded files (SIGTERM, SIGINT);
	// nil: never.
	Ctx context.Context
}

// CompareCommand is the `canopy compare BASELINE CURRENT` command: it sets
// *code to ExitOK or ExitRegression; the errors it returns carry their exit
// code (*Error) for MainWith to print.
func CompareCommand(code *int, stdout, stderr io.Writer) *cli.Command {
	return &cli.Command{
		Name:      "compare",
		Usage:     "compare two canopy reports metric by metric; exit 7 on a regression",
		ArgsUsage: "BASELINE CURRENT",
		Description: "BASELINE and CURRENT are report.json files written by canopy eval, or folders\n" +
			"holding one. Each metric is compared with an absolute tolerance; higher is better\n" +
			"for recall, precision, accuracy, iou, map and mar keys, lower for keys containing\n" +
			"\"loss\" and for val_classification and val_bbox_regression, other keys have no direction. Per-class arrays are compared by class id\n" +
			"(rows such as map_per_class[2]). A metric is undefined when absent, null or -1.\n\n" +
			"VERDICTS:\n" +
			"   same      both undefined, or the difference is within tolerance\n" +
			"   better    beyond tolerance in the good direction\n" +
			"   worse     beyond tolerance in the bad direction\n" +
			"   changed   beyond tolerance, no known direction\n" +
			"   appeared  undefined in the baseline, defined now (a change, not worse)\n" +
			"   vanished  defined in the baseline, undefined now (worse)\n\n" +
			"--fail-on worse exits 7 on worse or vanished; --fail-on change on anything but same.\n" +
			"Reports on different truth CSVs (sha256) are refused (exit 3) unless\n" +
			"--allow-different-truth; other run differences are listed above the table.\n\n" + ExitTable,
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "tolerance", Usage: "metric=abs absolute tolerance, repeatable or comma-separated; default=abs sets the default (1e-9); map_per_class=abs covers every map_per_class[id] row"},
			&cli.StringFlag{Name: "fail-on", Value: FailOnWorse, Usage: "worse (exit 7 when a metric is worse or vanished) or change (exit 7 when any metric is not same)"},
			&cli.BoolFlag{Name: "allow-different-truth", Usage: "compare reports whose truth CSVs differ (sha256) instead of refusing with exit 3"},
			&cli.StringFlag{Name: "junit", Usage: "write a JUnit XML file: testsuite canopy.compare, one testcase per metric, a failure per regression"},
			&cli.StringFlag{Name: "markdown", Usage: "write a GitHub markdown table and summary to this file; - prints it on stdout instead of the text table"},
			&cli.StringFlag{Name: "html", Usage: "write a self-contained HTML page to this file: every metric with its verdict, both runs' PR curves overlaid and the images whose recall changed most, drawn for both (needs --out folders with report.html, results.csv and predictions.csv; what is missing is said on the page). Images are read from the root folder each run's report.html records, only paths inside it and under PIL's pixel cap; that root is taken as written, so compare run folders you trust"},
		},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return &Error{Code: ExitUsage, Collective: true, Err: fmt.Errorf("jobs: compare: %w", err)}
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 2 {
				return &Error{Code: ExitUsage, Collective: true, Err: fmt.Errorf("jobs: compare: want two paths, BASELINE and CURRENT, got %d: %q", c.NArg(), c.Args().Slice())}
			}
			n, err := runCompare(CompareOptions{
				Baseline:            c.Args().Get(0),
				Current:             c.Args().Get(1),
				Tolerance:           c.StringSlice("tolerance"),
				FailOn:              c.String("fail-on"),
				AllowDifferentTruth: c.Bool("allow-different-truth"),
				JUnit:               c.String("junit"),
				Markdown:            c.String("markdown"),
				HTML:                c.String("html"),
				Stderr:              stderr,
				Ctx:                 c.Context,
			}, stdout)
			if err != nil {
				return err
			}
			*code = n
			return nil
		},
	}
}

// runCompare compares opts.Baseline with opts.Current, prints the table
// (or the markdown, with Markdown "-") on stdout, writes the JUnit and
// markdown files, and returns ExitOK or ExitRegression; an error carries
// its exit code.
func runCompare(opts CompareOptions, stdout io.Writer) (int, error) {
	start := time.Now()
	for _, o := range [][2]string{{"--junit", opts.JUnit}, {"--markdown", opts.Markdown}} {
		if p := o[1]; p != "" && p != "-" {
			if err := checkOutputPath(p); err != nil {
				return ExitUsage, &Error{Code: ExitUsage, Collective: true, Err: fmt.Errorf("jobs: compare: %s %s: %w", o[0], p, err)}
			}
		}
	}
	res, err := compareReports(opts)
	if err != nil {
		return Code(err), err
	}
	res.Elapsed = time.Since(start)
	if opts.Markdown == "-" {
		if err := report.WriteMarkdown(stdout, res); err != nil {
			return ExitInternal, &Error{Code: ExitInternal, Collective: true, Err: fmt.Errorf("jobs: compare: stdout: %w", err)}
		}
	} else {
		if err := report.WriteText(stdout, res); err != nil {
			return ExitInternal, &Error{Code: ExitInternal, Collective: true, Err: fmt.Errorf("jobs: compare: stdout: %w", err)}
		}
		if opts.Markdown != "" {
			if err := writeFileAtomic(opts.Markdown, func(w io.Writer) error { return report.WriteMarkdown(w, res) }); err != nil {
				return ExitInternal, &Error{Code: ExitInternal, Collective: true, Err: fmt.Errorf("jobs: compare: --markdown: %w", err)}
			}
		}
	}
	if opts.JUnit != "" {
		if err := writeFileAtomic(opts.JUnit, func(w io.Writer) error { return report.WriteJUnit(w, res) }); err != nil {
			return ExitInternal, &Error{Code: ExitInternal, Collective: true, Err: fmt.Errorf("jobs: compare: --junit: %w", err)}
		}
	}
	if opts.HTML != "" {
		if err := writeFileAtomic(opts.HTML, func(w io.Writer) error {
			return report.WriteHTML(w, res, output.DrawnImage(false, limits.DefaultMaxImagePixels), confine.RecordedReader(opts.Ctx))
		}); err != nil {
			return ExitInternal, &Error{Code: ExitInternal, Collective: true, Err: fmt.Errorf("jobs: compare: --html: %w", err)}
		}
	}
	if len(res.Regressions) > 0 {
		return ExitRegression, nil
	}
	return ExitOK, nil
}

// compareReports reads both reports, checks their truth and compares them
// metric by metric; it writes nothing but warnings on opts.Stderr.
func compareReports(opts CompareOptions) (*report.Result, error) {
	stderr := opts.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	failOn := opts.FailOn
	if failOn == "" {
		failOn = FailOnWorse
	}
	if failOn != FailOnWorse && failOn != FailOnChange {
		return nil, &Error{Code: ExitUsage, Collective: true, Err: fmt.Errorf("jobs: compare: --fail-on %q: want %s or %s", opts.FailOn, FailOnWorse, FailOnChange)}
	}
	if opts.Baseline == "" || opts.Current == "" {
		return nil, &Error{Code: ExitUsage, Collective: true, Err: errors.New("jobs: compare: want two paths, BASELINE and CURRENT")}
	}
	tols, def, err := report.ParseTolerances(opts.Tolerance)
	if err != nil {
		return nil, &Error{Code: ExitUsage, Collective: true, Err: fmt.Errorf("jobs: compare: %w", err)}
	}
	base, err := report.ReadWith(opts.Baseline, confine.ReadNamedInput)
	if err != nil {
		return nil, &Error{Code: ExitInput, Collective: true, Err: fmt.Errorf("jobs: compare: baseline: %w", err)}
	}
	cur, err := report.ReadWith(opts.Current, confine.ReadNamedInput)
	if err != nil {
		return nil, &Error{Code: ExitInput, Collective: true, Err: fmt.Errorf("jobs: compare: current: %w", err)}
	}
	res, err := report.Compare(base, cur, report.Options{Tolerances: tols, Default: def, FailOn: failOn,
		AllowDifferentTruth: opts.AllowDifferentTruth, Warn: stderr, RegressionExit: ExitRegression})
	if err != nil {
		return nil, &Error{Code: ExitInput, Collective: true, Err: fmt.Errorf("jobs: compare: %w", err)}
	}
	return res, nil
}

// writeFileAtomic writes path through a temporary file in its folder,
// renamed into place (writeAtomic).
func writeFileAtomic(path string, fill func(io.Writer) error) error {
	return outdir.WriteAtomic(filepath.Dir(path), filepath.Base(path), fill)
}

// checkOutputPath refuses, before any work, an output file path that
// cannot be written: a directory, or one whose folder is missing or not
// writable (a usage error, exit 2; a write that fails later is exit 1).
func checkOutputPath(p string) error {
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		return errors.New("is a directory")
	}
	dir := filepath.Dir(p)
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("its folder: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("its folder %s is not a directory", dir)
	}
	if err := syscall.Access(dir, 2); err != nil { // W_OK
		return fmt.Errorf("its folder %s is not writable: %w", dir, err)
	}
	return nil
}
