"""The compile room: CUDA sources compiled with NVRTC, cached per (device, kernel).

:class:`KernelModule` is the abstraction both packages use for their kernels.  Each kernel
(a template instantiation named by its C++ name) is compiled on its own, so the cache is
keyed by (device, kernel): in memory per process, and on disk by CuPy's kernel cache
(``CUPY_CACHE_DIR``, keyed by the expanded source, the options, the architecture and the
kernel name), which every later process reads.  :meth:`KernelModule.precompile` compiles
many kernels in parallel worker processes into that disk cache.

Kernel packages register themselves for the CI compile check (``python -m
fwht_gpu.cuda.compile_check``) through the ``fwht_gpu.kernels`` entry-point group: a
callable returning ``(translation unit text, number of instantiations)``.
"""
from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import multiprocessing
import os
import re
from importlib import metadata

from .device import cupy, current_id

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
    it (or loading it from the disk cache) the first time."""

    def __init__(self, path: str, options: tuple[str, ...] = OPTIONS):
        self.path = os.path.abspath(path)
        self.options = tuple(options)
        self._functions: dict[tuple[int, str], object] = {}
        #: Kernels loaded at their first launch rather than by :meth:`precompile`.
        self.on_demand: list[str] = []

    @functools.cached_property
    def source(self) -> str:
        """The expanded source text."""
        return expand_includes(self.path)

    @property
    def digest(self) -> str:
        """SHA-256 of the expanded source (changes whenever any included file does)."""
        return hashlib.sha256(self.source.encode()).hexdigest()

    def function(self, name: str, smem_bytes: int = 0):
        """The kernel ``name`` on the current device, allowed ``smem_bytes`` of dynamic
        shared memory."""
        fn = self._functions.get((current_id(), name))
        if fn is None:
            self.on_demand.append(name)
            fn = self._load(name)
        if smem_bytes > 48 * 1024 and fn.max_dynamic_shared_size_bytes < smem_bytes:
            fn.max_dynamic_shared_size_bytes = smem_bytes
        return fn

    def _load(self, name: str):
        mod = cupy().RawModule(code=self.source, options=self.options, name_expressions=[name])
        fn = self._functions[(current_id(), name)] = mod.get_function(name)
        return fn

    def precompile(self, names, workers: int | None = None, processes: bool = False) -> int:
        """Compile the kernels ``names`` not yet loaded, ``workers`` at a time (default: the
        CPU count), and load them; returns how many were compiled or loaded.  NVRTC runs
        without the GIL, so threads compile in parallel; ``processes`` uses worker processes
        instead (each compiles into the disk cache, then this process loads from it)."""
        dev = current_id()
        todo = sorted({n for n in names if (dev, n) not in self._functions})
        if not todo:
            return 0
        workers = min(len(todo), workers or os.cpu_count() or 1)
        if workers > 1 and processes:
            ctx = multiprocessing.get_context("spawn")
            with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
                chunks = [todo[i::workers] for i in range(workers)]
                list(pool.map(_compile_into_cache,
                              [(self.source, self.options, dev, c) for c in chunks]))
        if workers > 1 and not processes:
            cp = cupy()

            def load(name):
                with cp.cuda.Device(dev):
                    return self._load(name)
            with concurrent.futures.ThreadPoolExecutor(workers) as pool:
                list(pool.map(load, todo))
        for n in todo:
            if (dev, n) not in self._functions:
                self._load(n)
        return len(todo)


def _compile_into_cache(job) -> None:
    """Worker process: compile each kernel of a chunk into CuPy's disk cache."""
    source, options, device, names = job
    cp = cupy()
    with cp.cuda.Device(device):
        for n in names:
            cp.RawModule(code=source, options=options, name_expressions=[n]).compile()


def compile_units() -> dict[str, tuple[str, int]]:
    """Every registered kernel package's (translation unit, instantiation count), by entry-point
    name (the ``fwht_gpu.kernels`` group)."""
    units = {}
    for ep in metadata.entry_points(group="fwht_gpu.kernels"):
        units[ep.name] = ep.load()()
    return units
