"""GPU kernels of pagh_mm (``estimate.cu``, ``scatter.cu``, ``hash.cu`` and ``fused.cu``),
compiled per (device, kernel) through fwht_gpu's kernel modules."""
from __future__ import annotations

import functools
import os

import numpy as np

from fwht_gpu import memory
from fwht_gpu.gpu import KernelModule, cupy, limits

HERE = os.path.dirname(__file__)
ESTIMATE = KernelModule(os.path.join(HERE, "estimate.cu"))
SCATTER = KernelModule(os.path.join(HERE, "scatter.cu"), named=False)   # extern "C" kernels
HASH = KernelModule(os.path.join(HERE, "hash.cu"), named=False)
FUSED = KernelModule(os.path.join(HERE, "fused.cu"))
MAXDS = (5, 7, 9, 11, 13, 15, 31, 63, 127)
#: Threads per block of every pagh_mm kernel, and resident blocks per SM of a grid-stride loop.
THREADS, BLOCKS_PER_SM = 256, 8
#: Inner indices per block of ``pairs_direct`` (scatter.cu's PAIRS_K).
PAIRS_K = 32

#: The parameters of ``scan_tile`` in order (C types), for the instantiation text.
SCAN_PARAMS = ("const i64*", "const double*", "i64", "const i64*", "const double*", "i64",
               "const double*", "int", "int", "const u32*", "int", "int", "i64", "i64", "i64",
               "const double*", "int", "double", "double", "double*", "i64*", "u64*", "i64",
               "u64*")
#: The parameters of ``pruned_tile`` in order (C types).
PRUNED_PARAMS = ("const i64*", "const double*", "i64", "i64", "const i64*", "const double*", "i64",
                 "const double*", "int", "int", "const u32*", "const i64*", "const int*", "i64",
                 "const i64*", "const i64*", "int", "double", "double", "double*", "i64*",
                 "u64*", "i64", "u64*")
#: Threads per block of ``scan_tile`` (one per column of the tile; estimate.cu's launch bounds).
SCAN_THREADS = 512
#: Repetitions whose buckets ``scan_tile`` stages in shared memory and keeps in registers
#: (estimate.cu's SCAN_REG; up to min(MAXD, SCAN_REG) in an instance).
SCAN_REG = 13
#: Shared memory of ``scan_tile`` besides the filter's bitmaps, at most (estimate.cu's staged
#: rows: SCAN_REG x SCAN_STAGED hashes and signs).
SCAN_STATIC_BYTES = SCAN_REG * 32 * 12


#: The C type of each float dtype the fused kernels take, and the dtype of each C type.
C_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
_DTYPE_OF = {name: dtype for dtype, name in C_TYPES.items()}


def _span_bytes(b: int, dtype) -> int:
    """Bytes of b padded values of ``dtype`` in shared memory (tile.cuh's padded_size: one
    slot every 128 bytes)."""
    item = np.dtype(dtype).itemsize
    return (b + ((b - 1) >> (4 if item == 8 else 5))) * item


#: log2 of the values per thread of the fused kernel per transform dtype (b / 2^LOG_VPT
#: threads per block, at most 1024) up to which both factors' last rounds stay in registers
#: (16 FP32 or 8 FP64 values each), and its largest (32 FP32 or 16 FP64 values: A's wait in
#: the block's output row; see fused.cu's RegLogVpt).
FUSED_REG_LOG_VPT = {"float": 4, "double": 3}
FUSED_LOG_VPT = {"float": 5, "double": 4}
#: Largest log2 of the buckets of the fused dense kernel per transform dtype.
FUSED_MAX_LOG2B = {t: v + 10 for t, v in FUSED_LOG_VPT.items()}
#: log2 of the buckets for which the fused dense kernels of FUSED_REG_LOG_VPT values per
#: thread are also compiled for that size alone (fused.cu's FIXED: the transform's rounds
#: unrolled; H200, 2^13 buckets: FP32 covariance screen 0.79x the fused stage, FP64 0.89x,
#: FP32 2^12 0.91x, a product's 0.92x; ``results/h200/session42-fixed-logb.txt``).
FUSED_FIXED_LOG2B = {"float": (11, 12, 13, 14), "double": (11, 12, 13)}
#: log2 of the largest thread-block cluster of the fused cluster kernel (16 blocks, not
#: portable: sm_90 only; 8 elsewhere, see fwht_gpu's Limits.max_cluster_log).
FUSED_CLUSTER_MAX_LOG_CL = 4
#: log2 of the fewest buckets the fused cluster kernel computes per C type (below them, one
#: block of ``fused_dense_terms`` per inner index and repetition).  Clusters of two at 2^15
#: FP32 / 2^14 FP64: 5% faster / the same for a dense n = 16384 product (H200), but the FP32
#: covariance screen of 2^20 x 4096 took 1.22 s in the kernel against 0.81 s in one block
#: (H100): one block wherever it fits (``benchmarks/explore_fused.py --cluster-from``).
FUSED_CLUSTER_FROM = {t: v + 1 for t, v in FUSED_MAX_LOG2B.items()}
#: Most levels of the pairwise tree the fused cluster kernel sums (pending nodes in device
#: memory; 2^2 inner indices per cluster: FP64 without spills, FP32 136 bytes, sm_90).
FUSED_CLUSTER_LOG_G = 2


def _fused_smem(log2b: int, name: str, log_g_shared: int = 0, stage: bool = True) -> int:
    """Dynamic shared memory of a fused kernel's block holding 2^log2b buckets of C type
    ``name`` (and ``log_g_shared`` pending tree nodes): the padded buffers, then the stage
    (``stage`` False: none, see :func:`_stageless`)."""
    return -(-(1 + log_g_shared) * _span_bytes(1 << log2b, _DTYPE_OF[name]) // 16) * 16 + \
        (FUSED_STAGE_BYTES if stage else 0)


def _cluster_shape(log2b: int, name: str, most: int = FUSED_CLUSTER_MAX_LOG_CL,
                   smem: int | None = None) -> tuple[int, int]:
    """(log2 values per thread, log2 blocks per cluster) of ``fused_cluster_terms`` for 2^log2b
    buckets of C type ``name`` with clusters of at most 2^most blocks and ``smem`` bytes of
    shared memory per block (None: no limit); (0, 0) within one block (``fused_dense_terms``)
    or beyond the clusters.  1024 threads per block, each with as few values as possible
    (FUSED_REG_LOG_VPT: 2^14 FP32, 2^13 FP64 buckets per block, no spills of consequence) while
    every thread keeps a position of the cross-block stages (values per thread >= blocks per
    cluster) and the cluster is no larger than 2^most."""
    if log2b < FUSED_CLUSTER_FROM[name]:
        return 0, 0
    log_vpt = FUSED_REG_LOG_VPT[name]
    while log_vpt <= FUSED_LOG_VPT[name]:
        log_cl = log2b - 10 - log_vpt
        if 1 <= log_cl <= min(log_vpt, most) and \
                (smem is None or _fused_smem(log_vpt + 10, name) <= smem):
            return log_vpt, log_cl
        log_vpt += 1
    return 0, 0


#: Whether the fused cluster kernel keeps A's values in shared memory (after the stage) while B
#: is transformed, where the block's shared memory holds them (False: always in the output
#: row in device memory, as before session 28; explorations).
FUSED_CLUSTER_A_SHARED = True


#: Shared memory per block up to which the A_SHARED cluster kernels are compiled (sm_90's
#: 227 KiB: the devices with clusters).
FUSED_A_SHARED_SMEM = 227 * 1024


def _cluster_a_smem(log_bl: int, name: str) -> int:
    """Bytes of shared memory per block of ``fused_cluster_terms`` holding 2^log_bl buckets of
    C type ``name`` with A's values in shared memory (the buffer, the stage, then a slice)."""
    return _fused_smem(log_bl, name) + ((8 if name == "double" else 4) << log_bl)


def _cluster_a_fits(log_bl: int, name: str, smem: int = FUSED_A_SHARED_SMEM) -> bool:
    """Whether A's values fit beside a block's 2^log_bl buckets in ``smem`` bytes (and in the
    A_SHARED kernels compiled)."""
    return _cluster_a_smem(log_bl, name) <= min(smem, FUSED_A_SHARED_SMEM)


#: Most levels of the pairwise tree summed inside a block (2^LOG_G inner indices per block),
#: their pending nodes in shared memory beside the buffer.  One: a second level's node
#: costs the kernels of 2^12-2^14 buckets a resident block per SM (FP32 2^13: 123 KiB, one
#: block of 512 threads, 25% occupancy, against 90 KiB and two) or the L1 the sketch's gathers
#: use, more than the tree above the kernel saves (H200, fused stage + accumulate, the same
#: bits; ``benchmarks/explore_fused_parts.py`` variant ``maxg1``,
#: ``results/h200/session42-parts2g.*``, ``-parts3d.*``): covariance screen 2^18 x 4096, 9
#: repetitions, FP32 2^12 / 2^13 / 2^14 buckets 0.93x / 0.77-0.81x / 0.96-0.97x (two runs),
#: FP64 2^12 0.78x, 2^13 the same; products n = 8192, 5 repetitions, FP32 2^12 / 2^13 / 2^14
#: 0.88x / 0.82x / 0.83x, FP64 2^13 the same.
FUSED_MAX_LOG_G = 1

#: Most levels of the pairwise tree summed inside the block of a Gram kernel that sketches in
#: key order (:func:`_stageless`: its shared memory holds no sketch stage) when the block is
#: alone on its SM (1024 threads: FP32 2^14, FP64 2^13 buckets), per C type of the transforms:
#: each level halves the nodes the kernel writes and ``tree_sum`` reads again, but the shared
#: memory it takes is the L1 the sketch's gathers use.  H200, covariance screen 2^18 x 4096,
#: 9 repetitions, fused stage + accumulate against one level with the stage (the code
#: before), pairs of medians of 7 (``benchmarks/explore_fused_parts.py`` variants ``keysgN``,
#: ``withstage``; ``results/h200/session43-parts-{keysg2,rule,final}.*``): FP32 2^14 two
#: levels 0.94x, 0.97x, 0.95x, 0.85x, 0.98x, 0.96x (one level without the stage 1.00x, 1.02x);
#: FP64 2^13 two levels 0.97x, 1.02x, 1.02x, 1.12x, one level without the stage 1.02x, 1.12x,
#: 1.09x, 0.88x (the spread): one level, no stage.  The smaller kernels keep FUSED_MAX_LOG_G:
#: without the stage FP32 2^12 0.89-0.92x (four blocks per SM instead of three; two levels
#: 1.13-1.16x the one level without the stage, its fused stage 0.083-0.085 against 0.067-0.068
#: s: the L1 of 4 x 50 KiB of shared memory), FP32 2^13 0.98-1.01x.
FUSED_KEYS_MAX_LOG_G = {"float": 2, "double": 1}

#: Most levels of the tree summed inside a block when its pending nodes are in device memory
#: (the largest b; more levels spill registers: 248 bytes at 1, 1140 at 2, FP32 Gram, sm_90).
FUSED_GLOBAL_LOG_G = 1

#: The parameters of ``fused_dense_terms`` and ``fused_cluster_terms`` in order (C types;
#: S, T: the templates'): per factor its vectors, strides, key count and tables.
_FUSED_FACTOR = ("const S*", "i64", "i64", "int", "const i64*", "const i64*", "const double*",
                 "const int*", "const unsigned*", "const int*", "const int*", "const int*",
                 "const unsigned*")
FUSED_PARAMS = _FUSED_FACTOR + _FUSED_FACTOR + ("int", "int", "i64", "T*", "T*")
#: Bytes of the fused kernel's sketch stage in shared memory (fused.cu's CHUNK doubles and
#: ints, two doubles, 16-byte alignment).
FUSED_STAGE_BYTES = 2048 * 12 + 16 + 16


def names():
    """Every template instantiation of ``estimate.cu`` (also compiled by the CI nvcc check)."""
    return [f"scan_tile<{d},{x},{g},{sel}>" for d in MAXDS
            for x, g in (("true", "false"), ("false", "false"), ("true", "true"))
            for sel in ("false", "true")] + \
        [f"pruned_tile<{d},{g}>" for d in MAXDS for g in ("false", "true")] + ["heavy_bits"]


def fused_names():
    """Every template instantiation of ``fused.cu``: ``(name, T, S)``."""
    return [(f"fused_dense_terms<{t},{s},{v},{g},{c},{f}>", t, s)
            for t in ("float", "double") for s in ("double", "float")
            for v in range(1, FUSED_LOG_VPT[t] + 1) for g in ("false", "true")
            for f in (0,) + (FUSED_FIXED_LOG2B[t] if v == FUSED_REG_LOG_VPT[t] else ())
            for c in range(max(FUSED_MAX_LOG_G, FUSED_GLOBAL_LOG_G,
                               _most_levels(v + 10, t, False) if g == "true" and
                               v == FUSED_REG_LOG_VPT[t] and f == _fixed(v + 10, v, t) else 0)
                           + 1)]


def _fixed(log2b: int, log_vpt: int, name: str) -> int:
    """fused_dense_terms' FIXED for 2^log2b buckets of C type ``name`` at 2^log_vpt values per
    thread: log2b where that size has a kernel of its own, else 0."""
    return log2b if log_vpt == FUSED_REG_LOG_VPT[name] and log2b in FUSED_FIXED_LOG2B[name] \
        else 0


def fused_cluster_names(most: int | None = None):
    """Every template instantiation of ``fused_cluster_terms`` (fused.cu): ``(name, T, S)``, for
    clusters of up to 16 blocks and of up to 8 (``most``: only those of clusters of up to
    2^most blocks)."""
    shapes = {(t, _cluster_shape(log2b, t, m), log2b) for t in ("float", "double")
              for m in ((3, FUSED_CLUSTER_MAX_LOG_CL) if most is None else (most,))
              for log2b in range(1, 24) if _cluster_shape(log2b, t, m)[1]}
    shapes = sorted({(t, shape, a) for t, shape, log2b in shapes for a in ("false", "true")
                     if a == "false" or _cluster_a_fits(log2b - shape[1], t)})
    return [(f"fused_cluster_terms<{t},{s},{v},{g},{c},{cl},{a}>", t, s)
            for t, (v, cl), a in shapes for s in ("double", "float")
            for g in ("false", "true") for c in range(FUSED_CLUSTER_LOG_G + 1)
            if not (g == "true" and a == "true")]            # (a Gram product has no A to keep)


#: Columns per thread of ``tree_sum_32`` (fused.cu) per C type: a 16-byte vector of float32
#: (none of double: <double, 2> takes 255 registers and spills on sm_80 and sm_90).
TREE_VECTOR = {"float": 4, "double": 1}
#: Instantiations of ``tree_sum_32``: each C type, one column per thread and its vector.
TREE_NAMES = tuple(dict.fromkeys(f"tree_sum_32<{t},{v}>" for t in C_TYPES.values()
                                 for v in (1, TREE_VECTOR[t])))


def compile_unit() -> tuple[str, int]:
    """One translation unit with every kernel of pagh_mm (the ``fwht_gpu.kernels`` entry point
    of the CI nvcc check) and its number of instantiations."""
    lines = [f'#include "{m.path}"' for m in (ESTIMATE, SCATTER, HASH, FUSED)]
    params = ", ".join(SCAN_PARAMS)
    pruned = ", ".join(PRUNED_PARAMS)
    lines += [f"template __global__ void {nm}({pruned if nm.startswith('pruned') else params});"
              for nm in names() if "<" in nm]
    for nm, t, s in fused_names() + fused_cluster_names():
        fp = ", ".join(p.replace("S*", f"{s}*").replace("T*", f"{t}*") for p in FUSED_PARAMS)
        lines.append(f"template __global__ void {nm}({fp});")
    for nm in TREE_NAMES:
        t = nm[nm.index("<") + 1:nm.index(",")]
        lines.append(f"template __global__ void {nm}(const {t}*, i64, i64, {t}*);")
    return "\n".join(lines) + "\n", len(names()) + len(fused_names()) + \
        len(fused_cluster_names()) + len(TREE_NAMES)


def _device_limits():
    """The current device's :class:`fwht_gpu.gpu.Limits` (a seam for the CPU tests of the
    launch rules)."""
    return limits(cupy().cuda.Device().id)


@functools.lru_cache(maxsize=None)
def _grid_cap(device: int) -> int:
    """Resident blocks the device holds: a grid-stride loop's grid."""
    return BLOCKS_PER_SM * limits(device).sm_count


def _grid(total: int, threads: int = THREADS) -> int:
    return int(max(1, min((total + threads - 1) // threads, _grid_cap(cupy().cuda.Device().id))))


def _scan_function(d: int, log2b: int, xor: bool, gram: bool, select: bool, smem: int = 0):
    if d > MAXDS[-1]:
        raise ValueError(f"reps={d}: the GPU query kernels support at most {MAXDS[-1]} repetitions")
    if log2b > 31:
        raise ValueError(f"2^{log2b} buckets: the GPU query kernels take at most 2^31")
    maxd = next(x for x in MAXDS if x >= d)
    flag = {True: "true", False: "false"}
    return ESTIMATE.function(f"scan_tile<{maxd},{flag[bool(xor)]},{flag[bool(gram)]},"
                             f"{flag[bool(select)]}>", smem)


def _scan_grid(rows: int, cols: int) -> int:
    items = -(-cols // SCAN_THREADS) * -(-rows // 256)
    return int(max(1, min(items, 2 * _device_limits().sm_count)))


def tile_estimates(h1, s1, h2, s2, sketch, log2b: int, xor: bool, gram: bool = False):
    """(rows, cols) median estimates of the rows hashed in h1/s1 ((d, rows) tables) against
    the columns hashed in h2/s2 ((d, cols)); CuPy in, CuPy out (``gram``: halved, bucket 0
    left out)."""
    cp = cupy()
    d, rows = h1.shape
    cols = h2.shape[1]
    fn = _scan_function(d, log2b, xor, gram, False)
    out = cp.empty((rows, cols), dtype=cp.float64)
    if out.size:
        none = np.uint64(0)
        fn((_scan_grid(rows, cols),), (SCAN_THREADS,),
           (h1, s1, np.int64(rows), h2, s2, np.int64(cols), sketch, np.int32(d), np.int32(log2b),
            none, np.int32(0), np.int32(0), np.int64(0), np.int64(0), np.int64(cols), none,
            np.int32(0),
            np.float64(-np.inf), np.float64(-np.inf), out, none, none, np.int64(0), none))
    return out


#: order_key(-inf) of estimate.cu: the start of an atomicMax over keys.
_NO_KEY = 0x000FFFFFFFFFFFFF


def _key_value(u: int) -> float:
    """The double whose estimate.cu order_key is ``u``."""
    bits = u ^ (1 << 63) if u >> 63 else ~u & ((1 << 64) - 1)
    return float(np.array([bits], dtype=np.uint64).view(np.float64)[0])


#: Repetitions whose filter bitmaps a scan keeps in shared memory (an entry whose first
#: three repetitions are light, nearly every entry, is settled by them when d = 5).
FILTER_STAGED = 3


def filter_groups(d: int, log2b: int) -> int:
    """log2 of the buckets per bit of a scan's filter bitmap: the finest at which the first
    FILTER_STAGED repetitions' bitmaps fit in shared memory with two blocks per SM."""
    room = _device_limits().smem_per_sm // 2 - SCAN_STATIC_BYTES - 1024
    reps = min(d, FILTER_STAGED)
    g = 0
    while g < log2b and reps * 4 * max(1, (1 << (log2b - g)) >> 5) > room:
        g += 1
    return g


def heavy_bits(sketch, factor: float, lim: float, log2g: int | None = None):
    """((bitmap, log2g), bound) of the (d, b) ``sketch`` at ``lim``: the bitmap has one bit per
    group of 2^log2g buckets (default :func:`filter_groups`), (d, max(1, b / 2^log2g / 32))
    uint32 words, bit u % 32 of word u // 32 set when a bucket of group u has |value| x
    ``factor`` >= lim; bound: the largest |value| x ``factor`` of the other buckets (-inf
    when none)."""
    cp = cupy()
    d, b = sketch.shape
    log2b = b.bit_length() - 1
    if log2g is None:
        log2g = filter_groups(d, log2b)
    bits = cp.empty((d, max(1, (b >> log2g) >> 5)), dtype=cp.uint32)
    bound = cp.full(1, _NO_KEY, dtype=cp.uint64)
    ESTIMATE.function("heavy_bits")((_grid(bits.size),), (THREADS,),
                                    (sketch, np.int32(d), np.int32(log2b), np.int32(log2g),
                                     np.float64(factor), np.float64(lim), bits, bound))
    return (bits, log2g), _key_value(int(bound.get()[0]))


def scan_select(h1, s1, h2, s2, sketch, log2b: int, xor: bool, gram: bool, *, r0: int, c0: int,
                p: int, diagonal=None, by_abs: bool, skip_diagonal: bool, upper: bool,
                lim: float, cut: float, bits=None, room: int = 1 << 16,
                staged: int | None = None):
    """The entries of the tile (rows r0.. hashed in h1/s1, columns c0.. in h2/s2, of an m x p
    product) whose key (|estimate| with ``by_abs``, else the estimate) is >= ``lim`` (> -inf
    when lim is -inf), without the diagonal (``skip_diagonal``) or the entries below it
    (``upper``): (estimates, flat ids) in no particular order, and the largest key below
    ``cut`` among the other entries the kernel evaluated (-inf when none).  ``bits``: the
    :func:`heavy_bits` filter at ``lim`` (> 0): entries with more light repetitions than
    heavy ones are not evaluated (their keys are below the bitmap's bound).  ``diagonal``:
    a Gram product's exact diagonal.  ``staged``: at most this many repetitions' bitmaps in
    shared memory (default: as many as keep two blocks per SM, or one; the rest are read
    from L2)."""
    d, rows = h1.shape
    cols = h2.shape[1]
    log2g = 0
    if bits is not None:
        bits, log2g = bits
    words = max(1, (1 << (log2b - log2g)) >> 5)
    lim_ = _device_limits()
    sreps = 0
    if bits is not None:                # as many repetitions' bitmaps as keep 2 blocks per SM
        for most in (lim_.smem_per_sm // 2, lim_.smem_per_block):
            sreps = min(d, max(0, (most - SCAN_STATIC_BYTES - 1024) // (4 * words)))
            if sreps:
                break
        sreps = sreps if staged is None else min(sreps, staged)
    smem = 4 * words * sreps
    fn = _scan_function(d, log2b, xor, gram, True, smem)
    flags = (1 if by_abs else 0) | (2 if skip_diagonal else 0) | (4 if upper else 0)
    none = np.uint64(0)
    return _selected(lambda vals, ids, count, room, low: fn(
        (_scan_grid(rows, cols),), (SCAN_THREADS,),
        (h1, s1, np.int64(rows), h2, s2, np.int64(cols), sketch, np.int32(d), np.int32(log2b),
         none if bits is None else bits, np.int32(sreps), np.int32(log2g), np.int64(r0),
         np.int64(c0), np.int64(p), none if diagonal is None else diagonal, np.int32(flags),
         np.float64(lim), np.float64(cut), vals, ids, count, np.int64(room), low),
        shared_mem=smem), room)


def _selected(launch, room: int):
    """(estimates, flat ids, largest key below the cut) of a selecting kernel ``launch(vals,
    ids, count, room, low)``, run again with room for every entry when it found more."""
    cp = cupy()
    low = cp.full(1, _NO_KEY, dtype=cp.uint64)
    count = cp.zeros(1, dtype=cp.uint64)
    while True:
        vals = cp.empty(room, dtype=cp.float64)
        ids = cp.empty(room, dtype=cp.int64)
        launch(vals, ids, count, room, low)
        n = int(count.get()[0])
        if n <= room:
            return vals[:n], ids[:n], _key_value(int(low.get()[0]))
        memory.check(16 * n, f"the {n} entries of a query tile that reach the limit",
                     "raise the threshold, or lower candidates", device="gpu", force=True)
        room = n                        # once more, with room for every entry
        count.fill(0)
        low.fill(_NO_KEY)


def pruned_select(h1, s1, r0: int, h2, s2, sketch, gram: bool, bits, items, item_rep, starts,
                  members, *, by_abs: bool, skip_diagonal: bool, lim: float, cut: float,
                  room: int = 1 << 16):
    """The entries of rows r0.. (hashed in h1/s1, (d, rows)) against all columns (h2/s2,
    (d, p)) of an FWHT sketch whose key reaches ``lim`` > 0, found from the heavy buckets
    ``items`` (int64; -1: a Gram product's blind bucket) of repetitions ``item_rep`` (int32)
    through the columns sorted by bucket (``starts`` (d, b + 1), ``members`` (d, p)) and the
    exact heavy-bucket bitmap ``bits`` (:func:`heavy_bits` with log2g = 0): (estimates,
    flat ids, largest key below ``cut`` among the entries evaluated).  Gram: the strict
    upper triangle, without the diagonal.  See ``pruned_tile`` in estimate.cu."""
    d, rows = h1.shape
    p = h2.shape[1]
    log2b = sketch.shape[1].bit_length() - 1
    if d > MAXDS[-1] or log2b > 31:
        raise ValueError(f"reps={d}, 2^{log2b} buckets: the GPU query kernels take at most "
                         f"{MAXDS[-1]} repetitions and 2^31 buckets")
    maxd = next(x for x in MAXDS if x >= d)
    fn = ESTIMATE.function(f"pruned_tile<{maxd},{'true' if gram else 'false'}>")
    flags = (1 if by_abs else 0) | (2 if skip_diagonal else 0)
    total = int(items.size) * rows
    return _selected(lambda vals, ids, count, room, low: fn(
        (_grid(total),), (THREADS,),
        (h1, s1, np.int64(rows), np.int64(r0), h2, s2, np.int64(p), sketch, np.int32(d),
         np.int32(log2b), bits, items, item_rep, np.int64(items.size), starts, members,
         np.int32(flags), np.float64(lim), np.float64(cut), vals, ids, count, np.int64(room),
         low)), room)


def bucket_members(h, b: int):
    """(starts (d, b + 1), members (d, n)) of the (d, n) buckets ``h`` (CuPy): per repetition
    t the indices in bucket v are members[t, starts[t, v]:starts[t, v + 1]], increasing
    (:func:`pagh_mm.compiled.bucket_members` on the GPU)."""
    cp = cupy()
    d, n = h.shape
    members = cp.empty((d, n), dtype=cp.int64)
    starts = cp.zeros((d, b + 1), dtype=cp.int64)
    for t in range(d):
        members[t] = cp.argsort(h[t], kind="stable")
        cp.cumsum(cp.bincount(h[t], minlength=b), out=starts[t, 1:])
    return starts, members


def scatter_dense(X, indptr, keys, sgn, rows: int):
    """(nb, rows) float64 bucket sums of the float64 or float32 vectors X (keys x nb, any
    strides) through the scatter matrix in CSR form (indptr, keys, sgn): see ``scatter.cu``."""
    cp = cupy()
    nb = X.shape[1]
    out = cp.empty((nb, rows), dtype=cp.float64)
    if out.size == 0:
        return out
    if X.dtype not in (cp.float64, cp.float32):
        raise TypeError(f"scatter_dense takes float64 or float32 vectors, not {X.dtype}")
    s_key, s_col = (st // X.itemsize for st in X.strides)
    SCATTER.function("scatter_dense" if X.dtype == cp.float64 else "scatter_dense_f32")(
        (_grid(rows * nb),), (THREADS,),
        (X, np.int64(s_key), np.int64(s_col), np.int64(nb), indptr, keys, sgn, np.int64(rows), out))
    return out


#: Vectors per warp, warps per block and most rows of ``scatter_keys`` (scatter.cu).
SCATTER_VECS, SCATTER_WARPS, SCATTER_KEYS_ROWS = 2, 8, 64


def scatter_keys(X, indptr, skey, rows: int):
    """(nb, rows) float64 bucket sums of the float64 or float32 vectors X (keys x nb, keys
    contiguous: unit steps along axis 0) through a scatter matrix of at most 64 rows in CSR
    form (``indptr``, and ``skey``: uint32 keys in row order, bit 31 where the sign is -1): the
    sums of :func:`scatter_dense`, bit for bit, for the layout that function reads poorly."""
    cp = cupy()
    keys, nb = X.shape
    out = cp.empty((nb, rows), dtype=cp.float64)
    if out.size == 0:
        return out
    if X.dtype not in (cp.float64, cp.float32):
        raise TypeError(f"scatter_keys takes float64 or float32 vectors, not {X.dtype}")
    if (keys > 1 and X.strides[0] != X.itemsize) or rows > SCATTER_KEYS_ROWS or keys >= 1 << 31:
        raise ValueError("scatter_keys takes vectors with contiguous keys (fewer than 2**31) "
                         f"and at most {SCATTER_KEYS_ROWS} rows")
    items = -(-nb // SCATTER_VECS)
    grid = int(max(1, min(-(-items // SCATTER_WARPS), _grid_cap(cp.cuda.Device().id) * 4)))
    SCATTER.function("scatter_keys" if X.dtype == cp.float64 else "scatter_keys_f32")(
        (grid,), (SCATTER_WARPS * 32,),
        (X, np.int64(X.strides[1] // X.itemsize if nb > 1 else keys), np.int64(nb),
         np.int64(keys), indptr, skey, np.int32(rows), out))
    return out


def scatter_sparse(ptr, h, w, nb: int, b: int):
    """(nb, d, b) sketches of nb sparse vectors (``ptr`` their stored-value ranges, ``h``
    and ``w`` (d, nnz) buckets and signed values): see ``scatter.cu``."""
    cp = cupy()
    d, nnz = h.shape
    out = cp.zeros((nb, d, b), dtype=cp.float64)
    if nb * d == 0:
        return out
    SCATTER.function("scatter_sparse")(
        (_grid(nb * d),), (THREADS,),
        (cp.ascontiguousarray(ptr), cp.ascontiguousarray(h), cp.ascontiguousarray(w), np.int64(nnz),
         np.int32(d), np.int64(nb), np.int64(b), out))
    return out


def vector_norms(ptr, values):
    """(|v|_1 of every sparse vector (float64, stored order), a 1-element uint64 count of the
    stored values that are not integers) of vectors with stored-value bounds ``ptr``: see
    ``scatter.cu``."""
    cp = cupy()
    ptr = cp.ascontiguousarray(ptr, dtype=cp.int64)
    values = cp.ascontiguousarray(values, dtype=cp.float64)
    nb = int(ptr.size) - 1
    norm = cp.empty(max(nb, 0), dtype=cp.float64)
    fractional = cp.zeros(1, dtype=cp.uint64)
    if nb > 0:
        SCATTER.function("vector_norms")((_grid(nb),), (THREADS,),
                                         (ptr, values, np.int64(nb), norm, fractional))
    return norm, fractional


#: Threads of ``row_square_sums`` per row at most (warps of 128-value chunks) and of
#: ``col_square_sums`` per column group; blocks of the latter at least (spans of rows).
SQUARE_ROW_THREADS = 256
SQUARE_COL_THREADS = 128
SQUARE_COL_BLOCKS = 4096


def rows_in_place(X) -> bool:
    """Whether the square-sum kernels read the 2-d array X where it is: float32 or float64,
    consecutive elements along each row, a non-negative whole-element step between rows."""
    if getattr(X, "ndim", 0) != 2 or np.dtype(X.dtype) not in (np.float32, np.float64):
        return False
    rows, cols = X.shape
    return (cols < 2 or X.strides[1] == X.itemsize) and \
        (rows < 2 or (X.strides[0] >= 0 and X.strides[0] % X.itemsize == 0))


def _rows_contiguous(X):
    """X (2-d, float32 or float64 kept, else float64) as the square-sum kernels read it
    (:func:`rows_in_place`, else a C-ordered copy), and its row step in elements."""
    cp = cupy()
    if X.dtype not in (cp.float32, cp.float64):
        X = X.astype(cp.float64)
    if not rows_in_place(X):
        X = cp.ascontiguousarray(X)
    return X, (X.strides[0] // X.itemsize if X.shape[0] > 1 else X.shape[1])


def row_square_sums(X):
    """Squared norms in float64 of the rows of a (rows, n) float32 or float64 array whose rows
    are contiguous (other dtypes and layouts are copied first), in the pairwise tree of
    :func:`pagh_mm.reduction.row_sums` (its bits): see ``scatter.cu``."""
    cp = cupy()
    X, ld = _rows_contiguous(X)
    rows, n = X.shape
    out = cp.zeros(rows, dtype=cp.float64)
    if rows and n:
        log2p = max(0, (n - 1).bit_length())
        warps = max(1, min(SQUARE_ROW_THREADS // 32, (1 << log2p) >> 7))
        name = "row_square_sums" + ("_f32" if X.dtype == cp.float32 else "")
        SCATTER.function(name)((_grid(rows * 32 * warps, 32 * warps),), (32 * warps,),
                               (X, np.int64(ld), np.int64(n), np.int32(log2p), np.int64(rows),
                                out), shared_mem=8 * warps)
    return out


def col_square_sums(X):
    """Squared norms in float64 of the columns of a (rows, cols) float32 or float64 array
    whose rows are contiguous (other dtypes and layouts are copied first), in the pairwise
    tree over the rows (the bits of :func:`pagh_mm.reduction.block_sum` of the squares): the
    kernel's aligned spans of rows, then the spans' sums added pairwise here."""
    cp = cupy()
    X, ld = _rows_contiguous(X)
    rows, cols = X.shape
    if not rows or not cols:
        return cp.zeros(cols, dtype=cp.float64)
    groups = -(-cols // SQUARE_COL_THREADS)
    padded = 1 << max(0, (rows - 1).bit_length())
    spans = 1
    while groups * spans < SQUARE_COL_BLOCKS and padded // (2 * spans) >= 4 * 64:
        spans *= 2
    span = max(4, padded // spans)                  # a larger padding: the same sums
    part = cp.empty((spans, cols), dtype=cp.float64)
    name = "col_square_sums" + ("_f32" if X.dtype == cp.float32 else "")
    SCATTER.function(name)((groups, spans), (SQUARE_COL_THREADS,),
                           (X, np.int64(ld), np.int64(rows), np.int64(cols), np.int64(span),
                            part))
    while part.shape[0] > 1:                        # the levels above the spans, left first
        part = part[0::2] + part[1::2]
    return part[0]


def transposed(V):
    """A C-ordered copy of ``V.T`` for a 2-d GPU array: by cuBLAS ``geam`` (a tiled transpose,
    on the current stream) where V is float32/float64 with unit steps along its rows, else
    ``cupy.ascontiguousarray``.  H100, a C-ordered A's column blocks made keys-contiguous for
    the fused kernel: n = 32768 FP64 6.3 ms against 11.8 ms, FP32 3.1 against 9.6 ms (a copy of
    A: 6.0 / 5.2 ms)."""
    cp = cupy()
    rows, cols = V.shape
    if V.dtype not in (cp.float32, cp.float64) or V.size == 0 or V.strides[1] != V.itemsize \
            or V.strides[0] % V.itemsize or V.strides[0] < cols * V.itemsize or \
            max(rows, cols, V.strides[0] // V.itemsize) >= 1 << 31:     # (cuBLAS's int sizes)
        return cp.ascontiguousarray(V.T)
    from cupy_backends.cuda.libs import cublas as cb
    out = cp.empty((cols, rows), dtype=V.dtype)
    one, zero = np.ones(1, dtype=V.dtype), np.zeros(1, dtype=V.dtype)
    geam = cb.dgeam if V.dtype == cp.float64 else cb.sgeam
    handle = cp.cuda.device.get_cublas_handle()
    mode = cb.getPointerMode(handle)
    cb.setStream(handle, cp.cuda.get_current_stream().ptr)
    cb.setPointerMode(handle, cb.CUBLAS_POINTER_MODE_HOST)
    try:        # column-major: V is cols x rows (leading dimension its row step), out rows x cols
        geam(handle, cb.CUBLAS_OP_T, cb.CUBLAS_OP_N, rows, cols, one.ctypes.data, V.data.ptr,
             V.strides[0] // V.itemsize, zero.ctypes.data, out.data.ptr, rows, out.data.ptr, rows)
    finally:
        cb.setPointerMode(handle, mode)
    return out


def poly61(keys, coef):
    """(r, n) uint64 values << 3 of the degree-3 polynomials ``coef`` ((r, 4) uint64, powers
    0..3) over GF(2^61 - 1) at the uint64 ``keys`` (n): see ``hash.cu``."""
    cp = cupy()
    keys = cp.ascontiguousarray(keys.ravel(), dtype=cp.uint64)
    coef = cp.ascontiguousarray(cp.asarray(coef, dtype=cp.uint64))
    r, n = coef.shape[0], keys.size
    out = cp.empty((r, n), dtype=cp.uint64)
    if out.size:
        HASH.function("poly61")((_grid(r * n),), (THREADS,),
                                (keys, np.int64(n), coef, np.int64(r), out))
    return out


def _cluster_log(log2b: int, dtype) -> tuple[int, int]:
    """:func:`_cluster_shape` on the current device (its largest cluster, its shared memory)."""
    lim = _device_limits()
    return _cluster_shape(log2b, C_TYPES[np.dtype(dtype)],
                          min(FUSED_CLUSTER_MAX_LOG_CL, lim.max_cluster_log), lim.smem_per_block)


def fused_supported(log2b: int, dtype) -> bool:
    """Whether ``fused_terms`` computes transforms of 2^log2b buckets in ``dtype`` on the
    current device (beyond one block's shared memory: thread-block clusters, sm_90+)."""
    name = C_TYPES.get(np.dtype(dtype))
    if name is None or log2b < 1:
        return False
    if _cluster_log(log2b, dtype)[1] > 0:
        return True
    return log2b <= FUSED_MAX_LOG2B[name] and \
        _fused_smem(log2b, name) <= _device_limits().smem_per_block


def _slots_shared(log2b: int, dtype, log_g: int, stage: bool = True) -> bool:
    """Whether the buffer and ``log_g`` pending nodes fit the device's shared memory."""
    return _fused_smem(log2b, C_TYPES[np.dtype(dtype)], log_g, stage) <= \
        _device_limits().smem_per_block


def _stageless(log2b: int, name: str, gram: bool, keyed: bool) -> bool:
    """Whether the block of ``fused_dense_terms`` for 2^log2b buckets of C type ``name`` needs no
    sketch stage in shared memory: a Gram kernel of at most FUSED_REG_LOG_VPT values per
    thread whose factor is sketched in key order (``keyed``: its codes given; fused.cu's
    sketch_all, KEYS), which never reads the stage (the sketch by position's)."""
    return gram and keyed and fused_log_vpt(log2b, name) <= FUSED_REG_LOG_VPT[name] and \
        not _cluster_log(log2b, _DTYPE_OF[name])[1]


def _most_levels(log2b: int, name: str, stage: bool) -> int:
    """Most levels of the tree a block of ``fused_dense_terms`` for 2^log2b buckets of C type
    ``name`` sums in shared memory: FUSED_KEYS_MAX_LOG_G of its C type for a block without
    the sketch stage (:func:`_stageless`) of 1024 threads (RegLogVpt values per thread: alone
    on its SM), else FUSED_MAX_LOG_G."""
    if not stage and log2b == FUSED_REG_LOG_VPT[name] + 10:
        return FUSED_KEYS_MAX_LOG_G[name]
    return FUSED_MAX_LOG_G


def fused_group(log2b: int, dtype, block: int, gram: bool = False, keyed: bool = False) -> int:
    """log2 of the inner indices one block of ``fused_terms`` sums (the tree's lowest levels):
    as many as the device's shared memory holds beside the buffer, up to FUSED_MAX_LOG_G and no
    more than the ``block`` of the memory plan; when the buffer leaves room for none, the most
    the plan allows, their pending nodes in device memory (``fused_terms``' slots: each block's
    own rows, L2-resident, instead of a node per inner index written and read again), as
    always for clusters.  ``gram``, ``keyed`` (the factor sketched in key order): a block
    without the sketch stage (:func:`_stageless`, as ``fused_terms`` decides) sums up to
    :func:`_most_levels`."""
    name = C_TYPES[np.dtype(dtype)]
    c = 0
    cluster = _cluster_log(log2b, dtype)[1] > 0
    stage = not _stageless(log2b, name, gram, keyed)
    while not cluster and c < _most_levels(log2b, name, stage) and \
            _slots_shared(log2b, dtype, c + 1, stage) and 2 << c <= block:
        c += 1
    if c == 0:
        while c < (FUSED_CLUSTER_LOG_G if cluster else FUSED_GLOBAL_LOG_G) and 2 << c <= block:
            c += 1
    return c


#: Most keys per bucket, per C type, of a factor whose fused sketch walks its keys in order
#: (``fused_dense_terms``' sketch_keys: buckets of one key written as the keys are read, the
#: others summed from their lists) instead of its bucket lists by position: in the kernels of
#: the most buckets per block (FP32 2^15, FP64 2^14) and in the Gram kernels of fewer
#: buckets (:func:`fused_key_order`; the products' kernels of fewer spill with it).  H100,
#: d = 5, kernel time against the sketch by position in the same build
#: (``benchmarks/explore_fused_parts.py --key-order-load``): FP32 2^15 buckets, 0.25 and 0.5
#: keys per bucket 1.32x and 1.59x faster; FP64 2^14, 0.5 and 1 key per bucket 1.35x and
#: 1.33x; FP32 2^15 at 1 key per bucket (n = 32768, d = 13) 1.51x (0.385 against 0.580 s,
#: ``results/h100/session31-fused-load32768.json``), at 1.5 and 2 (n = 49152 and 65536, d =
#: 13, the fused stage) 1.47x and 1.40x (0.83 against 1.22 s, 1.54 against 2.16 s,
#: ``results/h100/session33-key-load.json``, ``benchmarks/explore_key_load.py``).  With the
#: slow buckets' compact lists (session 37; ``--inner 4096`` (FP32 at 6 and 8: 2048), the
#: fused stage, the same bits): FP32 at 3, 4, 6 and 8 keys per bucket 1.88x, 1.84x, 1.85x and
#: 1.90x (0.109 against 0.203 s, 0.147 against 0.271 s, 0.127 against 0.234 s, 0.170 against
#: 0.324 s), FP64 2^14 at 1.5, 2, 3 and 4 1.69x, 1.51x, 1.69x and 1.75x (0.034 against
#: 0.058 s, 0.050 against 0.076 s, 0.065 against 0.110 s, 0.083 against 0.144 s;
#: ``results/h100/session37-key-load-*``); not measured beyond.
FUSED_KEY_ORDER_MAX_LOAD = {"float": 8.0, "double": 4.0}


def fused_key_order(keys: int, log2b: int, dtype, gram: bool = False) -> bool:
    """Whether ``fused_terms`` sketches a factor of ``keys`` keys into 2^log2b buckets in key
    order (its codes, :meth:`pagh_mm.sketch.Side.gpu_codes`, are then needed): at most
    FUSED_KEY_ORDER_MAX_LOAD keys per bucket, in one block per inner index (not in clusters:
    measured slower there, session 31), of the most buckets per block (FUSED_MAX_LOG2B) or
    (``gram``) of any buckets: the Gram kernels of fewer buckets (fused.cu's sketch_all,
    KEYS).  Covariance screen 2^18 x 4096, 9 repetitions, the fused stage + accumulate,
    against the sketch by position (H200, ``benchmarks/explore_fused_parts.py --gram``,
    ``results/h200/session42-parts3g.*``): FP32 transforms 2^12 / 2^13 / 2^14 buckets 0.69x /
    0.76x / 0.86x (0.135 against 0.177 s at 2^13 with FUSED_MAX_LOG_G = 1), FP64 2^12 / 2^13
    0.82x / 0.89x."""
    name = C_TYPES[np.dtype(dtype)]
    if keys > FUSED_KEY_ORDER_MAX_LOAD[name] * (1 << log2b):
        return False
    if _cluster_log(log2b, dtype)[1]:
        return False
    return log2b == FUSED_MAX_LOG2B[name] or (gram and fused_supported(log2b, dtype))


def fused_log_vpt(log2b: int, name: str) -> int:
    """log2 of the values per thread of ``fused_dense_terms`` for 2^log2b buckets of C type
    ``name`` (blocks of at most 1024 threads).  Above FUSED_REG_LOG_VPT (fused.cu's
    RegLogVpt) only with 1024 threads: those kernels are compiled for exactly that
    (fused.cu's fixed_logb: log2b = log_vpt + 10)."""
    return min(log2b, max(FUSED_REG_LOG_VPT[name], log2b - 10))


def fused_terms(VA, table_a, VB, table_b, d: int, log2b: int, dtype, log_g: int = 0):
    """(ceil(nb / 2^log_g), d, b) nodes of the pairwise tree (``pagh_mm.reduction``) over the
    Hadamard-domain terms FWHT(P_t a_k) * FWHT(P_t b_k) (``VB`` None: a Gram product,
    FWHT(P_t a_k)^2) of the nb vectors k of ``VA`` and ``VB``, each node the sum of 2^log_g
    consecutive terms (the last one of fewer): (keys, nb) float64 or float32 arrays of one
    dtype (any strides), in ``dtype`` (float32 or float64): see ``fused.cu``.  ``table_*``:
    the scatter tables (indptr, keys, signs) of :meth:`pagh_mm.sketch.Side.gpu_table`, the
    bucket of each of their positions (:meth:`pagh_mm.sketch.Side.gpu_positions`) and the key
    codes (code, cptr, slow, sptr, skeys) of :meth:`pagh_mm.sketch.Side.gpu_codes` where
    :func:`fused_key_order` holds (else five None)."""
    cp = cupy()
    gram = VB is None
    b, nb = 1 << log2b, VA.shape[1]
    groups = -(-nb // (1 << log_g))
    out = cp.empty((groups, d, b), dtype=dtype)
    if out.size == 0:
        return out
    t_name = C_TYPES[np.dtype(dtype)]
    log_vpt, log_cl = _cluster_log(log2b, dtype)
    if log_cl:                  # a cluster of 2^log_cl blocks per (group, repetition)
        shared = False
        log_bl = log2b - log_cl
        a_shared = FUSED_CLUSTER_A_SHARED and not gram and \
            _cluster_a_fits(log_bl, t_name, _device_limits().smem_per_block)
        smem = _cluster_a_smem(log_bl, t_name) if a_shared else _fused_smem(log_bl, t_name)
        fn = FUSED.function(f"fused_cluster_terms<{t_name},{C_TYPES[VA.dtype]},{log_vpt},"
                            f"{'true' if gram else 'false'},{log_g},{log_cl},"
                            f"{'true' if a_shared else 'false'}>", smem, 1 << log_cl)
    else:
        log_vpt = fused_log_vpt(log2b, t_name)
        stage = not _stageless(log2b, t_name, gram, table_a[4] is not None)
        shared = _slots_shared(log2b, dtype, log_g, stage)
        smem = _fused_smem(log2b, t_name, log_g if shared else 0, stage)
        fn = FUSED.function(f"fused_dense_terms<{t_name},{C_TYPES[VA.dtype]},{log_vpt},"
                            f"{'true' if gram else 'false'},{log_g},"
                            f"{_fixed(log2b, log_vpt, t_name)}>", smem)
    slots = None if shared or log_g == 0 else cp.empty((groups * d, log_g, b), dtype=dtype)
    if gram:
        VB, table_b = VA, table_a
    sa = [st // VA.itemsize for st in VA.strides]
    sb = [st // VB.itemsize for st in VB.strides]
    # the key counts only for the sketch in key order (codes given; below 2^31 there)
    n_a, n_b = (np.int32(0 if tab[4] is None else V.shape[0])
                for V, tab in ((VA, table_a), (VB, table_b)))
    null = np.uintp(0)
    table_a, table_b = ([null if a is None else a for a in tab] for tab in (table_a, table_b))
    fn((groups * d << log_cl,), (b >> log_cl >> log_vpt,),
       (VA, np.int64(sa[0]), np.int64(sa[1]), n_a, *table_a,
        VB, np.int64(sb[0]), np.int64(sb[1]), n_b, *table_b,
        np.int32(d), np.int32(log2b), np.int64(nb), out,
        slots if slots is not None else np.uintp(0)), shared_mem=smem)
    return out


def tree_sum(nodes):
    """The pairwise tree sum over axis 0 of ``nodes`` (CuPy, float32 or float64, C-ordered):
    :func:`pagh_mm.reduction.block_sum`'s value, 32 nodes into one per pass (``tree_sum_32``:
    a little over one read of the nodes)."""
    cp = cupy()
    nodes = cp.ascontiguousarray(nodes)
    out = cp.empty(nodes.shape[1:], dtype=nodes.dtype)
    stride = out.size
    if stride == 0 or nodes.shape[0] == 0:
        return out if nodes.shape[0] else cp.zeros(nodes.shape[1:], dtype=nodes.dtype)
    if nodes.shape[0] == 1:
        out[...] = nodes[0]
        return out
    t = C_TYPES[nodes.dtype]
    v = TREE_VECTOR[t]                  # 16-byte loads where every node's row is aligned
    v = v if stride % v == 0 and nodes.data.ptr % (v * nodes.itemsize) == 0 else 1
    fn = FUSED.function(f"tree_sum_32<{t},{v}>")
    cur = nodes.reshape(nodes.shape[0], stride)
    while cur.shape[0] > 1:             # 32 nodes into one, level by level of the tree
        count = cur.shape[0]
        groups = -(-count // 32)
        nxt = out.reshape(1, stride) if groups == 1 else cp.empty((groups, stride), cur.dtype)
        fn((_grid(groups * stride // v),), (THREADS,),
           (cur, np.int64(count), np.int64(stride), nxt))
        cur = nxt
    return out


def pairs_direct(va, vb, rows, b: int, tab) -> None:
    """Add the direct pairs of the sparse vectors ``va``, ``vb`` ((ptr, keys, h, w) of
    :meth:`pagh_mm.sketch.Side.hashed_values`; ``vb`` None: a Gram product, A's with itself)
    to the (reps, b) float64 time-domain table ``tab``; ``rows``: (base, bit) int32 device
    arrays of :func:`pagh_mm.hashing.distinct_rows`. See ``scatter.cu``."""
    ptrA, kA, hA, wA = va
    ptrB, kB, hB, wB = va if vb is None else vb
    nb = int(ptrA.size) - 1
    if nb <= 0:
        return
    base, bit = rows
    fn = SCATTER.function("pairs_direct")
    args = (ptrA, kA, np.int32(kA.dtype.itemsize == 8), hA, wA, np.int64(hA.shape[1]),
            ptrB, kB, np.int32(kB.dtype.itemsize == 8), hB, wB, np.int64(hB.shape[1]),
            np.int64(nb), np.int64(b), base, bit, np.int32(vb is None))
    for r in range(int(tab.shape[0])):      # one repetition's row of the table in L2 at a time
        fn((-(-nb // PAIRS_K), 1), (THREADS,), args + (np.int32(r), tab))


#: pagh_mm.hashing's families as hash.cu's ``raw_hash`` numbers them.
HASH_FAMILIES = {"multiply-add-shift": 0, "multiply-shift": 0, "tabulation": 1, "polynomial": 2}


def hash_values(keys, values, family: str, params, which: int, log2b: int):
    """(h, w): uint32 buckets and float64 signed values (reps, n) of the stored values
    ``values`` (float64) at ``keys`` (int32 or int64, below 2^32) under the functions of side
    ``which`` (1: h1, s1; 2: h2, s2) of each repetition of ``params`` ((a, c, tables, coef)
    device arrays; tables/coef None unless the family uses them): see ``hash.cu``."""
    cp = cupy()
    a, c, tables, coef = params
    reps, n = int(a.shape[0]), int(keys.size)
    h = cp.empty((reps, n), dtype=cp.uint32)
    w = cp.empty((reps, n), dtype=cp.float64)
    if h.size:
        HASH.function("hash_values")(
            (_grid(reps * n),), (THREADS,),
            (keys, np.int32(keys.dtype.itemsize == 8), values, np.int64(n), np.int32(reps),
             np.int32(HASH_FAMILIES[family]), np.int32(family != "multiply-shift"),
             np.int32(which - 1), np.int32(1 + which), np.int32(log2b), a, c,
             a if tables is None else tables, a if coef is None else coef, h, w))
    return h, w
