// Package testhook holds the commands' test hooks, all in this file: the
// environment variables a test sets (CANOPY_TEST_*, CANOPY_TILE_DEAL) and
// InterruptSelf, which a test of package jobs replaces. Each is inert when
// unset.
// infer/replay has its own (FailEnv, SlowEnv); the seams that stand for a
// room's own function (a part file's creation, a crop model's loading, a
// raster's output, a read of compare --html) live with that room.
package testhook

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Perturb reports whether rank is the one PerturbEnv names.
func Perturb(rank int) bool {
	v, ok := os.LookupEnv(PerturbEnv)
	return ok && v == strconv.Itoa(rank)
}

// PerturbEnv is a test hook: the rank it names perturbs its metric digest,
// so the agreement check must fail with exit 6.
const PerturbEnv = "CANOPY_TEST_PERTURB_RANK"

// StopEnv is a test hook: the rank it names freezes itself with SIGSTOP
// before the gather ("R"), or before the job's first collective, the
// broadcast of the inputs ("R:start"), so the collective watchdog must fire
// on the others; "R:in-NAME" freezes it inside the collective NAME of the
// MPI binding (Allgatherv, Bcast, ...), after its arrival round, so the
// stall guard must; "0:html" freezes rank 0 while it writes report.html (a
// kill there must leave no report.json).
const StopEnv = "CANOPY_TEST_STOP_RANK"

// Stop freezes this rank (SIGSTOP) at the point StopEnv names.
func Stop(rank int, at string) {
	v, ok := os.LookupEnv(StopEnv)
	r, where, _ := strings.Cut(v, ":")
	if where == "" {
		where = "gather"
	}
	if ok && r == strconv.Itoa(rank) && where == at {
		stopSelf()
	}
}

// stopSelf is Stop's SIGSTOP; this package's test replaces it, so that a
// wrong match fails at once rather than freezing the test binary. The
// signal may reach another of the process's threads and stop the process
// a moment after kill returns; the wait keeps this thread from running on
// meanwhile (it once finished a small Allgatherv it was meant to freeze
// before).
var stopSelf = func() {
	syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	time.Sleep(200 * time.Millisecond)
}

// InterruptEnv is a test hook "RANK:N": that rank signals itself (SIGTERM)
// after N batches, as scancel or a preemption would.
const InterruptEnv = "CANOPY_TEST_INTERRUPT"

// InterruptSelf delivers the hook's signal; tests of package jobs replace
// it, since their ranks share one process.
var InterruptSelf = func(rank int) {
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	time.Sleep(200 * time.Millisecond) // let signal.NotifyContext cancel the context
}

// InterruptAfter is the number of batches after which InterruptEnv
// has rank signal itself (-1: never).
func InterruptAfter(rank int) int {
	v, ok := os.LookupEnv(InterruptEnv)
	if !ok {
		return -1
	}
	r, n, _ := strings.Cut(v, ":")
	if r != strconv.Itoa(rank) {
		return -1
	}
	k, err := strconv.Atoi(n)
	if err != nil {
		return -1
	}
	return k
}

// StaticDeal: CANOPY_TILE_DEAL=static makes a tile run cut each
// round into fixed contiguous blocks, one per rank, instead of dealing
// it at run time (make bench-scale's balance "before").
func StaticDeal() bool { return os.Getenv("CANOPY_TILE_DEAL") == "static" }

// SlowWindow: CANOPY_TEST_SLOW_MS (infer/replay's SlowEnv) makes
// each window of a tile run take that long more to read, so the Slurm
// tests can stop a tile job part way.
func SlowWindow() time.Duration {
	ms, _ := strconv.Atoi(os.Getenv("CANOPY_TEST_SLOW_MS"))
	return time.Duration(ms) * time.Millisecond
}

// StartDelayEnv is a test hook "RANK:MS": that rank waits MS milliseconds
// before it reads its command line, as a rank slow to start on a loaded
// node would, so a peer that fails first must still leave rank 0 time to
// say why.
const StartDelayEnv = "CANOPY_TEST_START_DELAY"

// StartDelay is how long StartDelayEnv has rank wait at start (0: none).
func StartDelay(rank int) time.Duration { return rankDelay(StartDelayEnv, rank) }

// ReportDelayEnv is a test hook "RANK:MS": that rank waits MS milliseconds
// before it reports an interruption, as a rank in the middle of a long
// batch when the signal came would, so a peer must not say it a second
// time meanwhile.
const ReportDelayEnv = "CANOPY_TEST_REPORT_DELAY"

// ReportDelay is how long ReportDelayEnv has rank wait before it reports
// an interruption (0: none).
func ReportDelay(rank int) time.Duration { return rankDelay(ReportDelayEnv, rank) }

// rankDelay reads a "RANK:MS" hook: MS milliseconds for that rank, 0 for
// the others and for a malformed or negative value.
func rankDelay(env string, rank int) time.Duration {
	r, ms, ok := strings.Cut(os.Getenv(env), ":")
	if !ok || r != strconv.Itoa(rank) {
		return 0
	}
	n, err := strconv.Atoi(ms)
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(n) * time.Millisecond
}

// StallFloorEnv is a test hook: a duration (Go syntax, "5s") that replaces
// StallFloor's 60 s, so a test of the stall guard need not wait a minute.
const StallFloorEnv = "CANOPY_TEST_STALL_FLOOR"

// StallFloor is the least time a collective may take, once every rank has
// entered it, before the stall guard ends the job: 60 s, or StallFloorEnv's
// value when that is a positive duration.
func StallFloor() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(StallFloorEnv)); err == nil && d > 0 {
		return d
	}
	return 60 * time.Second
}
