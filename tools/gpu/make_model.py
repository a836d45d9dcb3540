"""Writes the r50 model folder (model.safetensors in F32 and config.json) on
the GPU machine, which has torch but no Go: torchvision's RetinaNet
ResNet-50-FPN of tools/retinanet/golden.py filled by weights.py (the values
internal/testsupport/testweights and `go run ./cmd/testmodel -arch resnet50`
give), so canopy and torchvision run the same weights. 129 MB: too big to
carry, quick to make.

Usage (tools/gpu/check.sh): python3 tools/gpu/make_model.py OUT_FOLDER
"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "retinanet"))
import golden  # noqa: E402
import weights  # noqa: E402


def write_safetensors(path, tensors):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous().float()
        b = t.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    model, _ = golden.build("r50")
    weights.fill(model, 0)
    sd = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    write_safetensors(os.path.join(out, "model.safetensors"), sd)
    cfg = {"num_classes": 1, "label_dict": {"Tree": 0}, "score_thresh": 0.1, "nms_thresh": 0.05,
           "detections_per_img": 300, "topk_candidates": 1000}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    print("wrote %s (%d tensors)" % (out, len(sd)))


if __name__ == "__main__":
    main()
