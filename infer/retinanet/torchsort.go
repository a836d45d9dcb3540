package retinanet

import "math/bits"

// torchSortDesc is the index permutation that torch's
// `values.sort(descending=True)` gives for a 1-D float32 CPU tensor (not
// stable: the torch builds DeepForest runs use libstdc++'s std::sort
// there, under every ATEN_CPU_CAPABILITY; tools/retinanet/nms_ties.py
// records the peer's output). Exact ties come out in the order that
// introsort leaves them, which this reproduces step by step: the
// median-of-three pivot moved to the front, the unguarded partition, the
// heap sort below a depth of 2·⌊log₂ n⌋, and the final insertion sort over
// runs of more than 16. Only its comparisons decide the result, so the
// order follows from the algorithm, whatever the element moves.
func torchSortDesc(v []float32) []int {
	idx, _ := torchSortDescHeaps(v)
	return idx
}

// torchSortDescHeaps is torchSortDesc and the number of ranges it
// heap-sorted (for the tests: the fixture must reach that fallback).
func torchSortDescHeaps(v []float32) ([]int, int) {
	s := descSorter{v: v, idx: make([]int, len(v))}
	for i := range s.idx {
		s.idx[i] = i
	}
	if n := len(v); n > 1 {
		s.introsort(0, n, 2*(bits.Len(uint(n))-1))
		s.finalInsertion(0, n)
	}
	return s.idx, s.heaps
}

// descSorter sorts idx so that v[idx[·]] descends (torch's comparator:
// NaN before any number, then greater first).
type descSorter struct {
	v     []float32
	idx   []int
	heaps int // ranges heap-sorted
}

const introThreshold = 16 // libstdc++'s _S_threshold

// before is the comparator on two positions.
func (s *descSorter) before(i, j int) bool { return s.lessKey(s.idx[i], s.idx[j]) }

// lessKey is the comparator on two elements (indices into v).
func (s *descSorter) lessKey(a, b int) bool {
	x, y := s.v[a], s.v[b]
	return (x != x && y == y) || x > y
}

func (s *descSorter) swap(i, j int) { s.idx[i], s.idx[j] = s.idx[j], s.idx[i] }

func (s *descSorter) introsort(first, last, depth int) {
	for last-first > introThreshold {
		if depth == 0 {
			s.heapSort(first, last)
			return
		}
		depth--
		cut := s.partitionPivot(first, last)
		s.introsort(cut, last, depth)
		last = cut
	}
}

func (s *descSorter) partitionPivot(first, last int) int {
	mid := first + (last-first)/2
	s.medianToFirst(first, first+1, mid, last-1)
	// unguarded partition of [first+1, last) around the pivot at first
	lo, hi := first+1, last
	for {
		for s.before(lo, first) {
			lo++
		}
		hi--
		for s.before(first, hi) {
			hi--
		}
		if lo >= hi {
			return lo
		}
		s.swap(lo, hi)
		lo++
	}
}

// medianToFirst swaps the median of a, b and c to result.
func (s *descSorter) medianToFirst(result, a, b, c int) {
	switch {
	case s.before(a, b):
		switch {
		case s.before(b, c):
			s.swap(result, b)
		case s.before(a, c):
			s.swap(result, c)
		default:
			s.swap(result, a)
		}
	case s.before(a, c):
		s.swap(result, a)
	case s.before(b, c):
		s.swap(result, c)
	default:
		s.swap(result, b)
	}
}

func (s *descSorter) finalInsertion(first, last int) {
	if last-first <= introThreshold {
		s.insertion(first, last)
		return
	}
	s.insertion(first, first+introThreshold)
	for i := first + introThreshold; i < last; i++ {
		s.linearInsert(i)
	}
}

func (s *descSorter) insertion(first, last int) {
	for i := first + 1; i < last; i++ {
		if s.before(i, first) {
			x := s.idx[i]
			copy(s.idx[first+1:i+1], s.idx[first:i])
			s.idx[first] = x
		} else {
			s.linearInsert(i)
		}
	}
}

// linearInsert moves idx[last] left past every element it sorts before
// (unguarded: something before it stops it).
func (s *descSorter) linearInsert(last int) {
	x := s.idx[last]
	for s.lessKey(x, s.idx[last-1]) {
		s.idx[last] = s.idx[last-1]
		last--
	}
	s.idx[last] = x
}

// heapSort is std::partial_sort(first, last, last): make_heap, then
// pop_heap down to one element.
func (s *descSorter) heapSort(first, last int) {
	s.heaps++
	n := last - first
	for parent := (n - 2) / 2; parent >= 0; parent-- {
		s.adjustHeap(first, parent, n, s.idx[first+parent])
	}
	for end := last - 1; end-first > 0; end-- {
		x := s.idx[end]
		s.idx[end] = s.idx[first]
		s.adjustHeap(first, 0, end-first, x)
	}
}

// adjustHeap is libstdc++'s __adjust_heap: sift the hole at hole down to
// a leaf, always taking the child that does not sort before the other,
// then push x up from there.
func (s *descSorter) adjustHeap(first, hole, n, x int) {
	top := hole
	child := hole
	for child < (n-1)/2 {
		child = 2 * (child + 1)
		if s.before(first+child, first+child-1) {
			child--
		}
		s.idx[first+hole] = s.idx[first+child]
		hole = child
	}
	if n&1 == 0 && child == (n-2)/2 {
		child = 2 * (child + 1)
		s.idx[first+hole] = s.idx[first+child-1]
		hole = child - 1
	}
	parent := (hole - 1) / 2
	for hole > top && s.lessKey(s.idx[first+parent], x) {
		s.idx[first+hole] = s.idx[first+parent]
		hole = parent
		parent = (hole - 1) / 2
	}
	s.idx[first+hole] = x
}
