"""GPU kernels of pagh_mm (CuPy RawModules from ``estimate.cu`` and ``scatter.cu``,
compiled once per process and device)."""
from __future__ import annotations

import functools
import os

import numpy as np

HERE = os.path.dirname(__file__)
SOURCES = {"estimate": os.path.join(HERE, "estimate.cu"), "scatter": os.path.join(HERE, "scatter.cu")}
MAXDS = (7, 15, 31, 63, 127)
OPTIONS = ("-std=c++17", "--fmad=false")


def names():
    """Every template instantiation of ``estimate.cu`` (also compiled by the CI nvcc check)."""
    return [f"tile_estimates<{d},{x}>" for d in MAXDS for x in ("true", "false")]


def instantiation_source() -> str:
    """One translation unit with every kernel of pagh_mm (for the nvcc check)."""
    lines = [f'#include "{SOURCES["estimate"]}"', f'#include "{SOURCES["scatter"]}"']
    for nm in names():
        lines.append(f"template __global__ void {nm}(const i64*, const double*, const i64*, "
                     "const double*, const double*, int, i64, i64, int, i64, i64, double*);")
    return "\n".join(lines) + "\n"


def _cp():
    from fwht_gpu.cuda.launch import cupy
    return cupy()


@functools.lru_cache(maxsize=None)
def _module(kind: str, device: int):
    with open(SOURCES[kind]) as f:
        code = f.read()
    exprs = names() if kind == "estimate" else None
    return _cp().RawModule(code=code, options=OPTIONS, name_expressions=exprs)


def _function(kind: str, name: str):
    return _module(kind, _cp().cuda.Device().id).get_function(name)


@functools.lru_cache(maxsize=None)
def _grid_cap(device: int) -> int:
    """Resident blocks of 256 threads the device holds (8 per SM): a grid-stride loop's grid."""
    return 8 * int(_cp().cuda.Device(device).attributes["MultiProcessorCount"])


def _grid(total: int, threads: int = 256) -> int:
    return int(max(1, min((total + threads - 1) // threads, _grid_cap(_cp().cuda.Device().id))))


def tile_estimates(h1, s1, h2, s2, sketch, r0: int, rows: int, log2b: int, xor: bool):
    """(rows, p) median estimates of rows r0 .. r0 + rows - 1 of the rows hashed in h1/s1
    ((d, m) tables) against the columns hashed in h2/s2 ((d, p)); CuPy in, CuPy out."""
    cp = _cp()
    d, m = h1.shape
    p = h2.shape[1]
    if d > MAXDS[-1]:
        raise ValueError(f"reps={d}: the GPU query kernel supports at most {MAXDS[-1]} repetitions")
    maxd = next(x for x in MAXDS if x >= d)
    fn = _function("estimate", f"tile_estimates<{maxd},{'true' if xor else 'false'}>")
    out = cp.empty((rows, p), dtype=cp.float64)
    fn((_grid(rows * p),), (256,), (h1, s1, h2, s2, sketch, np.int32(d), np.int64(m), np.int64(p),
                                    np.int32(log2b), np.int64(r0), np.int64(rows), out))
    return out


def scatter_dense(X, indptr, keys, sgn, rows: int):
    """(nb, rows) bucket sums of the float64 vectors X (keys x nb, any strides) through the
    scatter matrix in CSR form (indptr, keys, sgn): see ``scatter.cu``."""
    cp = _cp()
    nb = X.shape[1]
    out = cp.empty((nb, rows), dtype=cp.float64)
    if out.size == 0:
        return out
    s_key, s_col = (st // 8 for st in X.strides)
    _function("scatter", "scatter_dense")(
        (_grid(rows * nb),), (256,),
        (X, np.int64(s_key), np.int64(s_col), np.int64(nb), indptr, keys, sgn, np.int64(rows), out))
    return out


def scatter_sparse(ptr, h, w, nb: int, b: int):
    """(nb, d, b) sketches of nb sparse vectors (``ptr`` their stored-value ranges, ``h``
    and ``w`` (d, nnz) buckets and signed values): see ``scatter.cu``."""
    cp = _cp()
    d, nnz = h.shape
    out = cp.zeros((nb, d, b), dtype=cp.float64)
    if nb * d == 0:
        return out
    _function("scatter", "scatter_sparse")(
        (_grid(nb * d),), (256,),
        (cp.ascontiguousarray(ptr), cp.ascontiguousarray(h), cp.ascontiguousarray(w), np.int64(nnz),
         np.int32(d), np.int64(nb), np.int64(b), out))
    return out
