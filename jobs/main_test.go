package jobs

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMain removes the folders the tests build once per test binary and
// share (the fake cuDNN, the small GPU model, the model set, the crop
// parity files) when the tests end.
func TestMain(m *testing.M) {
	code := m.Run()
	dirs := []string{fakeLib.dir, smallModel.dir, cropFiles.Dir}
	if modelSet.model != "" {
		dirs = append(dirs, filepath.Dir(modelSet.model))
	}
	for _, d := range dirs {
		if d != "" {
			os.RemoveAll(d)
		}
	}
	os.Exit(code)
}
