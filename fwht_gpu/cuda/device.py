"""The device room: the CuPy import, availability, the hardware limits queried from the
device, GPU memory checks and page-locked host memory.

CuPy is imported lazily (:func:`cupy`); nothing here touches a GPU on import.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .. import memory


def cupy():
    """The cupy module; ImportError with the install hint when it is missing."""
    try:
        import cupy as cp
    except ImportError as exc:
        raise ImportError("the GPU engine needs CuPy: pip install 'pagh-mm[cuda13]' "
                          "(or [cuda12] for a CUDA 12 driver)") from exc
    return cp


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    try:
        return cupy().cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def status() -> str:
    """One line: the GPU in use, or why there is none."""
    try:
        cp = cupy()
    except ImportError as exc:
        return f"unavailable ({exc})"
    try:
        n = cp.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver
        return f"unavailable (CuPy {cp.__version__}: {exc})"
    if n == 0:
        return f"unavailable (CuPy {cp.__version__}: no CUDA device)"
    lim = limits()
    free, total = cp.cuda.runtime.memGetInfo()
    return (f"{lim.name}, {lim.sm_count} SMs, {total / 2**30:.1f} GiB "
            f"({free / 2**30:.1f} free), CuPy {cp.__version__}")


@dataclass(frozen=True)
class Limits:
    """What the kernel configurations must respect on one device (queried by :func:`limits`;
    the configuration layer takes them as an argument, so it is testable without a GPU)."""

    name: str
    sm_count: int
    #: Dynamic shared memory one block may opt in to.
    smem_per_block: int
    #: Shared memory of one SM available to resident blocks (the per-SM total less the
    #: per-block reservation).
    smem_per_sm: int
    max_threads_per_sm: int = 2048
    regs_per_sm: int = 65536
    compute_capability: str = ""
    #: log2 of the largest thread-block cluster the kernels may use (0: no cluster launch):
    #: 4 on sm_90 (16 blocks, a non-portable size the kernels opt in to), 3 (the portable 8)
    #: on later cluster-capable parts (untested), 0 before sm_90.
    max_cluster_log: int = 0
    #: Resident blocks per SM at most (32 on sm_80 and sm_90, 16 on sm_86, 24 on sm_89).
    max_blocks_per_sm: int = 32

    @property
    def arch(self) -> str:
        """The ``sm_XY`` name of the compute capability."""
        return f"sm_{self.compute_capability}"


#: The H100 SXM's limits (the device the defaults were measured on; for tests and examples).
H100 = Limits("NVIDIA H100 80GB HBM3", 132, 227 * 1024, 227 * 1024, 2048, 65536, "90", 4)
#: The A100's limits.
A100 = Limits("NVIDIA A100-SXM4-80GB", 108, 163 * 1024, 163 * 1024, 2048, 65536, "80")


@functools.lru_cache(maxsize=None)
def _limits(device_id: int) -> Limits:
    cp = cupy()
    rt = cp.cuda.runtime
    attr = lambda k: int(rt.deviceGetAttribute(getattr(rt, "cudaDevAttr" + k), device_id))  # noqa: E731
    props = rt.getDeviceProperties(device_id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    cc = cp.cuda.Device(device_id).compute_capability
    try:            # cudaDevAttrClusterLaunch (120; CuPy names it in newer releases only)
        cluster = bool(rt.deviceGetAttribute(getattr(rt, "cudaDevAttrClusterLaunch", 120), device_id))
    except Exception:
        cluster = int(cc) >= 90
    try:            # cudaDevAttrMaxBlocksPerMultiprocessor (106)
        blocks = int(rt.deviceGetAttribute(getattr(rt, "cudaDevAttrMaxBlocksPerMultiprocessor", 106),
                                           device_id))
    except Exception:
        blocks = 16     # the fewest of the parts since sm_80 (a launch heuristic's input only)
    return Limits(name, attr("MultiProcessorCount"), attr("MaxSharedMemoryPerBlockOptin"),
                  attr("MaxSharedMemoryPerMultiprocessor") - attr("ReservedSharedMemoryPerBlock"),
                  attr("MaxThreadsPerMultiProcessor"), attr("MaxRegistersPerMultiprocessor"),
                  cc, max_cluster_log(cc, cluster), blocks)


def max_cluster_log(compute_capability: str, cluster_launch: bool) -> int:
    """log2 of the largest thread-block cluster the kernels use on a device of this compute
    capability (see :attr:`Limits.max_cluster_log`)."""
    if not cluster_launch or int(compute_capability or 0) < 90:
        return 0
    return 4 if int(compute_capability) == 90 else 3


def limits(device_id: int | None = None) -> Limits:
    """The limits of device ``device_id`` (default: CuPy's current device), queried once."""
    return _limits(cupy().cuda.Device().id if device_id is None else int(device_id))


def current_id() -> int:
    """CuPy's current device."""
    return int(cupy().cuda.Device().id)


def check_memory(nbytes: int, what: str) -> None:
    """MemoryError (InsufficientMemoryError) before a GPU allocation that cannot fit."""
    memory.check(nbytes, what, "transform in place (out=x), in smaller batches, or on the host",
                 device="gpu", force=True)


def is_pinned(a: np.ndarray) -> bool:
    """Whether a host array lives in page-locked memory known to CUDA."""
    try:
        return cupy().cuda.runtime.pointerGetAttributes(a.ctypes.data).type == 1
    except Exception:
        return False


def pinned_empty(shape, dtype) -> np.ndarray:
    """A NumPy array in page-locked host memory: ``fwht(a, device="cuda")`` then runs in
    about the time of the two DMA copies (no page-locking per call)."""
    dt = np.dtype(dtype)
    count = int(np.prod(shape))
    mem = cupy().cuda.alloc_pinned_memory(max(1, count * dt.itemsize))
    return np.frombuffer(mem, dtype=dt, count=count).reshape(shape)
