package jobs

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/canopy-hpc/canopy/infer/gemm"
	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/imagesrun"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/runkind"
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

// outState tells what an output folder holds (canopy doctor --out): the
// exit code (0 complete, 8 resumable, 1 neither) and a sentence. It only
// reads: it neither takes the lock nor tidies.
func outState(dir string) (int, string) {
	if _, err := os.Stat(dir); err != nil {
		return ExitInternal, fmt.Sprintf("no output folder (%v)", err)
	}
	busy := outdir.Busy(dir)
	has := func(n string) bool { _, err := os.Stat(filepath.Join(dir, n)); return err == nil }
	if msg, ok := outdir.Unsettled(dir); ok {
		return ExitInternal, busy + msg
	}
	if has(output.ReportJSON) && !outdir.Publishing(dir) {
		if bad := output.Verify(dir); bad != "" {
			return ExitInternal, busy + bad
		}
		return ExitOK, busy + "complete: " + output.Complete(dir)
	}
	if outdir.Publishing(dir) {
		return ExitInternal, busy + "a run was stopped while publishing its outputs; the next canopy run in this folder finishes the publication"
	}
	if !has(outdir.ManifestFile) {
		return ExitInternal, busy + "no canopy run (no manifest.json, no report.json)"
	}
	if b, err := os.ReadFile(filepath.Join(dir, outdir.ManifestFile)); err != nil || json.Unmarshal(b, &imagesrun.Manifest{}) != nil {
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
	if fault, code, ok := outdir.Failed(dir); ok {
		return ExitInternal, fmt.Sprintf("%sa run that failed (exit %d: %s), not an interruption: --resume with the same inputs fails the same way; fix the cause, then --resume continues from %d saved image(s) (or start again with --force)",
			busy, code, fault, len(done))
	}
	job := runkind.Eval
	if b, err := os.ReadFile(filepath.Join(dir, outdir.ManifestFile)); err == nil {
		var m imagesrun.Manifest
		if json.Unmarshal(b, &m) == nil {
			job = m.Kind()
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
	if fault, code, ok := outdir.Failed(dir); ok {
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
