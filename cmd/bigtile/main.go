// Command bigtile writes one large generated tile's truth and prediction
// CSVs (internal/testsupport/bigtile) for the big-tile metric benchmark
// and peer check:
//
//	go run ./cmd/bigtile -crowns 20000 -out bin/bigtile-20000
//
// writes OUT/truth.csv and OUT/predictions.csv. The same flags give the
// same bytes.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/canopy-hpc/canopy/internal/testsupport/bigtile"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bigtile:", err)
		os.Exit(1)
	}
}

func run() error {
	n := flag.Int("crowns", 20000, "truth crowns in the tile (at least 10)")
	seed := flag.Uint64("seed", 1, "generator seed")
	out := flag.String("out", "", "output folder (made if missing)")
	flag.Parse()
	if *out == "" || *n < 10 || *n > 10_000_000 {
		return fmt.Errorf("need -out and -crowns in [10, 10000000]")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	t := bigtile.Generate(*n, *seed)
	for name, write := range map[string]func(f *os.File) error{
		"truth.csv":       func(f *os.File) error { return t.WriteTruth(f) },
		"predictions.csv": func(f *os.File) error { return t.WritePreds(f) },
	} {
		f, err := os.Create(filepath.Join(*out, name))
		if err != nil {
			return err
		}
		if err := write(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	fmt.Printf("%s: %d crowns, %d predictions on a %d² tile\n", *out, len(t.Truth), len(t.Preds), t.Side)
	return nil
}
