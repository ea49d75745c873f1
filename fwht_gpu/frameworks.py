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
    if type(x) is np.ndarray or x is None:
        return False
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
    (its framework told of the write). ``fn`` writes a result of ``x``'s shape and dtype (a
    plain PyTorch CUDA tensor without ``out`` gets a fresh tensor from PyTorch's allocator
    as ``out_array``)."""
    if not is_foreign(x) and not is_foreign(out):     # NumPy, CuPy, array-likes: as they are
        y = fn(x, out)
        return out if out is not None else y
    if _module(x) == "torch":
        done, y = _torch_cuda_through(x, out, fn)
        if done:
            return y
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
            ctx.enter_context(_cupy_stream(cp, _torch_stream_ptr(int(ordinal)), int(ordinal)))
        return ctx
    with stream():
        a = cp.from_dlpack(x)
    if bf16:
        a = a.view(_dt.bfloat16)
    return a, _back(x, torch_like, bf16, gpu=True), stream


# --- PyTorch CUDA tensors: the per-call fast path ------------------------------------------------

#: CuPy wrappers of external streams by (device, stream pointer): a wrapper holds the pointer
#: only (the stream belongs to PyTorch), so one serves every call on that stream.
_STREAMS: dict = {}
#: PyTorch dtypes viewed directly: (the view's dtype, whether it is bfloat16 seen as int16).
_TORCH_DTYPES: dict = {}


class _StreamRef:
    """A stream pointer under the CUDA stream protocol (``cupy.cuda.Stream.from_external``)."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = ptr

    def __cuda_stream__(self):
        return (0, self.ptr)


def _cupy_stream(cp, ptr: int, device: int):
    """A CuPy stream object for the external stream ``ptr`` of ``device`` (cached):
    ``Stream.from_external`` (CuPy >= 14), else ``ExternalStream`` (CuPy 13)."""
    key = (device, ptr)
    s = _STREAMS.get(key)
    if s is None:
        from_external = getattr(cp.cuda.Stream, "from_external", None)
        if from_external is not None:
            with cp.cuda.Device(device):        # from_external takes the current device's id
                s = from_external(_StreamRef(ptr))
        else:
            s = cp.cuda.ExternalStream(ptr, device)
        if len(_STREAMS) >= 256:
            _STREAMS.clear()
        _STREAMS[key] = s
    return s


def _torch_stream_ptr(device: int) -> int:
    """PyTorch's current stream of ``device`` (its ``cudaStream_t``)."""
    import torch
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return int(raw(device))
    return int(torch.cuda.current_stream(device).cuda_stream)


def _torch_dtypes():
    if not _TORCH_DTYPES:
        import torch
        _TORCH_DTYPES.update({torch.float64: (np.dtype(np.float64), False),
                              torch.float32: (np.dtype(np.float32), False),
                              torch.float16: (np.dtype(np.float16), False),
                              torch.bfloat16: (np.dtype(np.int16), True)})
    return _TORCH_DTYPES


def _plain_cuda(t) -> bool:
    """A CUDA tensor of a transform dtype holding elements, recording no autograd history and
    with no lazy negation or conjugation: its memory is the tensor (as _torch_view sees it)."""
    return (t.is_cuda and not t.requires_grad and t.dtype in _torch_dtypes() and t.numel() > 0
            and t.layout is _strided() and not t.is_neg() and not t.is_conj())


def _strided():
    import torch
    return torch.strided


def _cupy_view(cp, t, device: int):
    """The CuPy array over the memory of the plain CUDA tensor ``t`` (see :func:`_plain_cuda`):
    what ``cupy.from_dlpack`` gives (bfloat16 through int16, as :func:`_torch_view`), without
    the DLPack round trip; it keeps ``t`` alive."""
    dt, bf16 = _TORCH_DTYPES[t.dtype]
    item = dt.itemsize
    shape, strides = tuple(t.shape), tuple(s * item for s in t.stride())
    span = item + sum((n - 1) * abs(s) for n, s in zip(shape, strides))
    mem = cp.cuda.UnownedMemory(t.data_ptr(), span, t, device)
    a = cp.ndarray(shape, dt, cp.cuda.MemoryPointer(mem, 0), strides)
    return (a.view(_dt.bfloat16), True) if bf16 else (a, False)


def _torch_cuda_through(x, out, fn):
    """:func:`through` for a plain PyTorch CUDA tensor ``x`` (and ``out``: None or a plain CUDA
    tensor of the same device): the engine's views built from the tensors' pointers, the
    device and PyTorch's current stream looked up once.  (False, None) when this path does
    not apply (the general path then handles the call, its errors included)."""
    import torch
    if type(x) is not torch.Tensor or not _plain_cuda(x):
        return False, None
    device = x.get_device()
    if out is not None and (type(out) is not torch.Tensor or not _plain_cuda(out)
                            or out.get_device() != device):
        return False, None
    from .cuda.device import cupy
    cp = cupy()
    stream = _cupy_stream(cp, _torch_stream_ptr(device), device)
    a, _ = _cupy_view(cp, x, device)
    given = out is not None
    if not given:               # the result in PyTorch's caching allocator (inside a CUDA-graph
        out = _torch_empty(x)   # capture: the graph's pool), written by the engine
    o = _cupy_view(cp, out, device)[0]
    with cp.cuda.Device(device), stream:
        fn(a, o)
    if given:
        _written(out)
    return True, out


def _torch_empty(x):
    """A C-contiguous tensor of ``x``'s shape, dtype and device from PyTorch's allocator;
    :class:`~fwht_gpu.memory.InsufficientMemoryError` when it has no room."""
    import torch
    try:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    except torch.cuda.OutOfMemoryError as exc:
        from .memory import InsufficientMemoryError, gib
        need = x.numel() * x.element_size()
        free = int(torch.cuda.mem_get_info(x.device)[0])
        raise InsufficientMemoryError(
            f"the result ({gib(need)}) does not fit the GPU's memory ({gib(free)} free; "
            f"PyTorch: {exc}); transform fewer rows at a time", need=need, available=free,
            device="gpu", hint="transform fewer rows at a time") from None


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
