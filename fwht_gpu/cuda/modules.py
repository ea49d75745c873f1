"""The compile room: CUDA sources compiled with NVRTC, cached per (device, kernel).

:class:`KernelModule` is the abstraction both packages use for their kernels.  Each kernel
(a template instantiation named by its C++ name) is compiled on its own, so the cache is
keyed by (device, kernel): in memory per process, and on disk by CuPy's kernel cache
(``CUPY_CACHE_DIR``, keyed by the expanded source, the options, the architecture and the
kernel name), which every later process reads.  :meth:`KernelModule.precompile` compiles
many kernels in parallel threads (NVRTC releases the GIL), optionally in the background.
The disk cache holds one entry per kernel with CuPy >= 14.1 (older CuPy recompiles
template instantiations in each process).

Kernel packages register themselves for the CI compile check (``python -m
fwht_gpu.cuda.compile_check``) through the ``fwht_gpu.kernels`` entry-point group: a
callable returning ``(translation unit text, number of instantiations)``.
"""
from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import os
import re
import threading
from importlib import metadata

from .device import cupy, current_id

#: ``CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED``: clusters of more than 8 blocks.
NON_PORTABLE_CLUSTER_SIZE = 14

OPTIONS = ("-std=c++17", "--fmad=false")
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$')


def expand_includes(path: str, _seen: set | None = None) -> str:
    """The text of ``path`` with its quoted local includes inlined (each file once, as
    ``#pragma once`` asks): the whole source goes into the compiler and into the cache key."""
    seen = set() if _seen is None else _seen
    path = os.path.abspath(path)
    if path in seen:
        return ""
    seen.add(path)
    out = []
    with open(path) as f:
        for line in f:
            m = _INCLUDE.match(line)
            if m:
                out.append(expand_includes(os.path.join(os.path.dirname(path), m.group(1)), seen))
            elif line.strip() != "#pragma once":
                out.append(line)
    return "".join(out)


class KernelModule:
    """One CUDA source file (with its local includes) whose kernels are compiled on demand.

    ``function(name)`` returns the launchable kernel for CuPy's current device, compiling
    it (or loading it from CuPy's disk cache) the first time.  ``named=False`` is for a file
    of ``extern "C"`` kernels compiled as one module (no template instantiations)."""

    def __init__(self, path: str, options: tuple[str, ...] = OPTIONS, named: bool = True):
        self.path = os.path.abspath(path)
        self.options = tuple(options)
        self.named = named
        self._functions: dict[tuple[int, str], object] = {}
        self._pending: dict[tuple[int, str], concurrent.futures.Future] = {}
        self._planned: set[tuple[int, str]] = set()
        self._wide_clusters: set[tuple[int, str]] = set()     # opted in to > 8 blocks
        self._lock = threading.Lock()
        #: Kernels a launch needed that no :meth:`precompile` call had listed.
        self.on_demand: list[str] = []

    @functools.cached_property
    def source(self) -> str:
        """The expanded source text."""
        return expand_includes(self.path)

    @property
    def digest(self) -> str:
        """SHA-256 of the expanded source (changes whenever any included file does)."""
        return hashlib.sha256(self.source.encode()).hexdigest()

    def function(self, name: str, smem_bytes: int = 0, cluster_blocks: int = 0):
        """The kernel ``name`` on the current device, allowed ``smem_bytes`` of dynamic
        shared memory (and clusters of more than 8 blocks, not portable, when its
        ``cluster_blocks`` are).  A kernel queued by a background :meth:`precompile` and not
        yet started is compiled here at once; one being compiled is waited for."""
        key = (current_id(), name)
        fn = self._functions.get(key)
        if fn is None:
            fut = self._pending.get(key)
            if fut is not None and not fut.cancel():
                fn = fut.result()
            else:
                if key not in self._planned:
                    self.on_demand.append(name)
                fn = self._load(name)
        if smem_bytes > 48 * 1024 and fn.max_dynamic_shared_size_bytes < smem_bytes:
            fn.max_dynamic_shared_size_bytes = smem_bytes
        if cluster_blocks > 8 and key not in self._wide_clusters:      # once per kernel
            cupy().cuda.driver.funcSetAttribute(fn.kernel.ptr, NON_PORTABLE_CLUSTER_SIZE, 1)
            self._wide_clusters.add(key)
        return fn

    def _load(self, name: str, device: int | None = None):
        cp = cupy()
        dev = current_id() if device is None else device
        with cp.cuda.Device(dev):
            if self.named:
                mod = cp.RawModule(code=self.source, options=self.options, name_expressions=[name])
            else:
                mod = self._module(dev)
            fn = mod.get_function(name)
        self._functions[(dev, name)] = fn
        return fn

    @functools.lru_cache(maxsize=None)  # noqa: B019  (one module per device, kept for the process)
    def _module(self, device: int):
        return cupy().RawModule(code=self.source, options=self.options)

    def precompile(self, names, workers: int | None = None, wait: bool = True) -> int:
        """Compile the kernels ``names`` not yet loaded, ``workers`` threads at a time
        (default: the usable CPUs; NVRTC runs without the GIL), on the current device;
        returns how many were queued.  With ``wait=False`` the compilation goes on in the
        background: :meth:`function` takes a queued kernel over or waits for a running one,
        so launches never wait for kernels they do not need."""
        dev = current_id()
        with self._lock:
            todo = [n for n in dict.fromkeys(names)
                    if (dev, n) not in self._functions and (dev, n) not in self._pending]
            self._planned.update((dev, n) for n in todo)
        if not todo:
            return 0
        pool = concurrent.futures.ThreadPoolExecutor(
            min(len(todo), workers or len(os.sched_getaffinity(0))), thread_name_prefix="nvrtc")
        for n in todo:
            self._pending[(dev, n)] = pool.submit(self._load, n, dev)
        pool.shutdown(wait=wait, cancel_futures=False)
        return len(todo)

    def cancel_pending(self) -> None:
        """Drop the queued background compilations (running ones finish)."""
        for fut in list(self._pending.values()):
            fut.cancel()


def compile_units() -> dict[str, tuple[str, int]]:
    """Every registered kernel package's (translation unit, instantiation count), by entry-point
    name (the ``fwht_gpu.kernels`` group)."""
    units = {}
    for ep in metadata.entry_points(group="fwht_gpu.kernels"):
        units[ep.name] = ep.load()()
    return units
