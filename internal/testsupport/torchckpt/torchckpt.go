// Package torchckpt rebuilds the torch.save archives that
// tools/deepforest/checkpoints.py writes with DeepForest's own code, from
// their committed data.pkl (as torch wrote it) and the weight generator
// (internal/testsupport/testweights): the R50 files are some 130 MB each,
// their pickles 60 kB. The storages hold exactly the bytes torch wrote
// (float32 test weights, or torch's round-to-nearest-even bfloat16/float16
// of them; num_batches_tracked 0), so canopy reads the same tensors from
// the rebuilt file as from the real one (`make df-checkpoints` checks
// this against the tool's real files).
package torchckpt

import (
	"archive/zip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/canopy-hpc/canopy/infer/safetensors"
	"github.com/canopy-hpc/canopy/infer/torchfile"
	"github.com/canopy-hpc/canopy/internal/testsupport/testweights"
)

// Rebuild writes out: a torch.save zip archive of pkl whose storages hold
// the test weights (seed) of the state dict's tensors, by name (a leading
// "model." stripped).
func Rebuild(pkl []byte, out string, seed uint64) error { return RebuildWith(pkl, out, seed, nil) }

// RebuildWith is Rebuild with some tensors' values given (by name, a
// leading "model." stripped) instead of generated: the crop parity
// model's fc.bias (tools/cropmodel/parity.py).
func RebuildWith(pkl []byte, out string, seed uint64, given map[string][]float32) error {
	f, storages, err := torchfile.ReadPickle(out, pkl)
	if err != nil {
		return err
	}
	root, ok := f.Root.(*torchfile.Dict)
	if !ok {
		return fmt.Errorf("torchckpt: the pickle is not a dict")
	}
	sd := root
	if v, ok := root.Get("state_dict"); ok {
		sd = v.(*torchfile.Dict)
	}
	basic := true
	for _, k := range sd.Keys {
		if strings.HasSuffix(k.(string), ".bn3.weight") {
			basic = false
		}
	}
	data := map[*torchfile.Storage][]byte{}
	for _, s := range storages {
		data[s] = make([]byte, s.Numel*int64(s.DType.Size()))
	}
	for i, k := range sd.Keys {
		t, ok := sd.Values[i].(*torchfile.Tensor)
		if !ok {
			return fmt.Errorf("torchckpt: %v is not a tensor", k)
		}
		name := strings.TrimPrefix(k.(string), "model.")
		if !t.DType.Float() {
			continue // num_batches_tracked: 0
		}
		vals, err := testweights.Tensor(name, t.Shape, seed, basic)
		if err != nil {
			return err
		}
		if g, ok := given[name]; ok {
			if len(g) != len(vals) {
				return fmt.Errorf("torchckpt: %s: %d given values for %d elements", name, len(g), len(vals))
			}
			vals = g
		}
		b := data[t.Storage][t.Offset*int64(t.DType.Size()):]
		for j, v := range vals {
			switch t.DType {
			case torchfile.Float32:
				binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(v))
			case torchfile.BFloat16:
				binary.LittleEndian.PutUint16(b[2*j:], safetensors.F32ToBF16(v))
			case torchfile.Float16:
				binary.LittleEndian.PutUint16(b[2*j:], safetensors.F32ToF16(v))
			default:
				return fmt.Errorf("torchckpt: %s: dtype %s", name, t.DType)
			}
		}
	}
	fh, err := os.Create(out)
	if err != nil {
		return err
	}
	w := zip.NewWriter(fh)
	put := func(name string, b []byte) error {
		e, err := w.CreateHeader(&zip.FileHeader{Name: "archive/" + name, Method: zip.Store})
		if err == nil {
			_, err = e.Write(b)
		}
		return err
	}
	err = put("data.pkl", pkl)
	for _, e := range [][2]string{{".format_version", "1"}, {".storage_alignment", "64"}, {"byteorder", "little"}} {
		if err == nil {
			err = put(e[0], []byte(e[1]))
		}
	}
	for _, s := range storages {
		if err == nil {
			err = put("data/"+s.Key, data[s])
		}
	}
	if err == nil {
		err = put("version", []byte("3\n"))
	}
	if err == nil {
		err = w.Close()
	}
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	return err
}

// Skeletons is the folder of the committed pickles, from the repository
// root.
const Skeletons = "infer/modelfile/testdata/deepforest"

// RebuildFile rebuilds NAME (model.ckpt, model.pt, model-bf16.ckpt,
// model-bf16.pt) from skel/NAME.data.pkl into out.
func RebuildFile(skel, name, out string) error {
	pkl, err := os.ReadFile(filepath.Join(skel, name+".data.pkl"))
	if err != nil {
		return err
	}
	return Rebuild(pkl, out, 0)
}

// HubFolder writes the R50 test weights (seed 0) as a model folder in dir:
// model.safetensors in dtype (F32, F16, BF16) and skel/hub-config.json,
// the config.json DeepForest's save_pretrained wrote.
func HubFolder(skel, dir, dtype string) error {
	entries, err := testweights.StateDict("resnet50", 1, 256, false)
	if err != nil {
		return err
	}
	vals, err := testweights.Values(entries, 0)
	if err != nil {
		return err
	}
	ts := map[string]safetensors.Tensor{}
	for _, e := range entries {
		ts[e.Name] = safetensors.Tensor{Shape: e.Shape, Data: vals[e.Name]}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, dtype, nil); err != nil {
		return err
	}
	cfg, err := os.ReadFile(filepath.Join(skel, "hub-config.json"))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644)
}

// SafetensorsFrom writes out: a safetensors file with header hdr (the
// header JSON a real file holds, as tools/cropmodel/parity.py keeps it)
// whose F32 tensors hold the test weights (seed; names with a leading
// "model." stripped; given values win) and whose integer tensors
// (num_batches_tracked) hold zeros: byte for byte the file torch's
// save_pretrained wrote.
func SafetensorsFrom(hdr []byte, out string, seed uint64, given map[string][]float32) error {
	var entries map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &entries); err != nil {
		return err
	}
	type ent struct {
		DType   string   `json:"dtype"`
		Shape   []int    `json:"shape"`
		Offsets [2]int64 `json:"data_offsets"`
	}
	basic := true
	for k := range entries {
		if strings.HasSuffix(k, ".bn3.weight") {
			basic = false
		}
	}
	var size int64
	parsed := map[string]ent{}
	for k, v := range entries {
		if k == "__metadata__" {
			continue
		}
		var e ent
		if err := json.Unmarshal(v, &e); err != nil {
			return fmt.Errorf("torchckpt: %s: %w", k, err)
		}
		parsed[k] = e
		size = max(size, e.Offsets[1])
	}
	data := make([]byte, size)
	for k, e := range parsed {
		if e.DType != "F32" {
			continue // zeros
		}
		name := strings.TrimPrefix(k, "model.")
		vals, err := testweights.Tensor(name, e.Shape, seed, basic)
		if err != nil {
			return err
		}
		if g, ok := given[name]; ok {
			vals = g
		}
		if int64(4*len(vals)) != e.Offsets[1]-e.Offsets[0] {
			return fmt.Errorf("torchckpt: %s: %d values for %d bytes", k, len(vals), e.Offsets[1]-e.Offsets[0])
		}
		for j, v := range vals {
			binary.LittleEndian.PutUint32(data[e.Offsets[0]+int64(4*j):], math.Float32bits(v))
		}
	}
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	b = append(append(b, hdr...), data...)
	return os.WriteFile(out, b, 0o644)
}
