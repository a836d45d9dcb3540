package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/testhook"
	"github.com/canopy-hpc/canopy/mpi"
)

// CommFactory starts the communicator for a job and returns it with its
// finalizer. The default is the cgo MPI binding (see mpi.go); tests pass
// an in-process one.
type CommFactory func() (mpi.Comm, func() error, error)

// Main is canopy's command line: it parses args (args[0] is the program
// name), runs the command and returns the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return MainWith(ctx, args, stdout, stderr, collective.World)
}

// MainWith is Main with a chosen communicator factory.
func MainWith(ctx context.Context, args []string, stdout, stderr io.Writer, newComm CommFactory) (exit int) {
	// Before MPI starts we do not know our rank from MPI; the launcher's
	// environment tells it, so a usage error is printed once, by rank 0.
	errw := stderr
	if launcherRank() > 0 {
		errw = io.Discard
	}
	time.Sleep(testhook.StartDelay(launcherRank()))
	if path := os.Getenv(ProfileEnv); path != "" {
		stop, err := startProfile(path)
		if err != nil {
			return failPreMPI(ctx, ExitUsage, false, errw, stderr, err)
		}
		// the profile is this rank's own file: a write or close error is
		// said by this rank, and a run that ended well exits 1
		defer func() {
			if err := stop(); err != nil {
				collective.SayLine(stderr, "canopy: ", err)
				if exit == ExitOK {
					exit = ExitInternal
				}
			}
		}()
	}
	code := ExitOK
	app := &cli.App{
		Name:  "canopy",
		Usage: "evaluate DeepForest detectors on many ranks with one-GPU metrics",
		Description: "Run under mpirun or srun; every rank scores the same merged detections, so the\n" +
			"metrics are bit-identical for any number of ranks.\n\n" + ExitTable,
		Writer:          stdout,
		ErrWriter:       errw,
		HideHelpCommand: true,
		ExitErrHandler:  func(*cli.Context, error) {},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return usageError(err)
		},
		Commands: []*cli.Command{
			evalCommand(&code, stdout, errw, stderr, newComm),
			predictCommand(&code, stdout, stderr, newComm),
			evalCropsCommand(&code, stdout, stderr, newComm),
			doctorCommand(&code, stdout, stderr, newComm),
			gpuPlanCommand(&code, stdout, stderr),
			CompareCommand(&code, stdout, stderr),
			{
				Name:  "version",
				Usage: "print canopy's version and build",
				Action: func(c *cli.Context) error {
					if c.NArg() > 0 {
						return usageError(fmt.Errorf("version takes no arguments, got %q", c.Args().Slice()))
					}
					fmt.Fprintf(stdout, "canopy %s (%s, git %s)\nbuild: %s\n", output.Version, runtime.Version(), output.GitRevision(), cuda.Build())
					if why := modelsel.NoGPU(); why != "" {
						fmt.Fprintf(stdout, "GPU: none usable, so the CPU: %s\n", why)
					}
					return nil
				},
			},
		},
	}
	app.CustomAppHelpTemplate = cli.AppHelpTemplate
	if err := app.RunContext(ctx, reorder(app, args)); err != nil {
		c := Code(err)
		if c == ExitInternal && isUsage(err) {
			c = ExitUsage
		}
		return failPreMPI(ctx, c, c == ExitUsage, errw, stderr, err)
	}
	return code
}

// preMPIGrace is how long a rank other than 0 holds back its exit after
// an error found before MPI starts (a usage error, a bad setting), or
// after a launcher mismatch, where MPI started each process alone. Every
// rank usually finds the same error, and only rank 0 prints it; a
// launcher that sees a rank exit non-zero stops the others, so a rank
// that exited at once could have rank 0 stopped before it printed (seen
// under load: exit 2 with no message). Rank 0's exit ends the job first.
// Were rank 0 not to fail (the error is this rank's alone: a file only
// its node lacks, a profile it cannot write), this rank is still running
// when the grace ends: it says the error with its rank and exits, and the
// launcher ends the job, so nothing hangs and nothing goes unsaid.
var preMPIGrace = 3 * time.Second

// holdBack returns code, first waiting preMPIGrace on a rank other than 0
// when code is an error. A rank the launcher signals during the wait (ctx
// ends: Open MPI answers rank 0's exit with SIGTERM, which canopy catches)
// returns at once and says nothing; one still running after the wait calls
// say with stderr (nil says nothing: a launcher mismatch, which every
// process meets alike and launcher rank 0 says).
func holdBack(ctx context.Context, code int, stderr io.Writer, say func(io.Writer)) int {
	if code == ExitOK || launcherRank() <= 0 {
		return code
	}
	t := time.NewTimer(preMPIGrace)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return code
	case <-t.C:
	}
	if say != nil && ctx.Err() == nil {
		say(stderr)
	}
	return code
}

// failPreMPI says err, an error found before MPI starts, and returns
// code: rank 0 says it at once on errw (the other ranks' errw discards
// it), a rank other than 0 after holdBack's wait, on stderr with its rank,
// if the launcher has not ended it by then. hint adds the pointer to
// --help.
func failPreMPI(ctx context.Context, code int, hint bool, errw, stderr io.Writer, err error) int {
	say := func(w io.Writer, prefix string) {
		collective.SayLine(w, prefix, err)
		if hint {
			fmt.Fprintln(w, "run 'canopy --help' for usage")
		}
	}
	say(errw, "canopy: ")
	return holdBack(ctx, code, stderr, func(w io.Writer) { say(w, rankPrefix()) })
}

// rankPrefix starts the line of a rank that says a pre-MPI error of its
// own: its launcher rank and host, as collective.LogPrefix does once MPI
// has started.
func rankPrefix() string {
	host, _ := os.Hostname()
	n := "?"
	if size, _, ok := collective.LauncherSize(); ok {
		n = strconv.Itoa(size)
	}
	return collective.RankPrefix(launcherRank(), n, host)
}

// isUsage recognises urfave/cli's own parse errors.
func isUsage(err error) bool {
	s := err.Error()
	return strings.Contains(s, "flag provided but not defined") || strings.Contains(s, "Required flag") ||
		strings.Contains(s, "No help topic") || strings.Contains(s, "invalid value")
}

// launcherRank reads the rank the launcher put in the environment (Open
// MPI, MPICH/PMI, Slurm), -1 when there is none.
func launcherRank() int {
	for _, k := range []string{"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"} {
		if v, ok := os.LookupEnv(k); ok {
			if r, err := strconv.Atoi(v); err == nil {
				return r
			}
		}
	}
	return -1
}

// reorder moves a command's flags in front of its positional arguments:
// urfave/cli v2 stops reading flags at the first positional argument, and
// canopy accepts flags on both sides. "--" ends flag reading.
func reorder(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	var cmd *cli.Command
	ci := -1
	for i := 1; i < len(args); i++ {
		if !strings.HasPrefix(args[i], "-") {
			cmd = app.Command(args[i])
			ci = i
			break
		}
	}
	if cmd == nil {
		return args
	}
	takesValue := map[string]bool{}
	for _, f := range cmd.Flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			takesValue[n] = !isBool
		}
	}
	out := append([]string(nil), args[:ci+1]...)
	var pos []string
	rest := args[ci+1:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			pos = append(pos, rest[i+1:]...)
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			out = append(out, a)
			name := strings.TrimLeft(a, "-")
			if !strings.Contains(name, "=") && takesValue[name] && i+1 < len(rest) {
				i++
				out = append(out, rest[i])
			}
			continue
		}
		pos = append(pos, a)
	}
	if len(pos) > 0 {
		out = append(out, "--")
		out = append(out, pos...)
	}
	return out
}

// jobOptions are the settings runJob applies to every job.
type jobOptions struct {
	collectiveTimeout time.Duration
	// out is the job's output folder, where a failing rank leaves a fault
	// marker so the ranks the launcher then stops stay silent.
	out string
	// verbose prints every rank's line for an interrupt or a fault, not
	// one per job.
	verbose bool
}

// interruptGrace is how long a rank other than 0 keeps its interrupt line
// back, so that when the whole job was signalled rank 0 is usually the one
// that says it. Which rank says it is outdir.ClaimSay's, not a race
// against this wait: a rank signalled alone says it after the wait, and a
// rank 0 later than the wait stays silent.
var interruptGrace = 3 * time.Second

// runShardJob is the action eval and predict end with: runJob with the
// flags both take (--collective-timeout, --verbose) and out, the command's
// output folder, setting *code. job is told whether it runs on rank 0 and
// the collective timeout.
func runShardJob(c *cli.Context, code *int, newComm CommFactory, stderr io.Writer, out string, job func(comm mpi.Comm, rank0 bool, timeout time.Duration) error) error {
	timeout := c.Duration("collective-timeout")
	opt := jobOptions{collectiveTimeout: timeout, out: out, verbose: c.Bool("verbose")}
	*code = runJob(c.Context, newComm, stderr, opt, func(comm mpi.Comm) error {
		return job(comm, comm.Rank() == 0, timeout)
	})
	return nil
}

// rankOutputs are the fields of a command's config that differ by rank:
// its stdout (rank 0's alone), its progress lines (rank 0's, on stderr)
// and the collective timeout.
type rankOutputs struct {
	stdout, progress *io.Writer
	timeout          *time.Duration
}

// runRankedJob is runShardJob for the commands whose rank 0 alone prints
// its table and its progress (predict, predict --tile and eval --tile,
// eval-crops): it sets o on each rank, then runs job.
func runRankedJob(c *cli.Context, code *int, newComm CommFactory, stderr io.Writer, out string, o rankOutputs, job func(comm mpi.Comm) error) error {
	return runShardJob(c, code, newComm, stderr, out, func(comm mpi.Comm, rank0 bool, timeout time.Duration) error {
		if !rank0 {
			*o.stdout = nil
		} else {
			*o.progress = stderr
		}
		*o.timeout = timeout
		return job(comm)
	})
}

// runJob starts the communicator, checks the launcher, runs job and applies
// the error rule: a collective error is printed by rank 0 and every rank
// returns its code; a local error is printed by its rank with rank and
// host, then the job is aborted with the code so no peer waits.
func runJob(ctx context.Context, newComm CommFactory, stderr io.Writer, opt jobOptions, job func(mpi.Comm) error) int {
	comm, finalize, err := newComm()
	if err != nil {
		collective.SayLine(stderr, "canopy: ", err)
		return ExitMPI
	}
	err = collective.CheckLauncher(comm)
	if err == nil && opt.collectiveTimeout > 0 {
		err = collective.SetTimeout(comm, opt.collectiveTimeout)
	}
	if err == nil {
		err = job(comm)
	}
	if err == nil {
		if ferr := finalize(); ferr != nil {
			collective.PrintErr(stderr, comm, ferr)
			return ExitMPI
		}
		return ExitOK
	}
	code := Code(err)
	var e *Error
	if errors.As(err, &e) && e.Collective {
		// A launcher mismatch leaves every process rank 0 of its own
		// world: the launcher's rank decides who prints.
		if comm.Rank() == 0 && launcherRank() <= 0 {
			collective.PrintErr(stderr, comm, err)
		}
		finalize()
		if comm.Size() == 1 && launcherRank() > 0 {
			// a mismatch: this process's world is itself, so its
			// finalize waits for nobody, least of all the launcher's
			// rank 0 that says why; hold back as before MPI starts
			return holdBack(ctx, code, stderr, nil)
		}
		return code
	}
	reportLocal(stderr, comm, opt, code, err)
	comm.Abort(code)
	return code // reached only by implementations whose Abort returns
}

// reportLocal prints a local error once per job. A fault is printed by its
// rank, which first leaves a marker in the output folder: the launcher
// answers MPI_Abort by signalling the other ranks, which then see an
// interrupt, and the marker keeps them silent. An interrupt is printed by
// the rank that claims it first in the output folder (outdir.ClaimSay):
// rank 0 at once, another rank after interruptGrace (it alone was
// signalled, or rank 0 is late); the others stay silent, and keep their
// abort until the line is out. --verbose prints every line.
func reportLocal(stderr io.Writer, comm mpi.Comm, opt jobOptions, code int, err error) {
	if opt.verbose {
		collective.PrintErr(stderr, comm, err)
		return
	}
	if code != ExitResumable {
		if opt.out != "" {
			outdir.WriteFault(opt.out, comm.Rank(), code, err) // canopy doctor --out reads the code
		}
		collective.PrintErr(stderr, comm, err)
		return
	}
	time.Sleep(testhook.ReportDelay(comm.Rank()))
	if comm.Rank() != 0 {
		time.Sleep(interruptGrace)
	}
	if opt.out == "" {
		collective.PrintErr(stderr, comm, err)
		return
	}
	if outdir.HasFault(opt.out) {
		return // a peer's fault stopped this rank; that rank has said why
	}
	done, say := outdir.ClaimSay(opt.out)
	if say {
		collective.PrintErr(stderr, comm, err)
	}
	done()
}

// ProfileEnv names a file prefix: when set, every rank writes a CPU
// profile to PREFIX.rankN (N from the launcher's environment, 0 alone).
const ProfileEnv = "CANOPY_CPUPROFILE"

// startProfile starts the rank's CPU profile; the function it returns
// stops it and returns the first error of writing or closing the file
// (pprof itself drops its write errors).
func startProfile(prefix string) (func() error, error) {
	f, err := os.Create(fmt.Sprintf("%s.rank%d", prefix, max(launcherRank(), 0)))
	if err != nil {
		return nil, fmt.Errorf("jobs: %s: %w", ProfileEnv, err)
	}
	pf := &profileFile{f: f}
	if err := pprof.StartCPUProfile(pf); err != nil {
		f.Close()
		return nil, fmt.Errorf("jobs: %s: %w", ProfileEnv, err)
	}
	return func() error {
		pprof.StopCPUProfile()
		err := pf.err
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("jobs: %s: the CPU profile is incomplete: %w", ProfileEnv, err)
		}
		return nil
	}, nil
}

// profileFile is the profile's file keeping its first write error.
type profileFile struct {
	f   *os.File
	err error
}

func (p *profileFile) Write(b []byte) (int, error) {
	n, err := p.f.Write(b)
	if err != nil && p.err == nil {
		p.err = err
	}
	return n, err
}
