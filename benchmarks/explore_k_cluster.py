"""Rows of length K * 2**k spread over a cluster of two blocks (issue 19 item 2, exploration;
Hopper): ``benchmarks/k_cluster.cu``'s fwht_k_rows_pair against the library's route (one
fwht_k_rows pass, or the power-of-two passes and the K stage) and a device copy of the same
bytes, with the bits compared (``==`` on the stored bits, both directions).

    python benchmarks/explore_k_cluster.py [--rows 4096] [--dtypes fp32 fp64 fp16 bf16]
        [--n 12288 20480 28672 40960] [--threads 256 512 1024] [--out JSON]

Columns: the library's kernel time and the pair kernel's at each thread count (CUDA graphs, as
``fwht bench`` times its kernels), each over the copy, and whether the pair kernel's output
has the library's bits (forward and inverse).
"""
from __future__ import annotations

import argparse
import os

import cupy as cp
import numpy as np

from fwht_gpu import dtypes as _dt
from fwht_gpu import gpu, hadamard, make_plan, provenance
from fwht_gpu.bench import _timer
from fwht_gpu.cuda import config, engine

from explore_k_lengths import copy_times, inputs     # (run as a script: benchmarks/ on the path)

HERE = os.path.dirname(os.path.abspath(__file__))
PAIR = gpu.KernelModule(os.path.join(HERE, "k_cluster.cu"))


def _pair(plan, K: int, inverse: bool, threads: int):
    """(launch(src, dst, flags), shared memory bytes) of fwht_k_rows_pair for these rows."""
    cfg = config.k_rows_config(plan, K, inverse)
    log_mu = plan.log2n - (1 if cfg.paired else 0)
    smem = cfg.smem_bytes((K // 2) << log_mu)
    fn = PAIR.function(cfg.name.replace("fwht_k_rows<", "fwht_k_rows_pair<", 1), smem, 2)

    def launch(src, dst, flags):
        rows = int(src.shape[0])
        fn((2 * rows,), (threads,), (src, dst, np.int64(rows), np.int32(log_mu),
                                     np.float64(1.0), flags), shared_mem=smem)
    return launch, smem


def _bits(a):
    return a.view(cp.uint16 if a.dtype.itemsize == 2 else
                  cp.uint32 if a.dtype.itemsize == 4 else cp.uint64)


def case(rows: int, n: int, dtype, thread_counts) -> dict:
    dt = np.dtype(dtype)
    K, M = hadamard.split(n)
    srcs, dst, nbytes = inputs(rows, n, dt)
    count = len(srcs)
    plan = make_plan(M, dt, device="cuda")
    launch = config.k_launch(plan, K, rows, False, gpu.limits())
    route = "fused" if launch.fused else f"split: {len(plan.passes)} pass(es) + K stage"
    flags = cp.zeros(1, dtype=cp.uint32)
    t_lib, _ = _timer(cp, lambda i: engine.run_k(plan, K, srcs[i % count], dst, 1.0, False,
                                                 check=False))
    t_copy = min(copy_times(srcs, dst, nbytes))
    row = {"dtype": _dt.short_name(dt), "rows": rows, "n": n, "K": K, "M": M, "bytes": nbytes,
           "library_route": route, "library_ms": t_lib, "copy_ms": t_copy,
           "library_ratio_copy": t_lib / t_copy, "pair": []}
    cfg = config.k_rows_config(plan, K, False)
    for threads in thread_counts:
        if threads > cfg.max_threads:
            continue
        same = True
        for inverse in (False, True):        # the bits, both directions
            run, smem = _pair(plan, K, inverse, threads)
            want = cp.empty_like(dst)
            engine.run_k(plan, K, srcs[0], want, 1.0, inverse, check=False)
            got = cp.full_like(dst, 7)
            run(srcs[0], got, flags)
            same = same and bool((_bits(got) == _bits(want)).all())
        run, smem = _pair(plan, K, False, threads)
        t_pair, _ = _timer(cp, lambda i: run(srcs[i % count], dst, flags))
        row["pair"].append({"threads": threads, "smem": smem, "ms": t_pair,
                            "ratio_copy": t_pair / t_copy, "same_bits": same})
    srcs.clear()
    cp.get_default_memory_pool().free_all_blocks()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--dtypes", nargs="*", default=["fp32", "fp64", "fp16", "bf16"])
    ap.add_argument("--n", type=int, nargs="*", default=[12 * 1024, 20 * 1024, 28 * 1024, 40 * 1024])
    ap.add_argument("--threads", type=int, nargs="*", default=[256, 512, 1024])
    ap.add_argument("--out", default=None, help="JSON record (fwht_gpu.provenance)")
    args = ap.parse_args()
    print(f"# {gpu.status()}")
    print(f"{'dtype':5} {'n':>6} {'K x M':>10} {'library':>9} {'x copy':>7}  "
          "pair kernel (threads: x copy, same bits)   library route")
    rows = []
    for name in args.dtypes:
        for n in args.n:
            r = case(args.rows, n, _dt.resolve(name), args.threads)
            rows.append(r)
            pairs = "  ".join(f"{p['threads']}: {p['ratio_copy']:.2f}x {p['same_bits']}"
                              for p in r["pair"])
            print(f"{r['dtype']:5} {n:>6} {r['K']:>3} x {r['M']:<5} {r['library_ms']:9.4f} "
                  f"{r['library_ratio_copy']:7.2f}  {pairs}   {r['library_route']}", flush=True)
    if args.out:
        settings = {"rows": args.rows, "dtypes": args.dtypes, "n": args.n,
                    "threads": args.threads}
        provenance.write(provenance.record("fwht-k-cluster-explore", rows, settings,
                                           device="gpu"), args.out)


if __name__ == "__main__":
    main()
