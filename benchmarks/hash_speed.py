"""Hash-family throughput (issue 20): bucket + sign values of 2**24 keys for d = 5
repetitions, per family, on the CPU (NumPy) and the GPU (CuPy) when present; plus a
prototype of simple tabulation on 16-bit characters (two lookups per key in 65536-entry
tables instead of four in 256-entry ones) to decide whether it is worth offering.

    python benchmarks/hash_speed.py [--keys 24] [--devices cpu,gpu] [--json out.json]

Prints a table (keys per second, and time relative to multiply-add-shift) and, with
``--json``, writes a result record (fwht_gpu.provenance, kind ``hash-speed``: commit,
device, versions); results belong in ``benchmarks/results/<device>/``.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from fwht_gpu import gpu, provenance
from pagh_mm import hashing

WHAT = "bucket_table + sign_table of one side"


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


def _device_rows(dev: str, xp, log2keys: int, reps: int, log2b: int) -> list[dict]:
    """Every family, then the 16-bit tabulation prototype, on one device."""
    rows = []
    keys = xp.arange(1 << log2keys, dtype=xp.int64)
    base = None
    for fam in hashing.FAMILIES:
        p = hashing.HashParams.draw(fam, 1, reps)
        t = _timer(xp, lambda p=p: (hashing.bucket_table(p, 1, keys, log2b, xp),
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


def run(log2keys: int, reps: int = 5, log2b: int = 16, which=("cpu", "gpu")) -> list[dict]:
    """The rows of the table: one per (device, family)."""
    devices = [("cpu", np)] if "cpu" in which else []
    if "gpu" in which and gpu.available():
        devices.append(("gpu", gpu.cupy()))
    rows = []
    for dev, xp in devices:
        rows += _device_rows(dev, xp, log2keys, reps, log2b)
    return rows


def main() -> None:
    """Command line: print the table, write the record with --json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=24, help="log2 of the number of keys")
    ap.add_argument("--devices", default="cpu,gpu", help="comma-separated: cpu, gpu")
    ap.add_argument("--json", default=None, help="where to write the result record")
    a = ap.parse_args()
    which = tuple(a.devices.split(","))
    rows = run(a.keys, which=which)
    print(f"{'device':6} {'family':42} {'seconds':>9} {'Gkeys/s':>8} {'x MAS':>6}")
    for r in rows:
        print(f"{r['device']:6} {r['family']:42} {r['seconds']:9.4f} {r['keys_per_s'] / 1e9:8.3f} "
              f"{r['vs_multiply_add_shift']:6.2f}")
    if a.json:
        settings = {"keys": 1 << a.keys, "reps": 5, "log2b": 16, "devices": list(which),
                    "what": WHAT}
        on_gpu = any(r["device"] == "gpu" for r in rows)
        rec = provenance.record("hash-speed", rows, settings, device="gpu" if on_gpu else "cpu")
        provenance.write(rec, a.json)
        print(f"wrote {a.json} (results folder: benchmarks/results/{provenance.device_folder(rec)}/)")


if __name__ == "__main__":
    main()
