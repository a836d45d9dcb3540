//go:build linux

package nn

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"
)

// bigFloats marks the 2 MiB-aligned middle of a big buffer for huge pages
// (the "hg" flag of its mapping in /proc/self/smaps) and keeps what is
// written to it; with CANOPY_HUGEPAGES=off it does not.
func TestBigFloatsAdvisesHugePages(t *testing.T) {
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || strings.Contains(string(mode), "[never]") {
		t.Skipf("this kernel gives no transparent huge pages (%q, %v)", mode, err)
	}
	big := BigFloats(6 << 20 / 4)
	mid := uintptr(unsafe.Pointer(&big[len(big)/2]))
	if flags := vmFlags(t, mid); !strings.Contains(" "+flags+" ", " hg ") {
		t.Fatalf("the big buffer's mapping has VmFlags %q: no hg (MADV_HUGEPAGE)", flags)
	}
	defer func(on bool) { hugeOn = on }(hugeOn)
	hugeOn = false // CANOPY_HUGEPAGES=off
	if wantHuge(len(big)) {
		t.Fatalf("with %s=off a buffer of %d floats is still advised", HugePagesEnv, len(big))
	}
	for i := range big {
		big[i] = float32(i)
	}
	if big[len(big)-1] != float32(len(big)-1) {
		t.Fatal("the buffer does not hold what was written")
	}
}

// vmFlags is the VmFlags line of the mapping of /proc/self/smaps that holds
// addr.
func vmFlags(t *testing.T, addr uintptr) string {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x", &lo, &hi); n == 2 && strings.Contains(line, " ") {
			in = lo <= addr && addr < hi
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "VmFlags:"))
		}
	}
	t.Fatalf("no mapping holds %#x", addr)
	return ""
}
