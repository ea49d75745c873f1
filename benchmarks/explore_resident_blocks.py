"""Time the wide-compute pipelined rows with the grid from the fallback estimate (today) and from
the occupancy calculator (fn.kernel.ptr); same bits both ways (session 25;
results/h100/session25-occupancy-grid-bench.*)."""
import functools, os
import numpy as np, ml_dtypes
import fwht_gpu
from fwht_gpu.cuda import engine
from fwht_gpu.cuda.device import cupy
cp = cupy()
old = engine._resident_blocks

@functools.lru_cache(maxsize=None)
def new(cfg, smem_per_sm):
    fn = engine.kernel(cfg)
    return max(1, int(cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
        fn.kernel.ptr, 1 << cfg.log_t, cfg.smem_bytes)))

def timeit(f, reps=30):
    f(); cp.cuda.Device().synchronize()
    ts = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record(); f(); b.record(); b.synchronize()
        ts.append(cp.cuda.get_elapsed_time(a, b))
    return float(np.median(ts))

rows = []
for dt, cd, logs in ((np.float16, np.float32, (8, 9, 10, 11)), (ml_dtypes.bfloat16, np.float32, (8, 9, 10, 11)),
                     (np.float32, np.float64, (8, 9, 10))):
    for lg in logs:
        n = 1 << lg
        m = (256 << 20) // (n * np.dtype(dt).itemsize)
        x = cp.asarray(np.random.default_rng(0).standard_normal((m, n)).astype(dt))
        out = cp.empty_like(x)
        copy = timeit(lambda: cp.copyto(out, x))
        res = {}
        bits = {}
        for rnd in range(3):
            for name, fn in (("old", old), ("new", new)):
                engine._resident_blocks = fn; engine._LAUNCHES.clear()
                t = timeit(lambda: fwht_gpu.fwht(x, compute_dtype=cd, out=out))
                res.setdefault(name, []).append(t)
                bits[name] = out.view(cp.uint16 if np.dtype(dt).itemsize == 2 else cp.uint32).copy()
        same = bool((bits["old"] == bits["new"]).all())
        r = dict(dtype=np.dtype(dt).name, compute=np.dtype(cd).name, log2n=lg, copy_ms=copy,
                 old_ms=min(res["old"]), new_ms=min(res["new"]), same_bits=same)
        rows.append(r)
        print(f"{r['dtype']}->{r['compute']} 2^{lg}: copy {copy:.3f} ms, today {r['old_ms']:.3f} ({r['old_ms']/copy:.2f}x), "
              f"occupancy {r['new_ms']:.3f} ({r['new_ms']/copy:.2f}x), same bits {same}", flush=True)
from fwht_gpu import provenance  # noqa: E402
provenance.write(provenance.record("resident-blocks-explore", rows, {"rows_bytes": 256 << 20}, device="gpu"),
                 os.path.join(os.environ.get("OUT", "."), "resident-blocks.json"))
