// Package cmpi is canopy's cgo binding to the MPI C API; *Comm implements
// mpi.Comm over MPI_COMM_WORLD.
//
// # Selecting the MPI library
//
// The package finds MPI through pkg-config:
//
//   - default build: pkg-config module "mpi" (on Debian/Ubuntu the
//     alternatives link to the default MPI, Open MPI or MPICH);
//   - go build -tags mpich: module "mpich";
//   - go build -tags ompi: module "ompi-c" (what an Open MPI installation
//     ships under its own prefix).
//
// A cluster's module-loaded MPI is found without root by pointing
// PKG_CONFIG_PATH at its pkgconfig directory, e.g.
//
//	PKG_CONFIG_PATH=$MPI_HOME/lib/pkgconfig go build -tags ompi ./...
//
// or by writing a small mpi.pc of one's own into a directory on
// PKG_CONFIG_PATH. The Go source is the same for every library: MPI handles
// (pointers in Open MPI, ints in MPICH) are only touched through tiny C
// accessor functions and the C.MPI_Comm / C.MPI_Datatype / C.MPI_Op types.
//
// # Threads
//
// Init asks for MPI_THREAD_SERIALIZED: MPI may be called from any OS thread
// but never from two at once. By convention one goroutine owns all MPI calls
// (the Comm also serializes them with a mutex, as a safety net). The
// package's init locks the main goroutine to the main thread, so Init and
// Finalize called from main (or TestMain) run on the thread that MPI
// considers the main one.
//
// Run without mpirun, Init gives a 1-rank singleton.
package cmpi

/*
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>

static MPI_Comm cmpi_comm_world(void) { return MPI_COMM_WORLD; }
static MPI_Comm cmpi_comm_null(void) { return MPI_COMM_NULL; }
static MPI_Datatype cmpi_byte(void) { return MPI_BYTE; }
static MPI_Datatype cmpi_int64(void) { return MPI_INT64_T; }
static MPI_Datatype cmpi_uint64(void) { return MPI_UINT64_T; }
static MPI_Datatype cmpi_double(void) { return MPI_DOUBLE; }
static MPI_Datatype cmpi_datatype_null(void) { return MPI_DATATYPE_NULL; }
static MPI_Op cmpi_sum(void) { return MPI_SUM; }
static MPI_Op cmpi_min(void) { return MPI_MIN; }
static MPI_Op cmpi_max(void) { return MPI_MAX; }
static void *cmpi_in_place(void) { return MPI_IN_PLACE; }
static int cmpi_comm_type_shared(void) { return MPI_COMM_TYPE_SHARED; }
static MPI_Info cmpi_info_null(void) { return MPI_INFO_NULL; }
static MPI_Errhandler cmpi_errors_return(void) { return MPI_ERRORS_RETURN; }
static int cmpi_success(void) { return MPI_SUCCESS; }
static int cmpi_thread_serialized(void) { return MPI_THREAD_SERIALIZED; }
static int cmpi_max_processor_name(void) { return MPI_MAX_PROCESSOR_NAME; }
static int cmpi_max_error_string(void) { return MPI_MAX_ERROR_STRING; }
static int cmpi_max_library_version_string(void) { return MPI_MAX_LIBRARY_VERSION_STRING; }

// In-place collectives: MPI_IN_PLACE never crosses into Go.
static int cmpi_allreduce_in_place(void *buf, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm) {
	return MPI_Allreduce(MPI_IN_PLACE, buf, count, dt, op, comm);
}
static int cmpi_allgatherv_in_place(void *recv, const int *counts, const int *displs, MPI_Datatype dt, MPI_Comm comm) {
	return MPI_Allgatherv(MPI_IN_PLACE, 0, dt, recv, counts, displs, dt, comm);
}

// The shared counter (mpi.Counter): an int64 in rank 0's window, every
// rank in a passive-target epoch (lock_all) for the counter's life.
static int cmpi_counter_new(MPI_Comm comm, int rank, MPI_Win *win) {
	int64_t *base = NULL;
	int rc = MPI_Win_allocate(rank == 0 ? sizeof(int64_t) : 0, sizeof(int64_t), MPI_INFO_NULL, comm, &base, win);
	if (rc != MPI_SUCCESS) return rc;
	MPI_Win_set_errhandler(*win, MPI_ERRORS_RETURN);
	if (rank == 0) {
		if ((rc = MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, *win)) != MPI_SUCCESS) return rc;
		*base = 0;
		if ((rc = MPI_Win_unlock(0, *win)) != MPI_SUCCESS) return rc;
	}
	if ((rc = MPI_Barrier(comm)) != MPI_SUCCESS) return rc;
	return MPI_Win_lock_all(0, *win);
}
static int cmpi_counter_fetch_add(MPI_Win win, int64_t n, int64_t *old) {
	int rc = MPI_Fetch_and_op(&n, old, MPI_INT64_T, 0, 0, MPI_SUM, win);
	if (rc != MPI_SUCCESS) return rc;
	return MPI_Win_flush(0, win);
}
static int cmpi_counter_free(MPI_Win *win) {
	int rc = MPI_Win_unlock_all(*win);
	if (rc != MPI_SUCCESS) return rc;
	return MPI_Win_free(win);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/canopy-hpc/canopy/mpi"
)

func init() {
	// Keep the main goroutine on the main thread: MPI_Init_thread and
	// MPI_Finalize are called from it (main or TestMain).
	runtime.LockOSThread()
}

var _ mpi.Comm = (*Comm)(nil)

// DefaultBlockSize is the unit of the blocked Allgatherv path (1 MiB).
const DefaultBlockSize = 1 << 20

// bcastChunk bounds one MPI_Bcast so its count fits a C int.
const bcastChunk = 1 << 30

// reduceChunk bounds the element count of one MPI_Allreduce.
const reduceChunk = 1 << 26

// Environment variables read by Init (every rank must see the same values).
const (
	// EnvBlockSize overrides DefaultBlockSize (bytes, > 0).
	EnvBlockSize = "CANOPY_MPI_BLOCK_SIZE"
	// EnvForceBlocked, when "1" or "true", makes Allgatherv always take
	// the blocked path.
	EnvForceBlocked = "CANOPY_MPI_FORCE_BLOCKED"
)

// Error is a failed MPI call.
type Error struct {
	Func string // the MPI function, e.g. "MPI_Allgatherv"
	Code int    // the MPI error code
	Msg  string // MPI_Error_string of Code
}

func (e *Error) Error() string {
	return fmt.Sprintf("cmpi: %s: %s (MPI error %d)", e.Func, e.Msg, e.Code)
}

// ErrFinalized is returned by collectives called after Finalize.
var ErrFinalized = errors.New("cmpi: MPI already finalized")

func errorString(rc C.int) string {
	buf := make([]byte, int(C.cmpi_max_error_string())+1)
	var n C.int
	if C.MPI_Error_string(rc, (*C.char)(unsafe.Pointer(&buf[0])), &n) != C.cmpi_success() {
		return "unknown error"
	}
	return strings.TrimSpace(string(buf[:int(n)]))
}

func check(fn string, rc C.int) error {
	if rc == C.cmpi_success() {
		return nil
	}
	return &Error{Func: fn, Code: int(rc), Msg: errorString(rc)}
}

// Comm is MPI_COMM_WORLD plus its node-local split. Create it with Init.
type Comm struct {
	mu        sync.Mutex
	world     C.MPI_Comm
	local     C.MPI_Comm
	rank      int
	size      int
	localRank int
	localSize int
	host      string
	impl      string
	done      bool

	blockSize    int
	forceBlocked bool
	blockType    C.MPI_Datatype // MPI_Type_contiguous(blockTypeSize, MPI_BYTE)
	blockTypeLen int
	scratch      []byte // padded receive buffer of the blocked path, reused

	// collective watchdog (watchdog.go)
	timeout time.Duration
	seq     int64
	wd      C.MPI_Comm // duplicate of world for the arrival rounds
	hosts   []string
	// the stall guard of the collective in progress (watchdog.go)
	stall       *time.Timer
	stallFloor  time.Duration
	onStall     func(error)
	afterArrive func(name string)
}

var (
	initMu  sync.Mutex
	initted bool
)

// Init initializes MPI (MPI_Init_thread with MPI_THREAD_SERIALIZED), makes
// errors on the world communicator return instead of aborting, and splits
// the node-local communicator. Call it once, from the main goroutine.
func Init() (*Comm, error) {
	initMu.Lock()
	defer initMu.Unlock()
	if initted {
		return nil, errors.New("cmpi: Init called twice")
	}
	blockSize, forceBlocked := DefaultBlockSize, false
	if s := os.Getenv(EnvBlockSize); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 || n > math.MaxInt32 {
			return nil, fmt.Errorf("cmpi: init: bad %s=%q", EnvBlockSize, s)
		}
		blockSize = n
	}
	switch strings.ToLower(os.Getenv(EnvForceBlocked)) {
	case "1", "true", "yes":
		forceBlocked = true
	}
	var flag C.int
	if err := check("MPI_Initialized", C.MPI_Initialized(&flag)); err != nil {
		return nil, err
	}
	if flag != 0 {
		return nil, errors.New("cmpi: MPI already initialized")
	}
	var provided C.int
	if err := check("MPI_Init_thread", C.MPI_Init_thread(nil, nil, C.cmpi_thread_serialized(), &provided)); err != nil {
		return nil, fmt.Errorf("cmpi: init: %w", err)
	}
	initted = true
	if provided < C.cmpi_thread_serialized() {
		C.MPI_Finalize()
		return nil, fmt.Errorf("cmpi: init: MPI provides thread level %d, need MPI_THREAD_SERIALIZED (%d)",
			int(provided), int(C.cmpi_thread_serialized()))
	}
	c := &Comm{
		world:        C.cmpi_comm_world(),
		local:        C.cmpi_comm_null(),
		blockSize:    blockSize,
		forceBlocked: forceBlocked,
		blockType:    C.cmpi_datatype_null(),
		wd:           C.cmpi_comm_null(),
	}
	if err := c.setup(); err != nil {
		C.MPI_Finalize()
		c.done = true
		return nil, fmt.Errorf("cmpi: init: %w", err)
	}
	return c, nil
}

func (c *Comm) setup() error {
	if err := check("MPI_Comm_set_errhandler", C.MPI_Comm_set_errhandler(c.world, C.cmpi_errors_return())); err != nil {
		return err
	}
	var v C.int
	if err := check("MPI_Comm_rank", C.MPI_Comm_rank(c.world, &v)); err != nil {
		return err
	}
	c.rank = int(v)
	if err := check("MPI_Comm_size", C.MPI_Comm_size(c.world, &v)); err != nil {
		return err
	}
	c.size = int(v)
	if err := check("MPI_Comm_split_type", C.MPI_Comm_split_type(c.world, C.cmpi_comm_type_shared(),
		C.int(c.rank), C.cmpi_info_null(), &c.local)); err != nil {
		return err
	}
	if err := check("MPI_Comm_set_errhandler", C.MPI_Comm_set_errhandler(c.local, C.cmpi_errors_return())); err != nil {
		return err
	}
	if err := check("MPI_Comm_rank", C.MPI_Comm_rank(c.local, &v)); err != nil {
		return err
	}
	c.localRank = int(v)
	if err := check("MPI_Comm_size", C.MPI_Comm_size(c.local, &v)); err != nil {
		return err
	}
	c.localSize = int(v)

	name := make([]byte, int(C.cmpi_max_processor_name())+1)
	if err := check("MPI_Get_processor_name", C.MPI_Get_processor_name((*C.char)(unsafe.Pointer(&name[0])), &v)); err != nil {
		return err
	}
	c.host = string(name[:int(v)])

	ver := make([]byte, int(C.cmpi_max_library_version_string())+1)
	if err := check("MPI_Get_library_version", C.MPI_Get_library_version((*C.char)(unsafe.Pointer(&ver[0])), &v)); err != nil {
		return err
	}
	c.impl = shortVersion(string(ver[:int(v)]))
	return nil
}

// shortVersion keeps the first line of MPI_Get_library_version's string,
// trimmed: "Open MPI v4.1.4, package: ..." becomes "Open MPI v4.1.4" and
// "MPICH Version:\t4.0.2" becomes "MPICH 4.0.2".
func shortVersion(s string) string {
	s = strings.TrimRight(s, "\x00")
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	line = strings.TrimSpace(line)
	if rest, ok := strings.CutPrefix(line, "MPICH Version:"); ok {
		line = "MPICH " + strings.TrimSpace(rest)
	}
	if i := strings.Index(line, ","); i > 0 {
		line = line[:i]
	}
	line = strings.Join(strings.Fields(line), " ")
	if len(line) > 80 {
		line = line[:80]
	}
	if line == "" {
		line = "unknown MPI"
	}
	return line
}

// Finalize frees the communicator's resources and calls MPI_Finalize. Every
// rank calls it, from the goroutine that called Init. A second call is a
// no-op.
func (c *Comm) Finalize() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return nil
	}
	c.done = true
	c.scratch = nil
	var errs []error
	if c.blockType != C.cmpi_datatype_null() {
		errs = append(errs, check("MPI_Type_free", C.MPI_Type_free(&c.blockType)))
	}
	if c.local != C.cmpi_comm_null() {
		errs = append(errs, check("MPI_Comm_free", C.MPI_Comm_free(&c.local)))
	}
	if c.wd != C.cmpi_comm_null() {
		errs = append(errs, check("MPI_Comm_free", C.MPI_Comm_free(&c.wd)))
	}
	errs = append(errs, check("MPI_Finalize", C.MPI_Finalize()))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cmpi: finalize: %w", err)
	}
	return nil
}

// Rank implements mpi.Comm.
func (c *Comm) Rank() int { return c.rank }

// Size implements mpi.Comm.
func (c *Comm) Size() int { return c.size }

// LocalRank implements mpi.Comm.
func (c *Comm) LocalRank() int { return c.localRank }

// LocalSize implements mpi.Comm.
func (c *Comm) LocalSize() int { return c.localSize }

// Host implements mpi.Comm (MPI_Get_processor_name).
func (c *Comm) Host() string { return c.host }

// Implementation implements mpi.Comm, e.g. "Open MPI v4.1.4".
func (c *Comm) Implementation() string { return c.impl }

// SetBlockSize sets the unit of Allgatherv's blocked path and returns the
// previous one; n <= 0 restores DefaultBlockSize. Every rank must use the
// same block size for the same call; change it on all ranks between
// collectives (tests use tiny sizes such as 7 to exercise padding).
func (c *Comm) SetBlockSize(n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.blockSize
	if n <= 0 {
		n = DefaultBlockSize
	}
	c.blockSize = min(n, math.MaxInt32)
	return prev
}

// SetForceBlocked makes Allgatherv take the blocked path even when the plain
// MPI_BYTE one would do, and returns the previous setting. Like the block
// size, it must agree on all ranks.
func (c *Comm) SetForceBlocked(on bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.forceBlocked
	c.forceBlocked = on
	return prev
}

// FreeScratch drops the blocked path's reusable receive buffer.
func (c *Comm) FreeScratch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scratch = nil
}

// AbortGrace bounds MPI_Abort: a rank whose launcher it cannot reach (its
// node cut off from the network) may wait in MPI_Abort for a reply that
// never comes; after AbortGrace the process exits with the code anyway.
const AbortGrace = 5 * time.Second

// Abort calls MPI_Abort on the world communicator and, should that return
// or last longer than AbortGrace, exits the process with code.
func (c *Comm) Abort(code int) {
	time.AfterFunc(AbortGrace, func() {
		fmt.Fprintf(os.Stderr, "cmpi: rank %d (%s): MPI_Abort did not end the process within %v (launcher unreachable?); exiting %d\n",
			c.rank, c.host, AbortGrace, code)
		os.Exit(code)
	})
	C.MPI_Abort(c.world, C.int(code))
	os.Exit(code)
}

// lock takes the mutex for the named collective and, with the watchdog on,
// runs its arrival round and starts its stall guard; on error the mutex is
// released. A collective lock began ends with unlock.
func (c *Comm) lock(name string) error {
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return ErrFinalized
	}
	if err := c.arrive(name); err != nil {
		c.mu.Unlock()
		return err
	}
	c.guard(name)
	return nil
}

// unlock ends the collective that lock began: it stops its stall guard
// and releases the mutex.
func (c *Comm) unlock() {
	if c.stall != nil {
		c.stall.Stop()
		c.stall = nil
	}
	c.mu.Unlock()
}

// Barrier implements mpi.Comm.
func (c *Comm) Barrier() error {
	if err := c.lock("Barrier"); err != nil {
		return fmt.Errorf("cmpi: barrier: %w", err)
	}
	defer c.unlock()
	if err := check("MPI_Barrier", C.MPI_Barrier(c.world)); err != nil {
		return fmt.Errorf("cmpi: barrier: %w", err)
	}
	return nil
}

func ptr[T any](s []T) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(s)) }

// Bcast implements mpi.Comm: the length goes first as an int64, then the
// bytes in chunks of at most 1 GiB.
func (c *Comm) Bcast(buf []byte, root int) ([]byte, error) {
	if root < 0 || root >= c.size {
		return nil, fmt.Errorf("cmpi: bcast: root %d out of range [0,%d)", root, c.size)
	}
	if err := c.lock("Bcast"); err != nil {
		return nil, fmt.Errorf("cmpi: bcast: %w", err)
	}
	defer c.unlock()
	n := C.int64_t(len(buf))
	if err := check("MPI_Bcast", C.MPI_Bcast(unsafe.Pointer(&n), 1, C.cmpi_int64(), C.int(root), c.world)); err != nil {
		return nil, fmt.Errorf("cmpi: bcast length: %w", err)
	}
	if c.rank != root {
		if n < 0 {
			return nil, fmt.Errorf("cmpi: bcast: root sent negative length %d", int64(n))
		}
		buf = make([]byte, int(n))
	}
	for off := 0; off < len(buf); off += bcastChunk {
		m := min(bcastChunk, len(buf)-off)
		if err := check("MPI_Bcast", C.MPI_Bcast(unsafe.Pointer(&buf[off]), C.int(m), C.cmpi_byte(), C.int(root), c.world)); err != nil {
			return nil, fmt.Errorf("cmpi: bcast: %w", err)
		}
	}
	return buf, nil
}

// AllgatherInt64 implements mpi.Comm.
func (c *Comm) AllgatherInt64(v int64) ([]int64, error) {
	if err := c.lock("Allgather"); err != nil {
		return nil, fmt.Errorf("cmpi: allgather: %w", err)
	}
	defer c.unlock()
	out := make([]int64, c.size)
	in := C.int64_t(v)
	if err := check("MPI_Allgather", C.MPI_Allgather(unsafe.Pointer(&in), 1, C.cmpi_int64(),
		ptr(out), 1, C.cmpi_int64(), c.world)); err != nil {
		return nil, fmt.Errorf("cmpi: allgather: %w", err)
	}
	return out, nil
}

func cOp(op mpi.Op) (C.MPI_Op, error) {
	switch op {
	case mpi.Sum:
		return C.cmpi_sum(), nil
	case mpi.Min:
		return C.cmpi_min(), nil
	case mpi.Max:
		return C.cmpi_max(), nil
	}
	return C.cmpi_sum(), fmt.Errorf("cmpi: allreduce: unknown op %v", op)
}

func allreduce[T int64 | uint64 | float64](c *Comm, v []T, op mpi.Op, dt C.MPI_Datatype) ([]T, error) {
	mop, err := cOp(op)
	if err != nil {
		return nil, err
	}
	if err := c.lock("Allreduce"); err != nil {
		return nil, fmt.Errorf("cmpi: allreduce: %w", err)
	}
	defer c.unlock()
	out := make([]T, len(v))
	copy(out, v)
	for off := 0; off < len(out); off += reduceChunk {
		m := min(reduceChunk, len(out)-off)
		if err := check("MPI_Allreduce", C.cmpi_allreduce_in_place(unsafe.Pointer(&out[off]), C.int(m), dt, mop, c.world)); err != nil {
			return nil, fmt.Errorf("cmpi: allreduce %v: %w", op, err)
		}
	}
	return out, nil
}

// AllreduceInt64 implements mpi.Comm.
func (c *Comm) AllreduceInt64(v []int64, op mpi.Op) ([]int64, error) {
	return allreduce(c, v, op, C.cmpi_int64())
}

// AllreduceUint64 implements mpi.Comm. Min and Max are done as int64 on
// values with the sign bit flipped (which maps unsigned order onto signed
// order): MPICH 4.0.2 compares MPI_UINT64_T (and MPI_UNSIGNED_LONG_LONG) as
// signed in MPI_MIN/MPI_MAX, so 2^63+1 < 2^63-1 there. Sum uses
// MPI_UINT64_T (two's complement addition is the same bits either way).
func (c *Comm) AllreduceUint64(v []uint64, op mpi.Op) ([]uint64, error) {
	if op != mpi.Min && op != mpi.Max {
		return allreduce(c, v, op, C.cmpi_uint64())
	}
	const flip = 1 << 63
	s := make([]int64, len(v))
	for i, x := range v {
		s[i] = int64(x ^ flip)
	}
	s, err := allreduce(c, s, op, C.cmpi_int64())
	if err != nil {
		return nil, err
	}
	out := make([]uint64, len(s))
	for i, x := range s {
		out[i] = uint64(x) ^ flip
	}
	return out, nil
}

// AllreduceFloat64 implements mpi.Comm.
func (c *Comm) AllreduceFloat64(v []float64, op mpi.Op) ([]float64, error) {
	return allreduce(c, v, op, C.cmpi_double())
}

// Allgatherv implements mpi.Comm. When every count and the total fit a C
// int it is one MPI_Allgatherv of MPI_BYTE. Otherwise (or when forced) each
// rank's part is padded to a whole number of blocks and gathered, as a
// contiguous block datatype with counts and displacements in blocks, into a
// reused scratch buffer, from which the parts are compacted into recv.
func (c *Comm) Allgatherv(send []byte, counts []int64, recv []byte) error {
	if err := mpi.CheckAllgatherv(c.rank, send, counts, recv); err != nil {
		return fmt.Errorf("cmpi: allgatherv: %w", err)
	}
	if len(counts) != c.size {
		return fmt.Errorf("cmpi: allgatherv: %w: %d counts for %d ranks", mpi.ErrCounts, len(counts), c.size)
	}
	if err := c.lock("Allgatherv"); err != nil {
		return fmt.Errorf("cmpi: allgatherv: %w", err)
	}
	defer c.unlock()
	var total int64
	small := true
	for _, n := range counts {
		total += n
		if n > math.MaxInt32 || total > math.MaxInt32 {
			small = false
		}
	}
	if total == 0 {
		return nil // every rank knows the counts: all skip alike
	}
	var err error
	if small && !c.forceBlocked {
		err = c.allgathervBytes(send, counts, recv)
	} else {
		err = c.allgathervBlocked(send, counts, recv)
	}
	if err != nil {
		return fmt.Errorf("cmpi: allgatherv: %w", err)
	}
	return nil
}

// inPlace reports whether send is exactly recv[off:off+len(send)].
func inPlace(send, recv []byte, off int64) bool {
	return len(send) > 0 && off+int64(len(send)) <= int64(len(recv)) && &send[0] == &recv[off]
}

func (c *Comm) allgathervBytes(send []byte, counts []int64, recv []byte) error {
	cnt := make([]C.int, c.size)
	displ := make([]C.int, c.size)
	var off int64
	for r, n := range counts {
		cnt[r] = C.int(n)
		displ[r] = C.int(off)
		off += n
	}
	if inPlace(send, recv, int64(displ[c.rank])) {
		return check("MPI_Allgatherv", C.cmpi_allgatherv_in_place(ptr(recv), &cnt[0], &displ[0], C.cmpi_byte(), c.world))
	}
	return check("MPI_Allgatherv", C.MPI_Allgatherv(ptr(send), C.int(len(send)), C.cmpi_byte(),
		ptr(recv), &cnt[0], &displ[0], C.cmpi_byte(), c.world))
}

func (c *Comm) blockDatatype() (C.MPI_Datatype, error) {
	if c.blockType != C.cmpi_datatype_null() && c.blockTypeLen == c.blockSize {
		return c.blockType, nil
	}
	if c.blockType != C.cmpi_datatype_null() {
		if err := check("MPI_Type_free", C.MPI_Type_free(&c.blockType)); err != nil {
			return c.blockType, err
		}
		c.blockType = C.cmpi_datatype_null()
	}
	var t C.MPI_Datatype
	if err := check("MPI_Type_contiguous", C.MPI_Type_contiguous(C.int(c.blockSize), C.cmpi_byte(), &t)); err != nil {
		return t, err
	}
	if err := check("MPI_Type_commit", C.MPI_Type_commit(&t)); err != nil {
		C.MPI_Type_free(&t)
		return t, err
	}
	c.blockType, c.blockTypeLen = t, c.blockSize
	return t, nil
}

func (c *Comm) allgathervBlocked(send []byte, counts []int64, recv []byte) error {
	b := int64(c.blockSize)
	cnt := make([]C.int, c.size)
	displ := make([]C.int, c.size)
	var blocks int64
	for r, n := range counts {
		nb := (n + b - 1) / b
		if nb > math.MaxInt32 || blocks > math.MaxInt32 {
			return fmt.Errorf("%d blocks of %d bytes overflow a C int", blocks+nb, b)
		}
		cnt[r] = C.int(nb)
		displ[r] = C.int(blocks)
		blocks += nb
	}
	dt, err := c.blockDatatype()
	if err != nil {
		return err
	}
	padded := blocks * b
	if int64(cap(c.scratch)) < padded {
		c.scratch = nil // let the old one go before the new one is touched
		c.scratch = make([]byte, padded)
	}
	scratch := c.scratch[:padded]
	copy(scratch[int64(displ[c.rank])*b:], send)
	if err := check("MPI_Allgatherv", C.cmpi_allgatherv_in_place(ptr(scratch), &cnt[0], &displ[0], dt, c.world)); err != nil {
		return err
	}
	var off int64
	for r, n := range counts {
		src := int64(displ[r]) * b
		copy(recv[off:off+n], scratch[src:src+n])
		off += n
	}
	return nil
}

// counter is the MPI-3 shared counter: rank 0's window of one int64.
type counter struct {
	c   *Comm
	win C.MPI_Win
}

// NewCounter implements mpi.Comm (MPI_Win_allocate, a collective).
func (c *Comm) NewCounter() (mpi.Counter, error) {
	if err := c.lock("NewCounter"); err != nil {
		return nil, fmt.Errorf("cmpi: counter: %w", err)
	}
	defer c.unlock()
	k := &counter{c: c}
	if err := check("MPI_Win_allocate", C.cmpi_counter_new(c.world, C.int(c.rank), &k.win)); err != nil {
		return nil, fmt.Errorf("cmpi: counter: %w", err)
	}
	return k, nil
}

// FetchAdd implements mpi.Counter (MPI_Fetch_and_op, MPI_SUM, then
// MPI_Win_flush): rank 0 takes no part.
func (k *counter) FetchAdd(n int64) (int64, error) {
	k.c.mu.Lock()
	defer k.c.mu.Unlock()
	if k.c.done {
		return 0, ErrFinalized
	}
	var old C.int64_t
	if err := check("MPI_Fetch_and_op", C.cmpi_counter_fetch_add(k.win, C.int64_t(n), &old)); err != nil {
		return 0, fmt.Errorf("cmpi: counter: %w", err)
	}
	return int64(old), nil
}

// Free implements mpi.Counter (MPI_Win_free, a collective).
func (k *counter) Free() error {
	if err := k.c.lock("CounterFree"); err != nil {
		return fmt.Errorf("cmpi: counter: %w", err)
	}
	defer k.c.unlock()
	if err := check("MPI_Win_free", C.cmpi_counter_free(&k.win)); err != nil {
		return fmt.Errorf("cmpi: counter: %w", err)
	}
	return nil
}
