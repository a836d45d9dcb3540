"""Pure-Python emulation of torch's CPU float32 sum of a contiguous 1-D tensor
(aten/src/ATen/native/cpu/SumKernel.cpp: cascade_sum -> vectorized_inner_sum ->
row_sum (ilp 4) -> multi_row_sum (4 levels)), single thread (numel below the
32768 grain size, or torch.set_num_threads(1)). `lanes` is the Vectorized<float>
width: 8 for AVX2, 16 for AVX512, and the scalar DEFAULT build also uses 8
(Vectorized<float> of 32 bytes). Used by golden.py only as a diagnostic, so that
canopy can check which summation order reproduces torch's float32 `mean()`.
"""
import numpy as np

F = np.float32


def _ceil_log2(x):
    return 0 if x <= 1 else int(x - 1).bit_length()


def _multi_row_sum(rows, nrows):
    """rows: list of `nrows`-tuples of lane vectors (each a numpy float32 array)."""
    size = len(rows)
    num_levels = 4
    level_power = max(4, _ceil_log2(size) // num_levels)
    level_step = 1 << level_power
    level_mask = level_step - 1
    zero = np.zeros_like(rows[0][0]) if size else None
    acc = [[zero.copy() for _ in range(nrows)] for _ in range(num_levels)] if size else None
    if not size:
        return None
    i = 0
    while i + level_step <= size:
        for _ in range(level_step):
            for k in range(nrows):
                acc[0][k] = (acc[0][k] + rows[i][k]).astype(F)
            i += 1
        for j in range(1, num_levels):
            for k in range(nrows):
                acc[j][k] = (acc[j][k] + acc[j - 1][k]).astype(F)
                acc[j - 1][k] = zero.copy()
            mask = level_mask << (j * level_power)
            if (i & mask) != 0:
                break
    while i < size:
        for k in range(nrows):
            acc[0][k] = (acc[0][k] + rows[i][k]).astype(F)
        i += 1
    for j in range(1, num_levels):
        for k in range(nrows):
            acc[0][k] = (acc[0][k] + acc[j][k]).astype(F)
    return acc[0]


def torch_sum_f32(values, lanes=8):
    x = np.asarray(values, dtype=F)
    n = x.size
    if n < lanes:  # scalar path: basic_loop / plain cascade over scalars
        return _scalar_cascade(x)
    vec_size = n // lanes
    vecs = [x[v * lanes:(v + 1) * lanes] for v in range(vec_size)]
    ilp = 4
    size_ilp = vec_size // ilp
    if size_ilp:
        rows = [tuple(vecs[r * ilp + k] for k in range(ilp)) for r in range(size_ilp)]
        partial = _multi_row_sum(rows, ilp)
    else:
        partial = [np.zeros(lanes, dtype=F) for _ in range(ilp)]
    for i in range(size_ilp * ilp, vec_size):
        partial[0] = (partial[0] + vecs[i]).astype(F)
    for k in range(1, ilp):
        partial[0] = (partial[0] + partial[k]).astype(F)
    final = F(0)
    for k in range(vec_size * lanes, n):
        final = F(final + x[k])
    for k in range(lanes):
        final = F(final + partial[0][k])
    return final


def _scalar_cascade(x):
    # row_sum over scalars with ilp 4 (non-vectorized inner reduction)
    n = x.size
    ilp = 4
    size_ilp = n // ilp
    if size_ilp:
        rows = [tuple(np.array([x[r * ilp + k]], dtype=F) for k in range(ilp)) for r in range(size_ilp)]
        partial = [p[0] for p in _multi_row_sum(rows, ilp)]
    else:
        partial = [F(0)] * ilp
    for i in range(size_ilp * ilp, n):
        partial[0] = F(partial[0] + x[i])
    for k in range(1, ilp):
        partial[0] = F(partial[0] + partial[k])
    return F(partial[0])
