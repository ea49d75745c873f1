"""Arrays of other frameworks (PyTorch, JAX, anything with ``__dlpack__``): their memory seen
as NumPy (host) or CuPy (GPU) arrays without a copy, and results given back in the caller's
type on the caller's device.

:func:`to_engine` is the way in: a PyTorch tensor or JAX array becomes a zero-copy NumPy or
CuPy view of its memory (PyTorch's bfloat16 through an int16 view, which NumPy's DLPack
import lacks; JAX's bfloat16 through ``numpy.asarray``); the returned ``back`` turns an
engine result into the caller's type again (zero-copy too, but JAX's bfloat16: a copy).
A PyTorch tensor on a GPU is transformed on PyTorch's current stream of its device. NumPy and
CuPy arrays, lists and other array-likes pass through unchanged (``back`` is None).
"""
from __future__ import annotations

import contextlib

import numpy as np

from . import dtypes as _dt

_CPU, _CUDA = 1, 2                  # DLPack device types


def _module(x) -> str:
    return type(x).__module__.split(".")[0]


def is_foreign(x) -> bool:
    """Whether ``x`` is another framework's array: it has ``__dlpack__`` and is neither a
    NumPy nor a CuPy array."""
    return hasattr(x, "__dlpack__") and not isinstance(x, np.ndarray) and \
        _module(x) not in ("cupy", "cupyx", "numpy")


def _torch_view(x, written: bool):
    """A PyTorch tensor as plain memory (no autograd history, lazy negation or conjugation
    applied), bfloat16 as int16. A tensor recording gradients is refused: this path records no
    autograd history (fwht_gpu.torch does)."""
    import torch
    name = "out" if written else "x"
    if x.requires_grad and (written or torch.is_grad_enabled()):
        raise TypeError(f"{name} requires grad: fwht_gpu.fwht records no autograd history; use "
                        "fwht_gpu.torch.fwht (differentiable), or pass x.detach()")
    if written and (x.is_neg() or x.is_conj()):
        raise ValueError("out is a lazily negated or conjugated view; pass a plain tensor")
    x = x.detach().resolve_neg().resolve_conj()
    return (x.view(torch.int16), True) if x.dtype == torch.bfloat16 else (x, False)


def _written(out) -> None:
    """Tell the framework that ``out`` was written through its engine view (PyTorch: the
    tensor's version counter, so that autograd sees the change)."""
    if is_foreign(out) and _module(out) == "torch":
        import torch
        torch.autograd.graph.increment_version(out)


def through(x, out, fn):
    """``fn(array, out_array)`` on the engine's views of ``x`` and ``out`` (any framework's),
    on ``x``'s device and stream; the result in ``x``'s type, or ``out`` itself when given
    (its framework told of the write)."""
    a, back, stream = to_engine(x)
    o = to_engine(out, True)[0] if out is not None else None
    with stream():
        y = fn(a, o)
        y = out if out is not None else back(y) if back else y
    if out is not None:
        _written(out)
    return y


def to_engine(x, written: bool = False):
    """(array, back, stream): the engine's view of ``x``, the function giving results back in
    ``x``'s type (None for NumPy/CuPy/array-likes) and a function returning a context manager
    that selects the device and stream to run on (PyTorch GPU tensors: PyTorch's current
    stream). ``written``: ``x`` is an ``out`` argument."""
    if not is_foreign(x):
        return x, None, contextlib.nullcontext
    torch_like = _module(x) == "torch"
    bf16 = False
    if torch_like:
        x, bf16 = _torch_view(x, written)
    dev, ordinal = x.__dlpack_device__()
    if int(dev) == _CPU:
        try:
            a = np.from_dlpack(x)
        except (RuntimeError, TypeError, BufferError) as exc:
            if not hasattr(x, "__array__"):  # (JAX's bfloat16: NumPy's DLPack lacks it)
                raise TypeError(f"x: a {type(x).__name__} of an unsupported dtype or layout "
                                f"for DLPack ({exc}); pass float64, float32, float16 or "
                                "bfloat16") from exc
            a = np.asarray(x)
        if bf16:
            a = a.view(_dt.bfloat16)
        return a, _back(x, torch_like, bf16, gpu=False), contextlib.nullcontext
    if int(dev) != _CUDA:
        raise TypeError(f"x: a {type(x).__name__} on DLPack device type {int(dev)}; the "
                        "transform runs on the CPU (NumPy) or on CUDA GPUs (CuPy)")
    from .cuda.device import cupy
    cp = cupy()

    def stream():
        ctx = contextlib.ExitStack()
        ctx.enter_context(cp.cuda.Device(int(ordinal)))
        if torch_like:
            import torch
            s = torch.cuda.current_stream(int(ordinal))
            ctx.enter_context(cp.cuda.ExternalStream(s.cuda_stream, int(ordinal)))
        return ctx
    with stream():
        a = cp.from_dlpack(x)
    if bf16:
        a = a.view(_dt.bfloat16)
    return a, _back(x, torch_like, bf16, gpu=True), stream


def _back(x, torch_like: bool, bf16: bool, gpu: bool):
    if torch_like:
        import torch

        def back(y):
            if bf16:
                y = y.view(np.int16)
            t = torch.from_dlpack(y) if gpu else torch.from_numpy(y)
            return t.view(torch.bfloat16) if bf16 else t
        return back
    mod = _module(x)
    if mod in ("jax", "jaxlib"):
        import jax.numpy as jnp

        def back_jax(y):
            try:
                return jnp.from_dlpack(y)
            except (RuntimeError, TypeError, BufferError):
                return jnp.asarray(y)       # bfloat16 from NumPy: no DLPack export
        return back_jax
    return None                             # unknown framework: NumPy/CuPy results
