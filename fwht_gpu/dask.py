"""The transform of dask arrays (the optional extra ``pagh-mm[dask]``):
:func:`fwht` and :func:`ifwht` along an axis held whole by every chunk, through
``map_blocks``.  Each row is transformed by one task with :func:`fwht_gpu.fwht` (NumPy or CuPy
blocks), so the result has the bits of the in-memory transform, whatever the chunks of the other
axes."""
from __future__ import annotations

from .transform import fwht as _fwht
from .transform import ifwht as _ifwht


def _along(x, axis: int, fn, options):
    if not (type(x).__module__.split(".")[0] == "dask" and hasattr(x, "chunks")):
        raise TypeError("fwht_gpu.dask transforms dask arrays; for in-memory arrays use "
                        "fwht_gpu.fwht")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis={axis} is out of range for a {x.ndim}-d array")
    ax = axis % x.ndim
    if len(x.chunks[ax]) != 1:
        raise ValueError(f"axis {axis} is split into {len(x.chunks[ax])} chunks: the transform "
                         f"mixes every element of it; rechunk it whole, e.g. "
                         f"x.rechunk({{{ax}: -1}})")
    if options.get("out") is not None:
        raise ValueError("out= is not supported for dask arrays (the result is a new dask array)")
    return x.map_blocks(fn, axis=ax, dtype=x.dtype, **options)


def fwht(x, axis: int = -1, **options):
    """:func:`fwht_gpu.fwht` of a dask array along ``axis`` (one chunk along it); keyword
    options as there (``out`` aside)."""
    return _along(x, axis, _fwht, options)


def ifwht(x, axis: int = -1, **options):
    """:func:`fwht_gpu.ifwht` of a dask array along ``axis`` (one chunk along it)."""
    return _along(x, axis, _ifwht, options)
