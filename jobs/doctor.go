package jobs

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/canopy-hpc/canopy/infer/gemm"
	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/tilerun"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/mpi"
)

type rankInfo struct {
	Rank, Size, LocalRank, LocalSize int
	Host, PID                        string
	GOMAXPROCS, NumCPU               int
	Affinity                         string
	VisibleGPUs                      string
	Device                           string
	Launcher                         string
}

// doctorDevice is where --device auto would put this rank: "cpu", or
// "cuda:N" with its sharing (the cuda build).
func doctorDevice(localRank, localSize int) string {
	n := 0
	if modelsel.HaveCUDA {
		var err error
		if n, err = modelsel.CountDevices(); err != nil {
			return "cuda?(" + err.Error() + ")"
		}
	}
	p, err := cuda.Place(cuda.Request{Kind: "auto", Index: -1}, localRank, localSize, n, modelsel.HaveCUDA)
	if err != nil || p.Kind == "cpu" {
		return "cpu"
	}
	if p.Sharing > 1 {
		return fmt.Sprintf("cuda:%d(x%d)", p.Index, p.Sharing)
	}
	return fmt.Sprintf("cuda:%d", p.Index)
}

func localInfo(c mpi.Comm) rankInfo {
	ri := rankInfo{Rank: c.Rank(), Size: c.Size(), LocalRank: c.LocalRank(), LocalSize: c.LocalSize(), Host: c.Host(),
		PID: fmt.Sprint(os.Getpid()), GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(), Device: "cpu"}
	ri.Affinity = "?"
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
				ri.Affinity = strings.TrimSpace(v)
			}
		}
	}
	ri.VisibleGPUs = "unset"
	if v, ok := os.LookupEnv("CUDA_VISIBLE_DEVICES"); ok {
		ri.VisibleGPUs = v
	}
	ri.Device = doctorDevice(c.LocalRank(), c.LocalSize())
	ri.Launcher = "none"
	if n, from, ok := collective.LauncherSize(); ok {
		ri.Launcher = fmt.Sprintf("%s=%d", from, n)
	}
	return ri
}

// doctor gathers every rank's view of its environment and rank 0 prints it.
func doctor(c mpi.Comm, stdout io.Writer) error {
	b, _ := json.Marshal(localInfo(c))
	parts, err := mpi.AllgatherBytes(c, b)
	if err != nil {
		return &Error{Code: ExitMPI, Err: fmt.Errorf("jobs: doctor: %w", err)}
	}
	if c.Rank() != 0 {
		return nil
	}
	fmt.Fprintf(stdout, "canopy %s (%s, git %s)\nMPI: %s, %d rank(s)\nbuild: %s, SGEMM %s (%s kernels), convolution kernels %s\n",
		output.Version, runtime.Version(), output.GitRevision(), c.Implementation(), c.Size(), cuda.Build(), gemm.Backend(), gemm.Core(), gemm.Kernels())
	if why := modelsel.NoGPU(); why != "" {
		fmt.Fprintf(stdout, "GPU: none usable by rank 0, which runs on the CPU: %s\n", why)
	}
	fmt.Fprintln(stdout)
	fmt.Fprintf(stdout, "%-5s %-20s %-8s %-6s %-10s %-8s %-12s %-8s %s\n", "rank", "host", "local", "pid", "GOMAXPROCS", "cpus", "affinity", "device", "CUDA_VISIBLE_DEVICES / launcher")
	for _, p := range parts {
		var ri rankInfo
		if err := json.Unmarshal(p, &ri); err != nil {
			return &Error{Code: ExitInternal, Collective: true, Err: fmt.Errorf("jobs: doctor: %w", err)}
		}
		p := box.Printable // the host name and the environment are printed, not obeyed
		fmt.Fprintf(stdout, "%-5d %-20s %-8s %-6s %-10d %-8d %-12s %-8s %s / %s\n", ri.Rank, p(ri.Host),
			fmt.Sprintf("%d/%d", ri.LocalRank, ri.LocalSize), p(ri.PID), ri.GOMAXPROCS, ri.NumCPU, p(ri.Affinity), p(ri.Device), p(ri.VisibleGPUs), p(ri.Launcher))
	}
	return nil
}

// faultOf reads the fault markers a failed run's ranks left (the lowest
// rank's): its message and exit code; ok is false when there is none or
// its code is not recorded.
func faultOf(dir string) (msg string, code int, ok bool) {
	m, _ := filepath.Glob(filepath.Join(dir, outdir.FaultPrefix+"-*"))
	sort.Strings(m)
	for _, f := range m {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		c, rest, found := strings.Cut(string(b), " ")
		if n, err := strconv.Atoi(c); found && err == nil {
			return box.Printable(rest), n, true
		}
	}
	return "", 0, false
}

// outState tells what an output folder holds (canopy doctor --out): the
// exit code (0 complete, 8 resumable, 1 neither) and a sentence. It only
// reads: it neither takes the lock nor tidies.
func outState(dir string) (int, string) {
	if _, err := os.Stat(dir); err != nil {
		return ExitInternal, fmt.Sprintf("no output folder (%v)", err)
	}
	busy := ""
	if f, err := os.Open(filepath.Join(dir, outdir.LockName)); err == nil {
		h := outdir.ReadHolder(f)
		if syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB) != nil {
			busy = fmt.Sprintf("in use by a running canopy job (%s); ", h)
		}
		f.Close()
	}
	has := func(n string) bool { _, err := os.Stat(filepath.Join(dir, n)); return err == nil }
	if _, _, err := outdir.ReadJournal(dir); err != nil {
		return ExitInternal, fmt.Sprintf("%sdamaged: %v; canopy cannot finish or undo that publication and refuses the folder (exit 1)", busy, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, outdir.PreviousDir, outdir.MovedList)); has(outdir.PreviousDir) && (err == nil && json.Unmarshal(b, new([]string)) != nil || err != nil && !os.IsNotExist(err)) {
		return ExitInternal, fmt.Sprintf("%sdamaged: the run set aside in %s has an unreadable %s; canopy cannot put it back and refuses the folder (exit 1): keep what you need of it and remove %s, or choose another --out", busy, outdir.PreviousDir, outdir.MovedList, outdir.PreviousDir)
	}
	if has(outdir.PreviousDir) && has(outdir.JournalName) {
		return ExitInternal, busy + "a --force run was stopped while publishing its complete outputs; the next canopy run in this folder finishes the publication and removes the previous run set aside in " + outdir.PreviousDir
	}
	if has(outdir.PreviousDir) {
		return ExitInternal, busy + "a --force run stopped before it committed (nothing of it is kept); its previous run is set aside in " + outdir.PreviousDir + " and the next canopy run in this folder puts it back"
	}
	if has("report.json") && !has(outdir.JournalName) {
		if bad := verifyOutputs(dir); bad != "" {
			return ExitInternal, busy + bad
		}
		return ExitOK, busy + "complete: " + completeSet(dir)
	}
	if has(outdir.JournalName) {
		return ExitInternal, busy + "a run was stopped while publishing its outputs; the next canopy run in this folder finishes the publication"
	}
	if !has(outdir.ManifestFile) {
		return ExitInternal, busy + "no canopy run (no manifest.json, no report.json)"
	}
	if b, err := os.ReadFile(filepath.Join(dir, outdir.ManifestFile)); err != nil || json.Unmarshal(b, &manifest{}) != nil {
		return ExitInternal, busy + "manifest.json is empty, truncated or unreadable (a run killed as it started, or a damaged folder): --resume refuses it (exit 2); start again with --force"
	}
	if code, msg, ok := tileOutState(dir); ok {
		return code, busy + msg
	}
	files, err := parts.ReadAll(dir)
	if err != nil {
		return ExitInternal, busy + err.Error()
	}
	done, st, err := parts.Decode(files, math.MaxInt)
	if err != nil {
		return ExitInternal, busy + err.Error()
	}
	if fault, code, ok := faultOf(dir); ok && (code == ExitUsage || code == ExitInput || code == ExitModel) {
		return ExitInternal, fmt.Sprintf("%sa run that failed (exit %d: %s), not an interruption: --resume with the same inputs fails the same way; fix the cause, then --resume continues from %d saved image(s) (or start again with --force)",
			busy, code, fault, len(done))
	}
	job := kindEval
	if b, err := os.ReadFile(filepath.Join(dir, outdir.ManifestFile)); err == nil {
		var m manifest
		if json.Unmarshal(b, &m) == nil {
			job = m.kind()
		}
	}
	if len(done) == 0 {
		return ExitResumable, busy + savedNothing(job)
	}
	return ExitResumable, fmt.Sprintf("%sresumable: an interrupted %s run, %d image(s) saved in %d part file(s) (%d torn record(s) dropped); continue it with canopy %s --resume and the same inputs, at any rank count",
		busy, job, len(done), len(files), st.Dropped, job)
}

// savedNothing is doctor's verdict on a run of kind that was stopped (not
// failed) before it saved any work: --resume continues it, from the start,
// as it does any stopped run (so does a run without --resume: a folder
// that holds no saved work needs no --force).
func savedNothing(kind string) string {
	return fmt.Sprintf("resumable: an interrupted %s run that saved no work yet (stopped as it started); canopy %s --resume with the same inputs runs it from the start, at any rank count (so would a run without --resume: nothing is lost)", kind, kind)
}

// tileOutState is outState for an unfinished tile run (ok false for
// another run): how many rasters are published and intact, how many
// windows the part files hold, and the command that continues it.
func tileOutState(dir string) (int, string, bool) {
	m, ok := tilerun.ReadPublished(dir)
	if !ok {
		return 0, "", false
	}
	finished, damaged := m.Finished, m.Damaged
	windows := 0
	_, st, files, err := parts.Scan(dir, math.MaxInt, func(int) bool { windows++; return false })
	if err != nil {
		return ExitInternal, err.Error(), true
	}
	if fault, code, ok := faultOf(dir); ok && (code == ExitUsage || code == ExitInput || code == ExitModel) {
		return ExitInternal, fmt.Sprintf("a %s run that failed (exit %d: %s), not an interruption: --resume with the same inputs fails the same way; fix the cause, then %s --resume continues (%d of %d rasters published)",
			m.Command, code, fault, m.Command, finished, m.Rasters), true
	}
	if finished == 0 && windows == 0 {
		return ExitResumable, savedNothing(m.Command), true
	}
	msg := fmt.Sprintf("resumable: an interrupted %s run, %d of %d rasters published, %d window record(s) in %d part file(s) (%d torn record(s) dropped)",
		m.Command, finished, m.Rasters, windows, len(files), st.Dropped)
	if damaged > 0 {
		msg += fmt.Sprintf("; %d published raster(s) changed or removed since (made again from the saved windows)", damaged)
	}
	return ExitResumable, msg + fmt.Sprintf("; continue it with canopy %s --resume and the same inputs, at any rank count", m.Command), true
}

// recordedOutputs reads the sha256 of each output that report.json
// records: predict's and the --tile runs' "outputs", eval's
// "run.outputs". derived lists the outputs made from report.json's own
// bytes (eval's report.html and COCO files), which it cannot record.
func recordedOutputs(dir string) (outs map[string]string, derived []string, err error) {
	b, err := readRegular(filepath.Join(dir, "report.json"), maxReportJSON)
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
		return rep.Run.Outputs, []string{"report.html", output.COCOTruthFile, output.COCOPredFile}, nil
	}
	return rep.Outputs, nil, nil
}

// verifyOutputs compares the files of a published run with the sha256s
// its report.json records; it names each output missing, changed or
// extra (a canopy output the run did not write), or returns "".
func verifyOutputs(dir string) string {
	outs, derived, err := recordedOutputs(dir)
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
	for _, name := range reportFiles {
		_, recorded := outs[name]
		if name == "report.json" || recorded || slices.Contains(derived, name) {
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

// completeSet names a verified run's outputs.
func completeSet(dir string) string {
	outs, derived, _ := recordedOutputs(dir)
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

// maxReportJSON bounds the report.json doctor --out reads (a run's is a
// few MB even with thousands of rasters).
const maxReportJSON = 1 << 30

// readRegular reads a regular file of at most max bytes.
func readRegular(path string, max int64) ([]byte, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > max {
		return nil, fmt.Errorf("%s is not a regular file of at most %d bytes", filepath.Base(path), max)
	}
	return os.ReadFile(path)
}
