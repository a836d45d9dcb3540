//go:build cudafront && !cuda

package gpucheck

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// EngineEnv names the engine binary to start instead of the one beside the
// front (a site that keeps them apart; the tests).
const EngineEnv = "CANOPY_CUDA_ENGINE"

// EngineSuffix is what the engine's name adds to the front's:
// canopy-cuda's engine is canopy-cuda-engine in the same folder.
const EngineSuffix = "-engine"

// Engine is the engine's path: $CANOPY_CUDA_ENGINE, else this executable's
// own path (links resolved) with EngineSuffix.
func Engine() (string, error) {
	if p := os.Getenv(EngineEnv); p != "" {
		return p, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding this executable: %w", err)
	}
	return self + EngineSuffix, nil
}

var engineErr error

// Front is the front's start, before MPI: with a usable GPU it execs the
// engine with this process's arguments and environment (the same pid, so
// the launcher's ranks stay its ranks), and does not return. It returns
// when this process runs on the CPU: no usable GPU (Run says why), or the
// engine could not be started (EngineErr says why).
func Front() {
	if !Run().Usable() {
		return
	}
	path, err := Engine()
	if err == nil {
		err = startEngine(path)
	}
	engineErr = fmt.Errorf("this node has %d GPU(s) but the cuda build's engine %s cannot start: %w (install canopy-cuda and canopy-cuda%s side by side, set %s, or run with --device cpu)",
		Run().Devices, path, err, EngineSuffix, EngineEnv)
}

// startEngine execs path; it returns only on failure.
func startEngine(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if self, err := os.Executable(); err == nil {
		if me, err := os.Stat(self); err == nil && os.SameFile(fi, me) {
			return errors.New("it is this front itself")
		}
	}
	return syscall.Exec(path, os.Args, os.Environ())
}

// EngineErr is why a node with a GPU could not start the engine (nil when
// it has none, or before Front ran).
func EngineErr() error { return engineErr }
