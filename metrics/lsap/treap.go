package lsap

// treap is an ordered set of column indices keyed by (v[j] descending,
// j ascending), where v is the solver's column potentials (a member's
// potential never changes while it is a member). Nodes are the column
// indices themselves, so the set costs three arrays of length nc.
type treap struct {
	v           []float64
	left, right []int32
	pri         []uint32
	root        int32
}

func (t *treap) init(n int, v []float64) {
	t.v = v
	t.left = make([]int32, n)
	t.right = make([]int32, n)
	t.pri = make([]uint32, n)
	for j := range t.pri {
		// a fixed mix of the index: the shape never affects the answer
		x := uint32(j)*0x9E3779B1 + 0x7F4A7C15
		x ^= x >> 15
		x *= 0x2C1B3C6D
		x ^= x >> 12
		t.pri[j] = x
		t.left[j], t.right[j] = -1, -1
	}
	t.root = -1
}

// before reports whether a precedes b in the set's order.
func (t *treap) before(a, b int32) bool {
	return t.v[a] > t.v[b] || (t.v[a] == t.v[b] && a < b)
}

// buildSorted makes the set hold 0..n-1, which must all have one
// potential (so index order is the set's order): a Cartesian tree built
// with a stack in O(n).
func (t *treap) buildSorted(n int) {
	stack := make([]int32, 0, 64)
	for j := int32(0); j < int32(n); j++ {
		last := int32(-1)
		for len(stack) > 0 && t.pri[stack[len(stack)-1]] < t.pri[j] {
			last = stack[len(stack)-1]
			stack = stack[:len(stack)-1]
		}
		t.left[j] = last
		if len(stack) > 0 {
			t.right[stack[len(stack)-1]] = j
		}
		stack = append(stack, j)
	}
	if len(stack) > 0 {
		t.root = stack[0]
	}
}

// split divides n into the members before x and the rest.
func (t *treap) split(n, x int32) (int32, int32) {
	if n < 0 {
		return -1, -1
	}
	if t.before(n, x) {
		l, r := t.split(t.right[n], x)
		t.right[n] = l
		return n, r
	}
	l, r := t.split(t.left[n], x)
	t.left[n] = r
	return l, n
}

func (t *treap) merge(a, b int32) int32 {
	if a < 0 {
		return b
	}
	if b < 0 {
		return a
	}
	if t.pri[a] > t.pri[b] {
		t.right[a] = t.merge(t.right[a], b)
		return a
	}
	t.left[b] = t.merge(a, t.left[b])
	return b
}

func (t *treap) insert(x int32) {
	t.left[x], t.right[x] = -1, -1
	t.root = t.insertAt(t.root, x)
}

func (t *treap) insertAt(n, x int32) int32 {
	if n < 0 {
		return x
	}
	if t.pri[x] > t.pri[n] {
		t.left[x], t.right[x] = t.split(n, x)
		return x
	}
	if t.before(x, n) {
		t.left[n] = t.insertAt(t.left[n], x)
	} else {
		t.right[n] = t.insertAt(t.right[n], x)
	}
	return n
}

// remove takes x (a member) out of the set.
func (t *treap) remove(x int32) { t.root = t.removeAt(t.root, x) }

func (t *treap) removeAt(n, x int32) int32 {
	if n == x {
		return t.merge(t.left[n], t.right[n])
	}
	if n < 0 {
		panic("metrics: treap remove of a non-member")
	}
	if t.before(x, n) {
		t.left[n] = t.removeAt(t.left[n], x)
	} else {
		t.right[n] = t.removeAt(t.right[n], x)
	}
	return n
}

// first is the set's first member.
func (t *treap) first() (int32, bool) {
	n := t.root
	if n < 0 {
		return -1, false
	}
	for t.left[n] >= 0 {
		n = t.left[n]
	}
	return n, true
}

// firstBelow is the first member with v < lvl.
func (t *treap) firstBelow(lvl float64) (int32, bool) {
	best := int32(-1)
	for n := t.root; n >= 0; {
		if t.v[n] < lvl {
			best, n = n, t.left[n]
		} else {
			n = t.right[n]
		}
	}
	return best, best >= 0
}

// firstAtOrBelow is the first member with v <= lvl.
func (t *treap) firstAtOrBelow(lvl float64) (int32, bool) {
	best := int32(-1)
	for n := t.root; n >= 0; {
		if t.v[n] <= lvl {
			best, n = n, t.left[n]
		} else {
			n = t.right[n]
		}
	}
	return best, best >= 0
}

// lastAtOrAbove is the last member with v >= lvl.
func (t *treap) lastAtOrAbove(lvl float64) (int32, bool) {
	best := int32(-1)
	for n := t.root; n >= 0; {
		if t.v[n] >= lvl {
			best, n = n, t.right[n]
		} else {
			n = t.left[n]
		}
	}
	return best, best >= 0
}
