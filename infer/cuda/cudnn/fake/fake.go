// Package fake builds the fake libcudnn.so.9 (csrc/fakecudnn.c) that machines
// without a GPU load in place of cuDNN: the 15 functions of cuDNN 9's
// graph API over host memory, with the real library's checks at
// finalization and a few engines, among them the kinds canopy's engine
// filter must refuse. See csrc/fakecudnn.c for what it checks and computes.
package fake

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

//go:embed csrc/fakecudnn.c
var source []byte

// Build compiles the fake into dir/libcudnn.so.9 (and a copy as its
// sub-library libcudnn_graph.so.9) with the C compiler ($CC,
// else cc) and returns its path. defines are extra -D flags, e.g.
// "FAKE_VERSION=8907" (a wrong major version) or "FAKE_OMIT_EXECUTE" (a
// library lacking one of the 15 symbols).
func Build(dir string, defines ...string) (string, error) {
	src := filepath.Join(dir, "fakecudnn.c")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		return "", fmt.Errorf("fake cudnn: %w", err)
	}
	out := filepath.Join(dir, "libcudnn.so.9")
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	args := []string{"-shared", "-fPIC", "-O3", "-fno-math-errno", "-fvisibility=hidden", "-o", out, src, "-lm"}
	for _, d := range defines {
		args = append(args, "-D"+d)
	}
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("fake cudnn: %s %v: %w\n%s", cc, args, err, b)
	}
	// The real libcudnn.so.9 is a loader that needs its sub-library
	// libcudnn_graph.so.9 beside it; the fake stands in for both.
	lib, err := os.ReadFile(out)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "libcudnn_graph.so.9"), lib, 0o755)
	}
	if err != nil {
		return "", fmt.Errorf("fake cudnn: %w", err)
	}
	return out, nil
}
