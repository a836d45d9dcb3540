package modelfile

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/canopy-hpc/canopy/infer/nn"
)

var (
	oldFPN  = regexp.MustCompile(`^backbone\.fpn\.(inner_blocks|layer_blocks)\.(\d+)\.(weight|bias)$`)
	oldHead = regexp.MustCompile(`^head\.(classification_head|regression_head)\.conv\.(\d+)\.(weight|bias)$`)
)

// Normalize maps every accepted key layout onto torchvision's current one:
// a leading "model." (DeepForest checkpoints saved from the LightningModule
// before mid 2025) is stripped, the old FPN keys inner_blocks.{i}.weight and
// the old head keys conv.{2i}.weight (v1 state dicts) are renamed as
// torchvision's _load_from_state_dict does, and num_batches_tracked buffers
// are dropped. Two source keys that land on one name are an error.
func Normalize(in nn.Weights) (nn.Weights, error) {
	out := make(nn.Weights, len(in))
	from := make(map[string]string, len(in))
	names := make([]string, 0, len(in))
	for k := range in {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		n := strings.TrimPrefix(k, "model.")
		if strings.HasSuffix(n, ".num_batches_tracked") {
			continue
		}
		if m := oldFPN.FindStringSubmatch(n); m != nil {
			n = fmt.Sprintf("backbone.fpn.%s.%s.0.%s", m[1], m[2], m[3])
		} else if m := oldHead.FindStringSubmatch(n); m != nil {
			i, _ := strconv.Atoi(m[2])
			if i%2 != 0 {
				return nil, fmt.Errorf("retinanet: tensor %q: odd index in the old head layout (conv.{0,2,4,6} hold the convolutions)", k)
			}
			n = fmt.Sprintf("head.%s.conv.%d.0.%s", m[1], i/2, m[3])
		}
		if prev, dup := from[n]; dup {
			return nil, fmt.Errorf("retinanet: tensors %q and %q both give %q", prev, k, n)
		}
		from[n] = k
		out[n] = in[k]
	}
	return out, nil
}

// CheckFinite refuses detector weights holding NaN or ±Inf (the check of
// nn.Weights, which the crop models' loader shares).
func CheckFinite(w nn.Weights) error {
	if err := w.CheckFinite(); err != nil {
		return fmt.Errorf("retinanet: %w", err)
	}
	return nil
}
