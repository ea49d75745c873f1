"""The fused GPU compression kernel's stages and layouts (issue 16), one process:

    python benchmarks/explore_fused.py --n 16384 --n 32768 --buckets 8192 [--json out.json]

For each n and transform dtype: compress a dense N(0, 1) A (C order, then F order) by B
with the fused kernel (with and without the contiguous copy of A's blocks), and with the
staged path; prints the median wall time of the compression and the profile's stages
(GPU synchronized between stages), and checks that every variant gives the same bits.
(Session 23's ``--gather-batch G``, the sketch's gathers G at a time per thread, measured
slower in FP64 in session 24 and was removed with its kernel macro in session 25.)"""
from __future__ import annotations

import argparse
import statistics
import time

import pagh_mm
from fwht_gpu import gpu, provenance
from pagh_mm import matmul
from pagh_mm.cuda import kernels


def _time(fn, repeats=3):
    cp = gpu.cupy()
    fn()
    cp.cuda.Device().synchronize()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        cp.cuda.Device().synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, action="append")
    ap.add_argument("--buckets", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dtype", action="append")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    cp = gpu.cupy()
    library = kernels.FUSED
    rows = []
    for n in a.n or [8192, 16384]:
        rng = cp.random.default_rng(n)
        A = rng.standard_normal((n, n))
        B = rng.standard_normal((n, n))
        for dt in a.dtype or ["float64", "float32"]:
            kw = dict(buckets=a.buckets, reps=a.reps, seed=1, dtype=dt)
            ref = None
            variants = [("fused, A C-order, contiguous copy", A, True, True, library),
                        ("fused, A C-order, strided columns", A, True, False, library),
                        ("fused, A F-order", cp.asfortranarray(A), True, True, library),
                        ("staged", A, False, True, library)]
            for name, AA, fused, contiguous, module in variants:
                matmul.GPU_FUSED, matmul.GPU_FUSED_CONTIGUOUS = fused, contiguous
                kernels.FUSED = module
                t, sk = _time(lambda: pagh_mm.compress(AA, B, **kw))
                prof = {}
                pagh_mm.compress(AA, B, profile=prof, **kw)
                same = True if ref is None else bool((sk.sketch == ref).all())
                ref = sk.sketch if ref is None else ref
                print(f"n={n} {dt} b={a.buckets}: {name:36} {t:8.4f} s  same bits {same}  "
                      + ", ".join(f"{k} {v:.4f}" for k, v in prof.items()), flush=True)
                rows.append({"n": n, "dtype": dt, "buckets": a.buckets, "variant": name,
                             "time_s": t, "same_bits": same, "stages_s": prof})
                sk = None
                cp.get_default_memory_pool().free_all_blocks()
    matmul.GPU_FUSED, matmul.GPU_FUSED_CONTIGUOUS = True, True
    kernels.FUSED = library
    if a.json:
        settings = {"n": a.n or [8192, 16384], "buckets": a.buckets, "reps": a.reps,
                    "dtypes": a.dtype or ["float64", "float32"], "repeats": 3}
        provenance.write(provenance.record("pagh-fused-explore", rows, settings, device="gpu"),
                         a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
