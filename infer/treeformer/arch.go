package treeformer

import (
	"fmt"
	"strings"
)

// Arch is a PvT-v2 configuration (transformers' PvtV2Config): per stage
// the number of blocks, the width, the attention heads, the Mix-FFN's
// hidden ratio and the spatial-reduction ratio of the keys and values.
type Arch struct {
	Name                                 string
	Depths, Widths, Heads, MLPRatios, SR [4]int
}

// B3 is OpenGVLab/pvt_v2_b3's configuration, built in so that no lookup
// leaves the machine (DeepForest's TreeFormerModel fetches it from the
// model hub). Patch embeddings are 7×7 stride 4 then 3×3 stride 2;
// LayerNorm eps is 1e-6; GELU is erf's.
var B3 = Arch{
	Name:      "pvt_v2_b3",
	Depths:    [4]int{3, 4, 18, 3},
	Widths:    [4]int{64, 128, 320, 512},
	Heads:     [4]int{1, 2, 5, 8},
	MLPRatios: [4]int{8, 8, 4, 4},
	SR:        [4]int{8, 4, 2, 1},
}

// Tiny is pvt_v2_b3 with one block per stage: the model of the committed
// fixtures and of the command tests (tools/treeformer/reference.py builds
// it with DeepForest's own code under this backbone name).
var Tiny = Arch{Name: "canopy-test/pvt_v2_b3", Depths: [4]int{1, 1, 1, 1}, Widths: B3.Widths, Heads: B3.Heads, MLPRatios: B3.MLPRatios, SR: B3.SR}

// LNEps is PvtV2Config.layer_norm_eps.
const LNEps = 1e-6

// RegDims are the decoder's widths (TreeFormerModel.REG_DIMS): proj maps
// each stage to them.
var RegDims = [4]int{128, 256, 512, 1024}

// Mean and Std are the ImageNet statistics of PvtImageProcessor
// (IMAGENET_DEFAULT_MEAN/STD), applied to the image in [0, 1] after its
// zero padding to a multiple of 32: (x − mean)/std in float32.
var (
	Mean = [3]float32{0.485, 0.456, 0.406}
	Std  = [3]float32{0.229, 0.224, 0.225}
)

// Stride is the density map's stride (TreeFormerModel.downsample_ratio).
const Stride = 4

// pvtSizes are the PvT-v2 sizes DeepForest's TreeFormerModel accepts;
// canopy tabulates only b3.
var pvtSizes = []string{"pvt_v2_b0", "pvt_v2_b1", "pvt_v2_b2", "pvt_v2_b3", "pvt_v2_b4", "pvt_v2_b5"}

// ArchByName is the configuration of a backbone name as DeepForest stores
// it ("pvt_v2_b3" or "OpenGVLab/pvt_v2_b3"). The other PvT sizes are
// refused by name.
func ArchByName(name string) (Arch, error) {
	if name == Tiny.Name {
		return Tiny, nil
	}
	v := name[strings.LastIndexByte(name, '/')+1:]
	if v == B3.Name {
		return B3, nil
	}
	for _, s := range pvtSizes {
		if v == s {
			return Arch{}, fmt.Errorf("treeformer: backbone %q: canopy builds only pvt_v2_b3 (DeepForest's point model); %s is not tabulated", name, s)
		}
	}
	return Arch{}, fmt.Errorf("treeformer: unknown backbone %q (want pvt_v2_b3)", name)
}
