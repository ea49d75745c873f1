"""The configuration room: how each pass of a Plan maps onto a kernel launch.

This is where the tile, the threads per block and the vector width are decided (from the
Plan, a :class:`~fwht_gpu.Tuning` and the device's :class:`~fwht_gpu.cuda.device.Limits`),
and the one table of kernel parameters from which the kernel names, the explicit
instantiation text (for ``nvcc``) and the launch arguments are generated.  Pure Python: no
GPU is needed to compute or test a configuration.

To add a kernel: write it under ``kernels/`` (included by ``kernels/fwht.cu``), give it a
config class here (template arguments -> ``name``, ``smem_bytes``) and a parameter table,
and list its configurations in :func:`all_configs`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .. import dtypes as _dt
from .. import variants
from ..plan import Plan, Stage, make_plan, smem_bytes_per_element
from ..tuning import DEFAULT, Tuning
from .device import H100, Limits

CTYPES = {
    np.dtype(np.float64): "double",
    np.dtype(np.float32): "float",
    np.dtype(np.float16): "__half",
    _dt.bfloat16: "__nv_bfloat16",
}

#: Parameters of ``fwht_pass`` in order: (name, C type; ``T`` is the storage type).
PASS_PARAMS = (("src", "const T*"), ("dst", "T*"), ("ntiles", "i64"), ("log_inner", "int"),
               ("log2n", "int"), ("fbits", "int"), ("check_input", "int"), ("last", "int"),
               ("scale", "double"), ("flags", "unsigned int*"), ("rows", "unsigned int*"),
               ("row_shift", "int"))
#: Parameters of ``fwht_stabilized_pass`` in order.
STABILIZED_PARAMS = (("src", "const T*"), ("dst", "T*"), ("err", "T*"), ("ntiles", "i64"),
                     ("log_inner", "int"), ("log2n", "int"), ("check_input", "int"),
                     ("first", "int"), ("last", "int"), ("scale", "double"),
                     ("flags", "unsigned int*"), ("rows", "unsigned int*"), ("row_shift", "int"))
_SCALARS = {"i64": np.int64, "int": np.int32, "double": np.float64}


def _template(kernel: str, *args) -> str:
    """C++ name of a template instantiation (bools as true/false)."""
    render = lambda v: ("true" if v else "false") if isinstance(v, bool) else str(v)  # noqa: E731
    return f"{kernel}<{','.join(render(a) for a in args)}>"


def _padded_units(units: int, unit_bytes: int) -> int:
    """Shared-memory units of a tile of ``units`` with the bank-conflict padding of
    ``kernels/tile.cuh`` (one unit per 16 (8-byte), 32 (4-byte) or 64 (2-byte) units)."""
    return units + (units >> {8: 4, 4: 5, 2: 6}[unit_bytes])


def _padded_tile_bytes(tile: int, item: int, paired: bool) -> int:
    """Bytes of a tile of ``tile`` elements held as ``item``-byte values (pairs of them when
    ``paired``) in shared memory, padded (``PassTraits::PADDED_UNITS`` units)."""
    per = 2 if paired else 1
    unit = item * per
    return (_padded_units(tile // per - 1, unit) + 1) * unit


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

    def declaration(self) -> str:
        """The explicit instantiation of this configuration (for ``nvcc``)."""
        params = ", ".join(t.replace("T", self.ctype) for _, t in self.PARAMS)
        return f"template __global__ void {self.name}({params});"

    def arguments(self, **values) -> tuple:
        """The launch arguments in parameter order (scalars converted to their C types)."""
        missing = {n for n, _ in self.PARAMS} - values.keys()
        if missing or len(values) != len(self.PARAMS):
            raise TypeError(f"{type(self).__name__}.arguments: missing {sorted(missing)} or extra values")
        return tuple(_SCALARS[t](values[n]) if t in _SCALARS else values[n] for n, t in self.PARAMS)

    def bind(self, dynamic: tuple[str, ...], **fixed) -> ArgumentTemplate:
        """:meth:`arguments` with the ``fixed`` values converted once: the returned template,
        called with the ``dynamic`` values in that order, gives the same tuple."""
        return ArgumentTemplate(self.PARAMS, dynamic, fixed)


class ArgumentTemplate:
    """Launch arguments in parameter order whose fixed values (those of a launch geometry)
    are converted to their C types once; ``template(*dynamic)`` fills in the per-call ones
    (arrays, the scale, the flags), converting scalars as :meth:`PassGeometry.arguments`."""

    __slots__ = ("_values", "_slots", "dynamic")

    def __init__(self, params, dynamic: tuple[str, ...], fixed: dict):
        names = [n for n, _ in params]
        dynamic = tuple(dynamic)
        if (set(dynamic) & fixed.keys() or set(dynamic) | fixed.keys() != set(names)
                or len(dynamic) != len(set(dynamic))):
            raise TypeError(f"bind: fixed {sorted(fixed)} and dynamic {list(dynamic)} must split "
                            f"the parameters {names}")
        kinds = dict(params)
        self._values = [(_SCALARS[t](fixed[n]) if t in _SCALARS else fixed[n]) if n in fixed else None
                        for n, t in params]
        self._slots = tuple((names.index(n), _SCALARS.get(kinds[n])) for n in dynamic)
        self.dynamic = dynamic

    def __call__(self, *values) -> tuple:
        if len(values) != len(self._slots):
            raise TypeError(f"expected the values of {list(self.dynamic)}")
        v = list(self._values)
        for (i, conv), x in zip(self._slots, values):
            v[i] = x if conv is None or type(x) is conv else conv(x)
        return tuple(v)


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

    PARAMS = PASS_PARAMS

    @property
    def name(self) -> str:
        return _template("fwht_pass", self.ctype, self.wtype, self.log_r, self.log_g, self.log_e,
                         self.log_t, self.strided, self.vec, self.paired, self.alg, self.pre, self.ps,
                         self.pipelined)

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory (``PassTraits<...>::SMEM_BYTES`` in the kernel)."""
        padded = _padded_tile_bytes(self.tile, self.witem, self.paired)
        if not self.pipelined:
            return padded
        return (padded + 15) // 16 * 16 + self.tile * self.itemsize   # + the staging buffer


@dataclass(frozen=True)
class StabilizedConfig(PassGeometry):
    """Template arguments of one ``fwht_stabilized_pass`` instantiation (``stab`` 1 Kahan /
    2 Neumaier; ``errvec``: an error vector in device memory between passes)."""

    stab: int = 1
    errvec: bool = False

    PARAMS = STABILIZED_PARAMS

    @property
    def name(self) -> str:
        return _template("fwht_stabilized_pass", self.ctype, self.log_r, self.log_g, self.log_e,
                         self.log_t, self.strided, self.vec, self.stab, self.errvec)

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory: values and errors (``StabilizedPassTraits<...>::SMEM_BYTES``)."""
        return _padded_units(self.tile, self.itemsize) * self.itemsize * 2


@dataclass(frozen=True)
class ClusterConfig(PassGeometry):
    """Template arguments of one ``fwht_cluster_pass`` instantiation (kernels/cluster_pass.cuh):
    a block's tile of 2**log_r rows x 2**log_g groups as :class:`KernelConfig`'s (plain
    Folklore, compute type = storage type, no staging), spread over clusters of 2**log_cl
    blocks; ``tile`` is a block's."""

    paired: bool = False
    log_cl: int = 1

    PARAMS = PASS_PARAMS

    @property
    def name(self) -> str:
        return _template("fwht_cluster_pass", self.ctype, self.log_r, self.log_g, self.log_cl,
                         self.log_e, self.log_t, self.strided, self.vec, self.paired)

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory: the padded tile (``ClusterPassTraits<...>::SMEM_BYTES``)."""
        return _padded_tile_bytes(self.tile, self.itemsize, self.paired)


@dataclass(frozen=True)
class StabilizedClusterConfig(StabilizedConfig):
    """Template arguments of one ``fwht_stabilized_cluster_pass`` instantiation
    (kernels/stabilized_cluster_pass.cuh): a block's tile as :class:`StabilizedConfig`'s (values
    and errors), spread over clusters of 2**log_cl blocks; ``tile`` is a block's."""

    log_cl: int = 1

    @property
    def name(self) -> str:
        return _template("fwht_stabilized_cluster_pass", self.ctype, self.log_r, self.log_g,
                         self.log_cl, self.log_e, self.log_t, self.strided, self.vec, self.stab,
                         self.errvec)


#: The configurations whose kernels span thread-block clusters (their own translation unit).
CLUSTER_CONFIGS = (ClusterConfig, StabilizedClusterConfig)


def _lowbit_log2(v: int) -> int:
    return (v & -v).bit_length() - 1


def _tile_groups(item: int, log_r: int, first_bit: int, total: int, strided_tile: int,
                 t: Tuning) -> tuple[int, int]:
    """(log2 G, vector width) of a pass tile of 2**log_r rows of ``item``-byte elements
    (sized by the stored bytes: a wider compute type or a stabilizer's errors take more
    shared memory for the same tile)."""
    strided = first_bit > 0
    if strided:
        # G consecutive columns: as many as fit a strided tile, at most the stride
        tile_log = (strided_tile // item).bit_length() - 1
        log_g = max(0, min(first_bit, tile_log - log_r))
    else:
        # group short transforms so a tile holds at least min_tile_bytes, within what divides total
        want = max(0, (t.min_tile_bytes // item).bit_length() - 1 - log_r)
        log_g = max(0, min(want, _lowbit_log2(total >> log_r)))
    vec = min(16 // item, 1 << (log_r + log_g))
    if strided:
        vec = min(vec, 1 << log_g)
    return log_g, vec


def _log_threads(smem_tile_bytes: int, log_units: int, log_e: int, units_per_vec: int,
                 t: Tuning, lim: Limits, wide: bool = False) -> int:
    """log2 threads per block: 2**log_sm_threads per SM (half that with a wider compute type,
    whose values take twice the registers) shared by the blocks that fit in the SM's shared
    memory (at most 4), no more than one round's items or the tile's vectors."""
    blocks = max(1, min(4, lim.smem_per_sm // (smem_tile_bytes + 1)))
    return max(0, min(t.log_sm_threads - int(wide) - (blocks.bit_length() - 1), log_units - log_e,
                      log_units - (units_per_vec.bit_length() - 1)))


def kernel_config(dtype, log_r: int, first_bit: int, total: int, compute_dtype=None,
                  stages: tuple[Stage, ...] = (), tuning: Tuning = DEFAULT,
                  limits: Limits = H100) -> KernelConfig:
    """The tile, threads and vector width of a ``fwht_pass`` over ``total`` elements
    (Folklore, or the Alman-Rao ``stages`` of the pass)."""
    t, dt = tuning, np.dtype(dtype)
    cdt = dt if compute_dtype is None else np.dtype(compute_dtype)
    item, witem = dt.itemsize, cdt.itemsize
    strided = first_bit > 0
    alg = int(any(s.kind == "h8" for s in stages))     # a pass without H8 blocks is Folklore's
    wide_rows = alg and item == 4 and witem == 4 and total >= 1 << 24
    log_g, vec = _tile_groups(item, log_r, first_bit, total,
                              t.alman_strided_tile_bytes if wide_rows else t.strided_tile_bytes, t)
    tl = log_r + log_g
    if alg and t.alman_vec32 and item == 4 and not strided:
        vec = min(8, 1 << tl)
    # 16-bit data moves and computes in pairs along the tile's unit-stride direction (in a
    # contiguous Alman-Rao pass after a first round on single values, see fwht_pass.cuh)
    paired = item == 2 and vec >= 2 and (log_g >= 1 if strided else log_r >= 1
                                         and (not alg or (t.alman_pairs and vec >= 8)))
    lr = log_r - (1 if paired and not strided else 0)
    uvec = vec // (2 if paired else 1)
    log_e = min(t.log_e, lr)
    if alg:                                            # Alman-Rao: whole H8 blocks per round
        log_e = t.alman_strided_e if strided and item == witem == 4 else 3
    log_t = _log_threads((1 << tl) * witem, tl - (1 if paired else 0), log_e, uvec, t, limits,
                         witem > item or log_e > 4)
    pre = sum(1 for s in stages if s.kind == "radix2") if alg else 0
    ps = bool(alg) and any(s.kind == "prescale" for s in stages)
    # pipelining needs shared-memory rounds (round 0 covers log_e rows of a strided pass,
    # the bits of one vector of a contiguous pass) and 16-byte pieces of rows
    rounds = lr > (log_e if strided else (uvec.bit_length() - 1))
    pieces = ((1 << log_g) * item) % 16 == 0 if strided else True
    mode = t.async_passes
    pipelined = rounds and pieces and (mode == "all" or (mode == "wide" and witem > item)
                                       or (mode == "wide-strided" and witem > item and strided))
    cfg = KernelConfig(CTYPES[dt], item, log_r, log_g, log_e, log_t, strided, vec, wtype=CTYPES[cdt],
                       witem=witem, paired=paired, alg=alg, pre=pre, ps=ps, pipelined=pipelined)
    if pipelined and cfg.smem_bytes > limits.smem_per_block:   # no room for the staging buffer
        cfg = dataclasses.replace(cfg, pipelined=False)
    return cfg


def stabilized_config(plan: Plan, first_bit: int, nbits: int, total: int,
                      limits: Limits = H100) -> StabilizedConfig:
    """The tile, threads and template flags of a stabilized pass."""
    t, item = plan.tuning, plan.dtype.itemsize
    foot = smem_bytes_per_element(plan.dtype, None, plan.stabilizer)
    log_g, vec = _tile_groups(item, nbits, first_bit, total, t.strided_tile_bytes, t)
    tl = nbits + log_g
    log_e = min(t.log_e, nbits)
    stab = {"kahan": 1, "neumaier": 2}[plan.stabilizer_kind]
    errvec = not plan.fold_each_pass and len(plan.passes) > 1
    log_t = _log_threads((1 << tl) * foot, tl, log_e, vec, t, limits)
    return StabilizedConfig(CTYPES[plan.dtype], item, nbits, log_g, log_e, log_t, first_bit > 0, vec,
                            stab=stab, errvec=errvec)


def _check_clusters(log_cl: int, limits: Limits) -> None:
    if log_cl > limits.max_cluster_log:
        raise ValueError(f"a plan with clusters of {1 << log_cl} thread blocks, and {limits.name} "
                         f"runs clusters of at most {1 << limits.max_cluster_log}: plan with "
                         f"make_plan(..., clusters={limits.max_cluster_log}) or "
                         "Tuning(cluster_log=0)")


def _check_cluster_tile(cfg, limits: Limits):
    if cfg.smem_bytes > limits.smem_per_block:
        raise ValueError(f"cluster pass tile of {cfg.smem_bytes} bytes exceeds {limits.name}'s "
                         f"{limits.smem_per_block} bytes per block: lower Tuning.cluster_tile_bytes")
    return cfg


def _cluster_tile(item: int, log_r: int, first_bit: int, tile_bytes: int,
                  t: Tuning) -> tuple[bool, int, int]:
    """(strided, log2 G, vector width) of a block's tile in a cluster pass: a strided pass's
    row segments fill ``tile_bytes`` (fwht_pass's rule); a contiguous one has one group (the
    cluster's rows are one transform's)."""
    if first_bit > 0:
        return (True, *_tile_groups(item, log_r, first_bit, 0, tile_bytes, t))
    return False, 0, min(16 // item, 1 << log_r)


def cluster_config(plan: Plan, log_r: int, log_cl: int, first_bit: int,
                   limits: Limits = H100) -> ClusterConfig:
    """The tile, threads and vector width of a cluster pass of ``plan``: blocks of 2**log_r
    rows in clusters of 2**log_cl (a strided pass's row segments fill
    ``tuning.cluster_tile_bytes``); ValueError when the device runs no such clusters."""
    _check_clusters(log_cl, limits)
    t, dt = plan.tuning, plan.dtype
    item = dt.itemsize
    strided, log_g, vec = _cluster_tile(item, log_r, first_bit, t.cluster_tile_bytes, t)
    paired = item == 2 and vec >= 2 and (log_g >= 1 if strided else log_r >= 1)
    lr = log_r - (1 if paired and not strided else 0)
    units = log_r + log_g - (1 if paired else 0)
    uvec = vec // (2 if paired else 1)
    log_e = min(t.log_e, lr)
    log_t = max(0, min(t.cluster_log_threads, units - log_e, units - (uvec.bit_length() - 1),
                       units - log_cl))
    return _check_cluster_tile(ClusterConfig(CTYPES[dt], item, log_r, log_g, log_e, log_t,
                                             strided, vec, paired=paired, log_cl=log_cl), limits)


def stabilized_cluster_config(plan: Plan, log_r: int, log_cl: int, first_bit: int,
                              limits: Limits = H100) -> StabilizedClusterConfig:
    """The tile, threads and template flags of a stabilized cluster pass of ``plan``: blocks
    of 2**log_r rows in clusters of 2**log_cl, values and errors within
    ``tuning.cluster_tile_bytes`` (a strided pass's row segments fill its share of values)."""
    _check_clusters(log_cl, limits)
    if plan.fold_each_pass:
        raise ValueError(f"{plan.stabilizer}: a stabilizer folded at every pass has no cluster passes")
    t, dt = plan.tuning, plan.dtype
    item = dt.itemsize
    foot = smem_bytes_per_element(dt, None, plan.stabilizer)
    strided, log_g, vec = _cluster_tile(item, log_r, first_bit, t.cluster_tile_bytes * item // foot, t)
    tl = log_r + log_g
    log_e = min(t.log_e, log_r)
    log_t = max(0, min(t.cluster_log_threads, tl - log_e, tl - (vec.bit_length() - 1), tl - log_cl))
    return _check_cluster_tile(StabilizedClusterConfig(
        CTYPES[dt], item, log_r, log_g, log_e, log_t, strided, vec,
        stab={"kahan": 1, "neumaier": 2}[plan.stabilizer_kind], errvec=True, log_cl=log_cl), limits)


def configs_for(plan: Plan, total: int, limits: Limits = H100) -> list[PassGeometry]:
    """The kernel configuration of each pass of ``plan`` over ``total`` elements (rows of
    ``plan.n << plan.interleave`` elements)."""
    out = []
    for p in plan.passes:
        first = p.first_bit + plan.interleave
        if p.cluster_bits:
            make = cluster_config if plan.stabilizer is None else stabilized_cluster_config
            out.append(make(plan, p.nbits - p.cluster_bits, p.cluster_bits, first, limits))
        elif plan.stabilizer is not None:
            out.append(stabilized_config(plan, first, p.nbits, total, limits))
        else:
            out.append(kernel_config(plan.dtype, p.nbits, first, total, plan.compute_dtype,
                                     p.stages if plan.algorithm == "alman" else (), plan.tuning, limits))
    return out


def unpipelined(cfg: PassGeometry) -> PassGeometry:
    """``cfg`` without the staging buffer (when every block gets one tile: nothing to prefetch)."""
    if isinstance(cfg, KernelConfig) and cfg.pipelined:
        return dataclasses.replace(cfg, pipelined=False)
    return cfg


#: The per-call launch arguments of ``fwht_pass`` and ``fwht_stabilized_pass`` (the rest depend
#: on the plan, the number of elements and the device alone: :func:`pass_launches`).
PASS_DYNAMIC = ("src", "dst", "check_input", "scale", "flags", "rows")
STABILIZED_DYNAMIC = ("src", "dst", "err", "check_input", "scale", "flags", "rows")


@dataclass(frozen=True)
class PassLaunch:
    """One pass as launched: its kernel configuration (without pipelining when every block
    gets one tile), the grid, threads and dynamic shared memory, and its launch arguments
    with the fixed values bound (call ``args`` with :data:`PASS_DYNAMIC` or, for a
    :class:`StabilizedConfig`, :data:`STABILIZED_DYNAMIC`)."""

    cfg: PassGeometry
    grid: int
    threads: int
    smem: int
    args: ArgumentTemplate = dataclasses.field(compare=False)

    @property
    def stabilized(self) -> bool:
        return isinstance(self.cfg, StabilizedConfig)


def pass_launches(plan: Plan, total: int, limits: Limits = H100, resident=None) -> tuple[PassLaunch, ...]:
    """The launches of the passes of ``plan`` over ``total`` elements on a device of ``limits``
    (``resident(cfg)``: blocks of a pipelined ``cfg`` resident on one SM, the occupancy
    calculator's answer; pipelined kernels loop over tiles in that many blocks per SM, and
    drop the staging buffer when every block gets one tile).  Depends on (plan, total,
    limits) alone: the engine caches it."""
    shift = plan.interleave
    log2row = plan.log2n + shift
    cfgs = configs_for(plan, total, limits)
    last = len(cfgs) - 1
    out = []
    for i, (p, cfg) in enumerate(zip(plan.passes, cfgs)):
        ntiles = total // cfg.tile
        grid = min(ntiles, 2**31 - 1)
        if isinstance(cfg, CLUSTER_CONFIGS):    # whole clusters: every block the same barriers
            if ntiles % (1 << cfg.log_cl):      # (a cluster short of blocks would hang)
                raise ValueError(f"{total} elements are not whole clusters of {cfg.name}'s tiles")
            grid = min(ntiles, (2**31 - 1) >> cfg.log_cl << cfg.log_cl)
        if isinstance(cfg, KernelConfig) and cfg.pipelined:   # resident blocks loop over tiles
            blocks = limits.sm_count * resident(cfg)
            if ntiles <= blocks:      # a tile per block: nothing to prefetch
                cfg = unpipelined(cfg)
            grid = min(grid, blocks)
        fixed = dict(ntiles=ntiles, log_inner=p.first_bit + shift, log2n=log2row, last=i == last,
                     row_shift=shift)
        if isinstance(cfg, StabilizedConfig):
            args = cfg.bind(STABILIZED_DYNAMIC, first=i == 0, **fixed)
        else:           # fbits: Alman-Rao's radix-2 prefix bits (the pre-scaling exponents skip them)
            args = cfg.bind(PASS_DYNAMIC, fbits=plan.prefix_bits, **fixed)
        out.append(PassLaunch(cfg, grid, 1 << cfg.log_t, cfg.smem_bytes, args))
    return tuple(out)


class LaunchCache:
    """A small cache of values computed from (plan, number of elements, device, extra hashable
    values), keyed by the
    plan's identity (plans are immutable; each entry keeps its plan alive, so an identity is
    never reused while its entry exists) - a dict lookup instead of hashing a Plan.  At most
    ``maxsize`` entries (the oldest half is dropped when full).  Safe to share between threads:
    a race computes a value twice."""

    def __init__(self, maxsize: int = 512):
        self.maxsize = int(maxsize)
        self._entries: dict = {}

    def get(self, plan: Plan, total: int, device: int, make, extra: tuple = ()):
        """The cached ``make()`` of (``plan``, ``total``, ``device``, ``extra``)."""
        key = (id(plan), int(total), int(device), extra)
        hit = self._entries.get(key)
        if hit is not None and hit[0] is plan:
            return hit[1]
        value = make()
        if len(self._entries) >= self.maxsize:
            for k in list(self._entries)[: self.maxsize // 2 + 1]:
                self._entries.pop(k, None)
        self._entries[key] = (plan, value)
        return value

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()


def plans_for_compile_check(tuning: Tuning = DEFAULT):
    """Every plan shape the engines can execute: each variant and dtype at every length,
    plain Folklore also split and interleaved (a non-last axis)."""
    for dt in _dt.SUPPORTED:
        for v in variants.VARIANTS.values():
            if not v.applies_to(dt):
                continue
            plain = v.name == "folklore"
            for log2n in range(1, 37 if plain else 33):
                kw = dict(algorithm=v.algorithm, stabilizer=v.stabilizer,
                          compute_dtype=v.compute_dtype(dt), device="cuda", tuning=tuning)
                plan = make_plan(1 << log2n, dt, **kw)
                yield plan
                if plain and len(plan.passes) == 1 and log2n >= 2:
                    yield make_plan(1 << log2n, dt, split=True, **kw)              # lone transforms
                if plain and log2n <= 16:
                    for s in range(1, 15):
                        yield make_plan(1 << log2n, dt, interleave=s, **kw)    # non-last axes


def all_configs(tuning: Tuning = DEFAULT, limits: Limits = H100):
    """Every configuration the planner and launcher can produce for ``limits`` (for the nvcc
    check in CI), each once."""
    seen = set()
    for plan in plans_for_compile_check(tuning):
        for log_batch in (0, 1, 4, 12):
            for cfg in configs_for(plan, 1 << (plan.log2n + plan.interleave + log_batch), limits):
                for c in dict.fromkeys((cfg, unpipelined(cfg))):     # the launcher may drop pipelining
                    if c not in seen:
                        seen.add(c)
                        yield c


def all_cluster_configs(tuning: Tuning = DEFAULT, limits: Limits = H100):
    """Every cluster-pass configuration the planner and launcher can produce on ``limits``
    with ``tuning``'s settings and clusters of 2 to 16 blocks, for plain Folklore and the
    global stabilizers (whatever ``tuning.cluster_log``, ``cluster_stabilized`` and
    ``cluster_neumaier_itemsize`` say: the shapes the tuning can turn on), each once."""
    seen = set()
    for log_cl in range(1, limits.max_cluster_log + 1):
        t = dataclasses.replace(tuning, cluster_log=log_cl, cluster_stabilized=True,
                                cluster_neumaier_itemsize=0)
        for dt in _dt.SUPPORTED:
            for stabilizer in (None, "kahan", "neumaier"):
                for log2n in range(2, 37):
                    plan = make_plan(1 << log2n, dt, stabilizer=stabilizer, device="cuda", tuning=t,
                                     clusters=log_cl)
                    if not plan.clustered:
                        continue
                    for log_batch in (0, 1, 4):
                        for cfg in configs_for(plan, 1 << (log2n + log_batch), limits):
                            if isinstance(cfg, CLUSTER_CONFIGS) and cfg not in seen:
                                seen.add(cfg)
                                yield cfg


def instantiation_source(configs, entry: str) -> str:
    """A .cu translation unit that includes ``entry`` and explicitly instantiates ``configs``."""
    return "\n".join([f'#include "{entry}"'] + [c.declaration() for c in configs]) + "\n"


# --- lengths n = K * 2**k (kernels/k_stage.cuh) ------------------------------------------------

#: Parameters of ``fwht_k_rows`` in order.
K_ROWS_PARAMS = (("src", "const T*"), ("dst", "T*"), ("ntiles", "i64"), ("log_mu", "int"),
                 ("log_rows", "int"), ("scale", "double"), ("flags", "unsigned int*"))
#: Parameters of ``fwht_k_stage`` in order.
K_STAGE_PARAMS = (("src", "const T*"), ("dst", "T*"), ("npos", "i64"), ("log_m", "int"),
                  ("scale", "double"), ("flags", "unsigned int*"))
#: Parameters of ``fwht_k_rows_pair`` in order.
K_PAIR_PARAMS = (("src", "const T*"), ("dst", "T*"), ("nrows", "i64"), ("log_mu", "int"),
                 ("scale", "double"), ("flags", "unsigned int*"))
#: Threads per block of ``fwht_k_stage``.
K_STAGE_THREADS = 256
#: Whether :func:`k_launch` may spread a row over a cluster of two or four blocks
#: (``fwht_k_rows_pair``; False: explorations measuring the one-block kernel, which then clear
#: ``engine._K_LAUNCHES``: launches are cached per plan and rows).
K_PAIR_ROWS = True


class _Declared:
    """Explicit instantiation text and launch arguments from ``PARAMS`` (as PassGeometry)."""

    declaration = PassGeometry.declaration
    arguments = PassGeometry.arguments
    bind = PassGeometry.bind


@dataclass(frozen=True)
class KRowsConfig(_Declared):
    """Template arguments of one ``fwht_k_rows`` instantiation: storage ``ctype``, compute
    ``wtype`` (the plan's compute dtype), order K, ``transpose`` (the inverse's H_K^T),
    ``paired`` (16-bit data as pairs of adjacent positions), ``b`` the blocks per SM of the
    launch bound (1; 2 or 3 for launches of 256 threads: ``k_bound_threads`` in the kernel),
    ``direct`` round 0's loads copied by cp.async straight to shared memory
    (:func:`_k_direct`)."""

    ctype: str
    wtype: str
    itemsize: int
    witem: int
    K: int
    transpose: bool
    paired: bool
    b: int = 1
    direct: bool = False

    PARAMS = K_ROWS_PARAMS

    @property
    def name(self) -> str:
        return _template("fwht_k_rows", self.ctype, self.wtype, self.K, self.transpose, self.paired,
                         self.b, self.direct)

    @property
    def unit_bytes(self) -> int:
        """Bytes of a compute unit in shared memory and registers (a pair: two values)."""
        return self.witem * (2 if self.paired else 1)

    @property
    def max_threads(self) -> int:
        """Threads of the launch bound (``k_bound_threads`` in the kernel): for b = 1 by the
        K values held in registers (``k_rows_max_threads``), else 256."""
        if self.b > 1:
            return 256
        regs = self.K * (self.unit_bytes // 4)
        return 1024 if regs <= 28 else 512 if regs <= 44 else 256

    def bound_registers(self, limits: Limits) -> int:
        """Registers per thread the launch bound leaves on a device of ``limits`` (ptxas
        allocates them in eights: 80 for three blocks of 256 threads)."""
        return min(255, limits.regs_per_sm // (self.max_threads * self.b) // 8 * 8)

    def smem_bytes(self, tile_units: int) -> int:
        """Dynamic shared memory of a tile of ``tile_units`` units (padded as tile.cuh)."""
        return (_padded_units(tile_units - 1, self.unit_bytes) + 1) * self.unit_bytes


@dataclass(frozen=True)
class KPairConfig(KRowsConfig):
    """Template arguments of one ``fwht_k_rows_pair`` instantiation (each row over a cluster of
    ``q`` blocks, K/q of its blocks in each; sm_90): those of ``fwht_k_rows`` and ``q`` (2, or
    4 for FP64 rows that no block holds, with b = 2 or 3)."""

    q: int = 2

    PARAMS = K_PAIR_PARAMS

    @property
    def name(self) -> str:
        return _template("fwht_k_rows_pair", self.ctype, self.wtype, self.K, self.transpose,
                         self.paired, self.q, self.b, self.direct)


@dataclass(frozen=True)
class KStageConfig(_Declared):
    """Template arguments of one ``fwht_k_stage`` instantiation."""

    ctype: str
    wtype: str
    K: int
    transpose: bool

    PARAMS = K_STAGE_PARAMS

    @property
    def name(self) -> str:
        return _template("fwht_k_stage", self.ctype, self.wtype, self.K, self.transpose)


def k_transpose(K: int, inverse: bool) -> bool:
    """The ``transpose`` template flag: the inverse uses H_K^T, which is H_K itself for the
    symmetric (Paley II) orders (one instantiation for both directions)."""
    from ..hadamard import matrix
    H = matrix(K)
    return bool(inverse) and not (H == H.T).all()


@dataclass(frozen=True)
class KLaunch:
    """How the GPU runs a K * 2**k transform of ``rows`` rows: ``rows_cfg`` set (one
    ``fwht_k_rows`` pass: tiles of 2**log_rows rows, ``threads`` per block, ``smem`` bytes; or,
    a :class:`KPairConfig`, one ``fwht_k_rows_pair`` pass: a row per cluster of ``q`` blocks,
    ``smem`` bytes each), or the power-of-two plan's passes (fwht_pass) and then
    ``stage_cfg``."""

    rows_cfg: KRowsConfig | None
    stage_cfg: KStageConfig
    log_mu: int = 0
    log_rows: int = 0
    ntiles: int = 0
    threads: int = 0
    smem: int = 0

    @property
    def fused(self) -> bool:
        return self.rows_cfg is not None

    @property
    def pair(self) -> bool:
        return isinstance(self.rows_cfg, KPairConfig)


def k_fusable(plan: Plan) -> bool:
    """Whether ``fwht_k_rows`` computes the power-of-two stage of ``plan`` (the plan of one block
    of 2**k): Folklore without a stabilizer, every operation rounded to the dtype (any grouping
    of the stages gives the same bits), or computed in a wider type in one pass (rounded to
    the dtype once, after the last stage, as the kernel does)."""
    return (plan.algorithm == "folklore" and plan.stabilizer is None
            and (plan.plain or len(plan.passes) <= 1)
            and not (plan.dtype.itemsize == 2 and plan.n == 1))    # 16-bit: pairs of positions


def k_rows_config(plan: Plan, K: int, inverse: bool) -> KRowsConfig:
    dt, cdt = plan.dtype, plan.compute_dtype
    return KRowsConfig(CTYPES[dt], CTYPES[cdt], dt.itemsize, cdt.itemsize, int(K),
                       k_transpose(K, inverse), dt.itemsize == 2)


def k_pair_reachable(cfg: KRowsConfig, q: int = 2) -> bool:
    """Whether :func:`_k_pair_launch` can ever take the ``q``-block kernel of ``cfg``: q = 2,
    K even and a launch bound of at least 512 threads (at 256, the bound's 255 registers per
    thread leave one 256-thread half per SM: 8 warps, below the 16 the rule asks); q = 4,
    FP64 K in ``K_QUAD_ORDERS`` (28 * 2**10: halves of 112 KiB would be alone on their SMs,
    session 28 measured them slower than two passes; quarters of 56 KiB run three per SM at
    80 registers, session 36; 20 * 2**11: halves of 160 KiB alone on their SMs, 1.34x a copy,
    quarters of 80 KiB two per SM 1.22-1.29x: session 35)."""
    if q == 2:
        return cfg.K % 2 == 0 and cfg.max_threads >= 512
    return q == 4 and cfg.K in K_QUAD_ORDERS and cfg.itemsize == 8 and cfg.witem == 8


def k_pair_config(cfg: KRowsConfig, q: int = 2, b: int = 1) -> KPairConfig:
    """The ``fwht_k_rows_pair`` instantiation of ``fwht_k_rows``' ``cfg`` over ``q`` blocks,
    compiled for ``b`` blocks per SM."""
    return KPairConfig(*dataclasses.astuple(dataclasses.replace(cfg, b=b)), q)


def _k_bound_blocks(cfg: KRowsConfig, threads: int, tiles: int) -> int:
    """The ``b`` of a launch of ``threads`` per block, ``tiles`` per SM by shared memory (H100,
    4096 rows, over a copy; session 35): 3 for three 256-thread blocks of 4-byte units (80
    registers instead of the 64 of a bound of 1024 threads: FP16 28 * 2**10 1.17 -> 1.05x,
    FP32 28 * 2**9 1.37 -> 1.15x, over two blocks 28 * 2**10 1.25 -> 1.21x); 2 for 8-byte units
    whose bound of 256 threads (K >= 28) let ptxas take up to 255 registers, one block per SM
    (128 registers, two blocks: FP64 28 * 2**8 1.77 -> 1.10x, 36 * 2**8 1.75 -> 1.39x); else 1."""
    if threads == 256 and tiles == 3 and cfg.unit_bytes == 4:
        return 3
    if threads == 256 and tiles >= 2 and cfg.unit_bytes == 8 and cfg.max_threads == 256:
        return 2
    return 1


def _k_direct(cfg: KRowsConfig, threads: int) -> bool:
    """Whether round 0 of a launch of ``threads`` per block copies its tile by cp.async straight
    to the padded slots (the whole tile in flight, no registers held) instead of through
    registers: plain FP64 (8-byte copies; the storage unit computes) in blocks of up to 256
    threads.  H100, 4096 rows over a copy (session 36, register loads -> direct): FP64 12 *
    2**8 1.09 -> 1.03x, 20 * 2**8 1.20 -> 1.11x, 36 * 2**8 1.39 -> 1.12x, 44 * 2**9 1.27 ->
    1.06x, 20 * 2**10 (two blocks) 1.03 -> 0.97x, 28 * 2**10 (four) 1.59 -> 1.41x (1.30x
    with three quarters per SM, 80 registers: no spills, 344 bytes with register loads), 20 *
    2**11 (four) 1.23 -> 1.16x; at 512 threads it lost (12 * 2**10 1.04 -> 1.08x, 20 * 2**9
    1.30 -> 1.36x), and 4-byte copies lost everywhere (FP32 28 * 2**10 1.22 -> 1.31x, FP16 20
    * 2**11 1.18 -> 1.26x, FP32 20 * 2**10 1.08 -> 1.21x)."""
    return cfg.itemsize == 8 and cfg.witem == 8 and threads <= 256


def k_stage_config(plan: Plan, K: int, inverse: bool) -> KStageConfig:
    return KStageConfig(CTYPES[plan.dtype], CTYPES[plan.compute_dtype], int(K),
                        k_transpose(K, inverse))


def k_launch(plan: Plan, K: int, rows: int, inverse: bool, limits: Limits = H100) -> KLaunch:
    """The launch of a K * plan.n transform of ``rows`` contiguous rows on a device of
    ``limits``: ``fwht_k_rows`` when :func:`k_fusable` and a row fits in shared memory (tiles
    of several short rows, up to ``tuning.k_tile_bytes`` of data (units of 8 bytes - FP64, or
    a wider compute type -: ``min_tile_bytes``), the rows per tile dividing ``rows``); ``fwht_k_rows_pair`` where :func:`_k_pair_launch` finds it better; else the
    power-of-two passes and ``fwht_k_stage``."""
    stage = k_stage_config(plan, K, inverse)
    if not k_fusable(plan) or rows < 1:
        return KLaunch(None, stage)
    cfg = k_rows_config(plan, K, inverse)
    log_mu = plan.log2n - (1 if cfg.paired else 0)
    row_units = K << log_mu
    pair = _k_pair_launch(cfg, stage, log_mu, row_units, rows, limits)
    if pair is not None:
        return pair
    if cfg.smem_bytes(row_units) > limits.smem_per_block:
        return KLaunch(None, stage)
    row_bytes = K * plan.n * plan.dtype.itemsize
    tile_bytes = plan.tuning.k_tile_bytes if cfg.unit_bytes <= 4 else plan.tuning.min_tile_bytes
    log_rows = 0
    while ((row_bytes << (log_rows + 1)) <= tile_bytes and rows % (2 << log_rows) == 0
           and cfg.smem_bytes(row_units << (log_rows + 1)) <= limits.smem_per_block):
        log_rows += 1
    tile_units = row_units << log_rows
    smem = cfg.smem_bytes(tile_units)
    tiles = _tiles_per_sm(smem, limits)
    threads = _k_fewer_threads(cfg, _k_threads(cfg, tile_units, tiles), tiles, limits)
    cfg = dataclasses.replace(cfg, b=_k_bound_blocks(cfg, threads, tiles), direct=_k_direct(cfg, threads))
    return KLaunch(cfg, stage, log_mu, log_rows, rows >> log_rows, threads, smem)


def _tiles_per_sm(smem: int, limits: Limits) -> int:
    """Blocks of ``smem`` bytes of shared memory an SM holds (0: none fits a block)."""
    if smem > limits.smem_per_block:
        return 0
    return limits.smem_per_sm // (smem + BLOCK_RESERVED_SMEM)


def _k_threads(cfg: KRowsConfig, tile_units: int, tiles: int) -> int:
    """Threads per block of a K-row tile of ``tile_units`` units, ``tiles`` of them per SM:
    about 8 units each per round (at least a warp), within the launch bound, and fewer for
    smaller tiles: several tiles per SM then overlap one's load with another's stages (H100,
    4096 rows: 12 * 2**10 FP32 2.9 -> 2.0x a copy at 256 threads, 20 * 2**10 3.1 -> 2.6x at
    512, FP16 20 and 28 * 2**10 4.4 -> 3.4-3.5x at 256; benchmarks/NOTES.md); a tile alone on
    its SM takes every thread the launch bound allows."""
    most = 256 if tiles >= 3 else 512 if tiles == 2 else 1024
    return max(32, min(cfg.max_threads, most, 1 << max(0, (tile_units // 8).bit_length() - 1)))


def _k_fewer_threads(cfg: KRowsConfig, threads: int, tiles: int, limits: Limits) -> int:
    """``threads`` halved while the SM keeps as many threads resident (the registers of the
    launch bound of one block, the SM's threads and blocks, ``tiles`` blocks by shared memory),
    for one-block tiles of 4-byte units (FP32, FP16/BF16 pairs): more, smaller blocks per SM,
    whose loads, rounds and stores overlap more.  H200, over a copy (session 41, with tiles of
    short rows up to 16 KiB instead of 64 KiB and the first round's bank spread on every tile
    size; against the code before, one run): 64 MiB of FP16 / BF16 12 * 2**8 rows 1.49 ->
    1.31x (two rows per tile, 64 threads, 16 per SM, against eight rows, 256 threads, four per
    SM), FP32 1.30 -> 1.21x (one row, 64 threads); 4096 rows of FP16 / BF16 12 * 2**10 1.36 -> 1.28 / 1.27x (128
    threads, eight per SM).  The other launches it changes (K = 12 .. 44 times 2**2 .. 2**10,
    64 MiB): faster by up to 1.55x (K = 36 / 44 at 32 threads), except, on the kernel before
    the spread covered every tile size, K = 20 / 28 rows of 2**5 .. 2**8 (up to 9% slower) and
    FP32 44 * 2**7 (1%); the K = 12 / 20 / 28 ones measured again on the final kernel all
    faster (``session41-k-rule*``, ``session41-ab-k-rule2``).  Not for FP64 (12 *
    2**8: 128 threads 1.19x against 256 threads' 1.17x, the direct copies) nor where fewer
    would stay resident (FP16 20 * 2**10, five 41 KiB tiles per SM: 128 threads 1.36x against
    256 threads' 1.28x, four resident)."""
    if cfg.unit_bytes != 4:
        return threads
    regs = cfg.bound_registers(limits)

    def resident(t: int) -> int:
        return t * min(tiles, limits.regs_per_sm // (t * regs), limits.max_threads_per_sm // t,
                       limits.max_blocks_per_sm)

    while threads > 32 and resident(threads // 2) >= resident(threads):
        threads //= 2
    return threads


def _k_pair_launch(cfg: KRowsConfig, stage: KStageConfig, log_mu: int, row_units: int, rows: int,
                   limits: Limits) -> KLaunch | None:
    """``fwht_k_rows_pair`` for rows whose one-block tile would be alone on its SM (or not fit
    a block at all) when the parts keep at least 16 warps resident per SM (their shared memory
    and the registers of the launch bound): over four blocks for FP64 rows that do not fit
    a block (28 * 2**10: two passes and the K stage 2.06 -> 1.81x, 28 * 2**9 one tile 1.71x,
    four blocks 2.05x: session 34; 20 * 2**11: two blocks 1.34x, four 1.22-1.29x: session
    35), else over two where reachable.  H100, 4096 rows, over a copy
    of the same bytes, one row per block -> per cluster: FP32 28 * 2**10 1.78 -> 1.38x, FP32
    20 * 2**11 1.14 -> 1.11x, FP64 20 * 2**10 1.27 -> 1.14x, FP64 20 * 2**11 (two passes and
    the K stage) 1.66 -> 1.51x; FP64 28 * 2**10 over two blocks (one half per SM, 256
    threads: 8 warps) 2.27x against two passes' 2.05x (session 28).  Rows of whole padded
    runs per block only (the K-point round's constant step), sm_90 clusters."""
    if not K_PAIR_ROWS or limits.max_cluster_log < 1 or log_mu < {8: 4, 4: 5, 2: 6}[cfg.unit_bytes]:
        return None
    whole = cfg.smem_bytes(row_units)
    if _tiles_per_sm(whole, limits) > 1:
        return None
    for q in K_PAIR_QS:
        if not k_pair_reachable(cfg, q) or limits.max_cluster_log < (q - 1).bit_length() or \
                (q == 4 and whole <= limits.smem_per_block):
            continue            # quarters only for rows no block holds
        part = row_units // q
        smem = cfg.smem_bytes(part)
        tiles = _tiles_per_sm(smem, limits)
        if tiles == 0:
            continue
        # quarters three per SM where their shared memory allows (80 registers: FP64 28 *
        # 2**10 1.41 -> 1.30x a copy with the direct loads, session 36), else two; halves:
        # the bound of one block until the threads are chosen
        pcfg = k_pair_config(cfg, q, (3 if tiles >= 3 else 2) if q == 4 else 1)
        threads = _k_threads(pcfg, part, tiles)
        regs = pcfg.bound_registers(limits)
        while q == 2 and threads > 128 and threads * regs * tiles > limits.regs_per_sm:
            threads //= 2           # (quarters: their registers, not their shared memory, bound them)
        if q == 2:
            pcfg = k_pair_config(cfg, q, _k_bound_blocks(cfg, threads, tiles))
            regs = pcfg.bound_registers(limits)
        resident = min(tiles, limits.regs_per_sm // (threads * regs))
        if resident * threads < 512:
            continue
        return KLaunch(dataclasses.replace(pcfg, direct=_k_direct(pcfg, threads)), stage, log_mu, 0, rows,
                       threads, smem)
    return None


#: The cluster sizes _k_pair_launch tries, in order (four only for rows that no block holds),
#: and the orders K whose FP64 rows may take four blocks (measured: 20 and 28).
K_PAIR_QS = (4, 2)
K_QUAD_ORDERS = (20, 28)

#: Shared memory the driver reserves per block (1 KiB on sm_80 and sm_90).
BLOCK_RESERVED_SMEM = 1 << 10


def all_k_configs():
    """Every ``fwht_k_rows``, ``fwht_k_rows_pair`` and ``fwht_k_stage`` instantiation the
    K * 2**k launcher can choose (for the nvcc check in CI), each once: every dtype with its
    compute dtypes, every shipped order, both directions."""
    from ..hadamard import ORDERS
    seen = set()
    for dt in _dt.SUPPORTED:
        for cdt in (dt, variants.wide_dtype(dt)):
            if cdt is None:
                continue
            for K in ORDERS:
                for inverse in (False, True):
                    plan = make_plan(8, dt, compute_dtype=None if cdt == dt else cdt, device="cuda")
                    rows_cfg = k_rows_config(plan, K, inverse)
                    more = (3,) if rows_cfg.unit_bytes == 4 else (2,) if rows_cfg.max_threads == 256 else ()
                    rows = [rows_cfg, *(dataclasses.replace(rows_cfg, b=b) for b in more)]
                    # three halves per SM at 256 threads: only under a one-block bound of 1024
                    # threads (at 512, 128 registers, _k_pair_launch first halves the threads)
                    pair3 = rows_cfg.unit_bytes == 4 and rows_cfg.max_threads == 1024
                    pair = [k_pair_config(rows_cfg, q, b) for q in (2, 4) if k_pair_reachable(rows_cfg, q)
                            for b in ((2, 3) if q == 4 else (1, 3) if pair3 else (1,))]
                    # direct loads or not (_k_direct) as launches of 32 .. max_threads threads
                    # may take them (quarters at b = 2 and 3, halves of K = 12 direct: not
                    # on the H100, on devices of less shared memory)
                    rows, pair = ([dataclasses.replace(c, direct=d) for c in cs
                                   for d in sorted({_k_direct(c, t) for t in (32, c.max_threads)})]
                                  for cs in (rows, pair))
                    for c in [*rows, *pair, k_stage_config(plan, K, inverse)]:
                        if c not in seen:
                            seen.add(c)
                            yield c
