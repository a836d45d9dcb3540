package torchckpt

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
)

// CropSkeletons is the folder of the crop parity models' pickles, safetensors
// header and config (tools/cropmodel/parity.py --skeleton), from the
// repository root; CropFixture the fixture beside it.
const (
	CropSkeletons = "infer/crop/testdata/deepforest"
	CropFixture   = "infer/crop/testdata/parity.json"
)

// CropFiles are the crop parity files rebuilt in Dir: the ResNet-50
// CropModel as DeepForest saved it (Lightning checkpoint, bare state dict,
// save_pretrained folder), the ResNet-18 state dict, and the forestgen
// raster DeepForest's predict_tile ran on.
type CropFiles struct {
	Dir                      string
	Ckpt, PT, R18, Hub, Tile string
}

// CropParity rebuilds the crop parity files into dir (root: the
// repository root, for go run ./cmd/forestgen): the weight generator
// (the fixture's seed) with fc.bias as the fixture records it, and the
// raster checked against the fixture's sha256.
func CropParity(root, dir string) (CropFiles, error) {
	pf, fx, err := cropModels(root, dir, nil)
	if err != nil {
		return pf, err
	}
	cmd := exec.Command("go", "run", "./cmd/forestgen", "-out", dir, "-n", "1", "-sizes",
		fmt.Sprintf("%dx%d", fx.Tile.Width, fx.Tile.Height), "-seed", "36")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return pf, fmt.Errorf("forestgen: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(pf.Tile)
	if err != nil {
		return pf, err
	}
	if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != fx.Tile.RasterSHA256 {
		return pf, errors.New("torchckpt: forestgen's raster is not the one DeepForest ran on (sha256 differs): make the crop fixture again (tools/cropmodel/parity.py)")
	}
	return pf, nil
}

// CropPlanted writes the crop parity models (not the raster) into dir
// with some ResNet-50 tensors given (by name, "model." stripped; sizes
// from CropSizes): a planted NaN or overflow in every file form.
func CropPlanted(root, dir string, given map[string][]float32) (CropFiles, error) {
	pf, _, err := cropModels(root, dir, given)
	return pf, err
}

// CropClasses is the parity ResNet-50's class count (its fc.bias length).
func CropClasses(root string) (int, error) {
	fx, err := readCropFixture(root)
	if err != nil {
		return 0, err
	}
	return len(fx.FCBias["resnet50"]) / 8, nil // hex of float32s
}

type cropFixture struct {
	Seed   uint64
	FCBias map[string]string `json:"fc_bias"`
	Tile   struct {
		Width, Height int
		RasterSHA256  string `json:"raster_sha256"`
	}
}

func readCropFixture(root string) (cropFixture, error) {
	var fx cropFixture
	b, err := os.ReadFile(filepath.Join(root, CropFixture))
	if err != nil {
		return fx, err
	}
	return fx, json.Unmarshal(b, &fx)
}

// cropModels writes the parity models: given tensors win over the
// ResNet-50's generated ones and the fixture's fc.bias.
func cropModels(root, dir string, given map[string][]float32) (CropFiles, cropFixture, error) {
	fx, err := readCropFixture(root)
	if err != nil {
		return CropFiles{}, fx, err
	}
	pf, err := writeCropModels(root, dir, fx, given)
	return pf, fx, err
}

func writeCropModels(root, dir string, fx cropFixture, given map[string][]float32) (CropFiles, error) {
	skel := filepath.Join(root, CropSkeletons)
	pf := CropFiles{Dir: dir, Ckpt: filepath.Join(dir, "crop.ckpt"), PT: filepath.Join(dir, "crop.pt"),
		R18: filepath.Join(dir, "crop-r18.pt"), Hub: filepath.Join(dir, "crop-hub"), Tile: filepath.Join(dir, "img_0000.png")}
	bias := func(arch string) (map[string][]float32, error) {
		b, err := hex.DecodeString(fx.FCBias[arch])
		if err != nil || len(b) == 0 || len(b)%4 != 0 {
			return nil, fmt.Errorf("torchckpt: %s: bad fc_bias of %s", CropFixture, arch)
		}
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return map[string][]float32{"fc.bias": v}, nil
	}
	b50, err := bias("resnet50")
	if err != nil {
		return pf, err
	}
	for k, v := range given {
		b50[k] = v
	}
	b18, err := bias("resnet18")
	if err != nil {
		return pf, err
	}
	for _, f := range []struct {
		name, out string
		given     map[string][]float32
	}{{"crop.ckpt", pf.Ckpt, b50}, {"crop.pt", pf.PT, b50}, {"crop-r18.pt", pf.R18, b18}} {
		pkl, err := os.ReadFile(filepath.Join(skel, f.name+".data.pkl"))
		if err != nil {
			return pf, err
		}
		if err := RebuildWith(pkl, f.out, fx.Seed, f.given); err != nil {
			return pf, err
		}
	}
	if err := os.MkdirAll(pf.Hub, 0o755); err != nil {
		return pf, err
	}
	hdr, err := os.ReadFile(filepath.Join(skel, "hub-header.json"))
	if err != nil {
		return pf, err
	}
	if err := SafetensorsFrom(hdr, filepath.Join(pf.Hub, "model.safetensors"), fx.Seed, b50); err != nil {
		return pf, err
	}
	cfg, err := os.ReadFile(filepath.Join(skel, "hub-config.json"))
	if err != nil {
		return pf, err
	}
	if err := os.WriteFile(filepath.Join(pf.Hub, "config.json"), cfg, 0o644); err != nil {
		return pf, err
	}
	return pf, nil
}
