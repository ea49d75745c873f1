"""The four storage dtypes and how their arithmetic is carried out exactly.

Every butterfly result is rounded to the storage dtype.  FP64 and FP32 are
computed natively (IEEE add/sub is correctly rounded).  FP16 and BF16 are
computed in FP32 and rounded once to the storage format: since 24 >= 2p + 2
for both (p = 11 and 8), that is the correctly rounded result, which is what
the GPU kernels do as well.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

bfloat16 = np.dtype(ml_dtypes.bfloat16)

#: Supported storage dtypes, from the widest.
SUPPORTED = (np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16), bfloat16)

_NAMES = {
    np.dtype(np.float64): "fp64",
    np.dtype(np.float32): "fp32",
    np.dtype(np.float16): "fp16",
    bfloat16: "bf16",
}
_ALIASES = {
    "fp64": np.float64, "float64": np.float64, "double": np.float64, "f8": np.float64,
    "fp32": np.float32, "float32": np.float32, "float": np.float32, "single": np.float32, "f4": np.float32,
    "fp16": np.float16, "float16": np.float16, "half": np.float16, "f2": np.float16,
    "bf16": bfloat16, "bfloat16": bfloat16,
}


def short_name(dtype) -> str:
    """'fp64', 'fp32', 'fp16' or 'bf16'."""
    return _NAMES[np.dtype(dtype)]


def resolve(dtype, argname: str = "dtype") -> np.dtype:
    """Turn a dtype-like (including the names 'fp32', 'bf16', ...) into a supported dtype.

    Raises TypeError naming ``argname`` when the dtype is not one of the four.
    """
    if isinstance(dtype, str) and dtype.lower() in _ALIASES:
        return np.dtype(_ALIASES[dtype.lower()])
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:  # pragma: no cover - message path
        raise TypeError(f"{argname}={dtype!r} is not a dtype; use one of fp64, fp32, fp16, bf16") from exc
    if dt not in _NAMES:
        raise TypeError(
            f"{argname} has unsupported dtype {dt}; supported are float64, float32, float16 and "
            "ml_dtypes.bfloat16 (convert first, e.g. x.astype(numpy.float64))"
        )
    return dt


def native(dtype) -> np.dtype:
    """The same dtype in the machine's byte order (a big-endian float64 becomes float64)."""
    return np.dtype(dtype).newbyteorder("=")


def work_dtype(dtype) -> np.dtype:
    """The dtype the NumPy engine computes in: FP32 for FP16/BF16, the dtype itself otherwise."""
    dt = np.dtype(dtype)
    return np.dtype(np.float32) if dt.itemsize == 2 else dt


def eps(dtype) -> float:
    """Unit roundoff u = 2**-p (half the machine epsilon) of a storage dtype."""
    return {"fp64": 2.0**-53, "fp32": 2.0**-24, "fp16": 2.0**-11, "bf16": 2.0**-8}[short_name(dtype)]


def max_finite(dtype) -> float:
    """Largest finite value of the dtype."""
    return float(ml_dtypes.finfo(np.dtype(dtype)).max)


def rounder(dtype, temporary: bool = False):
    """Function rounding a work-dtype array to the storage dtype (kept in the work dtype).

    The identity for FP64 and FP32; the bits of a round trip through the 16-bit format
    (round to nearest even) for FP16 (compiled: :mod:`fwht_gpu.rounding`) and BF16.  With
    ``temporary`` the argument is a temporary the caller gives up: FP16 rounds it in place.
    """
    dt = np.dtype(dtype)
    if dt.itemsize != 2:
        return lambda a: a
    if dt == np.float16:
        from .rounding import round_to_fp16
        return (lambda a: round_to_fp16(a, in_place=True)) if temporary else round_to_fp16
    return lambda a: a.astype(dt).astype(np.float32)
