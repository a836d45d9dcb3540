package output

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/canopy-hpc/canopy/internal/outdir"
)

// maxReportJSON bounds the report.json doctor --out reads (a run's is a
// few MB even with thousands of rasters).
const maxReportJSON = 1 << 30

// RecordedOutputs reads the sha256 of each output that dir's report.json
// records: predict's and the --tile runs' "outputs", eval's
// "run.outputs". derived lists the outputs made from report.json's own
// bytes (eval's report.html and COCO files), which it cannot record.
func RecordedOutputs(dir string) (outs map[string]string, derived []string, err error) {
	b, err := outdir.ReadRegular(filepath.Join(dir, ReportJSON), maxReportJSON)
	if err != nil {
		return nil, nil, err
	}
	var rep struct {
		Outputs map[string]string `json:"outputs"`
		Run     *struct {
			Outputs map[string]string `json:"outputs"`
		} `json:"run"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, nil, err
	}
	if rep.Run != nil { // eval
		return rep.Run.Outputs, []string{ReportHTML, COCOTruthFile, COCOPredFile}, nil
	}
	return rep.Outputs, nil, nil
}

// Verify compares the files of a run published in dir with the sha256s
// its report.json records; it names each output missing, changed or
// extra (a canopy output the run did not write), or returns "".
func Verify(dir string) string {
	outs, derived, err := RecordedOutputs(dir)
	if err != nil {
		return fmt.Sprintf("damaged: report.json is unreadable (%v); the outputs cannot be checked", err)
	}
	if len(outs) == 0 {
		return "damaged: report.json records no outputs (not a canopy report, or one edited); the outputs cannot be checked"
	}
	var missing, changed, extra []string
	for _, name := range sortedKeys(outs) {
		if !filepath.IsLocal(name) {
			return fmt.Sprintf("damaged: report.json records an output outside the folder (%s)", name)
		}
		// only a regular file is hashed: a FIFO put in an output's place
		// would block the read, and a link is not what the run wrote
		p := filepath.Join(dir, name)
		st, err := os.Lstat(p)
		switch {
		case err != nil:
			missing = append(missing, name)
		case !st.Mode().IsRegular():
			changed = append(changed, name+" (not a regular file)")
		default:
			if got, err := outdir.HashFile(p); err != nil || got != outs[name] {
				changed = append(changed, name)
			}
		}
	}
	for _, name := range Names.Reports {
		_, recorded := outs[name]
		if name == ReportJSON || recorded || slices.Contains(derived, name) {
			continue
		}
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			extra = append(extra, name)
		}
	}
	var says []string
	if len(missing) > 0 {
		says = append(says, "missing: "+strings.Join(missing, ", "))
	}
	if len(changed) > 0 {
		says = append(says, "changed since the run wrote them (sha256 differs from report.json's): "+strings.Join(changed, ", "))
	}
	if len(extra) > 0 {
		says = append(says, "not this run's outputs (report.json does not record them): "+strings.Join(extra, ", "))
	}
	if len(says) == 0 {
		return ""
	}
	return "damaged: report.json's outputs do not match the folder; " + strings.Join(says, "; ") + "; run again with --force to replace the run"
}

// Complete names a verified run's outputs.
func Complete(dir string) string {
	outs, derived, _ := RecordedOutputs(dir)
	var also []string
	for _, n := range derived {
		if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
			also = append(also, n)
		}
	}
	msg := "report.json and the outputs it records (" + strings.Join(sortedKeys(outs), ", ") + ") are one run's, sha256 verified"
	if len(also) > 0 {
		msg += "; made from report.json: " + strings.Join(also, ", ")
	}
	return msg
}

func sortedKeys(m map[string]string) []string {
	k := make([]string, 0, len(m))
	for n := range m {
		k = append(k, n)
	}
	sort.Strings(k)
	return k
}
