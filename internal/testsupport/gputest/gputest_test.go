//go:build !cuda

package gputest

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFakeCUDNNLeavesNoFolder: on the host shim the fake cuDNN is loaded
// and usable (cuDNN 9) and its build folder is gone once CUDNN returns.
func TestFakeCUDNNLeavesNoFolder(t *testing.T) {
	l := CUDNN(t, Device(t))
	if l.Version/10000 != 9 {
		t.Fatalf("the fake reports cuDNN version %d", l.Version)
	}
	dir := filepath.Dir(l.Path)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the fake's build folder %s is still there after loading (%v)", dir, err)
	}
	if again := CUDNN(t, Device(t)); again != l {
		t.Fatal("a second call built another library")
	}
}
