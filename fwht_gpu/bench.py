"""Performance study: ``fwht bench``.

Each case is timed with CUDA events around the kernels alone (warm-up first,
median of many runs, inputs rotated over enough buffers that the L2 cache does
not flatter), next to the physical floor - a device-to-device copy of the same
bytes (read + write; the faster of cudaMemcpy and a copy kernel) - and, for FP32/FP64 single transforms, ``cupy.fft.rfft``
of the same length, all measured in the same process.
"""
from __future__ import annotations

import dataclasses
import json
import math
import platform
import statistics

import numpy as np

from . import dtypes as _dt
from .cuda import launch
from .plan import make_plan

ROTATE_BYTES = 256 << 20


def _timer(cp, fn, min_runs=15, max_runs=200, budget_s=0.5):
    """Median time in ms of one call of fn(i) (i = call index).

    Calls are captured k at a time into a CUDA graph (k chosen so a replay lasts at
    least ~1 ms) so launch gaps do not count; each replay is timed with CUDA events.
    Falls back to timing single launches when the calls cannot be captured.
    """
    for i in range(3):
        fn(i)
    cp.cuda.Device().synchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    fn(3)
    end.record()
    end.synchronize()
    one = max(cp.cuda.get_elapsed_time(start, end), 1e-3)
    k = max(1, min(100, int(1.0 / one)))
    stream = cp.cuda.Stream(non_blocking=True)
    graph = None
    try:
        with stream:
            stream.begin_capture()
            try:
                for i in range(k):
                    fn(i)
            finally:
                graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
    except Exception:
        graph, k = None, 1
    runs = int(min(max_runs, max(min_runs, budget_s * 1e3 / (one * k))))
    times = []
    with stream:
        for i in range(runs):
            start.record(stream)
            if graph is not None:
                graph.launch(stream)
            else:
                fn(i)
            end.record(stream)
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) / k)
    return statistics.median(times), runs * k


def pass_times(cp, plan, src, dst) -> list[float]:
    """Median time in ms of each pass of ``plan`` alone (src -> dst)."""
    import dataclasses
    out = []
    for p in plan.passes:
        sub = dataclasses.replace(plan, passes=(p,))
        out.append(_timer(cp, lambda i: launch.execute(sub, src, dst, check=False))[0])
    return out


def _buffers(cp, shape, dtype, count):
    rng = cp.random.default_rng(1)
    out = []
    for _ in range(count):
        out.append(rng.standard_normal(shape, dtype=cp.float32).astype(dtype))
    return out


def bench_case(cp, shape, dtype, fft: bool) -> dict:
    """Time one transform shape (batch, n) of ``dtype``."""
    dt = np.dtype(dtype)
    batch, n = shape
    nbytes = batch * n * dt.itemsize
    count = max(1, min(16, math.ceil(ROTATE_BYTES / nbytes)))
    srcs = _buffers(cp, shape, dt, count)
    dst = cp.empty(shape, dtype=dt)
    plan = make_plan(n, dt, device="cuda")
    t_fwht, runs = _timer(cp, lambda i: launch.execute(plan, srcs[i % count], dst, check=False))
    t_memcpy, _ = _timer(cp, lambda i: dst.data.copy_from_device_async(srcs[i % count].data, nbytes))
    t_kcopy, _ = _timer(cp, lambda i: cp.copyto(dst, srcs[i % count]))
    t_copy = min(t_memcpy, t_kcopy)
    row = {
        "dtype": _dt.short_name(dt), "batch": batch, "n": n, "log2n": int(math.log2(n)),
        "bytes": nbytes, "passes": len(plan.passes), "runs": runs,
        "time_ms": t_fwht, "copy_ms": t_copy, "memcpy_ms": t_memcpy, "copy_kernel_ms": t_kcopy,
        "gbps": 2 * nbytes * len(plan.passes) / t_fwht / 1e6,
        "ratio_copy": t_fwht / t_copy,
        "ratio_passes_copy": t_fwht / (len(plan.passes) * t_copy),
    }
    if fft and dt.itemsize >= 4:
        try:
            t_fft, _ = _timer(cp, lambda i: cp.fft.rfft(srcs[i % count], axis=-1))
            row["rfft_ms"] = t_fft
            row["speedup_vs_rfft"] = t_fft / t_fwht
        except Exception as exc:  # cuFFT size limits / memory
            row["rfft_error"] = str(exc).splitlines()[0][:80]
    del srcs, dst
    cp.get_default_memory_pool().free_all_blocks()
    return row


def bench_host(cp, log2n: int = 26, dtype="fp32", repeats: int = 5) -> list[dict]:
    """fwht(numpy_array, device="cuda") wall time against the two pinned DMA copies alone."""
    import time
    from .transform import fwht
    dt = _dt.resolve(dtype)
    n = 1 << log2n
    x = np.random.default_rng(0).standard_normal(n).astype(dt)
    out = np.empty_like(x)
    nbytes = x.nbytes
    pinned = cp.cuda.alloc_pinned_memory(nbytes)
    dev = cp.empty(n, dtype=dt)
    stream = cp.cuda.get_current_stream()

    def copies():
        dev.data.copy_from_host_async(pinned.ptr, nbytes, stream)
        dev.data.copy_to_host_async(pinned.ptr, nbytes, stream)
        stream.synchronize()

    def wall(fn):
        fn()
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(ts)

    t_copies = wall(copies)
    px, pout = launch.pinned_empty(n, dt), launch.pinned_empty(n, dt)
    px[...] = x
    rows = []
    for method, a, o in (("pinned", px, pout), ("register", x, out), ("staging", x, out)):
        m = "staging" if method == "staging" else "register"
        t = wall(lambda: launch.transform_host(a, 0, "backward", "folklore", None, o, False, m))
        rows.append({"kind": "host", "dtype": _dt.short_name(dt), "log2n": log2n, "bytes": nbytes,
                     "method": method, "time_ms": t, "pinned_copies_ms": t_copies,
                     "ratio_copies": t / t_copies})
    return rows


def bench_axis(cp, dtype="fp32", shapes=((1 << 10, 1 << 16), (1 << 14, 1 << 12), (1 << 20, 1 << 6)),
               echo=print) -> list[dict]:
    """fwht along axis 0 of an (n, batch) array (strided passes over the transform axis, no
    transpose) against the same transforms on contiguous rows, wall time with the GPU
    synchronized."""
    import time
    from .transform import fwht
    dt = _dt.resolve(dtype)
    rows = []
    for n, batch in shapes:
        xc = _buffers(cp, (batch, n), dt, 1)[0]
        xt = cp.ascontiguousarray(xc.T)                 # (n, batch): transform axis 0
        def wall(fn):
            fn()
            cp.cuda.Device().synchronize()
            ts = []
            for _ in range(10):
                t0 = time.perf_counter()
                fn()
                cp.cuda.Device().synchronize()
                ts.append((time.perf_counter() - t0) * 1e3)
            return statistics.median(ts)
        t_rows = wall(lambda: fwht(xc))
        t_axis0 = wall(lambda: fwht(xt, axis=0))
        t_copy = wall(lambda: cp.copyto(xc, xc))
        row = {"kind": "axis", "dtype": dtype, "n": n, "batch": batch, "rows_ms": t_rows,
               "axis0_ms": t_axis0, "ratio": t_axis0 / t_rows, "copy_ms": t_copy}
        rows.append(row)
        echo(f"axis    {dtype:5} n=2^{n.bit_length() - 1} x {batch}: axis 0 {t_axis0:.3f} ms, rows "
             f"{t_rows:.3f} ms ({t_axis0 / t_rows:.2f}x)")
        del xc, xt
    return rows


VARIANTS = [("folklore", None, None), ("alman", None, None), ("folklore", "kahan", None),
            ("folklore", "neumaier", None), ("folklore", "kahan-pass", None),
            ("folklore", "neumaier-pass", None), ("folklore", None, "wide")]


def variant_name(alg, stab, wide, dtype) -> str:
    if wide:
        return f"compute {_dt.short_name(wide_dtype(dtype))}"
    return alg if stab is None else stab


def wide_dtype(dtype):
    return {2: np.dtype(np.float32), 4: np.dtype(np.float64)}.get(np.dtype(dtype).itemsize)


def bench_variants(cp, dtypes=("fp32", "fp16"), sizes=(20, 24, 27, 30), echo=print,
                   only=None, per_pass: bool = False) -> list[dict]:
    """Kernel time of every variant (or those named in ``only``) next to Folklore's, same
    inputs, same run; with ``per_pass`` also each pass alone (``pass_ms``: one launch of
    that pass's kernel, as the last pass)."""
    rows = []
    free = cp.cuda.runtime.memGetInfo()[0]
    echo(f"{'dtype':5} {'n':>5} {'variant':16} {'passes':>6} {'time ms':>10} {'x folklore':>10}")
    for name in dtypes:
        dt = _dt.resolve(name)
        for L in sizes:
            n = 1 << L
            if 4 * n * dt.itemsize > free // 2:
                continue
            count = max(1, min(8, math.ceil(ROTATE_BYTES / (n * dt.itemsize))))
            srcs = _buffers(cp, (1, n), dt, count)
            dst = cp.empty((1, n), dtype=dt)
            base = None
            for alg, stab, wide in VARIANTS:
                cdt = wide_dtype(dt) if wide else None
                if wide and cdt is None:
                    continue
                vname = variant_name(alg, stab, wide, dt)
                if only and base is not None and vname not in only:
                    continue
                plan = make_plan(n, dt, alg, stab, "cuda", cdt)
                t, _ = _timer(cp, lambda i: launch.execute(plan, srcs[i % count], dst, check=False))
                base = t if base is None else base
                row = {"kind": "variant", "dtype": name, "log2n": L, "variant": vname,
                       "passes": len(plan.passes), "time_ms": t,
                       "ratio_folklore": t / base}
                extra = ""
                if per_pass:
                    row["pass_ms"] = [
                        _timer(cp, lambda i, one=dataclasses.replace(plan, passes=(p,)):
                               launch.execute(one, srcs[i % count], dst, check=False))[0]
                        for p in plan.passes]
                    extra = "  passes " + " ".join(f"{v:.4f}" for v in row["pass_ms"])
                rows.append(row)
                echo(f"{name:5} {'2^%d' % L:>5} {row['variant']:16} {row['passes']:>6} {t:10.4f} "
                     f"{t / base:10.2f}{extra}")
            del srcs, dst
            cp.get_default_memory_pool().free_all_blocks()
    return rows


def run(dtypes=("fp32", "fp16", "bf16", "fp64"), single=range(10, 31), batched=range(8, 16),
        batch_bytes=256 << 20, fft=True, max_bytes=None, host=True, variants=(), echo=print) -> dict:
    """Benchmark single transforms 2**single and batched rows 2**batched; returns the JSON dict."""
    cp = launch.cupy()
    free, total = cp.cuda.runtime.memGetInfo()
    cap = max_bytes or free // 5      # rotating buffers + destination + rfft output
    rows = []
    head = (f"{'kind':7} {'dtype':5} {'shape':>14} {'pass':>4} {'time ms':>10} {'GB/s':>7} "
            f"{'x copy':>7} {'x p*copy':>8} {'rfft ms':>9} {'vs rfft':>8}")
    echo(f"GPU: {launch.status()}")
    echo(head)
    for name in dtypes:
        dt = _dt.resolve(name)
        cases = [("single", (1, 1 << L)) for L in single] + \
                [("batched", (batch_bytes // ((1 << L) * dt.itemsize), 1 << L)) for L in batched]
        for kind, shape in cases:
            if shape[0] * shape[1] * dt.itemsize > cap:
                continue
            r = bench_case(cp, shape, dt, fft and kind == "single")
            r["kind"] = kind
            rows.append(r)
            rf = f"{r['rfft_ms']:9.3f} {r['speedup_vs_rfft']:7.2f}x" if "rfft_ms" in r else f"{'':9} {'':8}"
            shp = f"{shape[0]}x2^{r['log2n']}"
            echo(f"{kind:7} {r['dtype']:5} {shp:>14} {r['passes']:>4} "
                 f"{r['time_ms']:10.4f} {r['gbps']:7.0f} {r['ratio_copy']:7.2f} "
                 f"{r['ratio_passes_copy']:8.2f} {rf}")
    if variants:
        rows += bench_variants(cp, dtypes=dtypes, sizes=variants, echo=echo)
    rows += bench_axis(cp, echo=echo)
    if host:
        for r in bench_host(cp):
            rows.append(r)
            echo(f"host    {r['dtype']:5} {'2^%d' % r['log2n']:>14} {r['method']:>9}: {r['time_ms']:.2f} ms "
                 f"wall, {r['ratio_copies']:.2f} x the two pinned copies ({r['pinned_copies_ms']:.2f} ms)")
    return {"device": launch.status(), "cupy": cp.__version__, "python": platform.python_version(),
            "method": "CUDA events, median, rotating inputs; copy = device-to-device memcpy of "
                      "the same bytes", "rows": rows}


def main(out_json: str | None = None, **kw) -> dict:
    res = run(**kw)
    if out_json:
        with open(out_json, "w") as f:
            json.dump(res, f, indent=1)
    return res
