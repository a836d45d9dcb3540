"""Deterministic TreeFormer test weights, reproduced bit for bit by canopy's Go
package internal/testsupport/testweights (TreeFormerRange): the generator of
tools/retinanet/weights.py (fnv1a64 name key, splitmix64 counter, 24-bit
uniforms, one float32 rounding) with ranges for TreeFormer's tensors:

  conv weight (4-D)            +-sqrt(3 / fan_in)          (fan_in = in/groups * kh * kw)
  linear weight (2-D)          +-sqrt(3 / in)
  LayerNorm / BatchNorm gamma  [0.8, 1.2)
  LayerNorm / BatchNorm beta   [-0.1, 0.1)
  BatchNorm running_mean       [-0.1, 0.1)
  BatchNorm running_var        [0.5, 1.5)
  any other bias               [-0.05, 0.05)

A 1-D weight or bias is a norm's when its stem is a LayerNorm (backbone
names containing "layer_norm") or a BatchNorm (a stem with a running_mean).
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "retinanet"))
from weights import uniform01  # noqa: E402  (the shared generator)


def ranges(name, shape, bn_stems):
    stem, leaf = name.rsplit(".", 1)
    if len(shape) == 4:
        b = math.sqrt(3.0 / (shape[1] * shape[2] * shape[3]))
        return -b, b
    if len(shape) == 2 and leaf == "weight":
        b = math.sqrt(3.0 / shape[1])
        return -b, b
    norm = stem in bn_stems or "layer_norm" in stem.rsplit(".", 1)[-1]
    if norm:
        if leaf == "weight":
            return 0.8, 1.2
        if leaf == "running_var":
            return 0.5, 1.5
        if leaf in ("bias", "running_mean"):
            return -0.1, 0.1
    if leaf == "bias":
        return -0.05, 0.05
    raise ValueError("no range for %s %s" % (name, shape))


def tensor(name, shape, seed, bn_stems):
    n = int(np.prod(shape)) if len(shape) else 1
    lo, hi = ranges(name, shape, bn_stems)
    v = lo + (hi - lo) * uniform01(name, n, seed)
    return v.astype(np.float32).reshape(shape)


def fill(model, seed):
    """Fills every parameter and buffer but num_batches_tracked in place."""
    import torch

    sd = model.state_dict()
    bn_stems = {k.rsplit(".", 1)[0] for k in sd if k.endswith(".running_mean")}
    with torch.no_grad():
        for name, t in sd.items():
            if name.endswith("num_batches_tracked"):
                continue
            t.copy_(torch.from_numpy(tensor(name, list(t.shape), seed, bn_stems)))


def image_u8(name, h, w, seed):
    """A seeded H x W x 3 uint8 image: the generator's top byte (testweights.Bytes)."""
    return (uniform01(name, h * w * 3, seed) * 256).astype(np.uint8).reshape(h, w, 3)
