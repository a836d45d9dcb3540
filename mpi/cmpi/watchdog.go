package cmpi

/*
#include <mpi.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>

static MPI_Datatype wd_byte(void) { return MPI_BYTE; }

// cmpi_arrive is the watchdog's arrival round before a collective: every
// rank sends its collective sequence number to rank 0; rank 0 answers every
// rank once all have arrived. Each side polls with MPI_Test until done or
// until timeout seconds pass. Rank 0 returns the number of ranks that did
// not arrive and marks them in missing[] (1 = missing), or -2 when a rank
// arrived with another sequence number (its rank in *bad); other ranks
// return 0 on success and -1 on timeout. Buffers are C memory, as
// nonblocking calls require; after a timeout they are left to the abort.
static int cmpi_arrive(MPI_Comm comm, int rank, int size, int64_t seq, double timeout, int tag,
                       int *missing, int *bad) {
	double deadline = MPI_Wtime() + timeout;
	struct timespec nap = {0, 100000}; // 100 µs between polls
	if (rank == 0) {
		int n = size - 1;
		int64_t *got = malloc(sizeof(int64_t) * (n > 0 ? n : 1));
		MPI_Request *req = malloc(sizeof(MPI_Request) * (n > 0 ? n : 1));
		int *done = calloc(n > 0 ? n : 1, sizeof(int));
		for (int r = 1; r < size; r++) MPI_Irecv(&got[r-1], 1, MPI_INT64_T, r, tag, comm, &req[r-1]);
		int left = n;
		while (left > 0) {
			for (int i = 0; i < n; i++) {
				if (done[i]) continue;
				int flag = 0;
				MPI_Test(&req[i], &flag, MPI_STATUS_IGNORE);
				if (flag) { done[i] = 1; left--; }
			}
			if (left == 0) break;
			if (MPI_Wtime() > deadline) {
				for (int i = 0; i < n; i++) missing[i+1] = !done[i];
				return left;
			}
			nanosleep(&nap, NULL);
		}
		for (int i = 0; i < n; i++) {
			if (got[i] != seq) { *bad = i + 1; free(got); free(req); free(done); return -2; }
		}
		int64_t *go = malloc(sizeof(int64_t));
		*go = seq;
		for (int r = 1; r < size; r++) MPI_Isend(go, 1, MPI_INT64_T, r, tag, comm, &req[r-1]);
		MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
		free(go); free(got); free(req); free(done);
		return 0;
	}
	int64_t *buf = malloc(2 * sizeof(int64_t));
	buf[0] = seq;
	MPI_Request req[2];
	MPI_Isend(&buf[0], 1, MPI_INT64_T, 0, tag, comm, &req[0]);
	MPI_Irecv(&buf[1], 1, MPI_INT64_T, 0, tag, comm, &req[1]);
	for (;;) {
		int flag = 0;
		MPI_Testall(2, req, &flag, MPI_STATUSES_IGNORE);
		if (flag) break;
		if (MPI_Wtime() > deadline) return -1;
		nanosleep(&nap, NULL);
	}
	free(buf);
	return 0;
}
*/
import "C"

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unsafe"
)

const watchdogTag = 31337

// TimeoutError reports a collective that did not start on every rank
// within the collective timeout.
type TimeoutError struct {
	Collective string
	Seq        int64
	After      time.Duration
	// Missing lists "rank (host)" of the ranks rank 0 waited for; on other
	// ranks it names rank 0, which had not confirmed that all arrived.
	Missing []string

	// Hosts are the distinct hosts of Missing, in rank order: on a cluster
	// the dead or cut-off node.
	Hosts []string
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("cmpi: %s (collective #%d) timed out after %v waiting for %s; hosts: %s",
		e.Collective, e.Seq, e.After, strings.Join(e.Missing, ", "), strings.Join(e.Hosts, ", "))
}

// SetCollectiveTimeout makes every later collective first check, within d,
// that all ranks reached it (an arrival round through rank 0 on a
// duplicate of the world communicator); when d passes, the collective
// returns a *TimeoutError naming the ranks and hosts waited for, and the
// caller is expected to abort. Ranks other than 0 wait 2d, so that rank 0,
// which knows who is missing, is the one that reports (they report rank 0
// when it is itself more than d late). d <= 0 turns the watchdog off. Every
// rank must set the same value.
func (c *Comm) SetCollectiveTimeout(d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > 0 && c.size > 1 && c.hosts == nil {
		if err := check("MPI_Comm_dup", C.MPI_Comm_dup(c.world, &c.wd)); err != nil {
			return fmt.Errorf("cmpi: watchdog: %w", err)
		}
		hosts, err := c.gatherHosts()
		if err != nil {
			return fmt.Errorf("cmpi: watchdog: %w", err)
		}
		c.hosts = hosts
	}
	c.timeout = d
	return nil
}

// gatherHosts exchanges processor names (fixed-size records). Called with
// c.mu held.
func (c *Comm) gatherHosts() ([]string, error) {
	const w = 256
	mine := make([]byte, w)
	copy(mine, c.host)
	all := make([]byte, w*c.size)
	if err := check("MPI_Allgather", C.MPI_Allgather(unsafe.Pointer(&mine[0]), w, C.wd_byte(),
		unsafe.Pointer(&all[0]), w, C.wd_byte(), c.world)); err != nil {
		return nil, err
	}
	hosts := make([]string, c.size)
	for r := range hosts {
		hosts[r] = strings.TrimRight(string(all[r*w:(r+1)*w]), "\x00")
	}
	return hosts, nil
}

// arrive runs the watchdog's arrival round for the named collective. Called
// with c.mu held.
func (c *Comm) arrive(name string) error {
	c.seq++
	if c.timeout <= 0 || c.size == 1 {
		return nil
	}
	missing := make([]C.int, c.size)
	var bad C.int
	wait := c.timeout
	if c.rank != 0 {
		wait *= 2
	}
	rc := C.cmpi_arrive(c.wd, C.int(c.rank), C.int(c.size), C.int64_t(c.seq), C.double(wait.Seconds()),
		watchdogTag, &missing[0], &bad)
	switch {
	case rc == 0:
		return nil
	case rc == -2:
		return fmt.Errorf("cmpi: %s (collective #%d): rank %d (%s) is at another collective: ranks called collectives in different orders",
			name, c.seq, int(bad), c.hosts[int(bad)])
	}
	e := &TimeoutError{Collective: name, Seq: c.seq, After: wait}
	waited := []int{0}
	if c.rank == 0 {
		waited = waited[:0]
		for r := 1; r < c.size; r++ {
			if missing[r] != 0 {
				waited = append(waited, r)
				e.Missing = append(e.Missing, fmt.Sprintf("rank %d (%s)", r, c.hosts[r]))
			}
		}
	} else {
		e.Missing = []string{fmt.Sprintf("rank 0 (%s) to confirm that every rank arrived", c.hosts[0])}
	}
	for _, r := range waited {
		if !slices.Contains(e.Hosts, c.hosts[r]) {
			e.Hosts = append(e.Hosts, c.hosts[r])
		}
	}
	return e
}

// StallError reports a collective that every rank entered (its arrival
// round passed) but that did not complete within the stall limit: a rank
// stopped inside it (frozen, stuck on a filesystem, its node cut off
// mid-transfer), which the arrival round cannot see.
type StallError struct {
	Collective string
	Seq        int64
	After      time.Duration
}

func (e *StallError) Error() string {
	return fmt.Sprintf("cmpi: %s (collective #%d) did not complete %v after every rank entered it: a rank stopped inside it (frozen, or its node cut off)",
		e.Collective, e.Seq, e.After)
}

// SetStallHandler arms the stall guard: with the watchdog on (a collective
// timeout d > 0, more than one rank), a collective that has not completed
// max(floor, 3d) after its arrival round passed calls onStall with a
// *StallError from another goroutine; onStall is expected to say it and
// abort the job, since the collective itself stays blocked. Ranks other
// than 0 wait twice as long, so that rank 0 says it. Within the limit a
// collective is data transfer alone, every rank having arrived, so the
// floor only keeps a slow network's large gather from being taken for a
// stall. afterArrive, when not nil, is called after each arrival round
// passes, before the collective (a test seam: a rank that freezes there).
// Every rank must set the same values.
func (c *Comm) SetStallHandler(floor time.Duration, onStall func(error), afterArrive func(name string)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stallFloor, c.onStall, c.afterArrive = floor, onStall, afterArrive
}

// guard starts the stall guard of the collective whose arrival round has
// just passed. Called with c.mu held.
func (c *Comm) guard(name string) {
	if c.timeout <= 0 || c.size == 1 || c.onStall == nil {
		return
	}
	limit := max(c.stallFloor, 3*c.timeout)
	if c.rank != 0 {
		limit *= 2
	}
	err := &StallError{Collective: name, Seq: c.seq, After: limit}
	onStall := c.onStall
	c.stall = time.AfterFunc(limit, func() { onStall(err) })
	if c.afterArrive != nil {
		c.afterArrive(name)
	}
}
