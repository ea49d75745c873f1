"""The cluster kernels' write-after-read barrier relaxed (session 36; issues 19 items 2 and 4):
the library's kernels (``cluster_sync_after_reads``: ``barrier.cluster.arrive.relaxed``)
against the same kernels built with ``-DFWHT_CLUSTER_RELAXED=0`` (``arrive.release``, which on
sm_90 waits for every global store in flight), in the same run, alternating, the same bits
checked: single transforms of 2^23 .. 2^30 over the cluster passes (FP32, FP16), K * 2**k rows
over clusters of two or four blocks (``fwht_k_rows_pair``), with a device copy of the same
bytes and ``cupy.fft.rfft`` (FP32 single transforms) in the same run.

    PYTHONPATH=. python3 benchmarks/explore_cluster_sync.py [--log2n 24 27 30] [--k 28672 40960]
        [--rounds 2] [--out JSON]
"""
from __future__ import annotations

import argparse

import cupy as cp
import numpy as np

from fwht_gpu import dtypes as _dt
from fwht_gpu import fwht, gpu, hadamard, make_plan, provenance
from fwht_gpu.cuda import engine
from fwht_gpu.cuda.modules import OPTIONS, KernelModule

BUILDS = {"relaxed": None, "release": ("-DFWHT_CLUSTER_RELAXED=0",)}


def _modules(switches):
    if switches is None:
        return engine.CLUSTER_KERNELS, engine.K_KERNELS
    return (KernelModule(engine.CLUSTER_SOURCE, OPTIONS + switches),
            KernelModule(engine.K_SOURCE, OPTIONS + switches))


def _use(mods) -> None:
    engine.CLUSTER_KERNELS, engine.K_KERNELS = mods
    engine._LAUNCHES.clear()
    engine._K_LAUNCHES.clear()


def _time(fn, reps: int = 20) -> float:
    """Median milliseconds of ``fn`` (CUDA events, after two warm calls)."""
    fn(), fn()
    ts = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(cp.cuda.get_elapsed_time(a, b))
    return float(np.median(ts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2n", type=int, nargs="*", default=[24, 27, 30])
    ap.add_argument("--dtypes", nargs="*", default=["fp32", "fp16"])
    ap.add_argument("--k", type=int, nargs="*", default=[28672, 40960])
    ap.add_argument("--k-dtypes", nargs="*", default=["fp32", "fp64", "fp16"])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    print(f"# {gpu.status()}")
    mods = {name: _modules(sw) for name, sw in BUILDS.items()}
    library = mods["relaxed"]
    rows = []
    cases = [("single", name, L) for name in args.dtypes for L in args.log2n]
    cases += [("k", name, n) for name in args.k_dtypes for n in args.k]
    for kind, name, size in cases:
        dt = _dt.resolve(name)
        if kind == "single":
            x = cp.random.default_rng(1).standard_normal(1 << size, dtype=cp.float32)
            x = (x / 1024 if np.dtype(dt).itemsize == 2 else x).astype(dt)     # no FP16 overflow
            y = cp.empty_like(x)

            def run():
                fwht(x, out=y)
            copy = _time(lambda: cp.copyto(y, x))
            rfft = _time(lambda: cp.fft.rfft(x)) if dt == np.float32 else None
            label = f"{name} 2^{size}"
        else:
            K, M = hadamard.split(size)
            plan = make_plan(M, dt, device="cuda")
            x = cp.random.default_rng(2).standard_normal((args.rows, size), dtype=cp.float32).astype(dt)
            y = cp.empty_like(x)

            def run():
                engine.run_k(plan, K, x, y, 1.0, False, check=False)
            copy = _time(lambda: cp.copyto(y, x))
            rfft = None
            label = f"{name} {args.rows} x {K} * {M}"
        ref, line = None, f"{label:24}"
        for rnd in range(args.rounds):
            for build, m in mods.items():
                _use(m)
                ms = _time(run)
                run()
                same = True
                if ref is None:
                    ref = y.copy()
                else:
                    same = bool((y.view(cp.uint8) == ref.view(cp.uint8)).all())
                rows.append({"case": kind, "dtype": name, "size": size, "build": build, "round": rnd,
                             "ms": ms, "copy_ms": copy, "ratio_copy": ms / copy, "rfft_ms": rfft,
                             "same_bits": same})
                line += f"  {build} {ms:.4f} ms ({ms / copy:.3f}x copy{'' if same else ', BITS DIFFER'})"
        if rfft is not None:
            line += f"  [rfft {rfft:.4f} ms]"
        print(line, flush=True)
        _use(library)
        x = y = ref = None
    _use(library)
    if args.out:
        provenance.write(provenance.record("explore-cluster-sync", rows, vars(args), None, device="gpu"),
                         args.out)
        print(f"# written: {args.out}")


if __name__ == "__main__":
    main()
