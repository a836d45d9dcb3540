// Package crop is DeepForest's CropModel for canopy: the classifier that
// gives each detected crown a label (species, alive/dead) after detection,
// as predict_tile(..., crop_model=...) and predict_file(...,
// crop_model=[...]) do (DeepForest 2.1.0 model.py CropModel,
// datasets/cropmodel.py, predict.py _predict_crop_model_).
//
// Load reads the three file forms DeepForest writes, without Python:
// a Lightning checkpoint (.ckpt: labels from its label_dict), a hub folder
// (save_pretrained: config.json + model.safetensors, labels from
// config.json's cropmodel.label_dict or Options.LabelDict), and a bare
// state dict (.pt/.pth, torch.save(model.state_dict()), labels from
// Options.LabelDict), through the same restricted unpickler
// (infer/torchfile) and safetensors checks (infer/safetensors) as the
// detector's files. The network is torchvision's ResNet (infer/resnet's
// body: ResNet-50 as simple_resnet_50 builds it, ResNet-18 as 1bad4419's
// create_crop_backbone, or any other depth the weights name), global
// average pooling and fc, run by the CPU engine (infer/cpu).
//
// The API takes raw crops: Model.Classify transforms each crop (Transform:
// ToTensor, Normalize, torchvision's antialiased tensor Resize, bit for
// bit torch's on the CPU) and classifies it, giving the logits and the
// softmax probabilities; Model.Read reads a box's crop from an image as
// DeepForest's BoundingBoxDataset reads it. Runner.Run takes crops already
// transformed. A crop's result never depends on the batch, the worker
// count or the other crops.
package crop

import (
	"context"
	"fmt"
	"sort"

	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/infer/torchfile"
)

// Model is a loaded crop model.
type Model struct {
	// Path is the file or folder it was loaded from; SHA256 the hex
	// digest of its weights file (the .ckpt/.pt, or model.safetensors).
	Path, SHA256 string
	Form         Form
	// LabelsFrom says where the labels came from: "checkpoint
	// label_dict", "config.json cropmodel.label_dict", "--crop-label-dict".
	LabelsFrom string
	// Transform is the crop transform its config asks for.
	Transform Transform
	// Set lists the config keys that were given (for the report).
	Set []string
	// BatchSize is the stored config's cropmodel.batch_size (0: not
	// stated): eval-crops averages val_loss over batches of it.
	BatchSize int
	// DTypes counts the weight tensors by stored dtype.
	DTypes map[string]int

	labels []string
	net    *Net
}

// Load reads a crop model: a .ckpt, .pt/.pth file or a hub folder. Every
// error wraps infer.ErrModel (exit 4), among them: a file that is a
// RetinaNet detector (give it as --model), weights that are not a
// torchvision ResNet classifier, a class count that differs from the
// label_dict's, a stated architecture the weights do not have.
func Load(path string, opts Options) (*Model, error) {
	m, err := load(path, opts)
	return m, modelErr(err)
}

func load(path string, opts Options) (*Model, error) {
	if opts.LabelDict != nil {
		if err := CheckLabels(opts.LabelDict); err != nil {
			return nil, fmt.Errorf("crop: --crop-label-dict: %w", err)
		}
	}
	s, err := read(path)
	if err != nil {
		return nil, err
	}
	w, err := classifierWeights(s.weights, path)
	if err != nil {
		return nil, err
	}
	if err := nn.Weights(s.stored()).CheckFinite(); err != nil {
		return nil, fmt.Errorf("crop: %s: %w", path, err)
	}
	net, err := NewNet(w)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	if a := s.settings.Architecture; a != "" && a != net.Arch() {
		return nil, fmt.Errorf("crop: %s: its config says cropmodel.architecture %s, but the weights are a %s", path, a, net.Arch())
	}
	ld, from, err := s.labelsFor(path, opts.LabelDict, opts.Fallback)
	if err != nil {
		return nil, err
	}
	if err := CheckLabels(ld); err != nil {
		return nil, fmt.Errorf("crop: %s: %s: %w", path, from, err)
	}
	if len(ld) != net.Classes {
		return nil, fmt.Errorf("crop: %s: the classifier has %d classes (fc.weight), but its labels (%s) name %d: %s",
			path, net.Classes, from, len(ld), labelString(ld))
	}
	return &Model{Path: path, SHA256: s.digest, Form: s.form, LabelsFrom: from, Transform: s.settings.Transform, BatchSize: s.settings.BatchSize,
		Set: s.settings.Set, DTypes: s.dtypes, labels: Names(ld), net: net}, nil
}

// classifierWeights strips a leading "model." (a CropModel's state dict
// and hub file hold the LightningModule's keys) and refuses a RetinaNet
// detector's weights with a message that says so.
func classifierWeights(in map[string]torchfile.Floats, path string) (nn.Weights, error) {
	out := make(nn.Weights, len(in))
	for k, t := range in {
		name := k
		if len(name) > 6 && name[:6] == "model." {
			name = name[6:]
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("crop: %s: tensors %q and %q are one after stripping \"model.\"", path, k, name)
		}
		out[name] = nn.Tensor{Shape: t.Shape, Data: t.Data}
	}
	if IsDetector(out) {
		return nil, fmt.Errorf("crop: %s is a RetinaNet detector (backbone.body, head), not a crop model: give it as --model", path)
	}
	if _, ok := out["fc.weight"]; !ok {
		names := make([]string, 0, len(out))
		for k := range out {
			names = append(names, k)
		}
		sort.Strings(names)
		if len(names) > 5 {
			names = append(names[:5], "...")
		}
		return nil, fmt.Errorf("crop: %s holds no fc.weight: not a torchvision ResNet classifier (tensors: %v)", path, names)
	}
	return out, nil
}

// IsDetector reports whether a state dict (a leading "model." stripped)
// is a RetinaNet's: its backbone body or its head.
func IsDetector(w nn.Weights) bool {
	for k := range w {
		if len(k) > 14 && (k[:14] == "backbone.body." || k[:5] == "head.") {
			return true
		}
	}
	return false
}

// IsClassifier reports whether a state dict (a leading "model."
// stripped) is a ResNet classifier's: conv1 and fc, no detector parts.
func IsClassifier(w nn.Weights) bool {
	_, conv := w["conv1.weight"]
	_, fc := w["fc.weight"]
	return conv && fc && !IsDetector(w)
}

// Labels are the class names by index (what cropmodel_label shows).
func (m *Model) Labels() []string { return m.labels }

// Arch is the network's name: "resnet50", "resnet18", ...
func (m *Model) Arch() string { return m.net.Arch() }

// Net is the classifier.
func (m *Model) Net() *Net { return m.net }

// Classify transforms each raw crop (imagefile's layout: R, G, B planes,
// values k/255) with the model's Transform and classifies it with
// workers goroutines. Outputs are in crop order.
func (m *Model) Classify(ctx context.Context, crops []imagefile.Image, workers int) ([]Output, error) {
	r := NewRunner(m.net, workers)
	return r.Classify(ctx, m.Transform, crops)
}
