"""GPU engine: compiles the kernels of ``fwht.cu`` (CuPy RawModule, cached per
process and on disk by CuPy) and executes a Plan pass by pass.

CuPy is imported lazily; nothing here runs on import.
"""
from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass

import numpy as np

from .. import dtypes as _dt
from .. import memory
from ..plan import STRIDED_TILE_BYTES, Pass, Plan, Stage, check_length, make_plan, pass_bits

SOURCE = os.path.join(os.path.dirname(__file__), "fwht.cu")
CTYPES = {
    np.dtype(np.float64): "double",
    np.dtype(np.float32): "float",
    np.dtype(np.float16): "__half",
    _dt.bfloat16: "__nv_bfloat16",
}
#: Elements each thread transforms in registers per round (log2).
LOG_E = int(os.environ.get("FWHT_LOG_E", 4))
#: Resident threads per SM the launcher aims for (log2); a block gets
#: 2**LOG_SM_THREADS / (blocks that fit by shared memory, at most 4) threads.
LOG_SM_THREADS = int(os.environ.get("FWHT_LOG_SM_THREADS", 10))
#: Which passes prefetch their next tile into shared memory (cp.async) while transforming
#: the current one: "wide" (those with a wider compute dtype, whose registers allow only two
#: blocks per SM: FP32 data in FP64 at 2^30 1.41x -> 1.13x Folklore's time, FP16 in FP32
#: 1.24x -> 1.08x on the H200), "all" (Folklore 2^27-2^30 1.03-1.09x slower, Alman-Rao up to
#: 1.4x slower: the staging buffer costs blocks and a shared-memory round), "wide-strided"
#: (only the strided passes of those) or "none".
ASYNC = os.environ.get("FWHT_ASYNC", "wide")
#: Alman-Rao FP32 contiguous passes load 32 bytes per thread (8 elements: round 0 holds a
#: whole H8 block, one shared-memory round trip fewer than with 16-byte vectors; H100, 2^30:
#: first pass 3.37 -> 2.95 ms, Folklore's first pass 2.84 ms).
ALMAN_VEC32 = os.environ.get("FWHT_ALMAN_VEC32", "1") == "1"
#: FP16/BF16 Alman-Rao contiguous passes on pairs (HADD2, 4-byte shared-memory accesses)
#: after a first round on single values; "0": single values throughout (H100, FP16 2^30:
#: first pass 3.18 -> 1.59 ms, Folklore's 1.43; the transform 1.41x -> 1.07x Folklore's time).
ALMAN_PAIRS = os.environ.get("FWHT_ALMAN_PAIRS", "1") == "1"
#: Shared-memory bytes of an FP32 Alman-Rao strided tile of 9 row bits in a transform of
#: at least 2^24 elements: 64 KB gives 128-byte row segments (H100, 2^27-2^30: 1.16-1.18x
#: -> 1.12-1.13x Folklore's time; at 2^20 too few tiles, and FP16/BF16 lose: 1.07 -> 1.11).
ALMAN_STRIDED_TILE_BYTES = int(os.environ.get("FWHT_ALMAN_STRIDED_TILE_BYTES", 1 << 16))
#: log2 values per thread per round in FP32 Alman-Rao strided passes: 6 = two H8 blocks per
#: round, so a 9-bit pass goes through shared memory once, as Folklore's 8-bit ones (H100,
#: 2^27/2^30: 1.12/1.13x -> 0.99/1.00x Folklore's time; 128 registers); 3 = one.  FP16/BF16
#: keep 3 (6: 2^24-2^27 3-5% faster, 2^30 2-4% slower, to 1.09-1.12x).
ALMAN_STRIDED_E = int(os.environ.get("FWHT_ALMAN_STRIDED_E", 6))
#: A contiguous pass groups several short transforms into one tile of at least this many bytes.
MIN_TILE_BYTES = 1 << 15
#: Shared memory per SM available to blocks (H100/H200: 227 KB per block, 228 KB per SM).
SM_SHARED_BYTES = 227 * 1024
NVRTC_OPTIONS = ("-std=c++17", "--fmad=false")


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
        cp = cupy()
        return cp.cuda.runtime.getDeviceCount() > 0
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
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    free, total = cp.cuda.runtime.memGetInfo()
    return (f"{name}, {props['multiProcessorCount']} SMs, {total / 2**30:.1f} GiB "
            f"({free / 2**30:.1f} free), CuPy {cp.__version__}")


# --- kernel configurations ---------------------------------------------------

def _template(kernel: str, *args) -> str:
    """C++ name of a template instantiation (bools as true/false)."""
    render = lambda v: ("true" if v else "false") if isinstance(v, bool) else str(v)  # noqa: E731
    return f"{kernel}<{','.join(render(a) for a in args)}>"


@dataclass(frozen=True)
class PassGeometry:
    """What every pass kernel is instantiated with: the storage type, a tile of 2**log_r rows
    x 2**log_g groups, 2**log_e units per thread per round, 2**log_t threads, ``vec``-element
    vector accesses."""

    ctype: str
    itemsize: int
    log_r: int
    log_g: int
    log_e: int
    log_t: int
    strided: bool
    vec: int

    @property
    def tile(self) -> int:
        return 1 << (self.log_r + self.log_g)


@dataclass(frozen=True)
class KernelConfig(PassGeometry):
    """Template arguments of one ``fwht_pass`` instantiation (``wtype``/``witem``: the
    compute type, equal to the storage type unless the plan has a wider compute_dtype;
    ``alg`` 1: an Alman-Rao pass of ``pre`` radix-2 stages, the pre-scaling when ``ps``,
    then H8 blocks; ``pipelined``: the next tile is copied to a shared staging buffer while
    the current one is transformed)."""

    wtype: str = ""
    witem: int = 0
    paired: bool = False
    alg: int = 0
    pre: int = 0
    ps: bool = False
    pipelined: bool = False

    @property
    def name(self) -> str:
        return _template("fwht_pass", self.ctype, self.wtype, self.log_r, self.log_g, self.log_e,
                         self.log_t, self.strided, self.vec, self.paired, self.alg, self.pre, self.ps,
                         self.pipelined)

    @property
    def smem_bytes(self) -> int:
        per = 2 if self.paired else 1
        unit = self.witem * per
        shift = {8: 4, 4: 5, 2: 6}[unit]
        last = self.tile // per - 1
        padded = (last + (last >> shift) + 1) * unit
        if not self.pipelined:
            return padded
        return (padded + 15) // 16 * 16 + self.tile * self.itemsize   # + the staging buffer


def _lowbit_log2(v: int) -> int:
    return (v & -v).bit_length() - 1


def _tile_groups(item: int, log_r: int, first_bit: int, total: int,
                 strided_tile: int = STRIDED_TILE_BYTES) -> tuple[int, int]:
    """(log2 G, vector width) of a pass tile of 2**log_r rows of ``item``-byte elements
    (sized by the stored bytes: a wider compute type or a stabilizer's errors take more
    shared memory for the same tile)."""
    strided = first_bit > 0
    if strided:
        # G consecutive columns: as many as fit a strided tile, at most the stride
        tile_log = (strided_tile // item).bit_length() - 1
        log_g = max(0, min(first_bit, tile_log - log_r))
    else:
        # group short transforms so a tile holds at least MIN_TILE_BYTES, within what divides total
        want = max(0, (MIN_TILE_BYTES // item).bit_length() - 1 - log_r)
        log_g = max(0, min(want, _lowbit_log2(total >> log_r)))
    vec = min(16 // item, 1 << (log_r + log_g))
    if strided:
        vec = min(vec, 1 << log_g)
    return log_g, vec


def _log_threads(smem_tile_bytes: int, log_units: int, log_e: int, units_per_vec: int,
                 wide: bool = False) -> int:
    """log2 threads per block: 2**LOG_SM_THREADS per SM (half that with a wider compute
    type, whose values take twice the registers) shared by the blocks that fit (at most
    4), no more than one round's items or the tile's vectors."""
    blocks = max(1, min(4, SM_SHARED_BYTES // (smem_tile_bytes + 1)))
    return max(0, min(LOG_SM_THREADS - int(wide) - (blocks.bit_length() - 1), log_units - log_e,
                      log_units - (units_per_vec.bit_length() - 1)))


def kernel_config(dtype, log_r: int, first_bit: int, total: int, compute_dtype=None,
                  stages: tuple[Stage, ...] = ()) -> KernelConfig:
    """Choose the tile, threads and vector width of a pass over ``total`` elements
    (Folklore, or the Alman-Rao ``stages`` of the pass)."""
    dt = np.dtype(dtype)
    cdt = dt if compute_dtype is None else np.dtype(compute_dtype)
    item, witem = dt.itemsize, cdt.itemsize
    strided = first_bit > 0
    alg = int(any(s.kind == "h8" for s in stages))     # a pass without H8 blocks is Folklore's
    wide_rows = alg and item == 4 and witem == 4 and total >= 1 << 24
    log_g, vec = _tile_groups(item, log_r, first_bit, total,
                              ALMAN_STRIDED_TILE_BYTES if wide_rows else STRIDED_TILE_BYTES)
    tl = log_r + log_g
    if alg and ALMAN_VEC32 and item == 4 and not strided:
        vec = min(8, 1 << tl)
    # 16-bit data moves and computes in pairs along the tile's unit-stride direction (in a
    # contiguous Alman-Rao pass after a first round on single values, see fwht.cu)
    paired = item == 2 and vec >= 2 and (log_g >= 1 if strided else log_r >= 1
                                         and (not alg or (ALMAN_PAIRS and vec >= 8)))
    lr = log_r - (1 if paired and not strided else 0)
    uvec = vec // (2 if paired else 1)
    log_e = min(LOG_E, lr)
    if alg:                                            # Alman-Rao: whole H8 blocks per round
        log_e = ALMAN_STRIDED_E if strided and item == witem == 4 else 3
    log_t = _log_threads((1 << tl) * witem, tl - (1 if paired else 0), log_e, uvec,
                         witem > item or log_e > 4)
    pre = sum(1 for s in stages if s.kind == "radix2") if alg else 0
    ps = bool(alg) and any(s.kind == "prescale" for s in stages)
    # pipelining needs shared-memory rounds (round 0 covers log_e rows of a strided pass,
    # the bits of one vector of a contiguous pass) and 16-byte pieces of rows
    rounds = lr > (log_e if strided else (uvec.bit_length() - 1))
    pieces = ((1 << log_g) * item) % 16 == 0 if strided else True
    pipelined = rounds and pieces and (ASYNC == "all" or (ASYNC == "wide" and witem > item)
                                       or (ASYNC == "wide-strided" and witem > item and strided))
    cfg = KernelConfig(CTYPES[dt], item, log_r, log_g, log_e, log_t, strided, vec, wtype=CTYPES[cdt],
                       witem=witem, paired=paired, alg=alg, pre=pre, ps=ps, pipelined=pipelined)
    if pipelined and cfg.smem_bytes > SM_SHARED_BYTES:        # no room for the staging buffer
        cfg = dataclasses.replace(cfg, pipelined=False)
    return cfg


@dataclass(frozen=True)
class ExtConfig(PassGeometry):
    """Template arguments of one ``fwht_ext_pass`` instantiation (the stabilizers: ``stab``
    1 Kahan / 2 Neumaier; ``errvec``: an error vector in device memory between passes)."""

    stab: int = 1
    errvec: bool = False

    @property
    def name(self) -> str:
        return _template("fwht_ext_pass", self.ctype, self.log_r, self.log_g, self.log_e,
                         self.log_t, self.strided, self.vec, self.stab, self.errvec)

    @property
    def smem_bytes(self) -> int:
        shift = {8: 4, 4: 5, 2: 6}[self.itemsize]
        padded = self.tile + (self.tile >> shift)
        return padded * self.itemsize * 2


def is_plain(plan: Plan) -> bool:
    """Folklore, no stabilizer, no compute dtype."""
    return plan.algorithm == "folklore" and plan.stabilizer is None and plan.compute_dtype == plan.dtype


def is_tuned(plan: Plan) -> bool:
    """No stabilizer (Folklore or Alman-Rao, any compute dtype): the tuned ``fwht_pass`` kernel."""
    return plan.stabilizer is None


def ext_config(plan: Plan, p, total: int, multi: bool) -> ExtConfig:
    """Tile, threads and template flags of a stabilized pass."""
    from ..plan import smem_bytes_per_element
    item = plan.dtype.itemsize
    foot = smem_bytes_per_element(plan.dtype, None, plan.stabilizer)
    log_r = p.nbits
    log_g, vec = _tile_groups(item, log_r, p.first_bit, total)
    tl = log_r + log_g
    log_e = min(LOG_E, log_r)
    stab = {"kahan": 1, "neumaier": 2}[plan.stabilizer_kind]
    errvec = not plan.fold_each_pass and multi
    log_t = _log_threads((1 << tl) * foot, tl, log_e, vec)
    return ExtConfig(CTYPES[plan.dtype], item, log_r, log_g, log_e, log_t, p.first_bit > 0, vec,
                     stab=stab, errvec=errvec)


def configs_for(plan: Plan, total: int) -> list[PassGeometry]:
    if not is_tuned(plan):
        multi = len(plan.passes) > 1
        return [ext_config(plan, p, total, multi) for p in plan.passes]
    return [kernel_config(plan.dtype, p.nbits, p.first_bit, total, plan.compute_dtype,
                          p.stages if plan.algorithm == "alman" else ())
            for p in plan.passes]


VARIANTS = [("folklore", None, None), ("folklore", "kahan", None), ("folklore", "neumaier", None),
            ("folklore", "kahan-pass", None), ("folklore", "neumaier-pass", None),
            ("alman", None, None), ("folklore", None, "wide"), ("alman", None, "wide")]


def all_configs():
    """Every configuration the planner and launcher can produce (for the nvcc check in CI)."""
    seen = set()
    for dt in _dt.SUPPORTED:
        for alg, stab, wide in VARIANTS:
            cdt = None
            if wide:
                if dt.itemsize == 8:
                    continue
                cdt = np.float32 if dt.itemsize == 2 else np.float64
            plain = (alg, stab, wide) == VARIANTS[0]
            for log2n in range(1, 37 if plain else 33):
                plan = make_plan(1 << log2n, dt, alg, stab, "cuda", cdt)
                plans = [plan]
                if plain and len(plan.passes) == 1 and log2n >= 2:
                    plans.append(split_in_two(plan))                      # lone transforms
                if plain and log2n <= 16:
                    plans += [strided_axis_plan(plan, s) for s in range(1, 15)]   # non-last axes
                for p in plans:
                    for log_batch in (0, 1, 4, 12):
                        for cfg in configs_for(p, 1 << (p.log2n + log_batch)):
                            # execute() drops the pipelining when every block gets one tile
                            twins = [cfg, dataclasses.replace(cfg, pipelined=False)] \
                                if isinstance(cfg, KernelConfig) and cfg.pipelined else [cfg]
                            for c in twins:
                                if c not in seen:
                                    seen.add(c)
                                    yield c


def instantiation_source(configs) -> str:
    """A .cu translation unit that explicitly instantiates ``configs``."""
    lines = [f'#include "{SOURCE}"']
    for c in configs:
        if isinstance(c, ExtConfig):
            lines.append(f"template __global__ void {c.name}(const {c.ctype}*, {c.ctype}*, {c.ctype}*, "
                         "i64, int, int, int, int, int, double, unsigned int*, unsigned int*, int);")
        else:
            lines.append(f"template __global__ void {c.name}(const {c.ctype}*, {c.ctype}*, i64, int, "
                         "int, int, int, int, double, unsigned int*, unsigned int*, int);")
    return "\n".join(lines) + "\n"


_PRECOMPILED: dict = {}


def precompile(configs) -> None:
    """Compile many kernel configurations in one NVRTC module (much faster than one
    module each); later launches of these configurations use it."""
    todo = sorted({c for c in configs if c.name not in _PRECOMPILED}, key=lambda c: c.name)
    if not todo:
        return
    mod = cupy().RawModule(code=_source(), options=NVRTC_OPTIONS, name_expressions=[c.name for c in todo])
    for c in todo:
        fn = mod.get_function(c.name)
        if c.smem_bytes > 48 * 1024:
            fn.max_dynamic_shared_size_bytes = c.smem_bytes
        _PRECOMPILED[c.name] = fn


def _kernel(cfg):
    fn = _PRECOMPILED.get(cfg.name)
    return fn if fn is not None else _compile_one(cfg)


@functools.lru_cache(maxsize=1)
def _source() -> str:
    with open(SOURCE) as f:
        return f.read()


@functools.lru_cache(maxsize=None)
def _compile_one(cfg):
    cp = cupy()
    mod = cp.RawModule(code=_source(), options=NVRTC_OPTIONS, name_expressions=[cfg.name])
    fn = mod.get_function(cfg.name)
    if cfg.smem_bytes > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = cfg.smem_bytes
    return fn


# --- execution -------------------------------------------------------------------

def execute(plan: Plan, src, dst, factor: float = 1.0, check: bool = True, row_shift: int = 0):
    """Run ``plan`` from ``src`` into ``dst`` (C-contiguous (batch, n) CuPy arrays, 16-byte
    aligned; ``src`` may be ``dst``), multiplying by ``factor`` in the last pass.

    With ``check`` the call waits for the result and returns the transforms whose input
    was finite and whose output is not (a boolean CuPy array over the transforms, in the
    order of the rows of the moved-axis input), or None when there are none: overflow is
    judged per transform, so a NaN in one transform never hides an overflow in another.
    ``row_shift``: each row of ``plan.n`` elements holds 2**row_shift interleaved
    transforms (a non-last axis, see :func:`strided_axis_plan`).
    """
    cp = cupy()
    total = int(src.size)
    if total == 0:
        return None
    if not plan.passes:
        if dst.data.ptr != src.data.ptr:
            dst[...] = src
        return None
    ntransforms = total >> (plan.log2n - row_shift)
    if check:   # flags[0]: bit 0 non-finite input, bit 1 non-finite output; then a bit per transform
        buf = cp.zeros(1 + (ntransforms + 31) // 32, dtype=cp.uint32)
        flags, rows = buf[:1], buf[1:]
    else:
        flags = rows = _scratch_flags(cp.cuda.Device().id)
    cfgs = configs_for(plan, total)
    if (is_plain(plan) and len(cfgs) == 1 and plan.passes[0].nbits == plan.log2n
            and plan.n * plan.dtype.itemsize >= 1 << 17
            and total // cfgs[0].tile < _sm_count()):
        # a 128 KB tile per transform and too few of them to fill the GPU: two passes over
        # more SMs instead (same bits for Folklore; 1.7x faster for one transform on the H200)
        plan = split_in_two(plan)
        cfgs = configs_for(plan, total)
    last = len(cfgs) - 1
    err = None
    if any(isinstance(c, ExtConfig) and c.errvec for c in cfgs):
        _check_memory(src.nbytes, "the error vector of the stabilized transform")
        err = cp.empty_like(dst)                 # written by pass 0 before any pass reads it
    for i, (p, cfg) in enumerate(zip(plan.passes, cfgs)):
        ntiles = total // cfg.tile
        grid = min(ntiles, 2**31 - 1)
        if isinstance(cfg, KernelConfig) and cfg.pipelined:   # resident blocks loop over the tiles
            resident = _sm_count() * _resident_blocks(cfg)
            if ntiles <= resident:      # a tile per block: nothing to prefetch
                cfg = dataclasses.replace(cfg, pipelined=False)
            grid = min(grid, resident)
        tail = (np.int32(check and i == 0), np.int32(i == last), np.float64(factor), flags, rows,
                np.int32(row_shift))
        if isinstance(cfg, ExtConfig):
            args = (src if i == 0 else dst, dst, err if err is not None else dst, np.int64(ntiles),
                    np.int32(p.first_bit), np.int32(plan.log2n), tail[0], np.int32(i == 0)) + tail[1:]
        else:   # log2 n and the radix-2 prefix bits: Alman-Rao's pre-scaling exponents
            args = (src if i == 0 else dst, dst, np.int64(ntiles), np.int32(p.first_bit),
                    np.int32(plan.log2n), np.int32(plan.log2n % 3)) + tail
        _kernel(cfg)((grid,), (1 << cfg.log_t,), args, shared_mem=cfg.smem_bytes)
    if not check:
        return None
    f = int(flags.get()[0])
    if not f & 2:
        return None
    bad = _nonfinite_transforms(dst, plan.n >> row_shift, row_shift)
    if f & 1:    # some transforms had non-finite input: those are not overflows
        ids = cp.arange(ntransforms, dtype=cp.int64)
        had_bad_input = ((rows[ids >> 5] >> (ids & 31).astype(cp.uint32)) & 1).astype(cp.bool_)
        bad &= ~had_bad_input
    return bad if bool(bad.any()) else None


def _bits(a):
    """``a`` viewed as unsigned integers of its width, and its dtype's exponent mask (all
    exponent bits set: inf or NaN)."""
    udt, mask = {8: (np.uint64, 0x7FF0000000000000), 4: (np.uint32, 0x7F800000),
                 2: (np.uint16, 0x7F80 if a.dtype == _dt.bfloat16 else 0x7C00)}[a.dtype.itemsize]
    return a.view(udt), udt(mask)


@functools.lru_cache(maxsize=None)
def _reductions():
    """(any non-finite, max |finite value|) over bit patterns: no temporary of the input's size."""
    cp = cupy()
    nonfinite = cp.ReductionKernel("T x, T m", "bool y", "(x & m) == m", "a || b", "y = a", "false",
                                   "fwht_nonfinite_any")
    max_abs = cp.ReductionKernel("T x, T e, T m", "T y", "((x & e) == e) ? (T)0 : (x & m)",
                                 "max(a, b)", "y = a", "0", "fwht_max_abs_bits")
    return nonfinite, max_abs


def _nonfinite_transforms(a, n: int, row_shift: int):
    """Per transform of the (batch, n * 2**row_shift) array ``a``: holds a non-finite value."""
    u, mask = _bits(a)
    return _reductions()[0](u.reshape(-1, n, 1 << row_shift), mask, axis=1).reshape(-1)


def split_in_two(plan: Plan) -> Plan:
    """A single-pass Folklore plan as two passes of about half the bits (a contiguous pass,
    then a strided one): more, smaller tiles for one short transform, the same bits."""
    lo = (plan.log2n + 1) // 2
    passes = (Pass(0, lo, plan.stages[:lo]), Pass(lo, plan.log2n - lo, plan.stages[lo:]))
    return Plan(plan.n, plan.dtype, plan.algorithm, None, plan.device, passes, plan.compute_dtype)


@functools.lru_cache(maxsize=None)
def _sm_count() -> int:
    cp = cupy()
    return int(cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["multiProcessorCount"])


@functools.lru_cache(maxsize=None)
def _resident_blocks(cfg: KernelConfig) -> int:
    """Blocks of ``cfg`` that fit on one SM at once (CUDA occupancy calculator)."""
    fn = _kernel(cfg)
    try:
        return max(1, int(cupy().cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
            fn.ptr, 1 << cfg.log_t, cfg.smem_bytes)))
    except Exception:   # estimate from shared memory, registers and threads
        regs = max(1, fn.num_regs) * (1 << cfg.log_t)
        return max(1, min(SM_SHARED_BYTES // cfg.smem_bytes, 65536 // regs, 2048 >> cfg.log_t))


@functools.lru_cache(maxsize=None)
def _scratch_flags(device_id: int):
    return cupy().zeros(1, dtype=cupy().uint32)


def _aligned(a) -> bool:
    return a.data.ptr % 16 == 0


def _check_memory(nbytes: int, what: str) -> None:
    memory.check(nbytes, what, "transform in place (out=x), in smaller batches, or on the host",
                 device="gpu", force=True)


def strided_axis_plan(plan: Plan, shift: int) -> Plan:
    """A plain Folklore plan whose stages act on index bits shift .. shift + log2(n) - 1 of a
    row of n * 2**shift elements: the transform along a non-last axis of a C-contiguous array
    whose trailing dimensions hold 2**shift elements, computed in place without a transpose.
    Every pass is strided; the stage order is unchanged, so the bits equal ``plan``'s."""
    cap = pass_bits(plan.dtype, True)
    passes, b = [], 0
    while b < plan.log2n:
        k = min(cap, plan.log2n - b)
        passes.append(Pass(shift + b, k, tuple(Stage("radix2", shift + b + j) for j in range(k))))
        b += k
    return Plan(plan.n << shift, plan.dtype, "folklore", None, "cuda", tuple(passes), plan.dtype)


def transform(x, axis: int, norm: str, algorithm: str, stabilizer, out, inverse: bool,
              compute_dtype=None):
    """fwht/ifwht of a CuPy array on its device (arguments already checked).

    The transform axis must be contiguous in memory: a view whose moved axis already
    is (and is 16-byte aligned) is read directly; anything else goes through one
    explicit transpose copy.  The result is written straight into ``out`` when its
    layout allows, otherwise into a fresh C-contiguous array.  ``x`` is never modified
    unless it is ``out``.  Transforms whose unscaled values overflow while their scaled
    result fits are recomputed in float64 (:func:`fwht_gpu.transform.recompute_rows`).
    """
    from ..transform import norm_factor
    cp = cupy()
    n = x.shape[axis]
    check_length(n, "x")
    factor = norm_factor(n, norm, inverse)
    plan = make_plan(n, x.dtype, algorithm, stabilizer, "cuda", compute_dtype)
    if x.size == 0:
        return out if out is not None else cp.empty_like(x)
    source = _input_kept(x, axis, out, plan, factor)
    usable = lambda a: a.flags.c_contiguous and _aligned(a)  # noqa: E731
    inner = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    if (axis != x.ndim - 1 and is_plain(plan) and usable(x) and inner & (inner - 1) == 0
            and (out is None or usable(out))):
        # a non-last axis with 2**s trailing elements: strided passes, no transpose
        shift = inner.bit_length() - 1
        sp = strided_axis_plan(plan, shift)
        dst = out if out is not None else cp.empty(x.shape, dtype=x.dtype)
        bad = execute(sp, x.reshape(-1, sp.n), dst.reshape(-1, sp.n), factor, row_shift=shift)
        _settle(bad, plan, factor, source, cp.moveaxis(dst, axis, -1), axis)
        return dst
    xm = cp.moveaxis(x, axis, -1)
    om = None if out is None else cp.moveaxis(out, axis, -1)
    need = 0 if (om is not None and usable(om)) else x.nbytes
    need += 0 if usable(xm) else x.nbytes
    _check_memory(need, "the work buffers")
    if usable(xm):
        src = xm
    else:
        src = cp.empty(xm.shape, dtype=x.dtype)
        src[...] = xm                                   # explicit transpose / realignment
    if om is not None and usable(om):
        dst = om
    elif src is not xm:
        dst = src                                       # private copy: transform in place
    else:
        dst = cp.empty(xm.shape, dtype=x.dtype)
    bad = execute(plan, src.reshape(-1, n), dst.reshape(-1, n), factor)
    _settle(bad, plan, factor, source, dst, axis)
    res = cp.moveaxis(dst, -1, axis)
    if out is not None:
        if dst is not om:
            out[...] = res
        return out
    return res if res.flags.c_contiguous else cp.ascontiguousarray(res)


def _input_kept(x, axis, out, plan, factor):
    """The input transforms can be recomputed from after the call: ``x`` itself, unless the
    call is in place (``out`` overlaps ``x``) and a scaled transform could overflow before its
    scaling (then a copy of ``x`` when memory allows, else None)."""
    cp = cupy()
    if out is None or not cp.may_share_memory(out, x):
        return x
    if factor >= 1.0 or plan.dtype == np.float64 or not _could_overflow(x, plan):
        return None
    try:
        _check_memory(x.nbytes, "a copy of the input of an in-place scaled transform")
    except MemoryError:
        return None
    return x.copy()


def _could_overflow(x, plan) -> bool:
    """Whether some unscaled intermediate value could leave the dtype's range: n max|x| times
    the growth of rounding (Folklore, stabilizers) or of Alman-Rao's pre-scaling."""
    u, exp = _bits(x)
    mag = u.dtype.type((1 << (8 * x.dtype.itemsize - 1)) - 1)
    top = _reductions()[1](u, exp, mag).reshape(1).view(x.dtype).astype(np.float64)
    growth = 1.05 if plan.algorithm == "folklore" else 2.0 ** (plan.log2n // 3 + 5)
    return float(top[0]) * plan.n * growth >= _dt.max_finite(plan.dtype)


def _settle(bad, plan, factor, source, result_m, axis) -> None:
    """Recompute the overflowed transforms (mask ``bad``) of ``source`` into ``result_m`` (the
    result with the transform axis moved last), or raise TransformOverflowError."""
    if bad is None:
        return
    from ..transform import overflow_error
    cp = cupy()
    if source is None:
        err = overflow_error(plan.dtype)
        if factor < 1.0 and plan.dtype != np.float64:
            err.args = (err.args[0] + "; the scaled result may fit, but this in-place call kept no "
                        "copy of the input to recompute it in float64: transform out of place",)
        raise err
    xm = cp.moveaxis(source, axis, -1)
    if xm.ndim == 1:
        xm, result_m = xm[None], result_m[None]
    idx = cp.unravel_index(cp.nonzero(bad)[0], xm.shape[:-1])
    _settle_rows(bad, plan, factor, xm[idx], result_m, idx)


def _settle_rows(bad, plan, factor, rows, result2, idx=None) -> None:
    """Recompute the overflowed transforms (mask ``bad``) into ``result2[idx]`` from ``rows``:
    the input rows ``idx`` (CuPy), or all input rows as a (batch, n) host array."""
    if bad is None:
        return
    from ..transform import recompute_rows
    cp = cupy()
    if idx is None:
        idx = cp.nonzero(bad)[0]
        rows = cp.asarray(rows[idx.get()])
    result2[idx] = recompute_rows(plan, rows, factor)


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


def transform_host(x: np.ndarray, axis: int, norm: str, algorithm: str, stabilizer, out,
                   inverse: bool, method: str = "register", compute_dtype=None) -> np.ndarray:
    """Transform a NumPy array on the GPU and return a NumPy array.

    ``method="register"`` page-locks the host arrays in place (cudaHostRegister) so the
    two DMA copies read and write them directly; ``"staging"`` copies through a pinned
    buffer instead.  The array must fit in device memory (one clear error otherwise).
    """
    from ..transform import norm_factor
    cp = cupy()
    n = x.shape[axis]
    factor = norm_factor(n, norm, inverse)
    plan = make_plan(n, x.dtype, algorithm, stabilizer, "cuda", compute_dtype)
    if out is None:
        out = np.empty(x.shape, dtype=x.dtype)
    if x.size == 0:
        return out
    _check_memory(x.nbytes, "the device copy of the host array")
    xm = np.moveaxis(x, axis, -1)
    om = np.moveaxis(out, axis, -1)
    src = xm if xm.flags.c_contiguous else np.ascontiguousarray(xm)
    dst = om if om.flags.c_contiguous else np.empty(om.shape, dtype=x.dtype)
    dev = cp.empty(src.shape, dtype=x.dtype)
    stream = cp.cuda.get_current_stream()
    rt = cp.cuda.runtime
    registered = []
    try:
        if method == "register":
            for a in (src, dst) if dst.ctypes.data != src.ctypes.data else (src,):
                if not is_pinned(a):
                    rt.hostRegister(a.ctypes.data, a.nbytes, 0)
                    registered.append(a.ctypes.data)
            dev.data.copy_from_host_async(src.ctypes.data, x.nbytes, stream)
            _settle_rows(execute(plan, dev.reshape(-1, n), dev.reshape(-1, n), factor), plan,
                         factor, src.reshape(-1, n), dev.reshape(-1, n))
            dev.data.copy_to_host_async(dst.ctypes.data, x.nbytes, stream)
            stream.synchronize()
        else:
            pinned = cp.cuda.alloc_pinned_memory(x.nbytes)
            host = np.frombuffer(pinned, dtype=x.dtype, count=x.size).reshape(src.shape)
            host[...] = src
            dev.data.copy_from_host_async(host.ctypes.data, x.nbytes, stream)
            _settle_rows(execute(plan, dev.reshape(-1, n), dev.reshape(-1, n), factor), plan,
                         factor, src.reshape(-1, n), dev.reshape(-1, n))
            dev.data.copy_to_host_async(host.ctypes.data, x.nbytes, stream)
            stream.synchronize()
            dst[...] = host
    finally:
        for ptr in registered:
            rt.hostUnregister(ptr)
    if dst is not om:
        om[...] = dst
    return out
