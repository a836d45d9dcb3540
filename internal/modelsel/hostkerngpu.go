//go:build hostkerngpu

package modelsel

import (
	"fmt"
	"os"
	"strconv"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/hostkern"
)

// A build for tests only (-tags hostkerngpu; main's MPI tests build it):
// with HostkernGPUsEnv=N the process sees N GPUs that are host shims
// (infer/cuda/hostkern: kernels.cu on the CPU), so the GPU engine runs
// under the real mpirun. Inert when unset; in no other build.

// HostkernGPUsEnv is the test hook's variable: the number of fake GPUs.
const HostkernGPUsEnv = "CANOPY_TEST_HOSTKERN_GPUS"

func init() {
	n, err := strconv.Atoi(os.Getenv(HostkernGPUsEnv))
	if err != nil || n < 1 {
		return
	}
	HaveCUDA = true
	CountDevices = func() (int, error) { return n, nil }
	OpenDevice = func(i int) (cuda.Device, error) {
		if i < 0 || i >= n {
			return nil, fmt.Errorf("cuda: device %d: this process sees %d", i, n)
		}
		return hostkern.NewAs(cuda.Info{Index: i, Name: "host shim", UUID: fmt.Sprintf("GPU-hostkern-%d", i), SM: "9.0"}), nil
	}
}
