package dataset

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"

	"github.com/go-gota/gota/dataframe"
)

// csvRows makes an annotation CSV of n rows over n/30 images, seeded by n.
func csvRows(n int) []byte {
	var b bytes.Buffer
	b.WriteString("image_path,xmin,ymin,xmax,ymax,label\n")
	for i := 0; i < n; i++ {
		x, y := (i*37)%360, (i*91)%360
		fmt.Fprintf(&b, "2019_BENCH_%05d.tif,%d,%d,%d.5,%d.25,Tree\n", i/30, x, y, x+20, y+25)
	}
	return b.Bytes()
}

var benchSizes = []int{10_000, 100_000, 1_000_000}

// benchCSV runs one CSV reader over the shared sizes.
func benchCSV(b *testing.B, read func([]byte) (int, error)) {
	for _, n := range benchSizes {
		data := csvRows(n)
		b.Run("rows="+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				got, err := read(data)
				if err != nil {
					b.Fatal(err)
				}
				if got != n {
					b.Fatalf("%d rows, want %d", got, n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/row")
		})
	}
}

// BenchmarkParseTruth is canopy's reader: validation, line numbers, grouping.
func BenchmarkParseTruth(b *testing.B) {
	benchCSV(b, func(d []byte) (int, error) {
		t, err := ParseTruth("bench.csv", d)
		if err != nil {
			return 0, err
		}
		n := 0
		for _, im := range t.Images {
			n += len(im.Rows)
		}
		return n, nil
	})
}

// BenchmarkGotaReadCSV is gota v0.12.0's dataframe.ReadCSV on the same bytes,
// with no validation or grouping: the measurement behind keeping gota out
// of the input path (docs/benchmarks.md).
func BenchmarkGotaReadCSV(b *testing.B) {
	benchCSV(b, func(d []byte) (int, error) {
		df := dataframe.ReadCSV(bytes.NewReader(d))
		return df.Nrow(), df.Err
	})
}
