"""Memory is checked before it is used.

A request that cannot fit raises :class:`InsufficientMemoryError` (a ``MemoryError``)
whose one-line message says how much is needed, how much there is and which
parameter to change, before anything large is allocated: never a process killed by
the operating system.

Host: the smaller of the kernel's ``MemAvailable`` and what the control group
(container, batch job) still allows.  Device: ``cudaMemGetInfo``'s free bytes plus
what CuPy's memory pool holds unused.
"""
from __future__ import annotations

import os

#: Requests below this many bytes are not checked (reading the limits costs ~50 us).
CHECK_ABOVE = 32 << 20


class InsufficientMemoryError(MemoryError):
    """A request larger than the memory available; ``need``/``available`` in bytes,
    ``device`` 'cpu' or 'gpu', ``hint``: what to change."""

    def __init__(self, message: str, need: int = 0, available: int = 0, device: str = "cpu",
                 hint: str = ""):
        super().__init__(message)
        self.need, self.available, self.device, self.hint = need, available, device, hint


def gib(nbytes: float) -> str:
    """Bytes as a short human-readable size."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if abs(nbytes) >= 1 << shift:
            return f"{nbytes / (1 << shift):.2f} {unit}"
    return f"{int(nbytes)} B"


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _cgroup_room() -> int | None:
    """Bytes the control group still allows (cgroup v2 or v1), None without a limit."""
    best = None
    for limit_f, usage_f in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                             ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                              "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit, usage = _read_int(limit_f), _read_int(usage_f)
        if limit is None or usage is None or limit >= 1 << 60:
            continue
        room = max(0, limit - usage)
        best = room if best is None else min(best, room)
    return best


def host_available() -> int | None:
    """Bytes of host memory this process can still allocate, or None when unknown."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            avail = None
    room = _cgroup_room()
    if room is not None:
        avail = room if avail is None else min(avail, room)
    return avail


def device_available() -> int:
    """Free bytes on the current CUDA device, counting CuPy's pooled free blocks."""
    import cupy as cp
    free, _ = cp.cuda.runtime.memGetInfo()
    return int(free + cp.get_default_memory_pool().free_bytes())


def available(device: str) -> int | None:
    """Available bytes on 'cpu' (host) or 'gpu' (current device)."""
    return device_available() if device == "gpu" else host_available()


def check(need: int, what: str, hint: str, device: str = "cpu", force: bool = False) -> None:
    """Raise :class:`InsufficientMemoryError` when ``need`` bytes (for ``what``) exceed what
    ``device`` has; ``hint`` says which parameter to change.  Small requests pass unchecked
    unless ``force``."""
    if need < CHECK_ABOVE and not force:
        return
    have = available(device)
    if have is None or need <= have:
        return
    where = "GPU" if device == "gpu" else "host"
    raise InsufficientMemoryError(
        f"{what} needs {gib(need)} of {where} memory but {gib(have)} is available; {hint}",
        need=int(need), available=int(have), device=device, hint=hint)
