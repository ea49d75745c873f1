"""The executing room: runs a Plan on CuPy arrays, pass by pass, as the Plan says.

:func:`run` executes a plan from a (batch, n << plan.interleave) array into another; the
kernel of each pass comes from :mod:`.config` (which decides it) and :mod:`.modules`
(which compiles it).  Nothing here changes the plan.
"""
from __future__ import annotations

import functools
import os

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


def compile_unit() -> tuple[str, int]:
    """The translation unit instantiating every configuration (the CI nvcc check): the
    power-of-two passes and the K * 2**k kernels (:data:`K_SOURCE`)."""
    configs = list(config.all_configs())
    kconfigs = list(config.all_k_configs())
    text = config.instantiation_source(configs, SOURCE) + config.instantiation_source(kconfigs, K_SOURCE)
    return text, len(configs) + len(kconfigs)


def kernel(cfg: config.PassGeometry):
    """The compiled kernel of ``cfg`` on the current device."""
    return KERNELS.function(cfg.name, cfg.smem_bytes)


def precompile(plans_and_totals, workers: int | None = None, wait: bool = True) -> int:
    """Compile, in parallel threads, every kernel the (plan, total elements) pairs launch
    (with and without pipelining), in their order; returns how many were queued.  With
    ``wait=False`` in the background (see :meth:`KernelModule.precompile`)."""
    lim = limits()
    names = {}
    for plan, total in plans_and_totals:
        for cfg in config.configs_for(plan, total, lim):
            names.update(dict.fromkeys((cfg.name, config.unpipelined(cfg).name)))
    return KERNELS.precompile(names, workers, wait)


def run(plan: Plan, src, dst, factor: float = 1.0, check: bool = True):
    """Run ``plan`` from ``src`` into ``dst`` (C-contiguous (batch, n << plan.interleave) CuPy
    arrays, 16-byte aligned; ``src`` may be ``dst``), multiplying by ``factor`` in the last
    pass.

    With ``check`` the call waits for the result and returns the transforms whose input
    was finite and whose output is not (a boolean CuPy array over the transforms, in the
    order of the rows of the moved-axis input), or None when there are none: overflow is
    judged per transform, so a NaN in one transform never hides an overflow in another.
    """
    cp = cupy()
    total = int(src.size)
    if total == 0:
        return None
    if not plan.passes:
        if dst.data.ptr != src.data.ptr:
            dst[...] = src
        return None
    shift = plan.interleave
    log2row = plan.log2n + shift
    ntransforms = total >> plan.log2n
    if check:   # flags[0]: bit 0 non-finite input, bit 1 non-finite output; then a bit per transform
        buf = cp.zeros(1 + (ntransforms + 31) // 32, dtype=cp.uint32)
        flags, rows = buf[:1], buf[1:]
    else:
        flags = rows = _scratch_flags(cp.cuda.Device().id)
    lim = limits()
    cfgs = config.configs_for(plan, total, lim)
    last = len(cfgs) - 1
    err = None
    if any(isinstance(c, config.StabilizedConfig) and c.errvec for c in cfgs):
        check_memory(src.nbytes, "the error vector of the stabilized transform")
        err = cp.empty_like(dst)                 # written by pass 0 before any pass reads it
    for i, (p, cfg) in enumerate(zip(plan.passes, cfgs)):
        ntiles = total // cfg.tile
        grid = min(ntiles, 2**31 - 1)
        if isinstance(cfg, config.KernelConfig) and cfg.pipelined:   # resident blocks loop over tiles
            resident = lim.sm_count * _resident_blocks(cfg, lim.smem_per_sm)
            if ntiles <= resident:      # a tile per block: nothing to prefetch
                cfg = config.unpipelined(cfg)
            grid = min(grid, resident)
        common = dict(src=src if i == 0 else dst, dst=dst, ntiles=ntiles, log_inner=p.first_bit + shift,
                      log2n=log2row, check_input=check and i == 0, last=i == last, scale=factor,
                      flags=flags, rows=rows, row_shift=shift)
        if isinstance(cfg, config.StabilizedConfig):
            args = cfg.arguments(err=err if err is not None else dst, first=i == 0, **common)
        else:           # fbits: Alman-Rao's radix-2 prefix bits (the pre-scaling exponents skip them)
            args = cfg.arguments(fbits=plan.prefix_bits, **common)
        kernel(cfg)((grid,), (1 << cfg.log_t,), args, shared_mem=cfg.smem_bytes)
    if not check:
        return None
    f = int(flags.get()[0])
    if not f & 2:
        return None
    bad = _nonfinite_transforms(dst, plan.n, shift)
    if f & 1:    # some transforms had non-finite input: those are not overflows
        ids = cp.arange(ntransforms, dtype=cp.int64)
        had_bad_input = ((rows[ids >> 5] >> (ids & 31).astype(cp.uint32)) & 1).astype(cp.bool_)
        bad &= ~had_bad_input
    return bad if bool(bad.any()) else None


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
    """Blocks of ``cfg`` that fit on one SM at once (CUDA occupancy calculator)."""
    fn = kernel(cfg)
    try:
        return max(1, int(cupy().cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
            fn.ptr, 1 << cfg.log_t, cfg.smem_bytes)))
    except Exception:   # estimate from shared memory, registers and threads
        regs = max(1, fn.num_regs) * (1 << cfg.log_t)
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
    False."""
    cp = cupy()
    rows = int(src.shape[0])
    if rows == 0 or src.size == 0:
        return False
    flags = cp.zeros(1, dtype=cp.uint32) if check else _scratch_flags(cp.cuda.Device().id)
    launch = config.k_launch(plan, K, rows, inverse, limits())
    if launch.fused:
        cfg = launch.rows_cfg
        grid = min(launch.ntiles, 2**31 - 1)
        args = cfg.arguments(src=src, dst=dst, ntiles=launch.ntiles, log_mu=launch.log_mu,
                             log_rows=launch.log_rows, scale=factor, flags=flags)
        K_KERNELS.function(cfg.name, launch.smem)((grid,), (launch.threads,), args,
                                                  shared_mem=launch.smem)
    else:
        mid = src
        if plan.passes:     # the power-of-two passes on the (rows * K, plan.n) blocks, unscaled
            run(plan, src.reshape(-1, plan.n), dst.reshape(-1, plan.n), 1.0, check=False)
            mid = dst
        cfg = launch.stage_cfg
        npos = rows * plan.n
        threads = config.K_STAGE_THREADS
        grid = max(1, min(-(-npos // threads), limits().sm_count * 16))
        args = cfg.arguments(src=mid, dst=dst, npos=npos, log_m=plan.log2n, scale=factor,
                             flags=flags)
        K_KERNELS.function(cfg.name)((grid,), (threads,), args)
    return check and bool(int(flags.get()[0]) & 2)


def nonfinite_rows(a2):
    """Per row of the 2-d CuPy array ``a2``: holds a non-finite value (on the bit patterns, any
    of the four dtypes)."""
    return _nonfinite_transforms(a2, a2.shape[1], 0)
