"""Hash-family throughput (issue 20): bucket + sign values of 2**24 keys for d = 5
repetitions, per family, on the CPU (NumPy) and the GPU (CuPy) when present; plus a
prototype of simple tabulation on 16-bit characters (two lookups per key in 65536-entry
tables instead of four in 256-entry ones) to decide whether it is worth offering.

    python benchmarks/hash_speed.py [--keys 24] [--json out.json]

Prints a table (keys per second, and time relative to multiply-add-shift) and writes JSON
with the commit, device and versions.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import time

import numpy as np

from pagh_mm import hashing


def _timer(xp, fn, repeats=7):
    fn()
    if xp is not np:
        xp.cuda.Device().synchronize()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if xp is not np:
            xp.cuda.Device().synchronize()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def tab16(tables, keys, xp):
    """Simple tabulation on two 16-bit characters: tables (d, 2, 65536) uint64."""
    lo = (keys & np.uint64(0xFFFF)).astype(xp.int64)
    hi = (keys >> np.uint64(16)).astype(xp.int64)
    return tables[:, 0][:, lo] ^ tables[:, 1][:, hi]


def run(log2keys: int, reps: int = 5, log2b: int = 16, which=("cpu", "gpu")):
    rows = []
    devices = [("cpu", np)] if "cpu" in which else []
    try:
        import cupy as cp
        if "gpu" in which and cp.cuda.runtime.getDeviceCount() > 0:
            devices.append(("gpu", cp))
    except Exception:
        pass
    for dev, xp in devices:
        keys = xp.arange(1 << log2keys, dtype=xp.int64)
        base = None
        for fam in hashing.FAMILIES:
            p = hashing.HashParams.draw(fam, 1, reps)
            t = _timer(xp, lambda: (hashing.bucket_table(p, 1, keys, log2b, xp),
                                    hashing.sign_table(p, 1, keys, xp)))
            base = base or t
            rows.append({"device": dev, "family": fam, "seconds": t, "keys_per_s": keys.size * reps / t,
                         "vs_multiply_add_shift": t / base})
        rng = np.random.default_rng(0)
        tables = xp.asarray(rng.integers(0, 2**64, (reps, 2, 1 << 16), dtype=np.uint64))
        ukeys = keys.astype(xp.uint64)
        t = _timer(xp, lambda: tab16(tables, ukeys, xp) >> np.uint64(64 - log2b))
        rows.append({"device": dev, "family": "tabulation-16 (prototype, buckets only)", "seconds": t,
                     "keys_per_s": keys.size * reps / t, "vs_multiply_add_shift": t / base})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=24, help="log2 of the number of keys")
    ap.add_argument("--devices", default="cpu,gpu", help="comma-separated: cpu, gpu")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    rows = run(a.keys, which=tuple(a.devices.split(",")))
    print(f"{'device':6} {'family':42} {'seconds':>9} {'Gkeys/s':>8} {'x MAS':>6}")
    for r in rows:
        print(f"{r['device']:6} {r['family']:42} {r['seconds']:9.4f} {r['keys_per_s'] / 1e9:8.3f} "
              f"{r['vs_multiply_add_shift']:6.2f}")
    if a.json:
        try:
            commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        except OSError:
            commit = ""
        meta = {"commit": commit, "python": platform.python_version(), "numpy": np.__version__,
                "keys": 1 << a.keys, "reps": 5, "log2b": 16, "what": "bucket_table + sign_table of one side"}
        try:
            import cupy as cp
            meta["cupy"] = cp.__version__
            meta["gpu"] = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
        except Exception:
            pass
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
