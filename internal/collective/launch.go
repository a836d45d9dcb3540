package collective

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/testhook"
	"github.com/canopy-hpc/canopy/mpi"
)

// LogPrefix is the prefix of every line canopy writes to stderr once MPI
// runs: rank, size and host, so interleaved logs of many ranks stay
// readable.
func LogPrefix(c mpi.Comm) string {
	return RankPrefix(c.Rank(), strconv.Itoa(c.Size()), c.Host())
}

// RankPrefix is LogPrefix from its parts, for a rank that speaks before
// MPI starts (its rank and size read from the launcher's environment).
func RankPrefix(rank int, size, host string) string {
	return fmt.Sprintf("canopy: rank %d/%s (%s): ", rank, size, host)
}

// LauncherSize reads the job size the launcher announced, if any:
// Open MPI's OMPI_COMM_WORLD_SIZE, PMI's PMI_SIZE, PMIx's PMIX_SIZE, or,
// inside a Slurm step (SLURM_STEP_ID set), SLURM_STEP_NUM_TASKS or
// SLURM_NTASKS. The variable's name is returned for messages.
func LauncherSize() (int, string, bool) {
	for _, k := range []string{"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"} {
		if n, ok := envInt(k); ok {
			return n, k, true
		}
	}
	if _, inStep := os.LookupEnv("SLURM_STEP_ID"); inStep {
		for _, k := range []string{"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"} {
			if n, ok := envInt(k); ok {
				return n, k, true
			}
		}
	}
	return 0, "", false
}

func envInt(k string) (int, bool) {
	v, ok := os.LookupEnv(k)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	return n, err == nil && n > 0
}

// CheckLauncher compares the MPI size with the launcher's. A mismatch is
// typically srun with a --mpi plugin the MPI library cannot use: N
// independent 1-rank jobs start, each of which would evaluate everything.
func CheckLauncher(c mpi.Comm) error {
	want, from, ok := LauncherSize()
	if !ok || want == c.Size() {
		return nil
	}
	hint := ""
	if c.Size() == 1 {
		hint = "; each process started as its own 1-rank job (under srun use --mpi=pmix for Open MPI)"
	}
	return &errkind.Error{Code: errkind.ExitMPI, Collective: true,
		Err: fmt.Errorf("jobs: MPI has %d rank(s) but the launcher started %d (%s)%s", c.Size(), want, from, hint)}
}

// SetTimeout turns on the collective watchdog when the communicator has
// one (the cgo binding does; the in-process one needs none), and its stall
// guard: a collective that every rank entered but that has not completed
// max(60 s, 3d) later (twice that on ranks other than 0) is said by the
// rank that sees it, and the job is aborted with exit 5.
func SetTimeout(c mpi.Comm, d time.Duration) error {
	if w, ok := c.(interface{ SetCollectiveTimeout(time.Duration) error }); ok {
		if err := w.SetCollectiveTimeout(d); err != nil {
			return &errkind.Error{Code: errkind.ExitMPI, Err: err}
		}
	}
	if w, ok := c.(stallGuarded); ok {
		rank := c.Rank()
		w.SetStallHandler(testhook.StallFloor(), func(err error) {
			PrintErr(os.Stderr, c, err)
			c.Abort(errkind.ExitMPI)
		}, func(name string) { testhook.Stop(rank, "in-"+name) })
	}
	return nil
}

// stallGuarded is a communicator with the stall guard (cmpi's): a
// collective every rank entered that does not complete in time is said by
// the rank that sees it, and the job is aborted with exit 5, where it
// would otherwise wait for the launcher's or the batch system's limit.
type stallGuarded interface {
	SetStallHandler(floor time.Duration, onStall func(error), afterArrive func(name string))
}

// PrintErr writes err once per line with the rank prefix.
func PrintErr(w io.Writer, c mpi.Comm, err error) {
	SayLine(w, LogPrefix(c), err)
}

// SayLine writes one line of canopy's stderr: prefix, then msg with what
// a terminal would act on escaped (box.Printable). Errors, warnings and
// notes quote text from the files canopy reads (pickle names, dict and
// state-dict keys, label names, image paths, raster names): this is the
// one place that text is made harmless, whatever path brought it, and a
// newline in it cannot start a line of its own.
func SayLine(w io.Writer, prefix string, msg any) {
	fmt.Fprintf(w, "%s%s\n", prefix, box.Printable(fmt.Sprint(msg)))
}
