"""Writes the fixtures of canopy's infer/torchfile tests with torch itself.

Made with torch 2.15.0+cu132 (PyPI, in the peers' venv, see
tools/deepforest/setup.sh), from the repository root:

    /opt/canopy-peers/venv/bin/python infer/torchfile/testdata/make.py

Files (all written by torch.save):
  state_f32.pt, state_f16.pt, state_bf16.pt  an OrderedDict state dict with
      _metadata (as Module.state_dict() returns it), a float tensor of
      every rank 0-4, an int64 num_batches_tracked; f16/bf16 are torch's
      own conversion of the f32 values.
  state_proto4.pt, state_proto5.pt           state_f32's dict, pickle
      protocols 4 and 5 (FRAME, MEMOIZE, STACK_GLOBAL, SHORT_BINUNICODE).
  param.pt        a dict holding an nn.Parameter (_rebuild_parameter).
  views.pt        two non-overlapping views of one storage (offsets).
  overlap.pt      two overlapping views of one storage (refused by
      Float32: more elements than stored).
  noncontig.pt    a transposed tensor (refused: not contiguous).
  forbidden.pt    a dict holding an argparse.Namespace (refused global).
  hparams.pt      nested plain values as a Lightning checkpoint holds them.
  legacy.pt       torch.save(_use_new_zipfile_serialization=False) (refused:
      not a zip).
expected.json holds, per file, each float tensor's shape, dtype and the
float32 bit patterns torch reads back (.float()), as integers.
"""
import argparse
import collections
import json
import os
import struct

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def bits(t):
    return [struct.unpack("<I", struct.pack("<f", v))[0] for v in t.float().flatten().tolist()]


def state(dtype):
    g = torch.Generator().manual_seed(28)
    sd = collections.OrderedDict()
    sd["conv.weight"] = torch.randn(4, 3, 3, 3, generator=g)
    sd["conv.bias"] = torch.randn(4, generator=g)
    sd["bn.running_var"] = torch.rand(4, generator=g) + 0.5
    sd["bn.num_batches_tracked"] = torch.tensor(7, dtype=torch.int64)
    sd["scalar"] = torch.tensor(-0.0)
    sd["special"] = torch.tensor([float("inf"), float("-inf"), 1e-40, 65504.0, 3.0e38])
    sd["rank3"] = torch.randn(2, 1, 3, generator=g)
    sd["empty"] = torch.zeros(0, 5)
    out = collections.OrderedDict()
    for k, v in sd.items():
        out[k] = v.to(dtype) if v.is_floating_point() else v
    out._metadata = collections.OrderedDict({"": {"version": 1}, "conv": {"version": 1}})
    return out


def main():
    expected = {}

    def save(name, obj, **kw):
        path = os.path.join(HERE, name)
        torch.save(obj, path, **kw)
        if name in ("legacy.pt", "forbidden.pt"):
            return
        back = torch.load(path, weights_only=False)  # our own files
        ts = {}

        def walk(prefix, v):
            if isinstance(v, torch.Tensor):
                if v.is_floating_point():
                    ts[prefix] = {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", ""), "bits": bits(v)}
            elif isinstance(v, dict):
                for k, x in v.items():
                    walk(f"{prefix}.{k}" if prefix else str(k), x)

        walk("", back)
        expected[name] = ts

    save("state_f32.pt", state(torch.float32))
    save("state_f16.pt", state(torch.float16))
    save("state_bf16.pt", state(torch.bfloat16))
    save("state_proto4.pt", state(torch.float32), pickle_protocol=4)
    save("state_proto5.pt", state(torch.float32), pickle_protocol=5)
    save("param.pt", {"w": torch.nn.Parameter(torch.tensor([1.0, 2.0, 3.0]))})
    base = torch.arange(10, dtype=torch.float32)
    save("views.pt", {"x": base[:4], "y": base[4:].view(2, 3)})
    save("overlap.pt", {"x": base, "y": base[2:5]})
    save("noncontig.pt", {"t": torch.arange(6, dtype=torch.float32).reshape(2, 3).t()})
    save("forbidden.pt", {"a": torch.zeros(2), "args": argparse.Namespace(lr=0.1)})
    save(
        "hparams.pt",
        {
            "state_dict": collections.OrderedDict(w=torch.ones(2)),
            "hyper_parameters": {"config": {"score_thresh": 0.3, "num_classes": 2, "label_dict": {"Tree": 0, "Bird": 1},
                                            "model": {"name": None, "revision": "main"}, "resize": [224, 224],
                                            "flag": True, "big": 2**70, "neg": -5, "t": (1, "a")}},
            "numeric_to_label_dict": {0: "Tree", 1: "Bird"},
            "epoch": 3,
        },
    )
    save("legacy.pt", {"a": torch.zeros(2)}, _use_new_zipfile_serialization=False)
    expected["torch"] = torch.__version__
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
