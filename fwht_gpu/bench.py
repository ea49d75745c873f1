"""Performance study on the GPU: ``fwht bench`` (the CPU's: :mod:`fwht_gpu.cpubench`).

Each case is timed with CUDA events around the kernels alone (warm-up first,
median of many runs, inputs rotated over enough buffers that the L2 cache does
not flatter), next to the physical floor - a device-to-device copy of the same
bytes (read + write; the faster of cudaMemcpy and a copy kernel) - and, for FP32/FP64
single transforms, ``cupy.fft.rfft`` of the same length, all measured in the same process.
On a GPU with thread-block clusters, each single length whose plan the clusters change
(:func:`fwht_gpu.plan.cluster_passes`) gets a second row next to the tuning's: kind ``plain``
(the passes without clusters) when the tuning plans clusters, as by default, else kind
``clusters`` (the largest clusters the device runs).
With ``peer_sizes``, the peers a user would choose instead (fast-hadamard-transform and
PyTorch baselines, when importable) are timed on the same batched rows in the same run, next
to ``fwht_gpu`` on CuPy arrays and PyTorch tensors (:mod:`fwht_gpu.peers`, rows of kind
``peer``).

:func:`run` returns a result record of :mod:`fwht_gpu.provenance` (kind ``fwht-bench``):
the rows with the commit, device, versions and the :class:`~fwht_gpu.Tuning` they ran under.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import time

import numpy as np

from . import dtypes as _dt
from . import gpu, peers, provenance
from . import variants as _variants
from .cuda import engine
from .cuda import host as cuda_host
from .plan import make_plan
from .transform import fwht, norm_factor
from .tuning import Tuning

ROTATE_BYTES = 256 << 20
METHOD = ("CUDA events, CUDA-graph replays, median, rotating inputs; copy = device-to-device "
          "copy of the same bytes (the faster of cudaMemcpy and a copy kernel)")


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
    except Exception:  # noqa: BLE001 - not capturable: time single launches
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


def cuda_plan(n: int, dtype, batch: int = 1, algorithm: str = "folklore",
              stabilizer: str | None = None, compute_dtype=None, tuning: Tuning | None = None):
    """The plan ``fwht`` uses for ``batch`` transforms on the current GPU (the planner
    splits a lone single-pass transform over the device's SMs)."""
    lim = gpu.limits()
    return make_plan(n, dtype, algorithm, stabilizer, "cuda", compute_dtype, batch=batch,
                     sms=lim.sm_count, tuning=tuning, clusters=lim.max_cluster_log)


def pass_times(cp, plan, src, dst) -> list[float]:
    """Median time in ms of each pass of ``plan`` alone (src -> dst)."""
    out = []
    for p in plan.passes:
        sub = dataclasses.replace(plan, passes=(p,))
        out.append(_timer(cp, lambda i, sub=sub: engine.run(sub, src, dst, check=False))[0])
    return out


def _buffers(cp, shape, dtype, count):
    rng = cp.random.default_rng(1)
    return [rng.standard_normal(shape, dtype=cp.float32).astype(dtype) for _ in range(count)]


def bench_case(cp, shape, dtype, fft: bool, tuning: Tuning | None = None) -> dict:
    """Time one transform shape (batch, n) of ``dtype``."""
    dt = np.dtype(dtype)
    batch, n = shape
    nbytes = batch * n * dt.itemsize
    count = max(1, min(16, math.ceil(ROTATE_BYTES / nbytes)))
    srcs = _buffers(cp, shape, dt, count)
    dst = cp.empty(shape, dtype=dt)
    plan = cuda_plan(n, dt, batch, tuning=tuning)
    t_fwht, runs = _timer(cp, lambda i: engine.run(plan, srcs[i % count], dst, check=False))
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
        except Exception as exc:  # noqa: BLE001 - cuFFT size limits / memory
            row["rfft_error"] = str(exc).splitlines()[0][:80]
    srcs.clear()
    dst = None
    cp.get_default_memory_pool().free_all_blocks()
    return row


def wall_times(fn, repeats: int, sync=None, setup=None) -> list[float]:
    """Wall times in ms (``time.perf_counter``) of ``repeats`` calls of ``fn()`` after a
    warm-up call; ``sync()`` after each call (timed), ``setup()`` before each (not timed)."""
    ts = []
    for i in range(repeats + 1):
        if setup:
            setup()
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        if i:
            ts.append((time.perf_counter() - t0) * 1e3)
    return ts


def _wall(fn, repeats: int, sync=None) -> float:
    """Median wall time in ms of ``fn()`` (after a warm-up), ``sync()`` after each call."""
    return statistics.median(wall_times(fn, repeats, sync))


def bench_host(cp, log2n: int = 26, dtype="fp32", repeats: int = 5,
               tuning: Tuning | None = None) -> list[dict]:
    """fwht(numpy_array, device="cuda") wall time against the two pinned DMA copies alone."""
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

    t_copies = _wall(copies, repeats)
    px, pout = gpu.pinned_empty(n, dt), gpu.pinned_empty(n, dt)
    px[...] = x
    plan = cuda_plan(n, dt, 1, tuning=tuning)
    factor = norm_factor(n, "backward", False)
    rows = []
    for method, a, o in (("pinned", px, pout), ("register", x, out), ("staging", x, out)):
        m = "staging" if method == "staging" else "register"
        t = _wall(lambda a=a, o=o, m=m: cuda_host.transform(plan, a, 0, factor, o, method=m),
                  repeats)
        rows.append({"kind": "host", "dtype": _dt.short_name(dt), "log2n": log2n, "bytes": nbytes,
                     "method": method, "time_ms": t, "pinned_copies_ms": t_copies,
                     "ratio_copies": t / t_copies})
    return rows


def bench_axis(cp, dtype="fp32", shapes=((1 << 10, 1 << 16), (1 << 14, 1 << 12), (1 << 20, 1 << 6)),
               echo=print, tuning: Tuning | None = None) -> list[dict]:
    """fwht along axis 0 of an (n, batch) array (strided passes over the transform axis, no
    transpose) against the same transforms on contiguous rows, wall time with the GPU
    synchronized."""
    dt = _dt.resolve(dtype)
    sync = cp.cuda.Device().synchronize
    rows = []
    for n, batch in shapes:
        xc = _buffers(cp, (batch, n), dt, 1)[0]
        xt = cp.ascontiguousarray(xc.T)                 # (n, batch): transform axis 0
        t_rows = _wall(lambda xc=xc: fwht(xc, tuning=tuning), 10, sync)
        t_axis0 = _wall(lambda xt=xt: fwht(xt, axis=0, tuning=tuning), 10, sync)
        t_copy = _wall(lambda xc=xc: cp.copyto(xc, xc), 10, sync)
        rows.append({"kind": "axis", "dtype": dtype, "n": n, "batch": batch, "rows_ms": t_rows,
                     "axis0_ms": t_axis0, "ratio": t_axis0 / t_rows, "copy_ms": t_copy})
        echo(f"axis    {dtype:5} n=2^{n.bit_length() - 1} x {batch}: axis 0 {t_axis0:.3f} ms, rows "
             f"{t_rows:.3f} ms ({t_axis0 / t_rows:.2f}x)")
        xc = xt = None
    return rows


#: The variants timed against Folklore (names of :data:`fwht_gpu.variants.VARIANTS`), in order.
BENCH_VARIANTS = ("folklore", "alman", "kahan", "neumaier", "kahan-pass", "neumaier-pass", "compute")


def variant_name(name: str, dtype) -> str:
    """The name of a variant in the tables ('compute fp64' for a wider compute dtype)."""
    v = _variants.variant(name)
    return f"compute {_dt.short_name(v.compute_dtype(dtype))}" if v.wide else name


def _variant_rows(cp, name, L, only, per_pass, tuning, echo) -> list[dict]:
    """Every variant (or those in ``only``) at 2**L of dtype ``name``, Folklore first."""
    dt = _dt.resolve(name)
    n = 1 << L
    count = max(1, min(8, math.ceil(ROTATE_BYTES / (n * dt.itemsize))))
    srcs = _buffers(cp, (1, n), dt, count)
    dst = cp.empty((1, n), dtype=dt)
    rows, base = [], None
    for name_ in BENCH_VARIANTS:
        v = _variants.variant(name_)
        if not v.applies_to(dt):
            continue
        alg, stab, cdt = v.algorithm, v.stabilizer, v.compute_dtype(dt)
        vname = variant_name(name_, dt)
        if only and base is not None and vname not in only:
            continue
        plan = cuda_plan(n, dt, 1, alg, stab, cdt, tuning)
        t, _ = _timer(cp, lambda i, plan=plan: engine.run(plan, srcs[i % count], dst, check=False))
        base = t if base is None else base
        row = {"kind": "variant", "dtype": name, "log2n": L, "variant": vname,
               "passes": len(plan.passes), "time_ms": t, "ratio_folklore": t / base}
        extra = ""
        if per_pass:
            row["pass_ms"] = [
                _timer(cp, lambda i, one=one: engine.run(one, srcs[i % count], dst, check=False))[0]
                for one in (dataclasses.replace(plan, passes=(p,)) for p in plan.passes)]
            extra = "  passes " + " ".join(f"{v:.4f}" for v in row["pass_ms"])
        rows.append(row)
        echo(f"{name:5} {f'2^{L}':>5} {vname:16} {row['passes']:>6} {t:10.4f} {t / base:10.2f}{extra}")
        other = _stabilized_alternative(plan, n, dt, alg, stab, cdt, tuning)
        if other is not None:                  # the same variant with(out) cluster passes
            label, alt = other
            t2, _ = _timer(cp, lambda i, alt=alt: engine.run(alt, srcs[i % count], dst, check=False))
            rows.append({"kind": "variant", "dtype": name, "log2n": L, "variant": f"{vname} {label}",
                         "passes": len(alt.passes), "time_ms": t2, "ratio_folklore": t2 / base,
                         "clustered": alt.clustered})
            echo(f"{name:5} {f'2^{L}':>5} {vname + ' ' + label:16} {len(alt.passes):>6} {t2:10.4f} "
                 f"{t2 / base:10.2f}")
    srcs.clear()
    dst = None
    cp.get_default_memory_pool().free_all_blocks()
    return rows


def _stabilized_alternative(plan, n, dt, alg, stab, cdt, tuning):
    """("clusters" or "no clusters", plan) of a global stabilizer's row under the other
    cluster choice (``Tuning.cluster_stabilized``, ``cluster_neumaier_itemsize``), when the
    plans differ (a GPU with clusters); else None."""
    t = Tuning() if tuning is None else tuning
    if stab is None or not gpu.limits().max_cluster_log:
        return None
    alt = cuda_plan(n, dt, 1, alg, stab, cdt,
                    dataclasses.replace(t, cluster_stabilized=not plan.clustered,
                                        cluster_neumaier_itemsize=0))
    if alt.passes == plan.passes:
        return None
    return ("clusters" if alt.clustered else "no clusters"), alt


def bench_variants(cp, dtypes=("fp32", "fp16"), sizes=(20, 24, 27, 30), echo=print,
                   only=None, per_pass: bool = False, tuning: Tuning | None = None) -> list[dict]:
    """Kernel time of every variant (or those named in ``only``) next to Folklore's, same
    inputs, same run; with ``per_pass`` also each pass alone (``pass_ms``: one launch of
    that pass's kernel, as the last pass)."""
    rows = []
    free = cp.cuda.runtime.memGetInfo()[0]
    echo(f"{'dtype':5} {'n':>5} {'variant':16} {'passes':>6} {'time ms':>10} {'x folklore':>10}")
    for name in dtypes:
        dt = _dt.resolve(name)
        for L in sizes:
            if 4 * (1 << L) * dt.itemsize > free // 2:
                continue
            rows += _variant_rows(cp, name, L, only, per_pass, tuning, echo)
    return rows


def _cluster_alternative(t: Tuning) -> tuple[str, Tuning] | None:
    """The bench's second row for the single lengths the clusters change: (kind, tuning),
    ``t`` without clusters (``plain``) when it plans them, else with the largest clusters this
    GPU runs (``clusters``); None on a GPU without clusters."""
    most = gpu.limits().max_cluster_log
    if not most:
        return None
    if t.cluster_log:
        return "plain", dataclasses.replace(t, cluster_log=0)
    return "clusters", dataclasses.replace(t, cluster_log=most)


def _echo_case(echo, kind: str, shape, r: dict) -> None:
    rf = (f"{r['rfft_ms']:9.3f} {r['speedup_vs_rfft']:7.2f}x" if "rfft_ms" in r
          else f"{'':9} {'':8}")
    shp = f"{shape[0]}x2^{r['log2n']}"
    echo(f"{kind:7} {r['dtype']:5} {shp:>14} {r['passes']:>4} "
         f"{r['time_ms']:10.4f} {r['gbps']:7.0f} {r['ratio_copy']:7.2f} "
         f"{r['ratio_passes_copy']:8.2f} {rf}")


def run(dtypes=("fp32", "fp16", "bf16", "fp64"), single=range(10, 31), batched=range(8, 16),
        batch_bytes=256 << 20, fft=True, max_bytes=None, host=True, variants=(), echo=print,
        tuning: Tuning | None = None, command: str | None = None, peer_sizes=(),
        peer_bytes: int = peers.BATCH_BYTES) -> dict:
    """Benchmark single transforms 2**single and batched rows 2**batched under ``tuning``
    (default: ``Tuning()``), and with ``peer_sizes`` (lengths, e.g. :data:`peers.SIZES`) the
    peer rows (:mod:`fwht_gpu.peers`: fast-hadamard-transform and PyTorch baselines when
    importable, rows of ``peer_bytes``); returns the result record (:mod:`fwht_gpu.provenance`;
    with peers, its versions name PyTorch and fast_hadamard_transform, null when absent)."""
    cp = gpu.cupy()
    t = Tuning() if tuning is None else tuning
    free = cp.cuda.runtime.memGetInfo()[0]
    cap = max_bytes or free // 5      # rotating buffers + destination + rfft output
    rows = []
    echo(f"GPU: {gpu.status()}")
    echo(f"{'kind':7} {'dtype':5} {'shape':>14} {'pass':>4} {'time ms':>10} {'GB/s':>7} "
         f"{'x copy':>7} {'x p*copy':>8} {'rfft ms':>9} {'vs rfft':>8}")
    for name in dtypes:
        dt = _dt.resolve(name)
        cases = [("single", (1, 1 << L)) for L in single] + \
                [("batched", (batch_bytes // ((1 << L) * dt.itemsize), 1 << L)) for L in batched]
        for kind, shape in cases:
            if shape[0] * shape[1] * dt.itemsize > cap:
                continue
            r = bench_case(cp, shape, dt, fft and kind == "single", t)
            r["kind"] = kind
            rows.append(r)
            _echo_case(echo, kind, shape, r)
            alt = _cluster_alternative(t)
            if kind == "single" and alt is not None and \
                    cuda_plan(shape[1], dt, 1, tuning=alt[1]).clustered != \
                    cuda_plan(shape[1], dt, 1, tuning=t).clustered:
                r = bench_case(cp, shape, dt, fft, alt[1])     # the same length, other passes
                r["kind"] = alt[0]
                r["cluster_log"] = alt[1].cluster_log
                rows.append(r)
                _echo_case(echo, alt[0], shape, r)
    peer_versions, peer_settings = {}, {}
    if peer_sizes:
        prows, peer_versions, peer_settings = peers.bench(
            cp, dtypes, peer_sizes, peer_bytes, echo=echo, tuning=t,
            plan_for=lambda n, dt, b: cuda_plan(n, dt, b, tuning=t))
        rows += prows
    if variants:
        rows += bench_variants(cp, dtypes=dtypes, sizes=variants, echo=echo, tuning=t)
    rows += bench_axis(cp, echo=echo, tuning=t)
    if host:
        for r in bench_host(cp, tuning=t):
            rows.append(r)
            size = f"2^{r['log2n']}"
            echo(f"host    {r['dtype']:5} {size:>14} {r['method']:>9}: "
                 f"{r['time_ms']:.2f} ms wall, {r['ratio_copies']:.2f} x the two pinned copies "
                 f"({r['pinned_copies_ms']:.2f} ms)")
    settings = {"tuning": t, "dtypes": list(dtypes), "single": list(single),
                "batched": list(batched), "batch_bytes": batch_bytes, "fft": bool(fft),
                "max_bytes": cap, "host": bool(host), "variants": list(variants),
                "rotate_bytes": ROTATE_BYTES, "method": METHOD, "peers": bool(peer_sizes),
                **peer_settings}
    rec = provenance.record("fwht-bench", rows, settings, command, device="gpu")
    if peer_versions:
        rec["versions"].update(peer_versions)
        provenance.validate(rec)
    return rec


def main(out_json: str | None = None, **kw) -> dict:
    """:func:`run` with keyword arguments ``kw``; writes the record to ``out_json`` when given."""
    res = run(**kw)
    if out_json:
        provenance.write(res, out_json)
    return res
