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

// HostkernCloseFailEnv names a fake GPU (its index) whose Close fails,
// after freeing it, as a late CUDA fault found by the close would.
const HostkernCloseFailEnv = "CANOPY_TEST_HOSTKERN_CLOSE_FAIL"

// closeFails is a fake GPU whose Close fails.
type closeFails struct{ cuda.Device }

func (d closeFails) Close() error {
	d.Device.Close()
	return fmt.Errorf("cuda: closing %s: an injected late fault (%s)", d.Info().Name, HostkernCloseFailEnv)
}

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
		d := hostkern.NewAs(cuda.Info{Index: i, Name: "host shim", UUID: fmt.Sprintf("GPU-hostkern-%d", i), SM: "9.0"})
		if v, ok := os.LookupEnv(HostkernCloseFailEnv); ok && v == strconv.Itoa(i) {
			return closeFails{d}, nil
		}
		return d, nil
	}
}
