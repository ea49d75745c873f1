"""Rows of length K * 2**k spread over a cluster of two blocks (issue 19 item 2; Hopper): the
library's route with ``fwht_k_rows_pair`` (where ``config.k_launch`` takes it) against the
route without it (``config.K_PAIR_ROWS = False``: one ``fwht_k_rows`` tile per row, or the
power-of-two passes and the K stage) and a device copy of the same bytes, with the bits
compared (``==`` on the stored bits, both directions).

    python benchmarks/explore_k_cluster.py [--rows 4096] [--dtypes fp32 fp64 fp16]
        [--n 28672 40960 ...] [--out JSON]

Without ``--n``: every length K * 2**k up to 2**18 elements for which the launcher takes the
pair kernel on this device.  Columns: both routes' kernel times (CUDA graphs, as ``fwht
bench`` times its kernels), each over the copy, the pair's threads, and whether the bits agree.
"""
from __future__ import annotations

import argparse

import cupy as cp
import numpy as np

from fwht_gpu import dtypes as _dt
from fwht_gpu import gpu, hadamard, make_plan, provenance
from fwht_gpu.bench import _timer
from fwht_gpu.cuda import config, engine

from explore_k_lengths import copy_times, inputs     # (run as a script: benchmarks/ on the path)


def _bits(a):
    return a.view(cp.uint16 if a.dtype.itemsize == 2 else
                  cp.uint32 if a.dtype.itemsize == 4 else cp.uint64)


def _route(plan, K, rows) -> str:
    launch = config.k_launch(plan, K, rows, False, gpu.limits())
    if launch.pair:
        return f"pair, {launch.threads} threads"
    return "one tile" if launch.fused else f"{len(plan.passes)} pass(es) + K stage"


def case(rows: int, n: int, dtype) -> dict:
    dt = np.dtype(dtype)
    K, M = hadamard.split(n)
    srcs, dst, nbytes = inputs(rows, n, dt)
    count = len(srcs)
    plan = make_plan(M, dt, device="cuda")
    row = {"dtype": _dt.short_name(dt), "rows": rows, "n": n, "K": K, "M": M, "bytes": nbytes}
    outs = {}
    for pair in (False, True):
        config.K_PAIR_ROWS = pair
        engine._K_LAUNCHES.clear()           # (launches are cached per plan and rows)
        key = "pair" if pair else "without"
        row[f"{key}_route"] = _route(plan, K, rows)
        row[f"{key}_ms"], _ = _timer(cp, lambda i: engine.run_k(plan, K, srcs[i % count], dst, 1.0,
                                                                False, check=False))
        for inverse in (False, True):
            got = cp.full_like(dst, 7)
            engine.run_k(plan, K, srcs[0], got, 1.0, inverse, check=False)
            outs[pair, inverse] = _bits(got)
    config.K_PAIR_ROWS = True
    engine._K_LAUNCHES.clear()
    row["same_bits"] = all(bool((outs[True, i] == outs[False, i]).all()) for i in (False, True))
    t_copy = min(copy_times(srcs, dst, nbytes))
    row["copy_ms"] = t_copy
    row["without_ratio_copy"] = row["without_ms"] / t_copy
    row["pair_ratio_copy"] = row["pair_ms"] / t_copy
    srcs.clear()
    outs.clear()
    cp.get_default_memory_pool().free_all_blocks()
    return row


def pair_lengths(dt, most: int = 1 << 18) -> list[int]:
    """The lengths K * 2**k <= most whose rows the launcher spreads over two blocks."""
    out = []
    for K in sorted(hadamard.ORDERS):
        for k in range(1, 20):
            if K << k <= most and config.k_launch(make_plan(1 << k, dt, device="cuda"), K, 4096,
                                                  False, gpu.limits()).pair:
                out.append(K << k)
    return sorted(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--dtypes", nargs="*", default=["fp32", "fp64", "fp16"])
    ap.add_argument("--n", type=int, nargs="*", default=None)
    ap.add_argument("--out", default=None, help="JSON record (fwht_gpu.provenance)")
    args = ap.parse_args()
    print(f"# {gpu.status()}")
    print(f"{'dtype':5} {'n':>6} {'K x M':>10} {'without':>9} {'x copy':>7} {'pair':>9} "
          f"{'x copy':>7}  same bits  routes")
    cases = [(_dt.resolve(name), n) for name in args.dtypes
             for n in args.n or pair_lengths(_dt.resolve(name))]
    count = lambda n: max(2, args.rows * 40960 // max(n, 40960))     # noqa: E731
    for pair in (False, True):          # both routes' kernels, compiled in parallel
        config.K_PAIR_ROWS = pair
        engine._K_LAUNCHES.clear()           # (launches are cached per plan and rows)
        engine.precompile_k([(make_plan(hadamard.split(n)[1], dt, device="cuda"),
                              hadamard.split(n)[0], count(n), inverse)
                             for dt, n in cases for inverse in (False, True)])
    config.K_PAIR_ROWS = True
    engine._K_LAUNCHES.clear()
    rows = []
    for dt, n in cases:
        r = case(count(n), n, dt)
        rows.append(r)
        print(f"{r['dtype']:5} {n:>6} {r['K']:>3} x {r['M']:<5} {r['without_ms']:9.4f} "
              f"{r['without_ratio_copy']:7.2f} {r['pair_ms']:9.4f} {r['pair_ratio_copy']:7.2f}"
              f"  {str(r['same_bits']):9}  {r['without_route']} -> {r['pair_route']}",
              flush=True)
    if args.out:
        settings = {"rows": args.rows, "dtypes": args.dtypes, "n": args.n}
        provenance.write(provenance.record("fwht-k-cluster-explore", rows, settings,
                                           device="gpu"), args.out)


if __name__ == "__main__":
    main()
