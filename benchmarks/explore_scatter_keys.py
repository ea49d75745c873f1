"""``scatter_keys`` (the ||AB||_F estimate's Count-Sketch of vectors whose keys are contiguous,
``pagh_mm/cuda/scatter.cu``) at other shapes: vectors per warp, keys per chunk, warps per
block, against ``scatter_dense`` on the other layout (the same work: every value read once;
other sums) and cuBLAS's GEMM with a dense +-1 block (the route before session 39), in one
run.

    PYTHONPATH=. python3 benchmarks/explore_scatter_keys.py --n 32768 --variants 2.256.8.8 2.256.8.1

A variant ``V.C.W.R``: SCATTER_VECS = V vectors per warp, SCATTER_CHUNK = C keys per chunk,
SCATTER_WARPS = W warps per block, SCATTER_RUN = R entries of each row's key list loaded at
once per chunk (the library: 2.256.8.8).  Every variant's sums are checked
against the library's (the same bits)."""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _events import event_median  # noqa: E402
from fwht_gpu import gpu, provenance  # noqa: E402
from fwht_gpu.cuda.modules import KernelModule  # noqa: E402
from pagh_mm import auto, hashing  # noqa: E402
from pagh_mm.cuda import kernels  # noqa: E402

LIBRARY = kernels.SCATTER


def module_for(v: int, c: int, w: int, r: int) -> KernelModule:
    mod = KernelModule(LIBRARY.path, LIBRARY.options, named=False)
    src = LIBRARY.source
    for name, val in (("SCATTER_CHUNK", c), ("SCATTER_VECS", v), ("SCATTER_WARPS", w),
                      ("SCATTER_RUN", r)):
        old = f"#define {name} "
        i = src.index(old)
        j = src.index("\n", i)
        src = src[:i] + f"#define {name} {val}" + src[j:]
    mod.__dict__["source"] = src
    return mod


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--dtype", action="append", choices=("float64", "float32"))
    ap.add_argument("--variants", nargs="+", default=["2.256.8.8", "2.256.8.1", "8.128.4.4",
                                                      "4.128.8.4", "2.512.4.16", "1.256.8.8"])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    cp = gpu.cupy()

    def timed(f):
        return event_median(cp, f, a.repeats)

    rows = []
    be_params = auto._jl_params(7)
    for dt in a.dtype or ["float64", "float32"]:
        B = cp.random.default_rng(1).standard_normal((a.n, a.n), dtype=cp.float64).astype(dt)
        at = cp.arange(a.n, dtype=cp.int64)
        row = hashing.bucket_table(be_params, 2, at, 6, cp)[0]
        sign = hashing.sign_table(be_params, 2, at, cp)[0]
        indptr, order, sgn, skey = auto._csr(row, sign, 64, cp)
        X = B.T                                 # keys x nb, keys contiguous (a C-ordered B)
        ref = kernels.scatter_keys(X, indptr, skey, 64)
        dense = timed(lambda: kernels.scatter_dense(B, indptr, order, sgn, 64))   # other layout
        D = cp.zeros((a.n, 64), dtype=cp.float64)
        D[at, row] = sign
        gemm = timed(lambda: B.astype(cp.float64, copy=False) @ D) if dt == "float64" else None
        nbytes = B.nbytes
        print(f"n={a.n} {dt}: scatter_dense on vectors-adjacent data {dense * 1e3:.2f} ms"
              + (f", cuBLAS GEMM with a dense +-1 block {gemm * 1e3:.2f} ms" if gemm else ""), flush=True)
        try:
            for var in a.variants:
                v, c, w, r = (int(x) for x in var.split("."))
                kernels.SCATTER = module_for(v, c, w, r)
                kernels.SCATTER_VECS, kernels.SCATTER_WARPS = v, w
                out = kernels.scatter_keys(X, indptr, skey, 64)
                same = bool(cp.array_equal(out.view(cp.uint8), ref.view(cp.uint8)))
                t = timed(lambda: kernels.scatter_keys(X, indptr, skey, 64))
                print(f"  {var:10} {t * 1e3:7.2f} ms  {nbytes / t / 1e12:5.2f} TB/s  same bits {same}",
                      flush=True)
                rows.append({"n": a.n, "dtype": dt, "variant": var, "seconds": t, "same_bits": same,
                             "scatter_dense_s": dense, "gemm_s": gemm})
        finally:
            kernels.SCATTER = LIBRARY
            kernels.SCATTER_VECS, kernels.SCATTER_WARPS = 2, 8
        B = X = D = None
        cp.get_default_memory_pool().free_all_blocks()
    if a.json:
        provenance.write(provenance.record("pagh-scatter-keys", rows, vars(a), device="gpu"), a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
