package jobs

import (
	"fmt"
	"io"
	"time"

	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/urfave/cli/v2"
)

// canopy doctor: its flags (the checks are doctor.go).

func doctorCommand(code *int, stdout, stderr io.Writer, newComm CommFactory) *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "print what every rank sees: MPI library, ranks, node-local ranks, threads, CPU affinity, GPUs, devices",
		Description: "Run it the way you run eval (mpirun -np N canopy doctor, or srun inside an\n" +
			"allocation) to check the launcher, the binding of ranks to cores and the GPUs.\n\n" + ExitTable,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Usage: "instead, tell the state of an output folder, without MPI: complete (exit 0), an interrupted run that --resume continues (exit 8: its part files hold finished images), in use by a running job, or neither (exit 1, also for a published run whose outputs no longer match the sha256s its report.json records: each missing, changed or extra output is named); what a job script checks after mpirun exits 1 on SIGTERM"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageError(fmt.Errorf("doctor takes no arguments, got %q", c.Args().Slice()))
			}
			if out := c.String("out"); out != "" {
				st, msg := outState(out)
				collective.SayLine(stdout, "", out+": "+msg) // msg quotes the folder's files
				*code = st
				return nil
			}
			*code = runJob(c.Context, newComm, stderr, jobOptions{collectiveTimeout: time.Minute}, func(comm mpi.Comm) error {
				return doctor(comm, stdout)
			})
			return nil
		},
	}
}
