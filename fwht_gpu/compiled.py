"""Compiled CPU kernels of the NumPy engine (numba): Folklore radix-2 stages in FP64/FP32.

The NumPy engine executes a Plan stage by stage with one array operation per stage; for
the common case (Folklore, no stabilizer, the storage dtype as compute dtype, FP64 or FP32)
this module runs the same stages, in the Plan's order, as compiled loops over cache-sized
blocks, in threads.  Each butterfly is (a + b, a - b) in the storage dtype, IEEE rounding,
no FMA (numba's default, ``fastmath=False``), and every element sees the same sequence of
stages, so the result has the NumPy engine's bits whatever the blocking and the number of
threads (tests/test_fwht_compiled.py compares them).

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
    return k.blocked, k.wide, k.wide2, k.serial


def stage_bits(plan) -> tuple[np.ndarray, int]:
    """(the plan's stage bits in order, int64; log2 of the cache block) for :func:`serial`."""
    bits = np.array([st.bit for p in plan.passes for st in p.stages], dtype=np.int64)
    return bits, min(BLOCK_BITS, plan.n.bit_length() - 1)


def serial_kernel():
    """The compiled single-thread row transform ``serial(x, n, bits, block_bits)``."""
    return _kernels()[3]


def supports(plan, counter) -> bool:
    """Whether :func:`run` executes ``plan`` (Folklore radix-2 stages only, no stabilizer,
    FP64/FP32 computed in the storage dtype, no operation counting)."""
    if not ENABLED or counter is not None or plan.stabilizer:
        return False
    if plan.compute_dtype != plan.dtype or np.dtype(plan.dtype) not in (np.float64, np.float32):
        return False
    return all(st.kind == "radix2" for p in plan.passes for st in p.stages)


def run(plan, x: np.ndarray, in_place: bool = False) -> np.ndarray:
    """The Plan's stages on a (batch, n) array of the plan's dtype: a new array (or ``x``
    itself, C-contiguous, with ``in_place``), the NumPy engine's bits."""
    blocked, wide, wide2, _ = _kernels()
    n = plan.n
    w = x if in_place else np.array(x, dtype=plan.dtype, order="C", copy=True)
    if w.size == 0 or n == 1:
        return w
    flat = w.reshape(-1)
    block_bits = min(BLOCK_BITS, n.bit_length() - 1)
    block = 1 << block_bits
    bits = [st.bit for p in plan.passes for st in p.stages]
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
    return w
