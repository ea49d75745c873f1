"""Exact rounding of FP32 work arrays to FP16 precision, compiled.

NumPy's float32 -> float16 -> float32 round trip converts one element at a time (about
6 ns per element), which made FP16 the slowest dtype of the NumPy engine.  The kernel
below computes the same round-to-nearest-even result on the bit patterns (about 1 ns per
element), compiled by numba on first use (and cached on disk).  For every finite input
and infinity the result has NumPy's bits (tests/test_rounding.py checks every FP16 value,
every tie and their float32 neighbours; .dev/round_exhaustive.py checked all 2**32
patterns once); a NaN stays a NaN of the same sign, as NumPy's (whose payload bits depend
on whether it converts in hardware).
"""
from __future__ import annotations

import functools

import numpy as np

#: Bit patterns (magnitude, float32) of the FP16 range boundaries.
_F16_OVERFLOW = 0x477FF000      # 65520: rounds to infinity
_F16_MIN_NORMAL = 0x38800000    # 2**-14
_F16_HALF_MIN_SUB = 0x33000000  # 2**-25: anything smaller rounds to zero


@functools.lru_cache(maxsize=None)
def _kernel():
    import numba

    @numba.njit(nogil=True, cache=True)
    def round_f16(x, out):                      # 1-d float32 arrays (out may be x)
        u = x.view(np.uint32)
        o = out.view(np.uint32)
        quantum = np.float32(2.0 ** -24)       # FP16's subnormal spacing
        for i in range(u.size):
            bits = np.uint32(u[i])
            sign = bits & np.uint32(0x80000000)
            mag = bits & np.uint32(0x7FFFFFFF)
            if mag >= _F16_OVERFLOW:
                if mag > 0x7F800000:            # NaN: keep the top 10 payload bits
                    payload = (mag & np.uint32(0x007FE000))
                    if payload == 0:
                        payload = np.uint32(0x2000)
                    o[i] = sign | np.uint32(0x7F800000) | payload
                else:                           # overflow or infinity
                    o[i] = sign | np.uint32(0x7F800000)
            elif mag >= _F16_MIN_NORMAL:        # normal: drop 13 bits, ties to even
                lsb = (mag >> np.uint32(13)) & np.uint32(1)
                o[i] = sign | ((mag + np.uint32(0xFFF) + lsb) & np.uint32(0xFFFFE000))
            elif mag >= _F16_HALF_MIN_SUB:      # subnormal: whole multiples of 2**-24
                shift = np.uint32(126) - (mag >> np.uint32(23))
                mant = (mag & np.uint32(0x007FFFFF)) | np.uint32(0x00800000)
                q = mant >> shift
                rest = mant & ((np.uint32(1) << shift) - np.uint32(1))
                half = np.uint32(1) << (shift - np.uint32(1))
                if rest > half or (rest == half and (q & np.uint32(1)) == 1):
                    q += np.uint32(1)
                out[i] = np.float32(q) * quantum
                o[i] = o[i] | sign
            else:                               # rounds to a signed zero
                o[i] = sign
    return round_f16


def round_to_fp16(a: np.ndarray, in_place: bool = False) -> np.ndarray:
    """``a`` (float32) rounded to the nearest FP16 value (ties to even): the bits of
    ``a.astype(float16).astype(float32)``, in a new array, or in ``a`` itself with
    ``in_place`` when ``a`` is a contiguous float32 array."""
    if in_place and a.dtype == np.float32 and (a.flags.c_contiguous or a.flags.f_contiguous):
        flat = a.ravel(order="A")                # a view of a's memory
        if flat.size:
            _kernel()(flat, flat)
        return a
    src = np.ascontiguousarray(a, dtype=np.float32)
    out = np.empty(src.shape, np.float32)
    if src.size:
        _kernel()(src.reshape(-1), out.reshape(-1))
    return out
