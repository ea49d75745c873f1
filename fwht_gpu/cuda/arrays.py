"""The GPU engine's entry for CuPy arrays: array layout, work buffers, overflow settling.

:func:`layout` tells the planner how an array lies (the batch, and whether the axis can be
transformed in place as interleaved transforms); :func:`transform` executes the plan it
made, with the same signature as the NumPy engine's ``fwht_gpu.cpu.transform``.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dt
from ..overflow import checking, overflow_error, recompute_rows
from ..plan import Plan
from . import engine
from .device import check_memory, cupy


def _usable(a) -> bool:
    """C-contiguous and 16-byte aligned: the kernels read and write it directly."""
    return a.flags.c_contiguous and a.data.ptr % 16 == 0


def layout(x, axis: int, out) -> tuple[int, int]:
    """(batch, interleave) of a transform along ``axis`` of the CuPy array ``x``: interleave
    s > 0 when the axis is not the last, x (and ``out``) are C-contiguous and aligned and
    the trailing dimensions hold 2**s elements (then the planner may transform in place
    with strided passes, no transpose)."""
    n = x.shape[axis]
    batch = x.size // n if n else 0
    if axis == x.ndim - 1:
        return batch, 0
    inner = math.prod(x.shape[axis + 1:])
    if (_usable(x) and inner & (inner - 1) == 0
            and (out is None or _usable(out))):
        return batch, inner.bit_length() - 1
    return batch, 0


def transform(plan: Plan, x, axis: int, factor: float = 1.0, out=None):
    """``plan`` along ``axis`` of the CuPy array ``x`` times ``factor``, into ``out`` (or a new
    array); ``x`` is never modified unless it is ``out``.

    With ``plan.interleave`` the axis is transformed in place by strided passes.  Otherwise
    the transform axis must be contiguous: a view whose moved axis already is (and is
    aligned) is read directly, anything else goes through one explicit transpose copy; the
    result goes straight into ``out`` when its layout allows.  Transforms whose unscaled
    values overflow while their scaled result fits are recomputed in float64 (under
    ``errstate(overflow="ignore")`` nothing is checked and the call does not wait for the
    kernels)."""
    cp = cupy()
    n = x.shape[axis]
    if x.size == 0:
        return out if out is not None else cp.empty_like(x)
    check = checking()
    source = _input_kept(x, axis, out, plan, factor) if check else None
    if plan.interleave:
        dst = out if out is not None else cp.empty(x.shape, dtype=x.dtype)
        row = plan.n << plan.interleave
        bad = engine.run(plan, x.reshape(-1, row), dst.reshape(-1, row), factor, check)
        if bad is not None:
            _settle(bad, plan, factor, source, cp.moveaxis(dst, axis, -1), axis)
        return dst
    last = axis == x.ndim - 1       # the axis is already last: the arrays are their own views
    xm = x if last else cp.moveaxis(x, axis, -1)
    om = None if out is None else out if last else cp.moveaxis(out, axis, -1)
    need = 0 if (om is not None and _usable(om)) else x.nbytes
    need += 0 if _usable(xm) else x.nbytes
    check_device_memory(cp, need, "the work buffers")
    if _usable(xm):
        src = xm
    else:
        src = cp.empty(xm.shape, dtype=x.dtype)
        src[...] = xm                                   # explicit transpose / realignment
    if om is not None and _usable(om):
        dst = om
    elif src is not xm:
        dst = src                                       # private copy: transform in place
    else:
        dst = cp.empty(xm.shape, dtype=x.dtype)
    bad = engine.run(plan, src.reshape(-1, n), dst.reshape(-1, n), factor, check)
    _settle(bad, plan, factor, source, dst, axis)
    res = dst if last else cp.moveaxis(dst, -1, axis)
    if out is not None:
        if dst is not om:
            out[...] = res
        return out
    return res if res.flags.c_contiguous else cp.ascontiguousarray(res)


def check_device_memory(cp, need: int, what: str) -> None:
    """:func:`~fwht_gpu.cuda.device.check_memory`, without querying the device when the answer
    is known: nothing is needed, or CuPy's pool alone holds enough free bytes (the check
    counts them: device free bytes + pooled free bytes >= need)."""
    if need <= 0:
        return
    try:
        pooled = cp.get_default_memory_pool().free_bytes()
    except Exception:
        pooled = 0
    if need <= pooled:
        return
    check_memory(need, what)


def _input_kept(x, axis, out, plan, factor):
    """The input transforms can be recomputed from after the call: ``x`` itself, unless the
    call is in place (``out`` overlaps ``x``) and a scaled transform could overflow before its
    scaling (then a copy of ``x`` when memory allows, else None)."""
    cp = cupy()
    if out is None or not cp.may_share_memory(out, x):
        return x
    if factor >= 1.0 or plan.dtype == np.float64 or not _could_overflow(x, plan):
        return None
    try:
        check_memory(x.nbytes, "a copy of the input of an in-place scaled transform")
    except MemoryError:
        return None
    return x.copy()


def _could_overflow(x, plan) -> bool:
    """Whether some unscaled intermediate value could leave the dtype's range: n max|x| times
    the growth of rounding (Folklore, stabilizers) or of Alman-Rao's pre-scaling."""
    u, exp = engine.bits(x)
    mag = u.dtype.type((1 << (8 * x.dtype.itemsize - 1)) - 1)
    top = engine.reductions()[1](u, exp, mag).reshape(1).view(x.dtype).astype(np.float64)
    growth = 1.05 if plan.algorithm == "folklore" else 2.0 ** (plan.log2n // 3 + 5)
    return float(top[0]) * plan.n * growth >= _dt.max_finite(plan.dtype)


def _run64(plan: Plan, x64, factor: float):
    y64 = cupy().empty_like(x64)
    engine.run(plan, x64, y64, factor)
    return y64


def _settle(bad, plan, factor, source, result_m, axis) -> None:
    """Recompute the overflowed transforms (mask ``bad``) of ``source`` into ``result_m`` (the
    result with the transform axis moved last), or raise TransformOverflowError."""
    if bad is None:
        return
    cp = cupy()
    if source is None:
        err = overflow_error(plan.dtype)
        if factor < 1.0 and plan.dtype != np.float64:
            err.args = (err.args[0] + "; the scaled result may fit, but this in-place call kept no "
                        "copy of the input to recompute it in float64: transform out of place",)
        raise err
    xm = cp.moveaxis(source, axis, -1)
    if xm.ndim == 1:
        xm, result_m = xm[None], result_m[None]
    idx = cp.unravel_index(cp.nonzero(bad)[0], xm.shape[:-1])
    settle_rows(bad, plan, factor, xm[idx], result_m, idx)


def settle_rows(bad, plan, factor, rows, result2, idx=None) -> None:
    """Recompute the overflowed transforms (mask ``bad``) into ``result2[idx]`` from ``rows``:
    the input rows ``idx`` (CuPy), or all input rows as a (batch, n) host array."""
    if bad is None:
        return
    cp = cupy()
    if idx is None:
        idx = cp.nonzero(bad)[0]
        rows = cp.asarray(rows[idx.get()])
    result2[idx] = recompute_rows(plan, rows, factor, _run64, cp)
