"""Writes the cross-check fixtures of canopy's infer/safetensors tests with
the reference Python library.

Made with safetensors 0.8.0 (PyPI), torch 1.13.0a0 (Debian python3-torch),
numpy 1.24.2, from the repository root:

    /usr/bin/python3 -m venv --system-site-packages /tmp/stvenv
    /tmp/stvenv/bin/pip install safetensors==0.8.0
    /tmp/stvenv/bin/python infer/safetensors/testdata/make.py

small_f32.safetensors, small_f16.safetensors, small_bf16.safetensors hold
the same tensors (plus an int64 "bn.num_batches_tracked" scalar, which the
Go reader skips) written by safetensors.torch.save_file after torch's own
float32 -> float16 / bfloat16 conversion (round to nearest even).
expected.json holds, per file, every float tensor's shape and the float32
bit patterns of the values read back by torch (as integers, so that NaN,
-0 and Inf survive JSON).
"""
import json
import math
import os
import struct

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


EDGES = [
    1.0,
    1.0 + 2.0**-11,  # F16 tie between 1 and 1+2^-10: to even, 1
    1.0 + 3 * 2.0**-11,  # F16 tie: to even, 1+2^-9
    65504.0,  # largest F16
    65519.0,  # rounds down to 65504 in F16
    65520.0,  # F16 tie between 65504 and 2^16: overflows to +Inf
    2.0**-24,  # smallest F16 subnormal
    2.0**-25,  # F16 tie between 0 and 2^-24: to even, 0
    3 * 2.0**-26,  # rounds up to 2^-24 in F16
    6.1e-5,  # near the smallest F16 normal
    -0.0,
    math.inf,
    -math.inf,
    math.nan,
    1.00390625,  # 1+2^-8: BF16 tie between 1 and 1+2^-7: to even, 1
    1.01171875,  # 1+3*2^-8: BF16 tie: to even, 1+2^-6
    3.0e38,  # finite in BF16, +Inf in F16
    math.pi,
    -1.0e-40,  # a float32 subnormal
]


def tensors():
    g = torch.Generator().manual_seed(5)
    return {
        "edges": torch.tensor([f32(x) for x in EDGES], dtype=torch.float32),
        "backbone.conv.weight": torch.randn(4, 2, 3, 3, generator=g),
        "backbone.conv.bias": torch.randn(4, generator=g) * 1e-3,
        "scalar": torch.tensor(-2.5),
        "empty": torch.zeros(0, 3),
    }


def main():
    expected = {}
    src = tensors()
    for name, dt in (("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)):
        ts = {k: v.to(dt).contiguous() for k, v in src.items()}
        ts["bn.num_batches_tracked"] = torch.tensor(7, dtype=torch.int64)
        save_file(ts, os.path.join(HERE, "small_%s.safetensors" % name), metadata={"format": "pt", "made_by": "make.py"})
        exp = {}
        for k, v in ts.items():
            if v.dtype == torch.int64:
                continue
            back = v.float().reshape(-1)
            bits = [struct.unpack("<I", struct.pack("<f", x))[0] for x in back.tolist()]
            exp[k] = {"shape": list(v.shape), "bits": bits}
        expected[name] = exp
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
