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


@functools.lru_cache(maxsize=None)
def _kernels():
    from . import _cpu_kernels as k
    return k.blocked, k.wide, k.wide2, k.serial, k.rounded, k.round_storage


def stage_bits(plan) -> tuple[np.ndarray, int]:
    """(the plan's stage bits in order, int64; log2 of the cache block) for :func:`serial`."""
    bits = np.array([st.bit for p in plan.passes for st in p.stages], dtype=np.int64)
    return bits, min(BLOCK_BITS, plan.n.bit_length() - 1)


def serial_kernel():
    """The compiled single-thread row transform ``serial(x, n, bits, block_bits)``."""
    return _kernels()[3]


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


def _stages(flat: np.ndarray, n: int, bits, mode: int) -> None:
    """The stages ``bits`` in order on the rows of length n of the flat work array."""
    blocked, wide, wide2, _, rounded, _ = _kernels()
    block_bits = min(BLOCK_BITS, n.bit_length() - 1)
    if mode:
        rounded(flat, n, np.asarray(bits, dtype=np.int64), block_bits, mode)
        return
    block = 1 << block_bits
    s = 0
    while s < len(bits):
        if bits[s] < block_bits:            # a run of stages inside cache blocks
            e = s
            while e < len(bits) and bits[e] < block_bits:
                e += 1
            blocked(flat, np.array(bits[s:e], dtype=np.int64), block)
            s = e
        elif s + 1 < len(bits) and bits[s + 1] == bits[s] + 1:
            wide2(flat, n, bits[s])          # two consecutive high stages in one pass
            s += 2
        else:
            wide(flat, n, bits[s])
            s += 1


def run(plan, x: np.ndarray, in_place: bool = False) -> np.ndarray:
    """The Plan's stages on a (batch, n) array of the plan's dtype: a new array (or ``x``
    itself, C-contiguous, with ``in_place``), the NumPy engine's bits.  FP64/FP32 computed
    in their own dtype run in place on the array; otherwise on a work array (float32 for
    FP16/BF16 arithmetic, the compute dtype for a wider one), rounded where the NumPy engine
    rounds (:func:`fwht_gpu.cpu.execute`)."""
    n = plan.n
    dt, cdt = np.dtype(plan.dtype), np.dtype(plan.compute_dtype)
    direct = cdt == dt and dt.itemsize != 2
    if direct:
        w = x if in_place else np.array(x, dtype=dt, order="C", copy=True)
    else:
        w = np.array(x, dtype=np.float32 if cdt.itemsize == 2 else cdt, order="C", copy=True)
    if w.size == 0 or n == 1:
        return x if in_place else w.astype(dt, copy=False)
    flat = w.reshape(-1)
    if cdt == dt:                           # no rounding where passes write back
        _stages(flat, n, [st.bit for p in plan.passes for st in p.stages], _mode(cdt))
    else:
        for p in plan.passes:
            _stages(flat, n, [st.bit for st in p.stages], _mode(cdt))
            if dt.itemsize == 2:            # the pass writes back in the storage dtype
                _kernels()[5](flat, _mode(dt))
            else:
                flat[...] = flat.astype(dt)
    if direct:
        return w
    if in_place:
        x[...] = w
        return x
    return w.astype(dt)
