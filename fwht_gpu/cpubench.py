"""``fwht bench --device cpu``: the transform on the CPU against a memory copy and an FFT.

Cases, for each dtype and each thread count w: single transforms of length 2**L (L in
``single``; a 1-d array) and ``batch_bytes`` worth of rows of length 2**L (L in ``batched``;
a (rows, 2**L) array).  Calls timed:

- ``fwht``: the public call ``fwht_gpu.fwht(x, workers=w)`` (a new output array each call);
- ``out``: ``fwht_gpu.fwht(x, out=y, workers=w)`` into an existing array;
- ``in-place``: ``FWHT(n, dtype, device="cpu")(x, overwrite_x=True, workers=w)``, with ``x``
  restored from a copy before each call, outside the timed region.

Next to them, measured in the same run: the copies that move the same bytes, ``x.copy()``
(a new array, as ``fwht`` makes: its pages are faulted in by the first write) for ``fwht``
and ``np.copyto`` into an existing array for ``out`` and ``in-place`` (NumPy copies in one
thread, whatever w); and ``rfft``, ``scipy.fft.rfft(x, workers=w)`` of the same shape in
float32 (FP32/FP16/BF16 data) or float64 (FP64 data): the compiled FFT a CPU user already
has (measured once per shape, FFT dtype and w, and shared by the rows it applies to).

Timing: ``time.perf_counter`` around each call, one warm-up call first; ``time_ms`` is the
median and ``time_min_ms`` the minimum of ``repeats`` calls (``copy_ms``, ``copy_min_ms``:
the same for the call's copy, named in ``copy_call``; ``rfft_ms``, ``rfft_min_ms`` for the
FFT).  ``gbps``: bytes read and written once (2 x the array's bytes) over the median time;
``ratio_copy`` / ``ratio_rfft``: the median time over the copy's / the FFT's median time
(below 1: faster).

Inputs: standard normal values, / sqrt(n) for FP32/FP64 (transforms of unit size), / 4 for
FP16/BF16 (normal numbers: FP16 subnormals take a slower path in the compiled kernels; the
transforms stay far below the FP16 range up to 2**28).

Every row records the 1-minute load average before its calls (``loadavg_1m``): on shared
cores the times are not clean.

:func:`run` returns a result record of :mod:`fwht_gpu.provenance` (kind ``fwht-cpu-bench``).
"""
from __future__ import annotations

import math
import statistics

import numpy as np
import scipy.fft

from . import compiled, cpu, memory, provenance
from . import dtypes as _dt
from .bench import wall_times
from .transform import FWHT, fwht

KIND = "fwht-cpu-bench"
METHOD = ("time.perf_counter around each call, min and median of repeats after a warm-up; "
          "fwht: fwht_gpu.fwht(x, workers=w) against x.copy(); out: fwht(x, out=y, "
          "workers=w) and in-place: FWHT(n, dtype)(x, overwrite_x=True, workers=w) (x restored "
          "outside the timed region) against np.copyto into an existing array (copies: one "
          "thread, whatever w); rfft: scipy.fft.rfft(x, workers=w) of the same shape, float32 "
          "for FP32/FP16/BF16 data, float64 for FP64; GB/s: 2 x array bytes / median")
#: The calls timed and the copy each is compared with.
CALLS = (("fwht", "x.copy()"), ("out", "np.copyto"), ("in-place", "np.copyto"))
#: The default cases: log2 lengths of single transforms and of batched rows, and the bytes
#: of a batch.
SINGLE = range(10, 25)
BATCHED = (8, 10, 12, 14)
BATCH_BYTES = 64 << 20
HEADER = (f"{'kind':7} {'dtype':5} {'shape':>12} {'call':8} {'thr':>3} {'time ms':>10} "
          f"{'min ms':>10} {'GB/s':>6} {'copy':>9} {'copy ms':>9} {'x copy':>7} {'rfft ms':>9} "
          f"{'x rfft':>7}")


def worker_counts(workers) -> list[int]:
    """The thread counts of ``workers`` (None: all cores; negative: counted back from the
    cores, as in ``scipy.fft``), each once, in order."""
    out = []
    for w in workers:
        k = cpu.check_workers(w) or cpu.cores()
        if k not in out:
            out.append(k)
    return out


def inputs(shape, dtype, seed: int = 0) -> np.ndarray:
    """Standard normal values of ``dtype`` in ``shape`` (transform along the last axis), scaled
    as the module docstring says: / sqrt(n) for FP32/FP64, / 4 for FP16/BF16."""
    dt = _dt.resolve(dtype)
    n = shape[-1]
    scale = 0.25 if dt.itemsize == 2 else 1.0 / math.sqrt(n)
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dt)


def _fft_dtype(dt: np.dtype) -> np.dtype:
    return np.dtype(np.float64 if dt == np.float64 else np.float32)


def _stats(prefix: str, ts: list[float]) -> dict:
    return {f"{prefix}_ms": statistics.median(ts), f"{prefix}_min_ms": min(ts)}


def bench_case(kind: str, shape: tuple[int, int], dtype, workers: list[int], repeats: int,
               fft: bool = True, fft_cache: dict | None = None) -> list[dict]:
    """Rows of one case: ``shape`` = (rows, n) (rows 1: a 1-d array of n) of ``dtype``, each
    call of :data:`CALLS` at each thread count in ``workers``.  ``fft_cache``: rfft times
    by (FFT dtype, shape, w), filled and reused across cases."""
    dt = _dt.resolve(dtype)
    batch, n = shape
    x = inputs((n,) if batch == 1 else shape, dt)
    dst = np.empty_like(x)
    base = {"kind": kind, "dtype": _dt.short_name(dt), "batch": batch, "n": n,
            "log2n": n.bit_length() - 1, "bytes": x.nbytes, "repeats": repeats}
    copies = {"np.copyto": _stats("copy", wall_times(lambda: np.copyto(dst, x), repeats)),
              "x.copy()": _stats("copy", wall_times(x.copy, repeats))}
    fdt = _fft_dtype(dt)
    xf = x.astype(fdt) if fft else None
    planned = FWHT(n, dt, device="cpu")
    cache = {} if fft_cache is None else fft_cache
    rows = []
    for w in workers:
        load = provenance.load_average()
        times = {
            "fwht": wall_times(lambda w=w: fwht(x, workers=w), repeats),
            "out": wall_times(lambda w=w: fwht(x, out=dst, workers=w), repeats),
            "in-place": wall_times(lambda w=w: planned(dst, overwrite_x=True, workers=w),
                                   repeats, setup=lambda: np.copyto(dst, x))}
        if fft and (fdt, x.shape, w) not in cache:
            cache[fdt, x.shape, w] = _stats(
                "rfft", wall_times(lambda w=w: scipy.fft.rfft(xf, workers=w), repeats))
        for call, ref in CALLS:
            row = dict(base, call=call, workers=w, **_stats("time", times[call]),
                       copy_call=ref, **copies[ref], loadavg_1m=load)
            row["gbps"] = 2 * x.nbytes / row["time_ms"] / 1e6
            row["ratio_copy"] = row["time_ms"] / row["copy_ms"]
            if fft:
                row.update(cache[fdt, x.shape, w], rfft_dtype=_dt.short_name(fdt))
                row["ratio_rfft"] = row["time_ms"] / row["rfft_ms"]
            rows.append(row)
    return rows


def _need_bytes(shape, dt: np.dtype, fft: bool) -> int:
    """Host memory of one case: input, copy destination, output, temporaries; the FFT's
    input and output."""
    nbytes = shape[0] * shape[1] * dt.itemsize
    fbytes = shape[0] * shape[1] * _fft_dtype(dt).itemsize
    return 4 * nbytes + (3 * fbytes if fft else 0)


def _echo_row(echo, r: dict) -> None:
    shape = f"{r['batch']}x2^{r['log2n']}"
    if r.get("skipped"):
        echo(f"{r['kind']:7} {r['dtype']:5} {shape:>12} skipped: {r['note']}")
        return
    rf = (f"{r['rfft_ms']:9.4f} {r['ratio_rfft']:7.3f}" if "rfft_ms" in r else f"{'-':>9} {'-':>7}")
    echo(f"{r['kind']:7} {r['dtype']:5} {shape:>12} {r['call']:8} {r['workers']:>3} "
         f"{r['time_ms']:10.4f} {r['time_min_ms']:10.4f} {r['gbps']:6.2f} {r['copy_call']:>9} "
         f"{r['copy_ms']:9.4f} {r['ratio_copy']:7.2f} {rf}")


def run(dtypes=("fp32", "fp64", "fp16", "bf16"), single=SINGLE, batched=BATCHED,
        batch_bytes: int = BATCH_BYTES, workers=(1, None), repeats: int = 7, fft: bool = True,
        echo=print, command: str | None = None) -> dict:
    """The CPU benchmark (see the module docstring) of single transforms 2**single and
    ``batch_bytes`` of rows of 2**batched, at each thread count of ``workers`` (None: all
    cores), ``repeats`` timed calls each (``fft``: with the scipy.fft.rfft comparison);
    returns its provenance record."""
    threads = worker_counts(workers)
    load0 = provenance.load_average()
    echo(f"CPU: {provenance.cpu_model()}, {cpu.cores()} cores; threads {threads}; compiled "
         f"kernels {'on' if compiled.ENABLED else 'off (PAGH_FWHT_COMPILED=0)'}")
    if load0 is not None and load0 > provenance.BUSY_LOAD:
        echo(f"note: load average {load0:.2f} before the run: other processes share the cores, "
             "times are not clean")
    echo(f"median (time ms) and min of {repeats} calls after a warm-up; GB/s: 2 x array bytes "
         "/ time; fwht: fwht(x) (a new array), out: fwht(x, out=y), in-place: FWHT(...)(x, "
         "overwrite_x=True); copy: the copy of the same bytes each is compared with (x.copy() "
         "makes a new array as fwht does; one thread whatever thr); x copy, x rfft: time over "
         "the copy's and scipy.fft.rfft's (same shape, float32 for FP32/FP16/BF16, float64 for "
         "FP64, same thr)")
    echo(HEADER)
    rows, fft_cache = [], {}
    for name in dtypes:
        dt = _dt.resolve(name)
        cases = [("single", (1, 1 << L)) for L in single] + \
                [("batched", (max(1, batch_bytes // ((1 << L) * dt.itemsize)), 1 << L))
                 for L in batched]
        for kind, shape in cases:
            need, have = _need_bytes(shape, dt, fft), memory.available("cpu")
            if have is not None and need > have:
                block = [{"kind": kind, "dtype": _dt.short_name(dt), "batch": shape[0],
                          "n": shape[1], "log2n": shape[1].bit_length() - 1, "skipped": True,
                          "note": f"needs {memory.gib(need)}, {memory.gib(have)} available"}]
            else:
                block = bench_case(kind, shape, dt, threads, repeats, fft, fft_cache)
            for r in block:
                _echo_row(echo, r)
            rows += block
    settings = {"dtypes": list(dtypes), "single": list(single), "batched": list(batched),
                "batch_bytes": batch_bytes, "workers": threads, "repeats": repeats,
                "fft": bool(fft), "cores": cpu.cores(), "compiled": compiled.ENABLED,
                "loadavg_1m": [load0, provenance.load_average()], "device": "cpu",
                "method": METHOD}
    return provenance.record(KIND, rows, settings, command, device="cpu")


def main(out_json: str | None = None, **kw) -> dict:
    """:func:`run` with keyword arguments ``kw``; writes the record to ``out_json`` when given."""
    res = run(**kw)
    if out_json:
        provenance.write(res, out_json)
    return res
