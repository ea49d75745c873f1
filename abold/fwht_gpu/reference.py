"""High-precision reference transforms and the thesis's error metrics.

Two independent references:

* :func:`mp_fwht` - mpmath at ``prec`` bits (113 by default, the thesis's
  128-bit float), for small n;
* :func:`dd_fwht` - vectorized double-double arithmetic (about 106 bits,
  error-free TwoSum/Dekker products), n = 2**20 in about a second.

Both return a :class:`DD` (hi, lo) pair of float64 arrays whose sum is the
reference value.  The tests check them against each other and against exact
integer results.
"""
from __future__ import annotations

from typing import NamedTuple

import mpmath
import numpy as np

from .plan import check_length


class DD(NamedTuple):
    """A double-double array: the value is hi + lo with |lo| <= ulp(hi) / 2."""

    hi: np.ndarray
    lo: np.ndarray

    def to_float64(self) -> np.ndarray:
        return self.hi + self.lo

    @staticmethod
    def from_array(x) -> "DD":
        hi = np.asarray(x).astype(np.float64)
        return DD(hi, np.zeros_like(hi))


# --- error-free transformations -------------------------------------------

def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _fast_two_sum(a, b):
    s = a + b
    return s, b - (s - a)


def _split(a):
    c = 134217729.0 * a
    hi = c - (c - a)
    return hi, a - hi


def _two_prod(a, b):
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def dd_add(x: DD, y: DD) -> DD:
    """Accurate double-double addition."""
    s, e = _two_sum(x.hi, y.hi)
    t, f = _two_sum(x.lo, y.lo)
    s, e = _fast_two_sum(s, e + t)
    return DD(*_fast_two_sum(s, e + f))


def dd_neg(x: DD) -> DD:
    return DD(-x.hi, -x.lo)


def dd_mul(x: DD, y: DD) -> DD:
    """Double-double multiplication."""
    p, e = _two_prod(x.hi, y.hi)
    e = e + (x.hi * y.lo + x.lo * y.hi)
    return DD(*_fast_two_sum(p, e))


def dd_scalar(value) -> DD:
    """A double-double scalar from an mpmath/Python number (e.g. 1/sqrt(n))."""
    with mpmath.workprec(200):
        v = mpmath.mpf(value)
        hi = float(v)
        lo = float(v - hi)
    return DD(np.float64(hi), np.float64(lo))


def dd_scale_pow2(x: DD, k: int) -> DD:
    """x * 2**k (exact)."""
    f = 2.0 ** k
    return DD(x.hi * f, x.lo * f)


# --- reference transforms -------------------------------------------------

def _as_rows(x, axis):
    x = np.moveaxis(np.asarray(x), axis, -1)
    n = x.shape[-1]
    check_length(n, "x")
    return x, n


def _xp(a):
    """numpy, or cupy for CuPy arrays (the double-double code is array-module generic)."""
    mod = type(a).__module__
    if mod.startswith("cupy"):
        import cupy
        return cupy
    return np


def dd_fwht(x, axis: int = -1) -> DD:
    """Unnormalized FWHT in double-double arithmetic along ``axis``.

    ``x`` may be any float array (converted exactly to float64; NumPy or CuPy, which then
    computes on the GPU) or a :class:`DD`.
    """
    first = x.hi if isinstance(x, DD) else x
    xp = _xp(first)
    if isinstance(x, DD):
        hi, lo = (xp.moveaxis(xp.asarray(a, dtype=xp.float64), axis, -1) for a in x)
    else:
        hi = xp.moveaxis(xp.asarray(x), axis, -1)
        check_length(hi.shape[-1], "x")
        hi = hi.astype(xp.float64)
        lo = xp.zeros_like(hi)
    shape = hi.shape
    n = shape[-1]
    check_length(n, "x")
    hi, lo = hi.reshape(-1, n).copy(), lo.reshape(-1, n).copy()
    m = 1
    while m < n:
        vh, vl = hi.reshape(hi.shape[0], -1, 2, m), lo.reshape(lo.shape[0], -1, 2, m)
        a = DD(vh[:, :, 0, :].copy(), vl[:, :, 0, :].copy())
        b = DD(vh[:, :, 1, :].copy(), vl[:, :, 1, :].copy())
        s, d = dd_add(a, b), dd_add(a, dd_neg(b))
        vh[:, :, 0, :], vl[:, :, 0, :] = s
        vh[:, :, 1, :], vl[:, :, 1, :] = d
        m *= 2
    back = lambda a: xp.moveaxis(a.reshape(shape), -1, axis)  # noqa: E731
    return DD(back(hi), back(lo))


def mp_fwht(x, axis: int = -1, prec: int = 113) -> DD:
    """Unnormalized FWHT with mpmath at ``prec`` bits of precision (slow: small n only)."""
    if prec < 113:
        raise ValueError(f"prec={prec}: the reference needs at least 113 bits")
    xr, n = _as_rows(np.asarray(x).astype(np.float64), axis)
    shape = xr.shape
    rows = xr.reshape(-1, n)
    hi = np.empty(rows.shape)
    lo = np.empty(rows.shape)
    with mpmath.workprec(prec):
        for r, row in enumerate(rows):
            v = [mpmath.mpf(float(t)) for t in row]
            m = 1
            while m < n:
                for i in range(0, n, 2 * m):
                    for j in range(i, i + m):
                        a, b = v[j], v[j + m]
                        v[j], v[j + m] = a + b, a - b
                m *= 2
            for k, t in enumerate(v):
                hi[r, k] = float(t)
                lo[r, k] = float(t - mpmath.mpf(hi[r, k]))
    back = lambda a: np.moveaxis(a.reshape(shape), -1, axis)  # noqa: E731
    return DD(back(hi), back(lo))


def reference_fwht(x, axis: int = -1, *, norm: str = "backward", inverse: bool = False,
                   method: str = "auto") -> DD:
    """High-precision transform with :func:`fwht_gpu.fwht` norm semantics.

    ``method`` is "mpmath" (113 bits), "dd" (double-double) or "auto" (mpmath for
    n <= 64, double-double otherwise).
    """
    from .transform import norm_factor
    n = np.shape(x)[axis] if not isinstance(x, DD) else np.shape(x.hi)[axis]
    if method == "auto":
        method = "mpmath" if n <= 64 and not isinstance(x, DD) else "dd"
    if method == "mpmath":
        y = mp_fwht(x, axis)
    elif method == "dd":
        y = dd_fwht(x, axis)
    else:
        raise ValueError(f"method={method!r}; choose 'auto', 'mpmath' or 'dd'")
    f = norm_factor(n, norm, inverse)
    if f != 1.0:
        y = dd_mul(y, dd_scalar(mpmath.mpf(1) / mpmath.sqrt(n) if norm == "ortho"
                                else mpmath.mpf(1) / n))
    return y


# --- error metrics (thesis 3.5 / 4.1) -------------------------------------

def _abs_err(y, ref) -> np.ndarray:
    ref = ref if isinstance(ref, DD) else DD.from_array(ref)
    xp = _xp(ref.hi)
    y = xp.asarray(y).astype(xp.float64)
    return xp.abs((y - ref.hi) - ref.lo), xp.abs(ref.to_float64())


def absolute_errors(y, ref) -> np.ndarray:
    """|y - ref| elementwise, ref a :class:`DD` or an array."""
    return _abs_err(y, ref)[0]


def relative_errors(y, ref) -> np.ndarray:
    """|y - ref| / |ref| over the entries where ref != 0 (flattened)."""
    err, mag = _abs_err(y, ref)
    nz = mag > 0
    return err[nz] / mag[nz]


def mean_relative_error(y, ref) -> float:
    """Mean over entries with ref != 0 of |y - ref| / |ref| (the thesis's headline metric)."""
    r = relative_errors(y, ref)
    return float(r.mean()) if r.size else 0.0


def max_relative_error(y, ref) -> float:
    """Largest |y - ref| / |ref| over entries with ref != 0."""
    r = relative_errors(y, ref)
    return float(r.max()) if r.size else 0.0


def error_metrics(y, ref) -> dict:
    """The three metrics at once (one pass over the data)."""
    err, mag = _abs_err(y, ref)
    nz = mag > 0
    rel = err[nz] / mag[nz]
    return {"mean_rel": float(rel.mean()) if rel.size else 0.0,
            "max_rel": float(rel.max()) if rel.size else 0.0,
            "mean_abs": float(err.mean())}


def mean_absolute_error(y, ref) -> float:
    """Mean of |y - ref| over all entries."""
    return float(absolute_errors(y, ref).mean())
