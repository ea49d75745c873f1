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
    import numba

    @numba.njit(nogil=True, cache=True, inline="always")
    def _stage(x, base, n, bit):
        h = 1 << bit
        for start in range(base, base + n, 2 * h):
            for i in range(start, start + h):
                a = x[i]
                b = x[i + h]
                x[i] = a + b
                x[i + h] = a - b

    @numba.njit(nogil=True, cache=True, inline="always")
    def _first3(x, base, n):
        """Stages at bits 0, 1, 2 (in that order) on n elements from base, eight values in
        registers at a time: the same butterflies in the same order as three _stage calls."""
        for g in range(base, base + n, 8):
            x0, x1, x2, x3 = x[g], x[g + 1], x[g + 2], x[g + 3]
            x4, x5, x6, x7 = x[g + 4], x[g + 5], x[g + 6], x[g + 7]
            x0, x1 = x0 + x1, x0 - x1
            x2, x3 = x2 + x3, x2 - x3
            x4, x5 = x4 + x5, x4 - x5
            x6, x7 = x6 + x7, x6 - x7
            x0, x2 = x0 + x2, x0 - x2
            x1, x3 = x1 + x3, x1 - x3
            x4, x6 = x4 + x6, x4 - x6
            x5, x7 = x5 + x7, x5 - x7
            x[g], x[g + 4] = x0 + x4, x0 - x4
            x[g + 1], x[g + 5] = x1 + x5, x1 - x5
            x[g + 2], x[g + 6] = x2 + x6, x2 - x6
            x[g + 3], x[g + 7] = x3 + x7, x3 - x7

    @numba.njit(nogil=True, cache=True, inline="always")
    def _stage2(x, base, n, bit):
        """Stages at ``bit`` then ``bit + 1``, four values in registers (the same butterflies
        in the same order as two _stage calls)."""
        h = 1 << bit
        for start in range(base, base + n, 4 * h):
            for i in range(start, start + h):
                a, b, c, d = x[i], x[i + h], x[i + 2 * h], x[i + 3 * h]
                a, b = a + b, a - b
                c, d = c + d, c - d
                x[i], x[i + 2 * h] = a + c, a - c
                x[i + h], x[i + 3 * h] = b + d, b - d

    @numba.njit(nogil=True, cache=True, parallel=True)
    def blocked(x, bits, block):
        """Stages ``bits`` (all < log2(block)) on every ``block`` of the flat array x."""
        nblocks = x.size // block
        first3 = bits.size >= 3 and block >= 8 and bits[0] == 0 and bits[1] == 1 and bits[2] == 2
        for k in numba.prange(nblocks):
            s0 = 0
            if first3:
                _first3(x, k * block, block)
                s0 = 3
            s = s0
            while s < bits.size:
                if s + 1 < bits.size and bits[s + 1] == bits[s] + 1:
                    _stage2(x, k * block, block, bits[s])
                    s += 2
                else:
                    _stage(x, k * block, block, bits[s])
                    s += 1

    @numba.njit(nogil=True, cache=True, parallel=True)
    def wide(x, n, bit):
        """One stage at ``bit`` over every row of length n of the flat array x: the pairs
        (i, i + 2^bit) in chunks of 2^BLOCK_BITS / 2 in parallel."""
        h = 1 << bit
        rows = x.size // n
        groups = n // (2 * h)                       # per row: blocks of 2h elements
        chunk = min(h, 1 << 11)
        per = h // chunk
        total = rows * groups * per
        for q in numba.prange(total):
            g, c = q // per, q % per
            start = g * 2 * h + c * chunk            # rows are whole groups: g spans them
            for i in range(start, start + chunk):
                a = x[i]
                b = x[i + h]
                x[i] = a + b
                x[i + h] = a - b

    @numba.njit(nogil=True, cache=True, parallel=True)
    def wide2(x, n, bit):
        """Stages at ``bit`` then ``bit + 1`` in one pass: four values (i, i + h, i + 2h,
        i + 3h) in registers, the same butterflies in the same order as two ``wide``."""
        h = 1 << bit
        rows = x.size // n
        groups = n // (4 * h)
        chunk = min(h, 1 << 11)
        per = h // chunk
        total = rows * groups * per
        for q in numba.prange(total):
            g, c = q // per, q % per
            start = g * 4 * h + c * chunk
            for i in range(start, start + chunk):
                a, b, c2, d = x[i], x[i + h], x[i + 2 * h], x[i + 3 * h]
                a, b = a + b, a - b
                c2, d = c2 + d, c2 - d
                x[i], x[i + 2 * h] = a + c2, a - c2
                x[i + h], x[i + 3 * h] = b + d, b - d

    return blocked, wide, wide2


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
    blocked, wide, wide2 = _kernels()
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
