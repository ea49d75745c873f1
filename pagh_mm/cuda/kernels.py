"""GPU kernels of pagh_mm (CuPy RawModule from ``estimate.cu``, compiled once per process)."""
from __future__ import annotations

import functools
import os

import numpy as np

SOURCE = os.path.join(os.path.dirname(__file__), "estimate.cu")
MAXDS = (7, 15, 31, 63, 127)


def names():
    """Every template instantiation (also compiled by the CI nvcc check)."""
    return [f"tile_estimates<{d},{x}>" for d in MAXDS for x in ("true", "false")]


def instantiation_source() -> str:
    lines = [f'#include "{SOURCE}"']
    for nm in names():
        lines.append(f"template __global__ void {nm}(const i64*, const double*, const i64*, "
                     "const double*, const double*, int, i64, i64, int, i64, i64, double*);")
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=None)
def _module():
    from fwht_gpu.cuda.launch import cupy
    with open(SOURCE) as f:
        code = f.read()
    return cupy().RawModule(code=code, options=("-std=c++17", "--fmad=false"),
                            name_expressions=names())


def tile_estimates(h1, s1, h2, s2, sketch, r0: int, rows: int, log2b: int, xor: bool):
    """(rows, p) median estimates of rows r0 .. r0 + rows - 1 (CuPy arrays in, CuPy out)."""
    from fwht_gpu.cuda.launch import cupy
    cp = cupy()
    d, m = h1.shape
    p = h2.shape[1]
    if d > MAXDS[-1]:
        raise ValueError(f"reps={d}: the GPU query kernel supports at most {MAXDS[-1]} repetitions")
    maxd = next(x for x in MAXDS if x >= d)
    fn = _module().get_function(f"tile_estimates<{maxd},{'true' if xor else 'false'}>")
    out = cp.empty((rows, p), dtype=cp.float64)
    total = rows * p
    threads = 256
    blocks = int(min((total + threads - 1) // threads, 132 * 32))
    fn((blocks,), (threads,), (h1, s1, h2, s2, sketch, np.int32(d), np.int64(m), np.int64(p),
                               np.int32(log2b), np.int64(r0), np.int64(rows), out))
    return out
