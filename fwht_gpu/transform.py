"""fwht / ifwht: argument checking and dispatch on the array type."""
from __future__ import annotations

import math

import numpy as np

from . import cpu, memory
from . import dtypes as _dt
from .plan import Plan, check_length, make_plan

NORMS = ("backward", "ortho", "forward")


class TransformOverflowError(OverflowError):
    """The transform of finite input produced inf or NaN (range of the dtype exceeded)."""


def _is_cupy(x) -> bool:
    mod = type(x).__module__
    return mod.startswith("cupy") and hasattr(x, "__cuda_array_interface__")


def norm_factor(n: int, norm: str, inverse: bool) -> float:
    """Scale applied after the unnormalized transform, as in numpy.fft."""
    if norm not in NORMS:
        raise ValueError(f"norm={norm!r}; choose 'backward', 'ortho' or 'forward'")
    if norm == "ortho":
        return 1.0 / math.sqrt(n)
    scaled = (norm == "backward") == inverse
    return 1.0 / n if scaled else 1.0


def overflow_error(dtype) -> TransformOverflowError:
    dt = np.dtype(dtype)
    return TransformOverflowError(
        f"the {_dt.short_name(dt)} transform overflowed: results exceed the largest "
        f"{dt} value ({_dt.max_finite(dt):.6g}). Transform in a wider dtype "
        "(e.g. x.astype(numpy.float32)) or scale the input down first")


def _check_args(x, axis, out, xp):
    if x.ndim == 0:
        raise ValueError("x: a 0-d array has no axis to transform; pass at least a 1-d array")
    _dt.resolve(x.dtype, "x")
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"axis must be an int, got {axis!r}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis={axis} is out of bounds for a {x.ndim}-d array")
    axis = int(axis) % x.ndim
    if out is not None:
        if not isinstance(out, xp.ndarray):
            raise TypeError(f"out must be a {xp.__name__}.ndarray like x, got {type(out).__name__}")
        odt = _dt.native(out.dtype) if xp is np else out.dtype   # written through a conversion
        if out.shape != x.shape or odt != x.dtype:
            raise ValueError(f"out has shape {out.shape} and dtype {out.dtype}; it must match x "
                             f"({x.shape}, {x.dtype})")
        if xp is np and not out.flags.writeable:
            raise ValueError("out is read-only; pass a writeable array")
    return axis


def _transform(x, axis, norm, algorithm, stabilizer, out, device, inverse, compute_dtype=None):
    if device not in (None, "cpu", "cuda", "gpu"):
        raise ValueError(f"device={device!r}; choose None (the array decides), 'cpu' or 'cuda'")
    if _is_cupy(x):
        if device == "cpu":
            raise ValueError("device='cpu' with a CuPy array: copy it to the host yourself "
                             "(x.get()); fwht never moves a CuPy array to the host silently")
        from .cuda import launch
        axis = _check_args(x, axis, out, launch.cupy())
        return launch.transform(x, axis, norm, algorithm, stabilizer, out, inverse, compute_dtype)
    if not isinstance(x, np.ndarray) or isinstance(x, np.ma.MaskedArray):
        if isinstance(x, np.ma.MaskedArray):
            raise TypeError("x is a masked array: the transform would use its masked values; "
                            "pass x.filled(0) (or another fill value) or x.data")
        x = np.asarray(x)
    if x.dtype != _dt.native(x.dtype):
        x = x.astype(_dt.native(x.dtype))             # non-native byte order: converted once
    axis = _check_args(x, axis, out, np)
    n = x.shape[axis]
    check_length(n, "x")
    factor = norm_factor(n, norm, inverse)
    if device in ("cuda", "gpu"):
        from .cuda import launch
        return launch.transform_host(x, axis, norm, algorithm, stabilizer, out, inverse,
                                     compute_dtype=compute_dtype)
    plan = make_plan(n, x.dtype, algorithm, stabilizer, "cpu", compute_dtype)
    return _run(plan, x, axis, factor, out, None, recompute=True)


def run_plan(plan: Plan, x: np.ndarray, axis: int = -1, factor: float = 1.0, out=None,
             counter: cpu.OpCounter | None = None) -> np.ndarray:
    """Execute ``plan`` with the NumPy engine along ``axis`` of ``x``, then multiply by ``factor``.

    Raises :class:`TransformOverflowError` when a transform of finite input gives a
    non-finite value (checked per transform, whatever the other rows hold)."""
    return _run(plan, x, axis, factor, out, counter, recompute=False)


def _run(plan, x, axis, factor, out, counter, recompute: bool):
    axis = axis % x.ndim
    xm = np.moveaxis(x, axis, -1)
    shape = xm.shape
    x2 = xm.reshape(-1, plan.n)
    if x2.shape[0] == 0:
        y2 = x2.copy()
    else:
        # reshape copy, engine output, result, and the engine's work arrays on row blocks
        memory.check(3 * x2.nbytes + cpu.work_bytes(plan, x2.shape[0]),
                     f"the {_dt.short_name(plan.dtype)} transform of {x2.shape[0]} x {plan.n} values",
                     "transform fewer rows at a time")
        y2 = cpu.scale(cpu.execute(plan, x2, counter), factor)
        bad = overflowed_rows(x2, y2, np)
        if bad is not None:
            if not recompute:
                raise overflow_error(plan.dtype)
            y2[bad] = recompute_rows(plan, x2[bad], factor)
    y = np.moveaxis(y2.reshape(shape), -1, axis)
    if out is None:
        out = np.empty(x.shape, dtype=x.dtype)
    out[...] = y
    return out


def _row_finite(a, xp):
    """Per row of a 2-d array: all values finite (in blocks of rows: no full-size temporary)."""
    rows = max(1, (8 << 20) // max(1, a.shape[1]))
    return xp.concatenate([xp.isfinite(a[r:r + rows]).all(axis=1)
                           for r in range(0, a.shape[0], rows)])


def overflowed_rows(x2, y2, xp):
    """Rows (a boolean mask) of the (batch, n) input ``x2`` whose values are all finite while
    their transform ``y2`` is not, or None when there are none.  Per row: a NaN or Inf in
    one transform never hides an overflow in another."""
    out_ok = _row_finite(y2, xp)
    if bool(out_ok.all()):
        return None
    bad = ~out_ok & _row_finite(x2, xp)
    return bad if bool(bad.any()) else None


def recompute_rows(plan: Plan, xrows, factor: float):
    """The scaled transforms (``factor`` < 1: ifwht, norm 'forward'/'ortho') of rows whose
    unscaled transform left the range of ``plan.dtype``: computed in float64 with the same
    algorithm and stabilizer, multiplied by ``factor`` in float64, rounded to float32 and
    then to the dtype (the same steps on every engine).  TransformOverflowError when the
    scaled result does not fit either."""
    if factor >= 1.0 or plan.dtype == np.float64:
        raise overflow_error(plan.dtype)
    wide = make_plan(plan.n, np.float64, plan.algorithm, plan.stabilizer, plan.device)
    x64 = xrows.astype(np.float64)
    if _is_cupy(xrows):
        from .cuda import launch
        y64 = launch.cupy().empty_like(x64)
        launch.execute(wide, x64, y64, factor)
        xp = launch.cupy()
    else:
        y64, xp = _run(wide, x64, -1, factor, None, None, recompute=False), np
    with np.errstate(over="ignore"):
        y = y64.astype(np.float32).astype(plan.dtype)
    if not bool(xp.isfinite(y).all()):
        raise overflow_error(plan.dtype)
    return y


def fwht(x, axis: int = -1, *, norm: str = "backward", algorithm: str = "folklore",
         stabilizer: str | None = None, compute_dtype=None, out=None, device: str | None = None):
    """Fast Walsh-Hadamard transform along ``axis`` (Hadamard / natural order).

    The unnormalized transform equals ``scipy.linalg.hadamard(n) @ x`` along the axis.

    Parameters
    ----------
    x : numpy.ndarray or cupy.ndarray
        float64, float32, float16 or ml_dtypes.bfloat16; the length along ``axis``
        must be a power of two.  The array decides the device (NumPy: CPU,
        CuPy: GPU); the result has the input's type, dtype and shape.
    axis : int
        Axis to transform (default last); any other axes are batch axes.
    norm : {"backward", "ortho", "forward"}
        As in :mod:`numpy.fft`: "backward" leaves the forward transform unscaled,
        "ortho" scales by 1/sqrt(n), "forward" by 1/n.
    algorithm : {"folklore", "alman"}
        Radix-2 butterflies, or Alman-Rao's 23-operation H8 blocks.
    stabilizer : {None, "kahan", "neumaier", "kahan-pass", "neumaier-pass"}
        Compensated butterflies (Folklore only): with a per-element error vector folded in
        at the end (thesis 3.3), or ("-pass") compensation kept within each GPU pass and
        folded in where the pass writes back (no error vector in memory).
    compute_dtype : {None, "float32", "float64"}
        Arithmetic inside a pass in this wider dtype (FP16/BF16 data in FP32, FP32 in FP64),
        rounded to the data's dtype where each pass writes back.
    out : array, optional
        Destination of the same type, shape and dtype; may be ``x`` itself (in place).
    device : {None, "cpu", "cuda"}
        ``"cuda"`` with a NumPy array transforms on the GPU through pinned memory
        and returns a NumPy array.

    Raises
    ------
    ValueError
        Length not a power of two (the message names the next one), bad norm,
        algorithm, stabilizer, axis or ``out``.
    TypeError
        Unsupported dtype.
    TransformOverflowError
        Finite input whose transform exceeds the dtype's range.
    """
    return _transform(x, axis, norm, algorithm, stabilizer, out, device, False, compute_dtype)


def ifwht(x, axis: int = -1, *, norm: str = "backward", algorithm: str = "folklore",
          stabilizer: str | None = None, compute_dtype=None, out=None, device: str | None = None):
    """Inverse transform: ``fwht`` with the inverse's scaling (1/n for norm="backward").

    ``ifwht(fwht(x)) == x`` up to rounding for every ``norm``.  Arguments as :func:`fwht`.
    """
    return _transform(x, axis, norm, algorithm, stabilizer, out, device, True, compute_dtype)


def operation_count(n: int, algorithm: str = "folklore", stabilizer: str | None = None) -> dict:
    """Element operations of one length-n transform, counted by running the NumPy engine.

    Returns a dict with ``add_sub`` (additions/subtractions), ``halving`` (the H8
    blocks' division by 2), ``scaling`` (Alman-Rao power-of-two pre-scalings of
    elements with a non-zero exponent) and ``compare`` (Neumaier's magnitude tests).
    """
    plan = make_plan(n, np.float64, algorithm, stabilizer, "cpu")
    counter = cpu.OpCounter()
    x = np.random.default_rng(0).standard_normal((1, n))
    cpu.execute(plan, x, counter)
    return counter.as_dict()
