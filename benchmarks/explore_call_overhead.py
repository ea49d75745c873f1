"""Per-call host overhead of fwht_gpu.fwht on small GPU arrays: CuPy arrays, PyTorch CUDA tensors,
FWHT.__call__, and fast-hadamard-transform's hadamard_transform when importable.

Each row: microseconds per call (wall clock over N back-to-back calls, after warm-up, the device
synchronized at both ends), and the GPU time of one call's kernels alone (engine.run without the
overflow check, CUDA events) for comparison.  ``--profile`` prints the cProfile top 25 by tottime
of N calls on each input.

    python benchmarks/explore_call_overhead.py [--rows 4096] [--n 1024] [--calls 2000] [--profile]
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np


def _per_call(fn, calls: int, sync) -> float:
    for _ in range(20):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - t0) / calls * 1e6


def _profile(name: str, fn, calls: int, sync) -> None:
    fn()
    sync()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    sync()
    prof.disable()
    print(f"\n--- cProfile, {calls} calls: {name} (top 25 by tottime) ---")
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()

    import cupy as cp

    import fwht_gpu as F
    from fwht_gpu.cuda import device, engine

    dt = np.dtype(args.dtype)
    x = cp.asarray(np.random.default_rng(0).standard_normal((args.rows, args.n)).astype(dt))
    sync = cp.cuda.Device().synchronize
    t = F.FWHT(args.n, dt, device="cuda")
    cases = [("fwht(cupy)", lambda: F.fwht(x)),
             ("ifwht(cupy, norm=ortho)", lambda: F.ifwht(x, norm="ortho")),
             ("FWHT.__call__(cupy)", lambda: t(x))]
    out = cp.empty_like(x)
    cases.append(("fwht(cupy, out=)", lambda: F.fwht(x, out=out)))

    try:
        import torch
        if not torch.cuda.is_available():
            raise ImportError("no CUDA build of PyTorch")
        tx = torch.from_dlpack(x).clone()
        tsync = torch.cuda.synchronize
        cases.append(("fwht(torch)", lambda: F.fwht(tx)))
        cases.append(("FWHT.__call__(torch)", lambda: t(tx)))
        try:
            from fast_hadamard_transform import hadamard_transform
            cases.append(("fast_hadamard_transform", lambda: hadamard_transform(tx)))
        except ImportError as exc:
            print(f"(fast-hadamard-transform not importable: {exc})")
    except ImportError as exc:
        torch, tsync = None, None
        print(f"(PyTorch CUDA not available: {exc})")

    def both():
        sync()
        if tsync is not None:
            tsync()

    # the kernels alone (no flag read, no host synchronization), CUDA events
    plan = t.plan_for(args.rows)
    dst = cp.empty_like(x)
    for _ in range(10):
        engine.run(plan, x, dst, check=False)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(200):
        engine.run(plan, x, dst, check=False)
    stop.record()
    stop.synchronize()
    gpu_us = cp.cuda.get_elapsed_time(start, stop) / 200 * 1e3

    print(f"{device.status()}; CuPy {cp.__version__}"
          + (f", PyTorch {torch.__version__}" if torch is not None else ""))
    print(f"{args.rows} x {args.n} {dt}, {args.calls} calls each; kernels alone (engine.run, "
          f"no check, CUDA events): {gpu_us:.1f} us")
    print(f"{'case':28s} {'us/call':>9s}")
    for name, fn in cases:
        print(f"{name:28s} {_per_call(fn, args.calls, both):9.1f}")
    if args.profile:
        for name, fn in cases:
            if name.startswith(("fwht(cupy)", "fwht(torch)")):
                _profile(name, fn, args.calls, both)


if __name__ == "__main__":
    main()
