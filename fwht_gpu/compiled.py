"""Compiled CPU kernels of the NumPy engine (numba): Folklore radix-2 stages in any dtype.

The NumPy engine executes a Plan stage by stage with one array operation per stage; for
Folklore plans without a stabilizer this module runs the same stages, in the Plan's order,
as compiled loops over cache-sized blocks, in threads.  FP64/FP32: each butterfly is
(a + b, a - b) in the storage dtype, IEEE rounding, no FMA (numba's default,
``fastmath=False``).  FP16/BF16: float32 operations, each result rounded to the 16-bit
format in registers (the bits of NumPy's / ml_dtypes' round trip).  A wider compute dtype
(FP16/BF16 in FP32, FP32 in FP64): the compute dtype's arithmetic, rounded to the storage
dtype where each pass writes back.  Every element sees the same sequence of operations, so
the result has the NumPy engine's bits whatever the blocking and the number of threads
(tests/test_fwht_compiled.py compares them).

Blocking: a run of consecutive stages whose bits are all below ``BLOCK_BITS`` is applied to
each block of 2^BLOCK_BITS contiguous elements in turn (the block stays in the L1/L2 cache);
a stage at a higher bit makes one pass over the array.  Both run in parallel over blocks
(``numba.prange``); threads never change results.
"""
from __future__ import annotations

import functools
import os

import numpy as np

#: log2 of the elements of a cache block (2^12 FP64: 32 KiB).
BLOCK_BITS = 12
#: Whether the NumPy engine uses these kernels (set PAGH_FWHT_COMPILED=0 to force the
#: array-operation path, e.g. to compare the two).
ENABLED = os.environ.get("PAGH_FWHT_COMPILED", "1") != "0"


#: Rows of at most this many bytes (in the work dtype) are transformed whole, each by one
#: thread while it stays in its cache, from one read of the input to one write of the
#: output (when there are rows enough for every thread); longer rows take one pass over
#: memory per run of stages.
ROW_BYTES = 1 << 20


@functools.lru_cache(maxsize=None)
def _kernels():
    from . import _cpu_kernels as k
    return k


def stage_bits(plan) -> tuple[np.ndarray, int]:
    """(the plan's stage bits in order, int64; log2 of the cache block) for :func:`serial`."""
    bits = np.array([st.bit for p in plan.passes for st in p.stages], dtype=np.int64)
    return bits, min(BLOCK_BITS, plan.n.bit_length() - 1)


def serial_kernel():
    """The compiled single-thread row transform ``serial(x, n, bits, block_bits)``."""
    return _kernels().serial


def _mode(dtype) -> int:
    """0: IEEE arithmetic of the dtype itself; 1 / 2: float32 rounded to FP16 / BF16."""
    dt = np.dtype(dtype)
    if dt.itemsize != 2:
        return 0
    return 1 if dt == np.float16 else 2


def supports(plan, counter) -> bool:
    """Whether :func:`run` executes ``plan``: Folklore radix-2 stages only, no stabilizer, no
    operation counting; any of the four dtypes, computed in the storage dtype (FP16/BF16:
    float32 operations each rounded to it) or in a wider compute dtype (rounded to the
    storage dtype where each pass writes back)."""
    if not ENABLED or counter is not None or plan.stabilizer:
        return False
    return all(st.kind == "radix2" for p in plan.passes for st in p.stages)


def _stages(flat: np.ndarray, n: int, bits: np.ndarray, s: int, e: int, mode: int) -> None:
    """The stages ``bits[s:e]`` in order on the rows of length n of the flat work array,
    a pass over memory per run of stages below the cache block and per two higher ones."""
    k = _kernels()
    block_bits = min(BLOCK_BITS, n.bit_length() - 1)
    while s < e:
        if bits[s] < block_bits:            # a run of stages inside cache blocks
            r = s
            while r < e and bits[r] < block_bits:
                r += 1
            k.blocked(flat, bits, s, r, block_bits, mode)
            s = r
        else:
            two = s + 1 < e and bits[s + 1] == bits[s] + 1
            k.wide(flat, int(bits[s]), two, mode)
            s += 2 if two else 1


def _threads() -> int:
    import numba
    return numba.get_num_threads()


def run(plan, x: np.ndarray, in_place: bool = False,
        out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """The Plan's stages on a (batch, n) array of the plan's dtype, the NumPy engine's bits:
    (a new array, ``out`` (C-contiguous, of x's shape and dtype, not overlapping x) when
    given, or ``x`` itself with ``in_place`` (C-contiguous); the rows whose input was
    finite and whose transform is not, a boolean mask, or None when there are none).

    FP32/FP64 computed in their own dtype run on the output array; FP16/BF16 (float32
    operations, each rounded to the 16-bit format) and wider compute dtypes (rounded to
    the storage dtype where each pass writes back) on float32 / float64 work rows.  Rows of
    up to ``ROW_BYTES`` go through the cache one at a time per thread: the input is read
    once and the output written once."""
    k = _kernels()
    n = plan.n
    dt, cdt = np.dtype(plan.dtype), np.dtype(plan.compute_dtype)
    work = np.dtype(np.float32 if cdt.itemsize == 2 else cdt)
    direct = cdt == dt and dt.itemsize != 2
    if in_place:
        out = x
    elif out is None:
        out = np.empty(x.shape, dt)
    batch = x.shape[0]
    if x.size == 0 or n == 1:
        if not in_place:
            out[...] = x
        return out, None
    bits = np.array([st.bit for p in plan.passes for st in p.stages], dtype=np.int64)
    ends = np.cumsum([len(p.stages) for p in plan.passes]).astype(np.int64) \
        if cdt != dt else np.array([bits.size], dtype=np.int64)
    op_mode = _mode(cdt)
    pass_mode = 0 if cdt == dt else (_mode(dt) or 3)
    fmt = _mode(dt)
    src = x.reshape(-1) if x.flags.c_contiguous else np.ascontiguousarray(x).reshape(-1)
    dst = out.reshape(-1)
    if dt.itemsize == 2:
        src, dst = src.view(np.uint16), dst.view(np.uint16)
    block_bits = min(BLOCK_BITS, n.bit_length() - 1)
    fin = np.zeros(batch, np.uint8)
    if n * work.itemsize <= ROW_BYTES and (batch >= _threads() or n <= 1 << BLOCK_BITS):
        if direct:
            k.rows_direct(src, dst, n, bits, block_bits, not in_place, fin)
        else:
            k.rows_work(src, dst, np.empty(0, work), n, bits, ends, block_bits, op_mode,
                        pass_mode, fmt, fin)
    else:
        if direct:
            w = dst
            if not in_place:
                w[...] = src
        else:
            w = np.empty(src.size, work)
            k.widen(src, w, fmt)
        k.row_finite(w, n, fin, 0)
        s = 0
        for e in ends:
            _stages(w, n, bits, s, int(e), op_mode)
            if pass_mode:
                k.round_storage(w, pass_mode)
            s = int(e)
        k.row_finite(w, n, fin, 1)
        if not direct:
            k.narrow(w, dst, fmt)
    bad = fin == 1                      # input finite (bit 0), output not (bit 1)
    return out, (bad if bool(bad.any()) else None)


def k_stage(signs: np.ndarray, w: np.ndarray, compute_dtype) -> np.ndarray:
    """The K-point stage of :func:`fwht_gpu.hadamard.k_stage` compiled: ``w`` (rows, K, M)
    in the work dtype of ``compute_dtype``, each sum rounded to it; the same operations in the
    same order per element as the array path (the same bits, tested)."""
    from .cpu import _pool
    w = np.ascontiguousarray(w)
    out = np.empty_like(w)
    tasks, threads = w.shape[0] * w.shape[1], _threads()
    step = max(1, -(-tasks // threads))
    run = functools.partial(_kernels().k_stage, w, np.ascontiguousarray(signs),
                            _mode(compute_dtype), out)
    list(_pool(threads).map(lambda t0: run(t0, min(tasks, t0 + step)), range(0, tasks, step)))
    return out
