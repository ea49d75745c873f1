"""Where a GPU query's time goes (issue 16): the certified and the plain top-k of the bench's
planted product, profiled function by function.

    python benchmarks/explore_query_profile.py --n 8192 --n 16384 [--dtype fp32] [--blocking]
        [--compress]

Times ``sk.top_k(k)`` and ``sk.top_k(k, verify=True)`` (medians of ``--repeats``, GPU
synchronized), then runs each once under cProfile; with ``--blocking`` (set
CUDA_LAUNCH_BLOCKING=1 in the environment too) every launch waits for its kernel, so a
function's time includes its kernels'.  Prints the functions of most cumulative and own
time (the host's waits for the device show as ``get`` and the other synchronizing calls).
``--compress``: the same for ``pagh_mm.compress(A, B, k=k)`` (with its stages' times from
``profile=``), instead of the queries.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time

import numpy as np

import pagh_mm
from fwht_gpu import gpu
from pagh_mm import synthetic


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, action="append")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "fp64"])
    ap.add_argument("--k", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--lines", type=int, default=30)
    ap.add_argument("--compress", action="store_true", help="profile the compression instead")
    a = ap.parse_args(argv)
    cp = gpu.cupy()
    dt = np.float32 if a.dtype == "fp32" else np.float64
    for n in a.n or [8192]:
        data = synthetic.planted_product(n, a.k, seed=n, dtype=dt, xp=cp)
        sk = pagh_mm.compress(data.A, data.B, k=a.k, seed=1)
        print(f"n={n} {a.dtype}: buckets {sk.buckets}, reps {sk.reps}, transforms {sk.dtype}")
        if a.compress:
            stages = {}
            pagh_mm.compress(data.A, data.B, k=a.k, seed=1, profile=stages)
            print("  stages: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in stages.items()))
        calls = ((("compress", lambda: pagh_mm.compress(data.A, data.B, k=a.k, seed=1)),) if a.compress else
                 (("top_k", lambda: sk.top_k(a.k)), ("top_k verify", lambda: sk.top_k(a.k, verify=True))))
        for name, fn in calls:
            ts = []
            for _ in range(a.repeats + 1):
                cp.cuda.Device().synchronize()
                t0 = time.perf_counter()
                fn()
                cp.cuda.Device().synchronize()
                ts.append(time.perf_counter() - t0)
            print(f"  {name}: median {statistics.median(ts[1:]) * 1e3:.2f} ms "
                  f"(min {min(ts[1:]) * 1e3:.2f})")
            prof = cProfile.Profile()
            cp.cuda.Device().synchronize()
            prof.enable()
            fn()
            cp.cuda.Device().synchronize()
            prof.disable()
            for key in ("cumulative", "tottime"):
                s = io.StringIO()
                pstats.Stats(prof, stream=s).sort_stats(key).print_stats(a.lines)
                body = s.getvalue()
                print(f"  --- {name}, by {key} ---")
                print("\n".join("    " + line for line in body.splitlines()[4:] if line.strip()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
