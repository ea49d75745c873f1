"""The executing room: runs a Plan on CuPy arrays, pass by pass, as the Plan says.

:func:`run` executes a plan from a (batch, n << plan.interleave) array into another; the
kernel of each pass comes from :mod:`.config` (which decides it) and :mod:`.modules`
(which compiles it).  Nothing here changes the plan.
"""
from __future__ import annotations

import functools
import os
from typing import NamedTuple

import numpy as np

from .. import dtypes as _dt
from ..plan import Plan
from . import config
from .device import check_memory, cupy, limits
from .modules import KernelModule

#: The entry translation unit of the transform kernels.
SOURCE = os.path.join(os.path.dirname(__file__), "kernels", "fwht.cu")
KERNELS = KernelModule(SOURCE)
#: The translation unit of the K * 2**k kernels (kernels/k_stage.cuh), compiled on its own.
K_SOURCE = os.path.join(os.path.dirname(__file__), "kernels", "fwht_k.cu")
K_KERNELS = KernelModule(K_SOURCE)
#: The translation unit of the cluster passes (kernels/cluster_pass.cuh, sm_90+), on its own.
CLUSTER_SOURCE = os.path.join(os.path.dirname(__file__), "kernels", "fwht_cluster.cu")
CLUSTER_KERNELS = KernelModule(CLUSTER_SOURCE)


def compile_unit() -> tuple[str, int]:
    """The translation unit instantiating every configuration (the CI nvcc check): the
    power-of-two passes, the K * 2**k kernels (:data:`K_SOURCE`) and the cluster passes
    (:data:`CLUSTER_SOURCE`, compiled for every architecture: before sm_90 they trap)."""
    configs = list(config.all_configs())
    kconfigs = list(config.all_k_configs())
    cconfigs = list(config.all_cluster_configs())
    text = config.instantiation_source(configs, SOURCE) + \
        config.instantiation_source(kconfigs, K_SOURCE) + \
        config.instantiation_source(cconfigs, CLUSTER_SOURCE)
    return text, len(configs) + len(kconfigs) + len(cconfigs)


def _module(cfg) -> KernelModule:
    """The kernel module (translation unit) a pass configuration's kernel lives in."""
    return CLUSTER_KERNELS if isinstance(cfg, config.CLUSTER_CONFIGS) else KERNELS


def kernel(cfg: config.PassGeometry):
    """The compiled kernel of ``cfg`` on the current device."""
    blocks = 1 << cfg.log_cl if isinstance(cfg, config.CLUSTER_CONFIGS) else 0
    return _module(cfg).function(cfg.name, cfg.smem_bytes, blocks)


def precompile(plans_and_totals, workers: int | None = None, wait: bool = True) -> int:
    """Compile, in parallel threads, every kernel the (plan, total elements) pairs launch
    (with and without pipelining), in their order; returns how many were queued.  With
    ``wait=False`` in the background (see :meth:`KernelModule.precompile`)."""
    lim = limits()
    names: dict = {KERNELS: {}, CLUSTER_KERNELS: {}}
    for plan, total in plans_and_totals:
        for cfg in config.configs_for(plan, total, lim):
            names[_module(cfg)].update(dict.fromkeys((cfg.name, config.unpipelined(cfg).name)))
    return sum(mod.precompile(n, workers, wait) for mod, n in names.items() if n)


def run(plan: Plan, src, dst, factor: float = 1.0, check: bool = True):
    """Run ``plan`` from ``src`` into ``dst`` (C-contiguous (batch, n << plan.interleave) CuPy
    arrays, 16-byte aligned; ``src`` may be ``dst``), multiplying by ``factor`` in the last
    pass.

    With ``check`` the call waits for the result and returns the transforms whose input
    was finite and whose output is not (a boolean CuPy array over the transforms, in the
    order of the rows of the moved-axis input), or None when there are none: overflow is
    judged per transform, so a NaN in one transform never hides an overflow in another.

    The launches (configurations, grids, the fixed launch arguments, the kernels) are
    computed once per (plan, elements, device) (:func:`launches`); the flags of a checked
    call live in a reused zeroed buffer (:func:`_take_flags`) read with one synchronization.
    """
    cp = cupy()
    total = int(src.size)
    if total == 0:
        return None
    if not plan.passes:
        if dst.data.ptr != src.data.ptr:
            dst[...] = src
        return None
    dev = cp.cuda.runtime.getDevice()
    steps, errvec = launches(plan, total, dev)
    ntransforms = total >> plan.log2n
    err = None
    if errvec:
        check_memory(src.nbytes, "the error vector of the stabilized transform")
        err = cp.empty_like(dst)                 # written by pass 0 before any pass reads it
    scale = np.float64(factor)
    if not check:
        flags = rows = _scratch_flags(dev)
        _launch(steps, src, dst, err, scale, _INT32[False], flags, rows)
        return None
    # flags[0]: bit 0 non-finite input, bit 1 non-finite output; then a bit per transform
    slot = _take_flags(cp, dev, 1 + (ntransforms + 31) // 32)
    stream = cp.cuda.get_current_stream()
    try:
        _launch(steps, src, dst, err, scale, _INT32[True], slot.flags, slot.rows)
        f = slot.read(cp, stream)
    except BaseException:
        _quiesce(stream)
        raise
    if f == 0:      # nothing was written to the buffer: still all zero, reusable
        _give_back_flags(dev, slot)
        return None
    if not f & 2:
        return None
    rows = slot.rows
    bad = _nonfinite_transforms(dst, plan.n, plan.interleave)
    if f & 1:    # some transforms had non-finite input: those are not overflows
        ids = cp.arange(ntransforms, dtype=cp.int64)
        had_bad_input = ((rows[ids >> 5] >> (ids & 31).astype(cp.uint32)) & 1).astype(cp.bool_)
        bad &= ~had_bad_input
    return bad if bool(bad.any()) else None


_INT32 = {False: np.int32(0), True: np.int32(1)}
#: Launches per (plan, elements, device): see :func:`launches`.
_LAUNCHES = config.LaunchCache()


def launches(plan: Plan, total: int, device: int):
    """((PassLaunch, kernel) per pass, whether an error vector is needed) of ``plan`` over
    ``total`` elements on ``device`` (the current device), computed once
    (:func:`fwht_gpu.cuda.config.pass_launches`)."""
    return _LAUNCHES.get(plan, total, device, lambda: _make_launches(plan, total, device))


def _make_launches(plan: Plan, total: int, device: int):
    lim = limits(device)
    steps = config.pass_launches(plan, total, lim,
                                 lambda cfg: _resident_blocks(cfg, lim.smem_per_sm))
    errvec = any(isinstance(s.cfg, config.StabilizedConfig) and s.cfg.errvec for s in steps)
    return tuple((s, kernel(s.cfg)) for s in steps), errvec


def _launch(steps, src, dst, err, scale, check_input, flags, rows) -> None:
    """Launch the passes ``steps`` (of :func:`launches`) on the current stream."""
    no = _INT32[False]
    for i, (s, fn) in enumerate(steps):
        if s.stabilized:
            args = s.args(src if i == 0 else dst, dst, err if err is not None else dst,
                          check_input if i == 0 else no, scale, flags, rows)
        else:
            args = s.args(src if i == 0 else dst, dst, check_input if i == 0 else no, scale, flags,
                          rows)
        fn((s.grid,), (s.threads,), args, shared_mem=s.smem)


class _Flags:
    """A zeroed device buffer for the flags of a checked call (word 0: the flags, then a bit
    per transform) and a page-locked host word to read the flags into."""

    __slots__ = ("buf", "flags", "rows", "words", "host", "_host_mem", "_host_ptr", "_dev_ptr")

    def __init__(self, cp, words: int):
        self.words = max(int(words), 2)
        self.buf = cp.zeros(self.words, dtype=cp.uint32)    # zeroed on the current stream
        self.flags, self.rows = self.buf[:1], self.buf[1:]
        self._host_mem = cp.cuda.alloc_pinned_memory(4)
        self.host = np.frombuffer(self._host_mem, dtype=np.uint32, count=1)
        self._host_ptr = int(self.host.ctypes.data)
        self._dev_ptr = int(self.buf.data.ptr)

    def read(self, cp, stream) -> int:
        """The flags word after the work queued on ``stream`` (one synchronization)."""
        rt = cp.cuda.runtime
        rt.memcpyAsync(self._host_ptr, self._dev_ptr, 4, rt.memcpyDeviceToHost, stream.ptr)
        stream.synchronize()
        return int(self.host[0])


#: Zeroed flag buffers with no work pending on them, per device (any thread, any stream may
#: take one: the call that used it waited for its stream before giving it back).
_FLAG_POOL: dict[int, list] = {}
#: Buffers of at most this many words are reused (larger ones: one per call).
FLAG_POOL_WORDS = 1 << 14
_FLAG_POOL_KEEP = 32


def _take_flags(cp, device: int, words: int) -> _Flags:
    """A zeroed flags buffer of at least ``words`` words on ``device``, used by one call at a
    time: taken from the pool (zeroed and idle) or newly allocated."""
    pool = _FLAG_POOL.get(device)
    if pool:
        try:
            slot = pool.pop()
        except IndexError:      # another thread took the last one
            slot = None
        if slot is not None and slot.words >= words:
            return slot
    return _Flags(cp, words if words > 64 else 64)


def _give_back_flags(device: int, slot: _Flags) -> None:
    """Return a buffer whose words are all still zero and whose work is finished."""
    if slot.words <= FLAG_POOL_WORDS:
        pool = _FLAG_POOL.setdefault(device, [])
        if len(pool) < _FLAG_POOL_KEEP:
            pool.append(slot)


def _quiesce(stream) -> None:
    """After a failed checked call: wait for what it launched (best effort) before its flags
    buffer is freed."""
    try:
        stream.synchronize()
    except Exception:
        pass


def bits(a):
    """``a`` viewed as unsigned integers of its width, and its dtype's exponent mask (all
    exponent bits set: inf or NaN)."""
    udt, mask = {8: (np.uint64, 0x7FF0000000000000), 4: (np.uint32, 0x7F800000),
                 2: (np.uint16, 0x7F80 if a.dtype == _dt.bfloat16 else 0x7C00)}[a.dtype.itemsize]
    return a.view(udt), udt(mask)


@functools.lru_cache(maxsize=None)
def reductions():
    """(any non-finite, max |finite value|) over bit patterns: no temporary of the input's size."""
    cp = cupy()
    nonfinite = cp.ReductionKernel("T x, T m", "bool y", "(x & m) == m", "a || b", "y = a", "false",
                                   "fwht_nonfinite_any")
    max_abs = cp.ReductionKernel("T x, T e, T m", "T y", "((x & e) == e) ? (T)0 : (x & m)",
                                 "max(a, b)", "y = a", "0", "fwht_max_abs_bits")
    return nonfinite, max_abs


def _nonfinite_transforms(a, n: int, row_shift: int):
    """Per transform of the (batch, n * 2**row_shift) array ``a``: holds a non-finite value."""
    u, mask = bits(a)
    return reductions()[0](u.reshape(-1, n, 1 << row_shift), mask, axis=1).reshape(-1)


@functools.lru_cache(maxsize=None)
def _resident_blocks(cfg: config.KernelConfig, smem_per_sm: int) -> int:
    """Blocks of a pipelined ``cfg`` launched per SM: an estimate from shared memory, registers
    and threads. The CUDA occupancy calculator answers fewer for the wide-compute row kernels
    (2^8-2^10: 20-32 blocks against 25-107) and those grids ran no faster (one H100, FP16 and
    BF16 rows in FP32, FP32 rows in FP64, 2^8-2^11: 0.99-1.05x the estimate's time, the same
    bits; ``benchmarks/explore_resident_blocks.py``)."""
    regs = max(1, kernel(cfg).num_regs) * (1 << cfg.log_t)
    return max(1, min(smem_per_sm // cfg.smem_bytes, 65536 // regs, 2048 >> cfg.log_t))


@functools.lru_cache(maxsize=None)
def _scratch_flags(device_id: int):
    return cupy().zeros(1, dtype=cupy().uint32)


# --- lengths n = K * 2**k -----------------------------------------------------------------------

def k_kernel_names(plan: Plan, K: int, rows: int, inverse: bool) -> tuple[list[str], list[str]]:
    """(names in :data:`K_KERNELS`, names in :data:`KERNELS`) that :func:`run_k` launches."""
    launch = config.k_launch(plan, K, rows, inverse, limits())
    if launch.fused:
        return [launch.rows_cfg.name], []
    passes = []
    for cfg in config.configs_for(plan, rows * K * plan.n, limits()):
        assert _module(cfg) is KERNELS        # (the K plans are planned without clusters)
        passes += [cfg.name, config.unpipelined(cfg).name]
    return [launch.stage_cfg.name], list(dict.fromkeys(passes))


def precompile_k(items, workers: int | None = None, wait: bool = True) -> int:
    """Compile, in parallel threads, the kernels :func:`run_k` launches for the (plan of a block,
    K, rows, inverse) items; returns how many were queued."""
    knames, pnames = {}, {}
    for plan, K, rows, inverse in items:
        a, b = k_kernel_names(plan, K, rows, inverse)
        knames.update(dict.fromkeys(a))
        pnames.update(dict.fromkeys(b))
    return K_KERNELS.precompile(knames, workers, wait) + KERNELS.precompile(pnames, workers, wait)


def run_k(plan: Plan, K: int, src, dst, factor: float = 1.0, inverse: bool = False,
          check: bool = True) -> bool:
    """The transform of length K * plan.n (``plan``: the power-of-two transform of each block of
    plan.n; ``inverse``: H_K^T in the K-point stage) of the rows of ``src`` into ``dst``
    (C-contiguous (rows, K * plan.n) CuPy arrays of plan.dtype, 16-byte aligned; ``src`` may
    be ``dst``), multiplied by ``factor``: the NumPy engine's operations in its order
    (:func:`fwht_gpu.hadamard.transform`), so the same bits.  With ``check`` the call waits
    for the result and returns whether some output value is not finite (the caller judges
    overflow per row); without, it only launches (capturable in a CUDA graph) and returns
    False.  The launch is computed once per (plan, rows, K, direction, device)
    (:func:`k_launches`)."""
    cp = cupy()
    rows = int(src.shape[0])
    if rows == 0 or src.size == 0:
        return False
    dev = cp.cuda.runtime.getDevice()
    step = k_launches(plan, K, rows, inverse, dev)
    if not check:
        _launch_k(plan, step, src, dst, factor, _scratch_flags(dev))
        return False
    slot = _take_flags(cp, dev, 1)
    stream = cp.cuda.get_current_stream()
    try:
        _launch_k(plan, step, src, dst, factor, slot.flags)
        f = slot.read(cp, stream)
    except BaseException:
        _quiesce(stream)
        raise
    if f == 0:      # nothing was written to the buffer: reusable
        _give_back_flags(dev, slot)
    return bool(f & 2)


#: Launches of :func:`run_k` per (plan, rows, device, (K, inverse)): see :func:`k_launches`.
_K_LAUNCHES = config.LaunchCache()


class KStep(NamedTuple):
    """One :func:`run_k` launch: its :class:`~fwht_gpu.cuda.config.KLaunch`, the kernel (the
    one-pass kernel, or the K-point stage after the plan's passes), grid, threads, dynamic
    shared memory, and the argument template filled with (src, dst, scale, flags)."""

    launch: config.KLaunch
    kernel: object
    grid: int
    threads: int
    smem: int
    args: config.ArgumentTemplate


def k_launches(plan: Plan, K: int, rows: int, inverse: bool, device: int) -> KStep:
    """The :class:`KStep` of :func:`run_k` on ``device`` (the current device), computed once:
    a call pays a dictionary lookup, not the launcher's choice and the kernel's attributes
    (H100, 64 rows of 12 * 2**10 FP32: 135 us of host time per ``fwht`` call before)."""
    return _K_LAUNCHES.get(plan, rows, device, lambda: _make_k_launch(plan, K, rows, inverse, device),
                           (int(K), bool(inverse)))


def _make_k_launch(plan: Plan, K: int, rows: int, inverse: bool, device: int) -> KStep:
    launch = config.k_launch(plan, K, rows, inverse, limits(device))
    dynamic = ("src", "dst", "scale", "flags")
    if launch.pair:             # a row per cluster of cfg.q blocks
        cfg = launch.rows_cfg
        return KStep(launch, K_KERNELS.function(cfg.name, launch.smem, cfg.q),
                     cfg.q * min(launch.ntiles, 2**31 // cfg.q - 1), launch.threads, launch.smem,
                     cfg.bind(dynamic, nrows=launch.ntiles, log_mu=launch.log_mu))
    if launch.fused:
        cfg = launch.rows_cfg
        return KStep(launch, K_KERNELS.function(cfg.name, launch.smem),
                     min(launch.ntiles, 2**31 - 1), launch.threads, launch.smem,
                     cfg.bind(dynamic, ntiles=launch.ntiles, log_mu=launch.log_mu,
                              log_rows=launch.log_rows))
    cfg = launch.stage_cfg
    npos = rows * plan.n
    threads = config.K_STAGE_THREADS
    return KStep(launch, K_KERNELS.function(cfg.name),
                 max(1, min(-(-npos // threads), limits(device).sm_count * 16)), threads, 0,
                 cfg.bind(dynamic, npos=npos, log_m=plan.log2n))


def _launch_k(plan: Plan, step: KStep, src, dst, factor: float, flags) -> None:
    """The launches of :func:`run_k` on the current stream: the one-pass kernel, or the
    power-of-two passes on the (rows * K, plan.n) blocks, unscaled, then the K-point stage."""
    mid = src
    if not step.launch.fused and plan.passes:
        run(plan, src.reshape(-1, plan.n), dst.reshape(-1, plan.n), 1.0, check=False)
        mid = dst
    step.kernel((step.grid,), (step.threads,), step.args(mid, dst, factor, flags),
                shared_mem=step.smem)


def nonfinite_rows(a2):
    """Per row of the 2-d CuPy array ``a2``: holds a non-finite value (on the bit patterns, any
    of the four dtypes)."""
    return _nonfinite_transforms(a2, a2.shape[1], 0)
