"""Variants of the library's cluster pass kernel, timed against it (issue 19 item 4, exploration).

Each variant is the library's translation unit of the cluster passes
(``fwht_gpu/cuda/kernels/fwht_cluster.cu``) compiled with an exploration macro set (the library
compiles them unset: the same code as without them); the plan, tiles, grids and launch
arguments are the engine's (:func:`fwht_gpu.cuda.config.pass_launches`), only the kernels differ.
Every row checks the variant's bits against the library's and times both, a device copy and,
for FP32, ``cupy.fft.rfft`` of the same length, in the same run (medians of CUDA-graph replays,
inputs rotated beyond the L2 cache: :func:`fwht_gpu.bench._timer`).

Variants: ``split``: ``FWHT_CLUSTER_SPLIT_BARRIER=1`` (the barrier before a tile's reuse split
into its arrive, after the cluster round's reads, and its wait, after the next tile's first
loads are issued).

    python benchmarks/explore_cluster_variants.py [--dtype fp32 --dtype fp16] [--log2n 24 27 30]
        [--variant split] [--out JSON]
"""
from __future__ import annotations

import argparse
import math

import numpy as np

from fwht_gpu import bench, gpu, provenance
from fwht_gpu import dtypes as _dt
from fwht_gpu.cuda import config, engine, modules

#: variant name -> compiler options added to the library's
VARIANTS = {"split": ("-DFWHT_CLUSTER_SPLIT_BARRIER=1",)}


def _variant_steps(plan, total: int, module):
    """The engine's launches of ``plan`` with the cluster passes' kernels from ``module``."""
    steps, errvec = engine.launches(plan, total, gpu.cupy().cuda.runtime.getDevice())
    out = []
    for s, fn in steps:
        if isinstance(s.cfg, config.CLUSTER_CONFIGS):
            fn = module.function(s.cfg.name, s.cfg.smem_bytes)
            if s.cfg.log_cl > 3:                  # 16 blocks: the non-portable size, opted in
                gpu.cupy().cuda.driver.funcSetAttribute(fn.kernel.ptr, 14, 1)
        out.append((s, fn))
    return tuple(out), errvec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", action="append", choices=["fp32", "fp16", "bf16", "fp64"])
    ap.add_argument("--log2n", type=int, nargs="+", default=[24, 27, 30])
    ap.add_argument("--variant", action="append", choices=sorted(VARIANTS))
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    cp = gpu.cupy()
    mods = {v: modules.KernelModule(engine.CLUSTER_SOURCE, modules.OPTIONS + VARIANTS[v])
            for v in a.variant or sorted(VARIANTS)}
    print(f"GPU: {gpu.status()}")
    rows = []
    for name in a.dtype or ["fp32", "fp16"]:
        dt = _dt.resolve(name)
        for L in a.log2n:
            n = 1 << L
            plan = bench.cuda_plan(n, dt)
            if not plan.clustered:
                print(f"{name} 2^{L}: no cluster passes planned here")
                continue
            count = max(1, min(8, math.ceil(bench.ROTATE_BYTES / (n * dt.itemsize))))
            srcs = bench._buffers(cp, (1, n), dt, count)
            dst = cp.empty((1, n), dtype=dt)
            flags = engine._scratch_flags(cp.cuda.runtime.getDevice())
            t_lib, _ = bench._timer(cp, lambda i: engine.run(plan, srcs[i % count], dst, check=False))
            engine.run(plan, srcs[0], dst, check=False)
            want = engine.bits(dst)[0].copy()
            t_copy, _ = bench._timer(cp, lambda i: cp.copyto(dst, srcs[i % count]))
            t_fft = None
            if name == "fp32":
                t_fft, _ = bench._timer(cp, lambda i: cp.fft.rfft(srcs[i % count]))
            row = {"dtype": name, "log2n": L, "passes": [p.nbits for p in plan.passes],
                   "library_ms": t_lib, "copy_ms": t_copy, "rfft_ms": t_fft}
            line = f"{name} 2^{L}: library {t_lib:.4f} ms ({t_lib / t_copy:.2f}x copy)"
            for v, mod in mods.items():
                steps, _ = _variant_steps(plan, n, mod)
                one = np.float64(1.0)
                run = lambda i, steps=steps: engine._launch(steps, srcs[i % count], dst, None, one,
                                                            np.int32(0), flags, flags)
                t_v, _ = bench._timer(cp, run)
                run(0)
                same = bool(cp.array_equal(engine.bits(dst)[0], want))
                row[f"{v}_ms"], row[f"{v}_same_bits"] = t_v, same
                line += f"; {v} {t_v:.4f} ms ({t_lib / t_v:.3f}x the library's), same bits: {same}"
            if t_fft:
                line += f"; rfft {t_fft:.4f} ms"
            print(line, flush=True)
            rows.append(row)
            srcs.clear()
            dst = None
            cp.get_default_memory_pool().free_all_blocks()
    if a.out:
        provenance.write(provenance.record("explore-cluster-variants", rows, vars(a), device="gpu"),
                         a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
