"""Deterministic RetinaNet test weights, reproduced bit for bit by canopy's Go
package internal/testsupport/testweights (same algorithm; see its doc comment).

Every tensor of a torchvision RetinaNet state dict is filled from a
counter-based hash, so no weights need to be stored:

    key   = fnv1a64(name) XOR seed
    x_i   = splitmix64(key + (i+1) * 0x9E3779B97F4A7C15)   (uint64, wrapping)
    u_i   = (x_i >> 40) * 2**-24                            (exact, in [0, 1))
    v_i   = float32(lo + float64(hi - lo) * u_i)            (float64, then rounded once)

where i is the element's C-order index and [lo, hi) depends on the tensor's
role (ranges(); basic is True for BasicBlock bodies, i.e. a state dict
without bn3).  splitmix64(z): z ^= z >> 30; z *= 0xBF58476D1CE4E5B9;
z ^= z >> 27; z *= 0x94D049BB133111EB; z ^= z >> 31.
"""
import math

import numpy as np

GOLDEN = 0x9E3779B97F4A7C15


def fnv1a64(s):
    h = 0xCBF29CE484222325
    for b in s.encode():
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def uniform01(name, n, seed):
    key = np.uint64(fnv1a64(name) ^ seed)
    with np.errstate(over="ignore"):
        i = np.arange(1, n + 1, dtype=np.uint64)
        z = key + i * np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(40)).astype(np.float64) * 2.0**-24


def is_bn(name):
    stem = name.rsplit(".", 1)[0]
    last = stem.rsplit(".", 1)[-1]
    return last.startswith("bn") or stem.endswith("downsample.1")


def ranges(name, shape, basic=False):
    """[lo, hi) of the tensor's uniform distribution."""
    leaf = name.rsplit(".", 1)[-1]
    if len(shape) == 4:
        fan_in = shape[1] * shape[2] * shape[3]
        b = math.sqrt(3.0 / fan_in)
        if "cls_logits" in name:
            b *= 3.0  # some hundreds of anchors above score_thresh 0.1
        return -b, b
    if len(shape) == 2 and leaf == "weight":
        # a classifier's fc (CropModel): wider than Kaiming-uniform so that
        # the softmax of the test weights is far from uniform
        return -8.0 * math.sqrt(3.0 / shape[1]), 8.0 * math.sqrt(3.0 / shape[1])
    if is_bn(name):
        if leaf == "running_mean":
            return -0.1, 0.1
        if leaf == "running_var":
            return 0.5, 1.5
        if leaf == "bias":
            return -0.1, 0.1
        # weight (gamma): the last BN of a residual branch (bn3 of a
        # Bottleneck, bn2 of a BasicBlock: basic=True when the state dict has
        # no bn3) and of a downsample is damped so that activations stay in
        # range through the blocks.
        stem = name.rsplit(".", 1)[0]
        if stem.endswith(".bn3") or stem.endswith("downsample.1"):
            return 0.3, 0.6
        if basic and ".layer" in stem and stem.endswith(".bn2"):
            return 0.3, 0.6
        return 1.0, 1.6
    if "cls_logits" in name and leaf == "bias":
        return -3.5, -2.5
    if leaf == "bias":
        return -0.05, 0.05
    raise ValueError("no range for %s %s" % (name, shape))


def tensor(name, shape, seed=0, basic=False):
    n = int(np.prod(shape)) if len(shape) else 1
    lo, hi = ranges(name, shape, basic)
    u = uniform01(name, n, seed)
    v = lo + (hi - lo) * u
    return v.astype(np.float32).reshape(shape)


def fill(model, seed=0):
    """Fills every parameter and buffer (but num_batches_tracked) in place."""
    import torch

    sd = model.state_dict()
    basic = not any(k.endswith(".bn3.weight") for k in sd)
    with torch.no_grad():
        for name, t in sd.items():
            if name.endswith("num_batches_tracked"):
                continue
            t.copy_(torch.from_numpy(tensor(name, list(t.shape), seed, basic)))
