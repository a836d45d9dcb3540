package mpitest

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/canopy-hpc/canopy/mpi"
)

// Case is one collective-aligned test.
type Case struct {
	Name string
	F    func(r *R)
}

// Cases is the conformance suite, in the order every rank runs it.
func Cases() []Case {
	return []Case{
		{"RankSize", testRankSize},
		{"LocalRankSize", testLocal},
		{"Barrier", testBarrier},
		{"Bcast", testBcast},
		{"AllgatherInt64", testAllgatherInt64},
		{"AllreduceInt64", testAllreduceInt64},
		{"AllreduceUint64", testAllreduceUint64},
		{"AllreduceFloat64", testAllreduceFloat64},
		{"Allgatherv", testAllgatherv},
		{"AllgathervBlocked", testAllgathervBlocked},
		{"AllgathervInPlace", testAllgathervInPlace},
		{"AllgatherBytes", testAllgatherBytes},
		{"BadArguments", testBadArguments},
		{"Counter", testCounter},
	}
}

func testRankSize(r *R) {
	c := r.C
	if c.Size() < 1 || c.Rank() < 0 || c.Rank() >= c.Size() {
		r.Errorf("rank %d size %d", c.Rank(), c.Size())
	}
	ranks, err := c.AllgatherInt64(int64(c.Rank()))
	r.Must(err, "AllgatherInt64")
	for i, v := range ranks {
		if v != int64(i) {
			r.Errorf("rank at index %d reports rank %d", i, v)
		}
	}
	sizes, err := c.AllgatherInt64(int64(c.Size()))
	r.Must(err, "AllgatherInt64")
	for i, v := range sizes {
		if v != int64(c.Size()) {
			r.Errorf("rank %d reports size %d, here %d", i, v, c.Size())
		}
	}
	if c.Implementation() == "" {
		r.Errorf("empty Implementation")
	}
	if c.Host() == "" {
		r.Errorf("empty Host")
	}
	if c.Rank() == 0 {
		r.Logf("%s, %d ranks, host %s", c.Implementation(), c.Size(), c.Host())
	}
}

func testLocal(r *R) {
	c := r.C
	lr, ls := c.LocalRank(), c.LocalSize()
	if ls < 1 || ls > c.Size() || lr < 0 || lr >= ls {
		r.Errorf("local rank %d local size %d (size %d)", lr, ls, c.Size())
	}
	leader := int64(0)
	if lr == 0 {
		leader = 1
	}
	leaderSize := int64(0)
	if lr == 0 {
		leaderSize = int64(ls)
	}
	sums, err := c.AllreduceInt64([]int64{leader, leaderSize, 1}, mpi.Sum)
	r.Must(err, "AllreduceInt64")
	nodes, covered := sums[0], sums[1]
	if nodes < 1 || nodes > int64(c.Size()) {
		r.Errorf("%d nodes for %d ranks", nodes, c.Size())
	}
	if covered != int64(c.Size()) {
		r.Errorf("node sizes sum to %d, size %d", covered, c.Size())
	}
	if sums[2] != int64(c.Size()) {
		r.Errorf("sum of ones %d, size %d", sums[2], c.Size())
	}
	// Every rank of a node agrees on the node's size: the max local rank
	// + 1 over the whole job is the largest node.
	mx, err := c.AllreduceInt64([]int64{int64(lr), int64(ls)}, mpi.Max)
	r.Must(err, "AllreduceInt64")
	if mx[0]+1 != mx[1] {
		r.Errorf("max local rank %d, max local size %d", mx[0], mx[1])
	}
	if c.Rank() == 0 {
		r.Logf("%d node(s)", nodes)
	}
}

func testBarrier(r *R) {
	c := r.C
	for i := 0; i < 3; i++ {
		r.Must(c.Barrier(), "Barrier")
	}
	// Ranks enter late by rank; no rank may leave before the last entered.
	// Clocks are comparable only on one node.
	time.Sleep(time.Duration(c.Rank()%8) * 5 * time.Millisecond)
	in := time.Now().UnixNano()
	r.Must(c.Barrier(), "Barrier")
	out := time.Now().UnixNano()
	ins, err := c.AllgatherInt64(in)
	r.Must(err, "AllgatherInt64")
	if c.LocalSize() == c.Size() {
		for x, t := range ins {
			if out < t {
				r.Errorf("left the barrier at %d before rank %d entered at %d", out, x, t)
			}
		}
	}
}

func testBcast(r *R) {
	c := r.C
	sizes := []int{0, 1, 1000, 3<<20 + 5}
	for root := 0; root < c.Size(); root++ {
		for si, n := range sizes {
			salt := 100 + si
			var buf []byte
			if c.Rank() == root {
				buf = make([]byte, n)
				Fill(buf, root, salt, 0)
			} else if si%2 == 1 {
				buf = []byte("ignored on non-root ranks") // must be ignored
			}
			got, err := c.Bcast(buf, root)
			r.Must(err, "Bcast")
			if len(got) != n {
				r.Errorf("Bcast root %d: got %d bytes, want %d", root, len(got), n)
				continue
			}
			if i := CheckPattern(got, root, salt); i >= 0 {
				r.Errorf("Bcast root %d size %d: byte %d wrong", root, n, i)
			}
		}
	}
}

func testAllgatherInt64(r *R) {
	c := r.C
	val := func(x int) int64 {
		switch x {
		case 0:
			return math.MaxInt64
		case 1:
			return math.MinInt64
		}
		return int64(x)*-1_000_000_000_007 + 3
	}
	got, err := c.AllgatherInt64(val(c.Rank()))
	r.Must(err, "AllgatherInt64")
	if len(got) != c.Size() {
		r.Errorf("AllgatherInt64: %d values for %d ranks", len(got), c.Size())
		return
	}
	for x, v := range got {
		if v != val(x) {
			r.Errorf("AllgatherInt64[%d] = %d, want %d", x, v, val(x))
		}
	}
}

func reduceExpect[T int64 | uint64 | float64](size int, gen func(rank int) []T, op mpi.Op) []T {
	want := append([]T{}, gen(0)...)
	for x := 1; x < size; x++ {
		for i, y := range gen(x) {
			switch op {
			case mpi.Sum:
				want[i] += y
			case mpi.Min:
				want[i] = min(want[i], y)
			case mpi.Max:
				want[i] = max(want[i], y)
			}
		}
	}
	return want
}

func checkReduce[T int64 | uint64 | float64](r *R, name string, f func([]T, mpi.Op) ([]T, error), gen func(rank int) []T, op mpi.Op) {
	r.tb.Helper()
	in := gen(r.C.Rank())
	orig := append([]T{}, in...)
	got, err := f(in, op)
	r.Must(err, name)
	want := reduceExpect(r.C.Size(), gen, op)
	if len(got) != len(want) {
		r.Errorf("%s %v: %d values, want %d", name, op, len(got), len(want))
		return
	}
	for i := range want {
		if got[i] != want[i] {
			r.Errorf("%s %v [%d] = %v, want %v", name, op, i, got[i], want[i])
		}
	}
	for i := range in {
		if in[i] != orig[i] {
			r.Errorf("%s %v modified its input", name, op)
			break
		}
	}
}

func testAllreduceInt64(r *R) {
	size := int64(r.C.Size())
	// Sums stay far from overflow; min and max use the extremes.
	sumGen := func(x int) []int64 {
		v := int64(x)
		return []int64{v, -v, (v - size/2) * 1_000_000_000_000_000, 1 << 40, -7 * v * v, 0}
	}
	extGen := func(x int) []int64 {
		v := int64(x)
		return []int64{v, -v, math.MinInt64 + v, math.MaxInt64 - v, (v%2*2 - 1) * (v + 1) * 1 << 50, -1}
	}
	checkReduce(r, "AllreduceInt64", r.C.AllreduceInt64, sumGen, mpi.Sum)
	checkReduce(r, "AllreduceInt64", r.C.AllreduceInt64, extGen, mpi.Min)
	checkReduce(r, "AllreduceInt64", r.C.AllreduceInt64, extGen, mpi.Max)
	empty := func(int) []int64 { return []int64{} }
	checkReduce(r, "AllreduceInt64", r.C.AllreduceInt64, empty, mpi.Sum)
	long := func(x int) []int64 {
		v := make([]int64, 100_000)
		for i := range v {
			v[i] = int64(i*(x+1)) - int64(x)*50_000
		}
		return v
	}
	checkReduce(r, "AllreduceInt64", r.C.AllreduceInt64, long, mpi.Sum)
}

func testAllreduceUint64(r *R) {
	size := uint64(r.C.Size())
	// Above 2^63: a signed reduction gets min and max wrong.
	sumGen := func(x int) []uint64 {
		v := uint64(x)
		return []uint64{v, (1<<63)/size + v, 1<<63 + v - uint64(x%2)*(1<<63), 0}
	}
	extGen := func(x int) []uint64 {
		v := uint64(x)
		return []uint64{v, 1<<63 + v, math.MaxUint64 - v, 1<<63 - 1 + v%2*2}
	}
	checkReduce(r, "AllreduceUint64", r.C.AllreduceUint64, sumGen, mpi.Sum)
	checkReduce(r, "AllreduceUint64", r.C.AllreduceUint64, extGen, mpi.Min)
	checkReduce(r, "AllreduceUint64", r.C.AllreduceUint64, extGen, mpi.Max)
}

func testAllreduceFloat64(r *R) {
	// Sums of dyadic fractions and exact integers are exact in any order;
	// 1.5 and 0.25 would be wrong under an integer op.
	sumGen := func(x int) []float64 {
		v := float64(x)
		return []float64{v, -v * 0.5, 0.25 + v*0.125, 1.5, 1e15 + v}
	}
	extGen := func(x int) []float64 {
		v := float64(x)
		return []float64{0.1 * v, -0.1 - v, v * 1e300, -1e-300 * (v + 1), math.Inf(1), 1.5 - v}
	}
	checkReduce(r, "AllreduceFloat64", r.C.AllreduceFloat64, sumGen, mpi.Sum)
	checkReduce(r, "AllreduceFloat64", r.C.AllreduceFloat64, extGen, mpi.Min)
	checkReduce(r, "AllreduceFloat64", r.C.AllreduceFloat64, extGen, mpi.Max)
}

// countPatterns are the Allgatherv layouts: uneven, empty parts, a last
// rank with nothing, all empty, one rank only, and a few MiB.
func countPatterns(size int) [][]int64 {
	gen := func(f func(x int) int64) []int64 {
		c := make([]int64, size)
		for x := range c {
			c[x] = f(x)
		}
		return c
	}
	return [][]int64{
		gen(func(x int) int64 { return int64((x*37+11)%100 + x*1000) }),
		gen(func(x int) int64 { return int64(x%2) * int64(13+x) }),
		gen(func(x int) int64 {
			if x == size-1 {
				return 0
			}
			return int64(7*x + 1)
		}),
		gen(func(int) int64 { return 0 }),
		gen(func(x int) int64 {
			if x == size/2 {
				return 5
			}
			return 0
		}),
		gen(func(x int) int64 { return int64(1<<20*(x%3+1) + 3*x) }),
		gen(func(x int) int64 { return int64(6 + x*7) }), // around a 7-byte block
	}
}

func checkAllgatherv(r *R, counts []int64, salt int, label string) {
	r.tb.Helper()
	c := r.C
	var send []byte // nil for an empty part
	if n := counts[c.Rank()]; n > 0 {
		send = make([]byte, n)
		Fill(send, c.Rank(), salt, 0)
	}
	var total int64
	for _, n := range counts {
		total += n
	}
	const tail = 16
	recv := make([]byte, total+tail)
	for i := range recv {
		recv[i] = 0xEE
	}
	r.Must(c.Allgatherv(send, counts, recv), "Allgatherv "+label)
	var off int64
	for x, n := range counts {
		if i := CheckPattern(recv[off:off+n], x, salt); i >= 0 {
			r.Errorf("Allgatherv %s counts %v: rank %d's part wrong at byte %d", label, short(counts), x, i)
		}
		off += n
	}
	for i := total; i < total+tail; i++ {
		if recv[i] != 0xEE {
			r.Errorf("Allgatherv %s counts %v: wrote past the total at %d", label, short(counts), i)
			break
		}
	}
}

func short(c []int64) string {
	s := fmt.Sprint(c)
	if len(s) > 60 {
		s = s[:60] + "..."
	}
	return s
}

func testAllgatherv(r *R) {
	for i, counts := range countPatterns(r.C.Size()) {
		checkAllgatherv(r, counts, 200+i, "default")
	}
}

func testAllgathervBlocked(r *R) {
	bs, ok := r.C.(BlockSetter)
	if !ok {
		r.Logf("no blocked path in %T", r.C)
		return
	}
	prevForce := bs.SetForceBlocked(true)
	prevBlock := bs.SetBlockSize(0)
	defer func() {
		bs.SetForceBlocked(prevForce)
		bs.SetBlockSize(prevBlock)
	}()
	for _, block := range []int{7, 1, 4096, 1 << 20} {
		bs.SetBlockSize(block)
		for i, counts := range countPatterns(r.C.Size()) {
			checkAllgatherv(r, counts, 300+i, fmt.Sprintf("blocked(%d)", block))
		}
	}
}

func testAllgathervInPlace(r *R) {
	c := r.C
	set := func(bs BlockSetter, force bool, block int) (undo func()) {
		if bs == nil {
			return func() {}
		}
		pf, pb := bs.SetForceBlocked(force), bs.SetBlockSize(block)
		return func() { bs.SetForceBlocked(pf); bs.SetBlockSize(pb) }
	}
	bs, _ := c.(BlockSetter)
	for mode := 0; mode < 2; mode++ {
		if mode == 1 && bs == nil {
			break
		}
		undo := set(bs, mode == 1, 7)
		for i, counts := range countPatterns(c.Size()) {
			var total, off int64
			for x, n := range counts {
				if x < c.Rank() {
					off += n
				}
				total += n
			}
			salt := 400 + i
			recv := make([]byte, total)
			own := recv[off : off+counts[c.Rank()]]
			Fill(own, c.Rank(), salt, 0)
			r.Must(c.Allgatherv(own, counts, recv), "Allgatherv in place")
			off = 0
			for x, n := range counts {
				if j := CheckPattern(recv[off:off+n], x, salt); j >= 0 {
					r.Errorf("in-place Allgatherv (mode %d) counts %v: rank %d's part wrong at %d", mode, short(counts), x, j)
				}
				off += n
			}
		}
		undo()
	}
}

func testAllgatherBytes(r *R) {
	c := r.C
	for round := 0; round < 3; round++ {
		salt := 500 + round
		n := (c.Rank()*13 + round*5) % 50
		if c.Rank() == c.Size()-1 && round != 1 {
			n = 0
		}
		var send []byte
		if n > 0 {
			send = make([]byte, n)
			Fill(send, c.Rank(), salt, 0)
		}
		parts, err := mpi.AllgatherBytes(c, send)
		r.Must(err, "AllgatherBytes")
		if len(parts) != c.Size() {
			r.Errorf("AllgatherBytes: %d parts for %d ranks", len(parts), c.Size())
			continue
		}
		for x, p := range parts {
			want := (x*13 + round*5) % 50
			if x == c.Size()-1 && round != 1 {
				want = 0
			}
			if len(p) != want || cap(p) != want {
				r.Errorf("AllgatherBytes: part %d has len %d cap %d, want %d", x, len(p), cap(p), want)
				continue
			}
			if i := CheckPattern(p, x, salt); i >= 0 {
				r.Errorf("AllgatherBytes: part %d wrong at byte %d", x, i)
			}
		}
	}
}

// testBadArguments passes the same bad arguments on every rank, so every
// implementation fails them alike before (or instead of) communicating.
func testBadArguments(r *R) {
	c := r.C
	size, rank := c.Size(), c.Rank()
	counts := make([]int64, size)
	for x := range counts {
		counts[x] = int64(x + 2)
	}
	var total int64
	for _, n := range counts {
		total += n
	}
	good := make([]byte, counts[rank])
	expect := func(what string, err error) {
		r.tb.Helper()
		if !errors.Is(err, mpi.ErrCounts) {
			r.Errorf("%s: got %v, want an error wrapping mpi.ErrCounts", what, err)
		}
		if err != nil && !strings.Contains(err.Error(), "mpi: ") {
			r.Errorf("%s: error %q lacks an mpi prefix", what, err)
		}
	}
	expect("send longer than counts", c.Allgatherv(make([]byte, counts[rank]+1), counts, make([]byte, total)))
	expect("send shorter than counts", c.Allgatherv(nil, counts, make([]byte, total)))
	expect("recv too short", c.Allgatherv(good, counts, make([]byte, total-1)))
	neg := append([]int64{}, counts...)
	neg[(rank+1)%size] = -1
	if size == 1 {
		neg = []int64{2, -1}
	}
	expect("negative count", c.Allgatherv(good, neg, make([]byte, total)))
	expect("too few counts", c.Allgatherv(nil, counts[:0], nil))
	expect("too many counts", c.Allgatherv(good, append(append([]int64{}, counts...), 0), make([]byte, total)))
	if err := mpi.CheckAllgatherv(rank, good, counts, make([]byte, total)); err != nil {
		r.Errorf("CheckAllgatherv of good arguments: %v", err)
	}

	if _, err := c.Bcast([]byte("x"), size); err == nil {
		r.Errorf("Bcast with root %d of %d ranks succeeded", size, size)
	}
	if _, err := c.Bcast(nil, -1); err == nil {
		r.Errorf("Bcast with root -1 succeeded")
	}
	if _, err := c.AllreduceInt64([]int64{1}, mpi.Op(42)); err == nil {
		r.Errorf("AllreduceInt64 with Op(42) succeeded")
	}
	// The group is still aligned and usable.
	r.Must(c.Barrier(), "Barrier after bad arguments")
	got, err := c.AllgatherInt64(int64(rank))
	r.Must(err, "AllgatherInt64 after bad arguments")
	for x, v := range got {
		if v != int64(x) {
			r.Errorf("AllgatherInt64 after bad arguments: [%d] = %d", x, v)
		}
	}
}

// testCounter: every rank fetch-and-adds its own increments, unevenly
// (rank r takes 1+r per call, r calls more than rank 0): the values each
// FetchAdd returned partition [0, total) with no gap or overlap, a new
// counter starts again at 0, and Free is a collective.
func testCounter(r *R) {
	c := r.C
	for trial := range 2 {
		k, err := c.NewCounter()
		if err != nil {
			r.Errorf("NewCounter: %v", err)
			c.Abort(1)
		}
		step := int64(1 + c.Rank())
		calls := 20 + c.Rank()
		var mine []int64
		for range calls {
			v, err := k.FetchAdd(step)
			if err != nil {
				r.Errorf("FetchAdd: %v", err)
				c.Abort(1)
			}
			for d := range step {
				mine = append(mine, v+d)
			}
		}
		// Every rank's claimed values, gathered: each of [0, total) once.
		buf := make([]byte, 0, 8*len(mine))
		for _, v := range mine {
			buf = append(buf, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
		}
		all, err := mpi.AllgatherBytes(c, buf)
		if err != nil {
			r.Errorf("gather: %v", err)
			c.Abort(1)
		}
		var total int64
		for q := range c.Size() {
			total += int64((20 + q) * (1 + q))
		}
		seen := make([]int, total)
		for q, b := range all {
			for i := 0; i+4 <= len(b); i += 4 {
				v := int64(b[i]) | int64(b[i+1])<<8 | int64(b[i+2])<<16 | int64(b[i+3])<<24
				if v < 0 || v >= total {
					r.Errorf("trial %d: rank %d got %d, outside [0, %d)", trial, q, v, total)
					continue
				}
				seen[v]++
			}
		}
		for v, n := range seen {
			if n != 1 {
				r.Errorf("trial %d: value %d handed out %d times", trial, v, n)
				break
			}
		}
		last, err := k.FetchAdd(0)
		if err != nil || last != total {
			r.Errorf("trial %d: the counter ends at %d (%v), want %d", trial, last, err, total)
		}
		if err := c.Barrier(); err != nil { // every rank read the end before the free
			r.Errorf("barrier: %v", err)
			c.Abort(1)
		}
		if err := k.Free(); err != nil {
			r.Errorf("Free: %v", err)
			c.Abort(1)
		}
	}
}
