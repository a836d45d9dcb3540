// Command cropmodel writes the crop parity files into a folder: the
// seeded ResNet-50 CropModel as DeepForest 2.1.0 saved it (crop.ckpt,
// crop.pt, crop-hub/), the ResNet-18 state dict (crop-r18.pt) and the
// forestgen raster of infer/crop/testdata/parity.json, rebuilt from the
// committed pickles and the weight generator (tools/cropmodel/bench.sh
// and the README's example use them).
//
//	go run ./cmd/cropmodel -out DIR
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/canopy-hpc/canopy/internal/testsupport/torchckpt"
)

func main() {
	out := flag.String("out", "", "folder to write (created)")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "cropmodel: -out is required")
		os.Exit(2)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "cropmodel:", err)
		os.Exit(1)
	}
	f, err := torchckpt.CropParity(".", *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cropmodel:", err)
		os.Exit(1)
	}
	fmt.Printf("%s\n%s\n%s\n%s\n%s\n", f.Ckpt, f.PT, f.Hub, f.R18, f.Tile)
}
