"""Batched rows of length n = K * 2**k on the GPU (issue 19 item 2, exploration): the
transform against a device copy of the same bytes, with power-of-two rows of 2^15 for
reference.  Target: within 1.15x of the copy for rows up to 40 * 2**10.

    python benchmarks/explore_k_lengths.py [--rows 4096] [--min-mb 64] [--dtypes fp32 fp16 bf16 fp64]
        [--n 3072 12288 20480 28672 40960] [--compute float32|float64] [--out JSON]

``--min-mb B``: at least B MiB of rows (more rows where 4096 rows are fewer bytes, a multiple
of 16: the power-of-two rows of ``fwht bench`` are batches of 64 MB).

Columns: the kernel time alone (``engine.run_k`` without the overflow check, captured in a
CUDA graph as ``fwht bench`` times its kernels), the copy (the faster of cudaMemcpy and a copy
kernel), their ratio, the route (``fused``: one fwht_k_rows pass; ``split``: the power-of-two
passes then fwht_k_stage), and the whole ``fwht_gpu.fwht`` call (with its overflow check: a
flag read back, so one synchronisation per call) timed with events around single calls.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

import cupy as cp
import numpy as np

import fwht_gpu as F
from fwht_gpu import dtypes as _dt
from fwht_gpu import gpu, hadamard, make_plan, provenance
from fwht_gpu.bench import _timer
from fwht_gpu.cuda import config, engine

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _events import event_median  # noqa: E402

ROTATE_BYTES = 1 << 30      # inputs rotated over at least this many bytes (no L2 flattery)


def _call_ms(fn, runs=30):
    """Median time in ms of single calls (each with its own synchronisation)."""
    return event_median(cp, fn, runs, warmups=3) * 1e3


def inputs(rows: int, n: int, dt):
    """(sources rotated over ROTATE_BYTES, destination, bytes of one) for rows of n values."""
    nbytes = rows * n * dt.itemsize
    count = max(1, min(16, math.ceil(ROTATE_BYTES / nbytes)))
    rng = cp.random.default_rng(1)
    srcs = [rng.standard_normal((rows, n), dtype=cp.float32).astype(dt) for _ in range(count)]
    return srcs, cp.empty((rows, n), dtype=dt), nbytes


def copy_times(srcs, dst, nbytes):
    """(cudaMemcpy ms, copy kernel ms) of the same bytes, over the rotated sources."""
    count = len(srcs)
    t_memcpy, _ = _timer(cp, lambda i: dst.data.copy_from_device_async(srcs[i % count].data, nbytes))
    t_kcopy, _ = _timer(cp, lambda i: cp.copyto(dst, srcs[i % count]))
    return t_memcpy, t_kcopy


def case(rows: int, n: int, dtype, compute=None) -> dict:
    """One row of the table (``compute``: a wider compute dtype, K * 2**k rows only)."""
    dt = np.dtype(dtype)
    K, M = hadamard.split(n)
    srcs, dst, nbytes = inputs(rows, n, dt)
    count = len(srcs)
    if K > 1:
        plan = make_plan(M, dt, compute_dtype=compute, device="cuda")
        launch = config.k_launch(plan, K, rows, False, gpu.limits())
        route = (f"fused {launch.threads} thr, {launch.smem // 1024} KiB, 2^{launch.log_rows} rows/tile"
                 if launch.fused else f"split: {len(plan.passes)} pass(es) + K stage")
        kernel = lambda i: engine.run_k(plan, K, srcs[i % count], dst, 1.0, False, check=False)  # noqa: E731
    else:
        plan = make_plan(n, dt, device="cuda", batch=rows, sms=gpu.limits().sm_count)
        route = f"power of two: {len(plan.passes)} pass(es)"
        kernel = lambda i: engine.run(plan, srcs[i % count], dst, check=False)  # noqa: E731
    t_kernel, runs = _timer(cp, kernel)
    t_memcpy, t_kcopy = copy_times(srcs, dst, nbytes)
    t_copy = min(t_memcpy, t_kcopy)
    it = iter(range(1 << 30))
    wide = compute if K > 1 else None
    t_call = _call_ms(lambda: F.fwht(srcs[next(it) % count], out=dst, compute_dtype=wide))
    row = {"dtype": _dt.short_name(dt), "compute": wide, "rows": rows, "n": n, "K": K, "M": M, "bytes": nbytes,
           "route": route, "runs": runs, "kernel_ms": t_kernel, "copy_ms": t_copy,
           "memcpy_ms": t_memcpy, "copy_kernel_ms": t_kcopy, "ratio_copy": t_kernel / t_copy,
           "call_ms": t_call, "call_ratio_copy": t_call / t_copy,
           "gbps": 2 * nbytes / t_kernel / 1e6}
    srcs.clear()
    cp.get_default_memory_pool().free_all_blocks()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--dtypes", nargs="*", default=["fp32", "fp16", "bf16", "fp64"])
    ap.add_argument("--n", type=int, nargs="*",
                    default=[12 * 256, 12 * 1024, 20 * 1024, 28 * 1024, 40 * 1024, 1 << 15])
    ap.add_argument("--min-mb", type=float, default=0.0,
                    help="at least this many MiB of rows (a multiple of 16 rows)")
    ap.add_argument("--compute", default=None,
                    help="a wider compute dtype of the K * 2**k rows for every --dtypes: float32 "
                         "(fp16, bf16) or float64 (fp32)")
    ap.add_argument("--out", default=None, help="JSON record (fwht_gpu.provenance)")
    args = ap.parse_args()

    def count(n: int, name: str) -> int:
        least = -(-int(args.min_mb * 2**20) // (n * _dt.resolve(name).itemsize))
        return max(args.rows, -(-least // 16) * 16)

    print(f"# {gpu.status()}")
    # compile every kernel first (in parallel), so that no timing waits for NVRTC
    items = []
    for name in args.dtypes:
        for n in args.n:
            K, M = hadamard.split(n)
            if K > 1:
                items.append((make_plan(M, _dt.resolve(name), compute_dtype=args.compute, device="cuda"),
                              K, count(n, name), False))
    engine.precompile_k(items)
    head = (f"{'dtype':5} {'rows':>5} {'n':>6} {'K x M':>10} {'kernel ms':>10} {'copy ms':>8} "
            f"{'x copy':>7} {'call ms':>8} {'x copy':>7}  route")
    print(head)
    rows = []
    for name in args.dtypes:
        for n in args.n:
            r = case(count(n, name), n, _dt.resolve(name), args.compute)
            rows.append(r)
            print(f"{r['dtype']:5} {r['rows']:>5} {r['n']:>6} {r['K']:>3} x {r['M']:<5} "
                  f"{r['kernel_ms']:>10.4f} {r['copy_ms']:>8.4f} {r['ratio_copy']:>7.3f} "
                  f"{r['call_ms']:>8.4f} {r['call_ratio_copy']:>7.3f}  {r['route']}", flush=True)
    if args.out:
        provenance.write(provenance.record("explore-k-lengths", rows, vars(args), None, device="gpu"),
                         args.out)
        print(f"# written: {args.out}")


if __name__ == "__main__":
    main()
