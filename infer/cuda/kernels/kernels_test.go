package kernels

import (
	"encoding/binary"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestDefinesAgree: the tile sizes the launchers use are kernels.cu's.
func TestDefinesAgree(t *testing.T) {
	src, err := os.ReadFile("kernels.cu")
	if err != nil {
		t.Fatal(err)
	}
	source := string(src)
	want := map[string]int{
		"CONV_BM": ConvBM, "CONV_BN": ConvBN, "CONV_BK": ConvBK, "CONV_THREADS": ConvThreads,
		"TC_BM": TCBM, "TC_BN": TCBN, "TC_BK": TCBK, "TC_THREADS": TCThreads, "ELEM_THREADS": ElemThreads,
		"POST_CAND": PostCand, "POST_LEVELS": PostLevels,
	}
	re := regexp.MustCompile(`(?m)^#define (\w+) (\d+)$`)
	got := map[string]int{}
	for _, m := range re.FindAllStringSubmatch(source, -1) {
		got[m[1]], _ = strconv.Atoi(m[2])
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("kernels.cu #define %s %d, geometry.go says %d", k, got[k], v)
		}
	}
	// conv_f32: each thread a 4×4 patch of the tile; tf32: 4 warps of 32×32.
	// Each thread loads one fixed column of every B tile.
	if ConvBM*ConvBN != ConvThreads*16 || TCBM*TCBN != (TCThreads/32)*32*32 || ConvThreads%ConvBN != 0 || TCThreads%TCBN != 0 {
		t.Error("tile sizes do not match the thread layout the kernels assume")
	}
	for _, n := range Names {
		if !regexp.MustCompile(`extern "C" __global__ void ` + n + `\(`).MatchString(source) {
			t.Errorf("kernels.cu exports no kernel %s", n)
		}
	}
}

// fatbinEntry is one image inside a CUDA fatbin container.
type fatbinEntry struct {
	Kind string // "ptx" or "elf"
	SM   int
}

// parseFatbin lists a fatbin's images: the container is a 16-byte header
// (magic 0xBA55ED50, version, header size, payload size) followed by entries,
// each a header (kind, version, header size, padded payload size, …, the SM
// version at byte 28) and its payload.
func parseFatbin(b []byte) ([]fatbinEntry, error) {
	le := binary.LittleEndian
	if len(b) < 16 || le.Uint32(b) != 0xBA55ED50 {
		return nil, fmt.Errorf("not a fatbin (magic)")
	}
	hs, size := int(le.Uint16(b[6:])), int(le.Uint64(b[8:]))
	if hs+size > len(b) {
		return nil, fmt.Errorf("fatbin: %d bytes, header says %d", len(b), hs+size)
	}
	var out []fatbinEntry
	for off := hs; off < hs+size; {
		if off+32 > len(b) {
			return nil, fmt.Errorf("fatbin: truncated entry at %d", off)
		}
		kind, eh, pad := le.Uint16(b[off:]), int(le.Uint32(b[off+4:])), int(le.Uint32(b[off+8:]))
		e := fatbinEntry{SM: int(le.Uint32(b[off+28:]))}
		switch kind {
		case 1:
			e.Kind = "ptx"
		case 2:
			e.Kind = "elf"
		default:
			e.Kind = fmt.Sprint("kind", kind)
		}
		out = append(out, e)
		off += eh + pad
	}
	return out, nil
}

// TestFatbinTargets: the committed module holds exactly compute_80 PTX (for
// any sm_80+ GPU, JIT-compiled by the driver) and sm_90 machine code.
func TestFatbinTargets(t *testing.T) {
	got, err := parseFatbin(Fatbin)
	if err != nil {
		t.Fatal(err)
	}
	want := []fatbinEntry{{"ptx", 80}, {"elf", 90}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("kernels.fatbin holds %v, want %v", got, want)
	}
	if _, err := parseFatbin(Fatbin[:len(Fatbin)/2]); err == nil {
		t.Error("a truncated fatbin parsed")
	}
}

func TestGeometry(t *testing.T) {
	if d := Conv(256, 100*100, false); d != (Dim{157, 4, 256}) {
		t.Errorf("Conv fp32: %+v", d)
	}
	if d := Conv(9, 65, true); d != (Dim{2, 1, 128}) {
		t.Errorf("Conv tf32: %+v", d)
	}
	if d := Elem(257); d != (Dim{2, 1, 256}) {
		t.Errorf("Elem: %+v", d)
	}
}

// TestNHWCAgrees: nhwc.cu indexes with NHWC_THREADS per block and the
// launchers use Elem's geometry; every name the Go side launches is an
// extern "C" kernel there.
func TestNHWCAgrees(t *testing.T) {
	src, err := os.ReadFile("nhwc.cu")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^#define NHWC_THREADS (\d+)$`).FindStringSubmatch(string(src))
	if m == nil || m[1] != strconv.Itoa(ElemThreads) {
		t.Errorf("nhwc.cu NHWC_THREADS %v, Elem's block %d", m, ElemThreads)
	}
	for _, n := range NHWCNames {
		if !regexp.MustCompile(`extern "C" __global__ void ` + n + `\(`).Match(src) {
			t.Errorf("nhwc.cu has no kernel %s", n)
		}
	}
}
