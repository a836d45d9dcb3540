// Command forestgen writes a set of synthetic aerial forest images
// (internal/testsupport/forest) as PNG files with a DeepForest annotation CSV:
//
//	go run ./cmd/forestgen -out testdata/demo -n 40 -seed 3
//
// writes OUT/img_0000.png … and OUT/annotations.csv (image_path, xmin, ymin,
// xmax, ymax, label; empty frames as one 0,0,0,0 row, DeepForest's
// convention). -size WxH sets the image size (default 400x400); -sizes takes
// a comma-separated list of sizes used in turn, for sets that mix sizes.
// The same flags give the same bytes.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/canopy-hpc/canopy/internal/testsupport/forest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "forestgen:", err)
		os.Exit(1)
	}
}

func parseSize(s string) (w, h int, err error) {
	a, b, ok := strings.Cut(s, "x")
	if ok {
		w, err = strconv.Atoi(a)
		if err == nil {
			h, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil || w < 1 || h < 1 {
		return 0, 0, fmt.Errorf("bad size %q, want WxH", s)
	}
	return w, h, nil
}

func run() error {
	out := flag.String("out", "", "output folder (created)")
	n := flag.Int("n", 40, "number of images")
	seed := flag.Uint64("seed", 1, "seed of the set (image i of seed s is the same in any set)")
	first := flag.Int("first", 0, "index of the first image")
	sizes := flag.String("sizes", "400x400", "image size WxH, or a comma-separated list used in turn")
	prefix := flag.String("prefix", "img_", "file name prefix")
	flag.Parse()
	if *out == "" {
		return fmt.Errorf("-out is required")
	}
	var ws, hs []int
	for _, s := range strings.Split(*sizes, ",") {
		w, h, err := parseSize(s)
		if err != nil {
			return err
		}
		ws, hs = append(ws, w), append(hs, h)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	csv := &strings.Builder{}
	csv.WriteString("image_path,xmin,ymin,xmax,ymax,label\n")
	for k := 0; k < *n; k++ {
		i := *first + k
		w, h := ws[k%len(ws)], hs[k%len(hs)]
		img, boxes := forest.Generate(*seed, i, w, h)
		name := fmt.Sprintf("%s%04d.png", *prefix, i)
		f, err := os.Create(filepath.Join(*out, name))
		if err != nil {
			return err
		}
		bw := bufio.NewWriter(f)
		if err := png.Encode(bw, img); err != nil {
			f.Close()
			return err
		}
		if err := bw.Flush(); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		if len(boxes) == 0 {
			fmt.Fprintf(csv, "%s,0,0,0,0,%s\n", name, forest.LabelTree)
		}
		for _, b := range boxes {
			fmt.Fprintf(csv, "%s,%d,%d,%d,%d,%s\n", name, b.XMin, b.YMin, b.XMax, b.YMax, b.Label)
		}
	}
	return os.WriteFile(filepath.Join(*out, "annotations.csv"), []byte(csv.String()), 0o644)
}
