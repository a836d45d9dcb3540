package torchfile

import (
	"os"
	"testing"
)

// BenchmarkReadCheckpoint reads a real checkpoint named by
// CANOPY_TORCHFILE_BENCH (make df-checkpoints writes
// bin/df-checkpoints/model.ckpt) and converts every float tensor of its
// state dict: what torch.load(weights_only=True) does
// (tools/torchfile/bench.py runs both, alternating).
func BenchmarkReadCheckpoint(b *testing.B) {
	path := os.Getenv("CANOPY_TORCHFILE_BENCH")
	if path == "" {
		b.Skip("CANOPY_TORCHFILE_BENCH names no checkpoint")
	}
	for i := 0; i < b.N; i++ {
		f, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		sd := f.Root.(*Dict)
		if v, ok := sd.Get("state_dict"); ok {
			sd = v.(*Dict)
		}
		n := 0
		for _, v := range sd.Values {
			if t, ok := v.(*Tensor); ok && t.DType.Float() {
				data, err := f.Float32(t)
				if err != nil {
					b.Fatal(err)
				}
				n += len(data)
			}
		}
		f.Close()
		b.ReportMetric(float64(n), "floats")
	}
}
