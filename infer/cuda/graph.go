package cuda

// Graph is a recorded sequence of a Device's launches (a CUDA graph's
// executable on a GPU; the host shim's launch list).
type Graph uintptr

// Capturer is a Device that can record the launches it is given between
// BeginCapture and EndCapture, without running them, as a Graph, and
// replay the graph later: the same kernels with the same arguments, so
// the buffers a graph reads and writes must stay where they were (the
// caller refills its inputs before Replay). Uploads and downloads are not
// recorded: they fail during a capture (on a GPU they would synchronize
// the stream), and the capture fails with them. One capture at a time.
type Capturer interface {
	BeginCapture() error
	// EndCapture returns the graph, or the first error since
	// BeginCapture (the capture is abandoned).
	EndCapture() (Graph, error)
	// Replay queues the graph's launches in order.
	Replay(Graph) error
	// DropGraph frees a graph.
	DropGraph(Graph)
}
