"""Where the compression's "choose" stage goes on the GPU, and faster ways to do its parts.

The automatic rule reads the factors before the sketch: the ||AB||_F estimate
(:func:`pagh_mm.auto.frobenius_sketch`: G A and H B^T, Count-Sketches of 64 rows), and for
float64 data whether every value is an integer and the factors' squared norms (the narrowed
transforms' rounding bound).  For each size and dtype (planted products as ``pagh-mm bench``
makes them) this times each part (medians of ``--repeats``, the device synchronized around
each): the library's estimate (since session 39 ``scatter.cu``'s kernels in the CPU's order;
sessions 33-38 dense +-1 blocks of G and H by cuBLAS in float64) against the sparse product
(cuSPARSE G times float64 column chunks, the GPU's route before session 33), the squared
norms (session 33's square-sum kernels), the integer test, a copy of A (``A.copy()``, C-ordered:
the memory floor for a C-ordered A, a transposing copy for ``--order F``) and the compression's
stages.  Session 33's first run (`results/h100/session33-choose-before.json`) timed the route
before and a hand kernel.

    PYTHONPATH=. python3 benchmarks/explore_choose.py --n 16384 --n 32768 --order C --order F \
        --json out.json
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from fwht_gpu import provenance
from pagh_mm import auto, exact, matmul, synthetic
from pagh_mm.backend import gpu


def cp_sync() -> None:
    import cupy
    cupy.cuda.Device().synchronize()


def timed(be, fn, repeats: int):
    out = fn()
    cp_sync()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        cp_sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), out




def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, action="append", required=True)
    ap.add_argument("--dtype", action="append", choices=("fp64", "fp32"))
    ap.add_argument("--order", action="append", choices=("C", "F"),
                    help="the factors' memory order (default C; both: --order C --order F)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    be = gpu()
    cp = be.xp
    rows_out = []
    for n, name, order in ((n, name, order) for n in a.n for name in a.dtype or ["fp64", "fp32"]
                           for order in a.order or ["C"]):
        dt = np.float64 if name == "fp64" else np.float32
        data = synthetic.planted_product(n, 300, seed=n, dtype=dt, xp=cp)
        A, B = data.A, data.B
        if order == "F":
            A, B = cp.asfortranarray(A), cp.asfortranarray(B)
        row = {"n": n, "dtype": name, "order": order}
        t, _ = timed(be, lambda: auto.frobenius_sketch(A, B, be, 7), a.repeats)
        row["frobenius_sketch_s"] = t
        params = auto._jl_params(7)
        sides = [auto._JLSide(M, w, params, 6, be) for w, M in ((1, A), (2, B))]
        t, la = timed(be, lambda: sides[0].block(0, n), a.repeats)
        row["dense_A_s"] = t
        t, lb = timed(be, lambda: sides[1].block(0, n), a.repeats)
        row["dense_B_s"] = t
        # the sparse product of the CPU's route (session 32's GPU route too)
        at = cp.arange(n, dtype=cp.int64)
        G = be.sp.csr_matrix((sides[0].sign, (sides[0].row, at)), shape=(64, n))
        H = be.sp.csr_matrix((sides[1].sign, (sides[1].row, at)), shape=(64, n))
        t, sa = timed(be, lambda: auto._times_dense(G, A, cp).T, a.repeats)
        row["spmm_A_s"] = t
        t, sb = timed(be, lambda: auto._times_dense(H, B.T, cp).T, a.repeats)
        row["spmm_B_s"] = t
        row["dense_vs_spmm_max_rel"] = float(max(cp.abs(la - sa).max() / cp.abs(sa).max(),
                                                 cp.abs(lb - sb).max() / cp.abs(sb).max()))
        t, _ = timed(be, lambda: A.copy(), a.repeats)
        row["copy_A_s"] = t
        if dt == np.float64:
            t, _ = timed(be, lambda: matmul._integral(be, A), a.repeats)
            row["integral_s"] = t
            t, _ = timed(be, lambda: exact.factor_norms(be, A, B), a.repeats)
            row["factor_norms_s"] = t
        prof: dict = {}
        from pagh_mm import compress
        compress(A, B, k=300, seed=3)
        cp_sync()
        compress(A, B, k=300, seed=3, profile=prof)
        row["stages_s"] = prof
        t, _ = timed(be, lambda: A.sum(axis=0), a.repeats)
        row["sum_axis0_s"] = t
        print(row, flush=True)
        rows_out.append(row)
        data = A = B = G = H = la = lb = sa = sb = None
        cp.get_default_memory_pool().free_all_blocks()
    if a.json:
        provenance.write(provenance.record("explore-choose", rows_out, vars(a)), a.json)


if __name__ == "__main__":
    main()
