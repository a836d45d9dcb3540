// Command canopy evaluates DeepForest detectors under mpirun or srun and
// reports metrics that are bit-identical for any number of ranks. The
// command logic lives in package jobs.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/canopy-hpc/canopy/jobs"
)

func main() {
	os.Exit(run(context.Background(), os.Args, os.Stdout, os.Stderr))
}

// run is main with its dependencies as arguments. SIGINT, SIGTERM (scancel,
// preemption) and SIGUSR1 (Slurm's --signal warning) cancel the context:
// ranks finish their batch, sync their part files and exit 8.
func run(ctx context.Context, args []string, stdout, stderr *os.File) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGUSR1)
	defer stop()
	return jobs.Main(ctx, args, stdout, stderr)
}
