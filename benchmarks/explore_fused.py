"""The fused GPU compression kernel's stages and layouts (issue 16), one process:

    python benchmarks/explore_fused.py --n 16384 --n 32768 --buckets 8192 [--json out.json]

For each n and transform dtype: compress a dense N(0, 1) A (C order, then F order) by B
with the fused kernel (with and without the contiguous copy of A's blocks; ``--cluster-from N``
also with thread-block clusters from 2^N buckets, ``--cluster-log-g G`` with clusters summing
2^G inner indices; ``--a-in-row``: the cluster kernel with A's values waiting in the output
row in device memory, not in shared memory, as before session 28), and with the staged path; prints the median wall time of the compression and the profile's stages
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
    ap.add_argument("--cluster-from", type=int, action="append", default=[],
                    help="also the fused kernel with clusters from 2^N buckets (A F-order)")
    ap.add_argument("--cluster-log-g", type=int, action="append", default=[],
                    help="also the cluster kernel summing 2^G inner indices (A F-order)")
    ap.add_argument("--a-in-row", action="store_true",
                    help="also the cluster kernel with A's values in the output row")
    ap.add_argument("--only-f", action="store_true", help="no C-ordered A variants")
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
            AF = cp.asfortranarray(A)
            default = (dict(kernels.FUSED_CLUSTER_FROM), kernels.FUSED_CLUSTER_LOG_G,
                       kernels.FUSED_CLUSTER_A_SHARED)
            variants = [] if a.only_f else [
                ("fused, A C-order, contiguous copy", A, True, True, library, default),
                ("fused, A C-order, strided columns", A, True, False, library, default)]
            variants += [("fused, A F-order", AF, True, True, library, default)]
            variants += [(f"fused, A F-order, clusters from 2^{c}", AF, True, True, library,
                          ({t: c for t in default[0]}, default[1], default[2]))
                         for c in a.cluster_from]
            variants += [(f"fused, A F-order, clusters sum 2^{g}", AF, True, True, library,
                          (default[0], g, default[2])) for g in a.cluster_log_g]
            if a.a_in_row:
                variants += [("fused, A F-order, A in the row", AF, True, True, library,
                              (default[0], default[1], False))]
            variants += [("staged", A, False, True, library, default)]
            for name, AA, fused, contiguous, module, (cfrom, clog_g, a_shared) in variants:
                matmul.GPU_FUSED, matmul.GPU_FUSED_CONTIGUOUS = fused, contiguous
                kernels.FUSED = module
                kernels.FUSED_CLUSTER_FROM, kernels.FUSED_CLUSTER_LOG_G = dict(cfrom), clog_g
                kernels.FUSED_CLUSTER_A_SHARED = a_shared
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
            kernels.FUSED_CLUSTER_FROM, kernels.FUSED_CLUSTER_LOG_G, \
                kernels.FUSED_CLUSTER_A_SHARED = default
    matmul.GPU_FUSED, matmul.GPU_FUSED_CONTIGUOUS = True, True
    kernels.FUSED = library
    if a.json:
        settings = {"n": a.n or [8192, 16384], "buckets": a.buckets, "reps": a.reps,
                    "dtypes": a.dtype or ["float64", "float32"], "repeats": 3,
                    "cluster_from": a.cluster_from, "cluster_log_g": a.cluster_log_g,
                    "a_in_row": a.a_in_row, "only_f": a.only_f}
        provenance.write(provenance.record("pagh-fused-explore", rows, settings, device="gpu"),
                         a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
