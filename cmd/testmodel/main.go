// Command testmodel writes a DeepForest-style model folder (model.safetensors
// and config.json) whose weights come from internal/testsupport/testweights, the
// generator the parity fixtures share with tools/retinanet/weights.py:
//
//	go run ./cmd/testmodel -arch resnet50 -classes 1 -fpn 256 -out bin/model-r50
//
// gives torchvision's retinanet_resnet50_fpn(num_classes=1) state dict with
// seed 0 values: the network of testdata/golden/retinanet/r50.json. It is
// for benchmarks and for trying canopy without a real checkpoint; its
// detections mean nothing. -arch treeformer writes a TreeFormer hub folder
// instead (tools/gpu/check.sh's point model).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/canopy-hpc/canopy/infer/safetensors"
	"github.com/canopy-hpc/canopy/internal/testsupport/testweights"
)

func main() {
	out := flag.String("out", "", "model folder to write")
	arch := flag.String("arch", "resnet50", "resnet18, resnet34, resnet50, resnet101 or resnet152; or treeformer (DeepForest's point model, pvt_v2_b3: with -seed 46 the weights of tools/treeformer/reference.py's full reference)")
	classes := flag.Int("classes", 1, "classes")
	fpn := flag.Int("fpn", 256, "FPN channels")
	seed := flag.Uint64("seed", 0, "generator seed")
	dtype := flag.String("dtype", "F32", "F32, F16 or BF16")
	minSize := flag.Int("min-size", 0, "config.json min_size (0: absent, torchvision's 800)")
	maxSize := flag.Int("max-size", 0, "config.json max_size (0: absent, torchvision's 1333)")
	flag.Parse()
	if err := run(*out, *arch, *classes, *fpn, *seed, *dtype, *minSize, *maxSize); err != nil {
		fmt.Fprintln(os.Stderr, "testmodel:", err)
		os.Exit(1)
	}
}

func run(out, arch string, classes, fpn int, seed uint64, dtype string, minSize, maxSize int) error {
	if out == "" {
		return fmt.Errorf("-out is required")
	}
	if arch == "treeformer" {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
		return testweights.TreeFormerFolder(out, "OpenGVLab/pvt_v2_b3", [4]int{3, 4, 18, 3}, seed)
	}
	entries, err := testweights.StateDict(arch, classes, fpn, false)
	if err != nil {
		return err
	}
	vals, err := testweights.Values(entries, seed)
	if err != nil {
		return err
	}
	ts := make(map[string]safetensors.Tensor, len(entries))
	for _, e := range entries {
		ts[e.Name] = safetensors.Tensor{Shape: e.Shape, Data: vals[e.Name]}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := safetensors.Write(filepath.Join(out, "model.safetensors"), ts, dtype, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	labels := map[string]int{"Tree": 0}
	if classes > 1 {
		labels = map[string]int{}
		for k := 0; k < classes; k++ {
			labels[fmt.Sprintf("class%d", k)] = k
		}
	}
	cfg := map[string]any{"num_classes": classes, "label_dict": labels, "score_thresh": 0.1, "nms_thresh": 0.05,
		"detections_per_img": 300, "topk_candidates": 1000}
	if minSize > 0 {
		cfg["min_size"] = minSize
	}
	if maxSize > 0 {
		cfg["max_size"] = maxSize
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "config.json"), append(b, '\n'), 0o644)
}
