// Command memprobe measures the CPU detector's peak memory on one image
// size: the calibration of the job's per-rank memory estimate
// (internal/limits, docs/reliability.md).
//
//	go run ./cmd/memprobe MODEL_DIR W H [MIN_SIZE MAX_SIZE]
//
// It loads the model folder, makes the CPU detector (which drops the 3×3
// weights its Winograd filters replace), runs one synthetic W×H image and prints the
// process's peak resident memory (ru_maxrss) before and after the run; the
// difference is what the network needed at that input size.
package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/canopy-hpc/canopy/infer/modelfile"
	"github.com/canopy-hpc/canopy/infer/retinanet"
)

// hwm is the process's peak resident memory (getrusage's ru_maxrss, KiB).
func hwm() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Maxrss * 1024
}

func main() {
	if len(os.Args) != 4 && len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: memprobe MODEL_DIR W H [MIN_SIZE MAX_SIZE]")
		os.Exit(2)
	}
	m, _, _, err := modelfile.LoadFolder(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "memprobe:", err)
		os.Exit(1)
	}
	w, _ := strconv.Atoi(os.Args[2])
	h, _ := strconv.Atoi(os.Args[3])
	if len(os.Args) == 6 {
		m.Opt.MinSize, _ = strconv.Atoi(os.Args[4])
		m.Opt.MaxSize, _ = strconv.Atoi(os.Args[5])
	}
	loaded := hwm()
	d, err := retinanet.NewDetector(m, 2, make([]int32, m.Classes))
	if err != nil {
		fmt.Fprintln(os.Stderr, "memprobe:", err)
		os.Exit(1)
	}
	r := d.Runner()
	prepared := hwm()
	img := retinanet.Image{W: w, H: h, Pix: make([]float32, 3*w*h)}
	for i := range img.Pix {
		img.Pix[i] = float32(i%251) / 251
	}
	base := hwm()
	r.Detect(img)
	pw, ph := m.PaddedSize(w, h)
	peak := hwm()
	fmt.Printf("peak %d MiB after loading, %d MiB after the runner's filters\n", loaded>>20, prepared>>20)
	fmt.Printf("%s %dx%d (network input %dx%d): peak %d MiB before, %d MiB after: %d MiB, %.0f B per input pixel\n",
		m.Arch, w, h, pw, ph, base>>20, peak>>20, (peak-base)>>20, float64(peak-base)/float64(pw*ph))
}
