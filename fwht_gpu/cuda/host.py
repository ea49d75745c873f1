"""The GPU engine's entry for NumPy arrays: transform host memory on the GPU.

Same signature as ``fwht_gpu.cpu.transform``; the array must fit in device memory (one
clear error otherwise).
"""
from __future__ import annotations

import numpy as np

from ..overflow import checking
from ..plan import Plan
from . import engine
from .arrays import settle_rows
from .device import check_memory, cupy, is_pinned


def transform(plan: Plan, x: np.ndarray, axis: int, factor: float = 1.0, out=None,
              method: str = "register") -> np.ndarray:
    """``plan`` along ``axis`` of the host array ``x`` on the GPU, into ``out`` (or a new
    NumPy array).

    ``method="register"`` page-locks the host arrays in place (cudaHostRegister) so the
    two DMA copies read and write them directly; ``"staging"`` copies through a pinned
    buffer instead."""
    cp = cupy()
    n = x.shape[axis]
    if out is None:
        out = np.empty(x.shape, dtype=x.dtype)
    if x.size == 0:
        return out
    check_memory(x.nbytes, "the device copy of the host array")
    xm = np.moveaxis(x, axis, -1)
    om = np.moveaxis(out, axis, -1)
    src = xm if xm.flags.c_contiguous else np.ascontiguousarray(xm)
    # the DMA copy writes native bytes: a byte-swapped or strided ``out`` gets them by conversion
    direct = om.flags.c_contiguous and om.dtype == x.dtype and om.flags.writeable
    dst = om if direct else np.empty(om.shape, dtype=x.dtype)
    dev = cp.empty(src.shape, dtype=x.dtype)
    stream = cp.cuda.get_current_stream()
    rt = cp.cuda.runtime

    def on_device(host_in, host_out):
        dev.data.copy_from_host_async(host_in.ctypes.data, x.nbytes, stream)
        bad = engine.run(plan, dev.reshape(-1, n), dev.reshape(-1, n), factor, checking())
        settle_rows(bad, plan, factor, src.reshape(-1, n), dev.reshape(-1, n))
        dev.data.copy_to_host_async(host_out.ctypes.data, x.nbytes, stream)
        stream.synchronize()

    registered = []
    try:
        if method == "register":
            for a in (src, dst) if dst.ctypes.data != src.ctypes.data else (src,):
                if not is_pinned(a):
                    rt.hostRegister(a.ctypes.data, a.nbytes, 0)
                    registered.append(a.ctypes.data)
            on_device(src, dst)
        else:
            pinned = cp.cuda.alloc_pinned_memory(x.nbytes)
            host = np.frombuffer(pinned, dtype=x.dtype, count=x.size).reshape(src.shape)
            host[...] = src
            on_device(host, host)
            dst[...] = host
    finally:
        for ptr in registered:
            rt.hostUnregister(ptr)
    if dst is not om:
        om[...] = dst
    return out
