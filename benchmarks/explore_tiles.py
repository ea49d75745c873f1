"""Tile-geometry experiment: per-pass times for a grid of Tuning settings (GPU).

    python benchmarks/explore_tiles.py [out.json]

Every setting is a ``fwht_gpu.Tuning`` passed to the planner, all in this process; the
optional argument is where the result record goes (fwht_gpu.provenance, kind ``tiles``:
one row per (setting, case) with the per-pass times and their ratios to a copy).
"""
from __future__ import annotations

import dataclasses
import itertools
import sys

from fwht_gpu import Tuning, gpu, provenance
from fwht_gpu import bench as fbench
from fwht_gpu import dtypes as _dt

CASES = [("fp32", 1, 24), ("fp32", 1, 26), ("fp32", 1, 30), ("fp16", 1, 26), ("fp32", 4096, 14),
         ("fp16", 8192, 14), ("fp16", 4096, 15), ("fp64", 1, 24)]
GRID = {"segment_bytes": [64, 128], "tile_bytes": [32768, 65536], "log_e": [3, 4]}


def case_row(cp, name: str, batch: int, L: int, tuning: Tuning) -> dict:
    """Per-pass times of one case under ``tuning``, next to a copy of the same bytes."""
    dt = _dt.resolve(name)
    x = cp.random.default_rng(0).standard_normal((batch, 1 << L), dtype=cp.float32).astype(dt)
    y = cp.empty_like(x)
    plan = fbench.cuda_plan(1 << L, dt, batch, tuning=tuning)
    pt = fbench.pass_times(cp, plan, x, y)
    cp_ms = fbench._timer(cp, lambda i: y.data.copy_from_device_async(x.data, x.nbytes))[0]
    return {"case": f"{name} {batch}x2^{L}", "dtype": name, "batch": batch, "log2n": L,
            "passes": [p.nbits for p in plan.passes], "pass_ms": pt, "copy_ms": cp_ms,
            "ratios": [t / cp_ms for t in pt]}


def main(argv: list[str]) -> None:
    """Sweep GRID over CASES; print each setting's table; write the record to argv[0]."""
    cp = gpu.cupy()
    base = Tuning()
    rows = []
    for vals in itertools.product(*GRID.values()):
        setting = dict(zip(GRID, vals))
        t = dataclasses.replace(base, **setting)
        print(setting)
        for name, batch, L in CASES:
            try:
                row = {"setting": setting, **case_row(cp, name, batch, L, t)}
            except Exception as exc:  # noqa: BLE001 - a setting the launcher refuses: go on
                print(f"   {name} {batch}x2^{L}: {type(exc).__name__}: {exc}")
                rows.append({"setting": setting, "case": f"{name} {batch}x2^{L}",
                             "error": f"{type(exc).__name__}: {exc}"[:200]})
                continue
            rows.append(row)
            ratios = [f"{r:.2f}" for r in row["ratios"]]
            print(f"   {row['case']:16} passes {row['passes']} x copy {ratios}"
                  f"  total {sum(row['pass_ms']):.4f} ms, copy {row['copy_ms']:.4f} ms")
    if argv:
        rec = provenance.record("tiles", rows, {"tuning": base, "grid": GRID, "cases": CASES},
                                device="gpu")
        provenance.write(rec, argv[0])
        print(f"wrote {argv[0]} (results folder: benchmarks/results/{provenance.device_folder(rec)}/)")


if __name__ == "__main__":
    main(sys.argv[1:])
