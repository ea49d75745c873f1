"""The fused compression's two passes beside its kernel, timed alone on the GPU.

1. A C-ordered A's block of columns made keys-contiguous before the fused kernel reads it
   (``matmul.GPU_FUSED_CONTIGUOUS``): ``cupy.ascontiguousarray(A[:, k0:k1].T)`` (the library's
   until session 33) against cuBLAS ``geam`` (a tiled transpose) of the same block, both over
   every block of the inner dimension, and a plain copy of A (the floor: one read and one
   write of it).
2. ``kernels.tree_sum`` of ``--nodes`` nodes of d x b values (the fused kernel's nodes of one
   block), its read rate.

    PYTHONPATH=. python3 benchmarks/explore_fused_copy.py --n 16384 --n 32768 --json out.json
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from fwht_gpu import provenance


def main() -> None:
    import cupy as cp
    from cupy_backends.cuda.libs import cublas as cb
    from pagh_mm.cuda import kernels

    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, action="append", required=True)
    ap.add_argument("--block", type=int, action="append")
    ap.add_argument("--nodes", type=int, action="append")
    ap.add_argument("--reps", type=int, default=13)
    ap.add_argument("--log2b", type=int, default=15)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()

    def timed(fn):
        fn()
        cp.cuda.Device().synchronize()
        ts = []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            fn()
            cp.cuda.Device().synchronize()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    handle = cp.cuda.device.get_cublas_handle()
    rows = []
    for n in a.n:
        for dt in (np.float64, np.float32):
            A = cp.random.default_rng(n).standard_normal((n, n), dtype=dt)
            geam = cb.dgeam if dt == np.float64 else cb.sgeam
            one, zero = np.array(1, dtype=dt), np.array(0, dtype=dt)

            def by_geam(k0, k1):
                w = k1 - k0
                out = cp.empty((w, n), dtype=dt)     # row-major w x n: block k0..k1 transposed
                geam(handle, cb.CUBLAS_OP_T, cb.CUBLAS_OP_N, n, w, one.ctypes.data,
                     A.data.ptr + k0 * A.itemsize, n, zero.ctypes.data, out.data.ptr, n,
                     out.data.ptr, n)
                return out
            t_copy = timed(lambda: A.copy())
            for block in a.block or [512, 2048]:
                blocks = [(k0, min(n, k0 + block)) for k0 in range(0, n, block)]
                t_cupy = timed(lambda: [cp.ascontiguousarray(A[:, k0:k1].T) for k0, k1 in blocks])
                t_geam = timed(lambda: [by_geam(k0, k1) for k0, k1 in blocks])
                same = all(bool((by_geam(k0, k1) == cp.ascontiguousarray(A[:, k0:k1].T)).all())
                           for k0, k1 in blocks[:2])
                row = {"n": n, "dtype": np.dtype(dt).name, "block": block, "copy_s": t_copy,
                       "cupy_transpose_s": t_cupy, "geam_transpose_s": t_geam, "same": same}
                print(row, flush=True)
                rows.append(row)
            A = None
    for nodes in a.nodes or [64, 256]:
        for dt in (np.float32, np.float64):
            X = cp.ones((nodes, a.reps, 1 << a.log2b), dtype=dt)
            t = timed(lambda: kernels.tree_sum(X))
            row = {"tree_sum_nodes": nodes, "dtype": np.dtype(dt).name, "reps": a.reps,
                   "log2b": a.log2b, "seconds": t, "read_GBps": X.nbytes / t / 1e9}
            print(row, flush=True)
            rows.append(row)
            X = None
    from pagh_mm import compress, synthetic
    seen = []
    real = kernels.tree_sum

    def logged(nodes):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        out = real(nodes)
        cp.cuda.Device().synchronize()
        seen.append((tuple(nodes.shape), str(nodes.dtype), time.perf_counter() - t0))
        return out
    kernels.tree_sum = logged
    for n in a.n:
        d = synthetic.planted_product(n, 300, seed=n, dtype=np.float64, xp=cp)
        compress(d.A, d.B, k=300, seed=3)
        seen.clear()
        prof: dict = {}
        compress(d.A, d.B, k=300, seed=3, profile=prof)
        row = {"compress_n": n, "stages_s": prof, "tree_sums": len(seen),
               "tree_sum_shapes": sorted({s for s, _, _ in seen}),
               "tree_sum_s": sum(t for _, _, t in seen)}
        print(row, flush=True)
        rows.append(row)
        d = None
    kernels.tree_sum = real
    if a.json:
        provenance.write(provenance.record("explore-fused-copy", rows, vars(a)), a.json)


if __name__ == "__main__":
    main()
