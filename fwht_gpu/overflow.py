"""Overflow of a transform: detected per transform on every engine; a scaled transform whose
unscaled values overflowed while the scaled result fits is recomputed in float64.

:func:`errstate` (``overflow="ignore"``) turns the detection off for the calls made inside it,
on every engine alike: the results are then the engines' values as computed (inf or NaN where
a value left the dtype's range, also where the scaled result would have fitted), and a GPU call
no longer waits for its kernels (the check reads a flag back: one synchronisation per call), so
calls queue on the stream like any CuPy or PyTorch operation."""
from __future__ import annotations

import contextlib
import contextvars

import numpy as np

from . import dtypes as _dt
from .plan import Plan, make_plan


class TransformOverflowError(OverflowError):
    """The transform of finite input produced inf or NaN (range of the dtype exceeded)."""


#: What a transform does when its values leave the dtype's range (see :func:`errstate`).
OVERFLOW_MODES = ("raise", "ignore")
_OVERFLOW = contextvars.ContextVar("fwht_gpu_overflow", default="raise")


@contextlib.contextmanager
def errstate(*, overflow: str):
    """Context manager (or decorator) for overflow handling, as :func:`numpy.errstate`:
    ``overflow="raise"`` (the default: overflowed transforms are recomputed in float64 when
    the scaled result fits, else :class:`TransformOverflowError`; a GPU call waits for its
    kernels to read the overflow flag) or ``"ignore"`` (no detection: inf or NaN where values
    left the range, and GPU calls return without waiting, so back-to-back calls overlap their
    host work with the kernels). Per thread and per asyncio task (a context variable); every
    engine alike, so the same values on the CPU and the GPU in either mode (NaN where NaN:
    the payloads are the device's).

    >>> with fwht_gpu.errstate(overflow="ignore"):
    ...     y = fwht_gpu.fwht(x_gpu)     # returns once the kernel is queued
    """
    if overflow not in OVERFLOW_MODES:
        raise ValueError(f"overflow={overflow!r}; choose one of {OVERFLOW_MODES}")
    token = _OVERFLOW.set(overflow)
    try:
        yield
    finally:
        _OVERFLOW.reset(token)


def geterr() -> dict:
    """The current handling: ``{"overflow": "raise" | "ignore"}`` (see :func:`errstate`)."""
    return {"overflow": _OVERFLOW.get()}


def checking() -> bool:
    """Whether transforms detect overflow here (:func:`errstate`)."""
    return _OVERFLOW.get() == "raise"


def overflow_error(dtype) -> TransformOverflowError:
    dt = np.dtype(dtype)
    return TransformOverflowError(
        f"the {_dt.short_name(dt)} transform overflowed: results exceed the largest "
        f"{dt} value ({_dt.max_finite(dt):.6g}). Transform in a wider dtype "
        "(e.g. x.astype(numpy.float32)) or scale the input down first")


def _row_finite(a, xp):
    """Per row of a 2-d array: all values finite (in blocks of rows: no full-size temporary)."""
    rows = max(1, (8 << 20) // max(1, a.shape[1]))
    return xp.concatenate([xp.isfinite(a[r:r + rows]).all(axis=1)
                           for r in range(0, a.shape[0], rows)])


def overflowed_rows(x2, y2, xp):
    """Rows (a boolean mask) of the (batch, n) input ``x2`` whose values are all finite while
    their transform ``y2`` is not, or None when there are none.  Per row: a NaN or Inf in
    one transform never hides an overflow in another. None under
    ``errstate(overflow="ignore")``."""
    if not checking():
        return None
    out_ok = _row_finite(y2, xp)
    if bool(out_ok.all()):
        return None
    bad = ~out_ok & _row_finite(x2, xp)
    return bad if bool(bad.any()) else None


def recompute_rows(plan: Plan, xrows, factor: float, run64, xp):
    """The scaled transforms (``factor`` < 1: ifwht, norm 'forward'/'ortho') of rows whose
    unscaled transform left the range of ``plan.dtype``: computed in float64 with the same
    algorithm and stabilizer by ``run64(plan64, x64, factor)`` (the caller's engine),
    rounded to float32 and then to the dtype (the same steps on every engine).
    TransformOverflowError when the scaled result does not fit either."""
    if factor >= 1.0 or plan.dtype == np.float64:
        raise overflow_error(plan.dtype)
    wide = make_plan(plan.n, np.float64, plan.algorithm, plan.stabilizer, plan.device,
                     tuning=plan.tuning)
    y64 = run64(wide, xrows.astype(np.float64), factor)
    with np.errstate(over="ignore"):
        y = y64.astype(np.float32).astype(plan.dtype)
    if not bool(xp.isfinite(y).all()):
        raise overflow_error(plan.dtype)
    return y
