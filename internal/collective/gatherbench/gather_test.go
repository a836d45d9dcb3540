package gatherbench

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/wire"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/cmpi"
	"github.com/canopy-hpc/canopy/mpi/mpitest"
)

var comm *cmpi.Comm

func TestMain(m *testing.M) {
	c, err := cmpi.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	comm = c
	code := m.Run()
	if code != 0 && c.Size() > 1 {
		c.Abort(code)
	}
	c.Finalize()
	os.Exit(code)
}

// shard builds rank's share of total boxes: 1,000 images per rank of
// total/(1000·size) boxes each, float32 values, as peers.py does.
func shard(total, rank, size int) []wire.Image {
	rng := rand.New(rand.NewPCG(uint64(rank), 42))
	perRank := total / size
	const imagesPerRank = 1000
	per := perRank / imagesPerRank
	imgs := make([]wire.Image, imagesPerRank)
	for j := range imgs {
		dets := make([]box.Detection, per)
		for k := range dets {
			x, y := float32(rng.Float64()*380), float32(rng.Float64()*380)
			dets[k] = box.Detection{Box: box.Box{Xmin: float64(x), Ymin: float64(y),
				Xmax: float64(x + float32(1+rng.Float64()*19)), Ymax: float64(y + float32(1+rng.Float64()*19))},
				Score: float64(float32(rng.Float64()))}
		}
		imgs[j] = wire.Image{Index: rank*imagesPerRank + j, Dets: dets}
	}
	return imgs
}

func gather(c mpi.Comm, imgs []wire.Image, nImages int) ([][]box.Detection, int, error) {
	buf, err := wire.Encode(nil, imgs)
	if err != nil {
		return nil, 0, err
	}
	parts, err := mpi.AllgatherBytes(c, buf)
	if err != nil {
		return nil, 0, err
	}
	merged, _, err := wire.Merge(parts, nImages)
	return merged, len(buf), err
}

// BenchmarkGather1M times encode + AllgatherBytes + decode/merge of
// 1,000,000 boxes until every rank holds the merged arrays.
func BenchmarkGather1M(b *testing.B) {
	if comm.Size() > 1 && !mpitest.FixedBenchtime() {
		b.Skip("with several ranks run with -test.benchtime=Nx so every rank runs the same iterations")
	}
	const total = 1_000_000
	imgs := shard(total, comm.Rank(), comm.Size())
	nImages := 1000 * comm.Size()
	var sent int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := comm.Barrier(); err != nil {
			b.Fatal(err)
		}
		merged, n, err := gather(comm, imgs, nImages)
		if err != nil {
			b.Fatal(err)
		}
		if len(merged) != nImages {
			b.Fatalf("merged %d images", len(merged))
		}
		sent = n
	}
	b.StopTimer()
	all, err := comm.AllreduceInt64([]int64{int64(sent)}, mpi.Sum)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(all[0])/total, "B/box")
	b.ReportMetric(0, "ns/op") // time per op is reported as sec/op below
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/gather")
}

// TestGatherMerged checks the benchmark's data path gives every rank the
// same merged boxes (a benchmark that gathers garbage is no benchmark).
func TestGatherMerged(t *testing.T) {
	const total = 20_000
	imgs := shard(total, comm.Rank(), comm.Size())
	merged, _, err := gather(comm, imgs, 1000*comm.Size())
	if err != nil {
		t.Fatal(err)
	}
	for r := 0; r < comm.Size(); r++ {
		want := shard(total, r, comm.Size())
		for j, im := range want {
			got := merged[im.Index]
			if len(got) != len(im.Dets) || (len(got) > 0 && got[0] != im.Dets[0]) {
				t.Fatalf("rank %d image %d differs after the gather", r, j)
			}
		}
	}
}
