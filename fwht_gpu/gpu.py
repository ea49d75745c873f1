"""The public GPU face of fwht_gpu, for the packages and examples built on it.

``available()``/``status()`` say whether a GPU can be used and why not; ``cupy()`` is the
CuPy module (lazily imported, with the install hint when missing); ``limits()`` the current
device's queried limits; :class:`KernelModule` compiles a package's own CUDA source, cached
per (device, kernel) in memory and on disk; ``pinned_empty`` allocates page-locked host
arrays.  Nothing here imports CuPy until it is called.
"""
from .cuda.device import A100, H100, Limits, available, cupy, is_pinned, limits, pinned_empty, status
from .cuda.modules import KernelModule

__all__ = ["available", "status", "cupy", "limits", "Limits", "H100", "A100", "KernelModule",
           "pinned_empty", "is_pinned"]
