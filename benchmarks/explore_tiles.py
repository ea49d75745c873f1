"""Tile-geometry experiment: per-pass times for several FWHT_* settings (GPU).

    PYTHONPATH=. python3 benchmarks/explore_tiles.py

Each setting runs in a fresh process (the settings are read at import).
"""
import itertools
import json
import os
import subprocess
import sys

CASES = [("fp32", 1, 24), ("fp32", 1, 26), ("fp32", 1, 30), ("fp16", 1, 26), ("fp32", 4096, 14),
         ("fp16", 8192, 14), ("fp16", 4096, 15), ("fp64", 1, 24)]

CHILD = r"""
import json, sys
import numpy as np
import fwht_gpu as F
from fwht_gpu import bench, dtypes
from fwht_gpu.cuda import launch
cp = launch.cupy()
res = []
for name, batch, L in %s:
    dt = dtypes.resolve(name)
    x = cp.random.default_rng(0).standard_normal((batch, 1 << L), dtype=cp.float32).astype(dt)
    y = cp.empty_like(x)
    plan = F.make_plan(1 << L, dt, device="cuda")
    pt = bench.pass_times(cp, plan, x, y)
    cp_ms = bench._timer(cp, lambda i: y.data.copy_from_device_async(x.data, x.nbytes))[0]
    res.append(dict(case=f"{name} {batch}x2^{L}", passes=[p.nbits for p in plan.passes],
                    pass_ms=pt, copy_ms=cp_ms, ratios=[t / cp_ms for t in pt]))
print(json.dumps(res))
""" % repr(CASES)


def main():
    grid = {
        "FWHT_SEGMENT_BYTES": ["64", "128"],
        "FWHT_TILE_BYTES": ["32768", "65536"],
        "FWHT_LOG_E": ["3", "4"],
    }
    out = []
    for vals in itertools.product(*grid.values()):
        env = dict(os.environ, **dict(zip(grid, vals)))
        r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True)
        if r.returncode:
            print(vals, r.stderr[-2000:])
            continue
        rows = json.loads(r.stdout.strip().splitlines()[-1])
        out.append({"settings": dict(zip(grid, vals)), "rows": rows})
        print(dict(zip(grid, vals)))
        for row in rows:
            print(f"   {row['case']:16} passes {row['passes']} x copy {['%.2f' % t for t in row['ratios']]}"
                  f"  total {sum(row['pass_ms']):.4f} ms, copy {row['copy_ms']:.4f} ms")
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
