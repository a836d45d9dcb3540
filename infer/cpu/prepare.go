package cpu

import (
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/canopy-hpc/canopy/infer/nn"
)

// Filters is a network's CPU state: its convolutions' transformed
// Winograd filters, made once, by the first runner (Prepare). A network
// holds one and passes it its convolutions.
type Filters struct {
	ready    sync.Once   // the transformed filters are made
	done     atomic.Bool // and ready has run
	released atomic.Bool // Prepare dropped the Winograd layers' 3×3 weights
}

// Bytes is the memory the CPU detector (NewDetector) will add
// for its transformed Winograd filters, net of the 3×3 weights it drops
// (0 once they are made): a job's memory estimate adds it to the process's
// resident memory, measured before any runner exists.
func (m *Filters) Bytes(convs []*nn.Conv) int64 {
	if m.done.Load() {
		return 0
	}
	var n int64
	for _, c := range convs {
		if c != nil && UseWinograd(c) {
			comps := int64(36)
			if WinoTile(c) == 2 {
				comps = 16
			}
			n += (comps - 9) * int64(c.Out*c.In) * 4
		}
	}
	return n
}

// Prepare makes, once per network, the Winograd filters of every 3×3
// stride-1 convolution (which tile each uses depends on its shape alone).
// It first collects the garbage of loading and gives its pages back, and
// collects again every winoGCBytes of filters: with release (the CPU
// detector, which never uploads the model to a GPU) each convolution's 3×3
// weights are dropped as soon as its filters exist, and the collections let
// the next filters reuse their memory, so the process grows by the filters
// less the weights they replace (Bytes). The first runner decides:
// a later NewDetector on a model a Runner prepared keeps the weights.
func (m *Filters) Prepare(convs []*nn.Conv, release bool) {
	m.ready.Do(func() {
		debug.FreeOSMemory()
		var made int64
		for _, c := range convs {
			if c == nil || !UseWinograd(c) {
				continue
			}
			if WinoTile(c) == 4 {
				made += int64(len(c.WinogradU4())) * 4
			} else {
				made += int64(len(c.WinogradU())) * 4
			}
			if release {
				c.W = nil
				m.released.Store(true)
			}
			if made >= winoGCBytes {
				runtime.GC()
				made = 0
			}
		}
		debug.FreeOSMemory()
		m.done.Store(true)
	})
}

// winoGCBytes is how many bytes of Winograd filters Prepare makes
// between two collections.
const winoGCBytes = 32 << 20

// Released reports whether the CPU detector dropped the 3×3 weights that
// its Winograd filters replace: the model then runs on the CPU only.
func (m *Filters) Released() bool { return m.released.Load() }

// Procs is the GOMAXPROCS a process running a CPU engine of threads
// workers should have: one P more than its workers. The workers spend their
// time in cgo calls (OpenBLAS, the C kernels), and with exactly threads Ps
// a worker spawned for a layer, or back from C, waited for a P: on the
// 2-core test VM, 800×800 on 2 threads took 0.93–1.00 s per image at
// GOMAXPROCS 2 and 0.84–0.89 s at 3 or 4 (BenchmarkDetect, alternating),
// 1333×799 1.40–1.45 against 1.35–1.38. The results never depend on it.
func Procs(threads int) int { return max(threads, 1) + 1 }
