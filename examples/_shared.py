"""Helpers shared by the examples: sizes (--small or PAGH_MM_EXAMPLES_SMALL=1 for CI),
where the PNG goes, the device, timing."""
from __future__ import annotations

import argparse
import os
import time

import numpy as np


def args(description: str):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--small", action="store_true", default=os.environ.get("PAGH_MM_EXAMPLES_SMALL") == "1",
                    help="tiny sizes (CI); also PAGH_MM_EXAMPLES_SMALL=1")
    ap.add_argument("--out-dir", default=os.path.dirname(os.path.abspath(__file__)),
                    help="where to write the PNG (default: next to the script)")
    ap.add_argument("--cpu", action="store_true", help="stay on the CPU even if a GPU is present")
    return ap.parse_args()


def backend(force_cpu: bool):
    """(xp, on_gpu): CuPy when a GPU is usable, else NumPy."""
    if not force_cpu:
        from fwht_gpu import gpu
        if gpu.available():
            return gpu.cupy(), True
    return np, False


def timed(fn, gpu: bool):
    t0 = time.perf_counter()
    out = fn()
    if gpu:
        import cupy
        cupy.cuda.Device().synchronize()
    return out, time.perf_counter() - t0


def correlated_data(n_rows: int, n_cols: int, pairs: int, rho: float, seed: int = 0):
    """Standardized data with ``pairs`` planted column pairs of correlation ~rho."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_rows, n_cols))
    cols = rng.choice(n_cols, 2 * pairs, replace=False)
    a, b = cols[:pairs], cols[pairs:]
    X[:, b] = rho * X[:, a] + np.sqrt(1 - rho ** 2) * X[:, b]
    X = (X - X.mean(0)) / X.std(0)
    return X, [(int(min(i, j)), int(max(i, j))) for i, j in zip(a, b)]


def savefig(fig, out_dir: str, name: str) -> str:
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path
