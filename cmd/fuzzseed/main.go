// Command fuzzseed writes seed-corpus files for Go's fuzzing engine
// (testdata/fuzz/FuzzX/ in a package, which `go test` runs as part of the
// tests and `go test -fuzz` starts from). scripts/fuzz-seeds.sh lists every
// corpus canopy commits.
//
//	fuzzseed -dir DIR [-kind bytes|string|packet|part] [-then 'bool(false)'] ARG...
//
// Each ARG is one seed: with -kind bytes a file whose bytes are the seed,
// with string the seed itself, with packet files packed as canopy's rank-0
// input broadcast (0, then each file length-prefixed, as jobs.packFields),
// with part a wire record of ARG detections framed as a part file record,
// with records the match records (internal/records) of ARG small images,
// every metric family, labels below 3.
// -then appends a further argument line, in the corpus syntax, to every
// seed (for fuzz targets of more than one argument).
package main

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/records"
	"github.com/canopy-hpc/canopy/internal/wire"
	"github.com/canopy-hpc/canopy/metrics"
)

func main() {
	dir := flag.String("dir", "", "corpus folder (testdata/fuzz/FuzzX)")
	kind := flag.String("kind", "bytes", "bytes, string, packet or part")
	then := flag.String("then", "", "a further argument line for every seed, e.g. bool(false)")
	flag.Parse()
	if err := run(*dir, *kind, *then, flag.Args()); err != nil {
		fmt.Fprintf(os.Stderr, "fuzzseed: %v\n", err)
		os.Exit(1)
	}
}

func run(dir, kind, then string, args []string) error {
	if dir == "" {
		return fmt.Errorf("-dir is required")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var seeds []string
	switch kind {
	case "bytes":
		for _, a := range args {
			b, err := os.ReadFile(a)
			if err != nil {
				return err
			}
			seeds = append(seeds, "[]byte("+strconv.Quote(string(b))+")")
		}
	case "string":
		for _, a := range args {
			seeds = append(seeds, "string("+strconv.Quote(a)+")")
		}
	case "packet":
		pkt := []byte{0}
		for _, a := range args {
			b, err := os.ReadFile(a)
			if err != nil {
				return err
			}
			pkt = binary.LittleEndian.AppendUint64(pkt, uint64(len(b)))
			pkt = append(pkt, b...)
		}
		seeds = append(seeds, "[]byte("+strconv.Quote(string(pkt))+")")
	case "part":
		var rec []byte
		for i, a := range args {
			n, err := strconv.Atoi(a)
			if err != nil {
				return err
			}
			dets := make([]box.Detection, n)
			for k := range dets {
				x := float64(10 * k)
				dets[k] = box.Detection{Box: box.Box{Xmin: x, Ymin: x / 2, Xmax: x + 8.5, Ymax: x/2 + 7}, Label: int32(k % 2), Score: 0.9 - 0.1*float64(k%9)}
			}
			b, err := wire.Encode(make([]byte, 8), []wire.Image{{Index: i, Dets: dets}})
			if err != nil {
				return err
			}
			binary.LittleEndian.PutUint64(b, uint64(len(b)-8))
			rec = append(rec, b...)
		}
		seeds = append(seeds, "[]byte("+strconv.Quote(string(rec))+")")
	case "records":
		for _, a := range args {
			// N, or N@0: matched for a lowest IoU threshold of 0, where
			// the IoU records count their zero pairs (every pair valid)
			num, every := strings.CutSuffix(a, "@0")
			n, err := strconv.Atoi(num)
			if err != nil {
				return err
			}
			minIoU := 0.4
			if every {
				minIoU = 0
			}
			b, err := matchRecords(n, minIoU)
			if err != nil {
				return err
			}
			seeds = append(seeds, "[]byte("+strconv.Quote(string(b))+")")
		}
	default:
		return fmt.Errorf("unknown -kind %q", kind)
	}
	for _, s := range seeds {
		text := "go test fuzz v1\n" + s + "\n"
		if then != "" {
			text += then + "\n"
		}
		sum := sha256.Sum256([]byte(text))
		if err := os.WriteFile(filepath.Join(dir, "seed-"+hex.EncodeToString(sum[:8])), []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// matchRecords matches n small images (the second without detections,
// the third an empty frame) for the lowest IoU threshold minIoU and
// encodes their records.
func matchRecords(n int, minIoU float64) ([]byte, error) {
	in := metrics.Input{Labels: box.SortedLabelMap([]string{"a", "b", "c"})}
	idx := make([]int, n)
	for i := range n {
		idx[i] = i
		im := box.Image{Path: strconv.Itoa(i)}
		var dets []box.Detection
		for k := range 2 + i%3 {
			x := float64(12 * k)
			b := box.Box{Xmin: x, Ymin: x / 2, Xmax: x + 40, Ymax: x/2 + 35}
			im.Truth = append(im.Truth, box.Truth{Box: b, Label: int32(k % 3)})
			if i%3 != 1 {
				b.Xmin += float64(k)
				dets = append(dets, box.Detection{Box: b, Label: int32((k + i) % 3), Score: 0.9 - 0.1*float64(k)})
			}
		}
		if i%3 == 2 {
			im = box.Image{Path: im.Path, Empty: true}
		}
		in.Images = append(in.Images, im)
		in.Dets = append(in.Dets, dets)
	}
	recs, err := metrics.MatchImages(in, idx, metrics.MatchOptions{MinIoU: minIoU}, metrics.All)
	if err != nil {
		return nil, err
	}
	return records.Encode(nil, recs, metrics.All), nil
}
