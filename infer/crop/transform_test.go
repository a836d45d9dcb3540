package crop

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/canopy-hpc/canopy/internal/testsupport/testweights"
)

// parityFixture is testdata/parity.json (tools/cropmodel/parity.py).
type parityFixture struct {
	Peer      map[string]any
	Command   string
	Labels    map[string]int
	Seed      uint64
	FCBias    map[string]string `json:"fc_bias"`
	Transform []struct {
		Name         string
		H, W, OH, OW int
		Bits         string
		SHA256       string
	}
	Tile struct {
		Raster        string
		Width, Height int
		RasterSHA256  string `json:"raster_sha256"`
		Patch         int
		Overlap, IoU  float64
		Rows          [][8]any
		Probs50       [][]float64 `json:"probs_resnet50"`
		Probs18       [][]float64 `json:"probs_resnet18"`
	}
}

func readParity(t testing.TB) *parityFixture {
	t.Helper()
	b, err := os.ReadFile("testdata/parity.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx parityFixture
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.Transform) == 0 || len(fx.Tile.Rows) == 0 {
		t.Fatal("parity.json: no transform cases or no tile rows")
	}
	return &fx
}

// planes turns HWC bytes into imagefile's CHW k/255 planes.
func planes(u8 []byte, w, h int) []float32 {
	pix := make([]float32, 3*w*h)
	for i := 0; i < w*h; i++ {
		for c := 0; c < 3; c++ {
			pix[c*w*h+i] = float32(float64(u8[3*i+c]) / 255)
		}
	}
	return pix
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// TestTransformMatchesTorch: DeepForest's crop transform (ToTensor,
// Normalize, torchvision's antialiased tensor Resize) bit for bit as
// torch 2.15 computes it on the CPU, on seeded crops resized up, down,
// one side only, and to 224×224 (tools/cropmodel/parity.py). The no-FMA
// rule (ATEN_CPU_CAPABILITY=default) must differ somewhere, so the
// fixture tells the rules apart.
func TestTransformMatchesTorch(t *testing.T) {
	fx := readParity(t)
	differs := false
	for _, c := range fx.Transform {
		u8 := testweights.Bytes(c.Name, c.H*c.W*3, fx.Seed)
		tr := DefaultTransform()
		tr.Size = [2]int{c.OH, c.OW}
		got, err := tr.Apply(planes(u8, c.W, c.H), c.W, c.H)
		if err != nil {
			t.Fatal(err)
		}
		b := f32Bytes(got)
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) != c.SHA256 {
			n, first := 0, -1
			if want, err := hex.DecodeString(c.Bits); err == nil && len(want) == len(b) {
				for i := 0; i < len(b); i += 4 {
					if binary.LittleEndian.Uint32(b[i:]) != binary.LittleEndian.Uint32(want[i:]) {
						if first < 0 {
							first = i / 4
						}
						n++
					}
				}
			}
			t.Errorf("%s %dx%d→%dx%d: sha256 differs (%d of %d values differ where the fixture has bits, first at %d)",
				c.Name, c.H, c.W, c.OH, c.OW, n, len(got), first)
		}
		tr.FMA = false
		alt, _ := tr.Apply(planes(u8, c.W, c.H), c.W, c.H)
		if string(f32Bytes(alt)) != string(b) {
			differs = true
		}
	}
	if !differs {
		t.Error("the no-FMA rule gives the same bits on every case: the fixture does not test the accumulation")
	}
}
