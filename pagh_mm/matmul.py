"""compress(A, B) and approx_matmul(A, B): the public entry points."""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

import fwht_gpu
import fwht_gpu.dtypes as _fdt
from fwht_gpu import memory

from . import backend as _be
from .backend import all_finite
from . import auto, certificate, compiled, hashing, sketchfile
from . import decode as _decode
from .auto import AUTO, default_buckets  # noqa: F401  (public through pagh_mm)
from .compressed import CompressedProduct
from .convolution import METHODS, Accumulator
from .sketch import Side, canonical

#: Default bytes of inner-dimension temporaries per block on the CPU (the GPU default is
#: min(2 GiB, 1/8 of free device memory)); raised to what one inner index needs.
MEMORY_BUDGET = 256 << 20
#: Largest number of buckets (log2) of a new sketch: multiply-add-shift of 32-bit keys in 64-bit
#: words is strongly universal for at most 32 output bits.
MAX_LOG2B = 32
#: Most repetitions the GPU query kernel handles.
GPU_MAX_REPS = 127
#: Bytes of temporaries per stored value of a sparse block and repetition (hashes, signed
#: values, bin indices).
SPARSE_BYTES = 40
#: The GPU pair route's temporaries per stored value of a block: per distinct repetition a
#: uint32 bucket and a float64 signed value, and once its float64 value and int64 key; per
#: inner index and side, its int64 bounds and their temporary.
PAIR_BYTES, PAIR_BYTES_PER_REP, PAIR_BYTES_PER_INDEX = 16, 12, 20
#: Whether dense GPU compressions use the fused kernel where it applies (False: the
#: staged path, scatter / transform / product as separate kernels; for comparisons).
GPU_FUSED = True
#: Whether the fused kernel reads a block of vectors whose keys are not contiguous (a
#: C-ordered A's columns) from a contiguous copy of the block (one read and one write of it:
#: each thread block then gathers from one contiguous row instead of a strided column).
GPU_FUSED_CONTIGUOUS = True


# --- validation -----------------------------------------------------------------------------

def _as_matrix(M, name: str, be):
    """A 2-d dense array or sparse matrix of real numbers on ``be``'s device."""
    if isinstance(M, np.ma.MaskedArray):
        raise TypeError(f"{name} is a masked array: the sketch would use its masked values; pass "
                        f"{name}.filled(0) (masked entries as zeros) or {name}.data to ignore the mask")
    if be.sp.issparse(M):
        kind = np.dtype(M.dtype).kind
    else:
        if not isinstance(M, be.xp.ndarray) or isinstance(M, np.matrix):
            try:
                M = be.xp.asarray(M)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"{name} is not a matrix of numbers ({exc})") from None
        kind = M.dtype.kind
    if M.ndim != 2:
        raise ValueError(f"{name} must be a 2-d matrix, got {M.ndim} dimensions")
    if kind not in "biuf" and np.dtype(M.dtype) != _fdt.bfloat16:
        raise TypeError(f"{name} has dtype {M.dtype}; pass a real (integer or floating) matrix")
    return M


def _check_finite(M, name, be, B=None):
    """NaN and Inf refused, naming the factor (and ``B``'s, read with the same
    synchronisation)."""
    def values(X):
        return X.data if be.sp.issparse(X) else X
    if B is None or not be.gpu:
        for X, what in ((M, name), (B, "B")):
            if X is not None and not all_finite(values(X), be.xp):
                _not_finite(what)
        return
    both = be.xp.stack([all_finite(values(X), be.xp, defer=True) for X in (M, B)]).get()
    for ok, what in zip(both, (name, "B")):
        if not ok:
            _not_finite(what)


def _not_finite(name: str):
    raise ValueError(f"{name} contains NaN or Inf; remove them (they would poison the sketch; "
                     "the Python API's check_finite=False skips this check)")


def _int_arg(value, name: str, lo: int, hint: str = "") -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}={value!r} must be an integer{hint}")
    if int(value) < lo:
        raise ValueError(f"{name}={value!r} must be an integer >= {lo}{hint}")
    return int(value)


def _is_auto(value) -> bool:
    return isinstance(value, str) and value == AUTO


def check_buckets(buckets) -> int:
    """log2 of a valid bucket count (a power of two, 2 .. 2**40)."""
    if isinstance(buckets, (bool, np.bool_)) or not isinstance(buckets, numbers.Integral):
        raise TypeError(f"buckets={buckets!r} must be an integer power of two or 'auto'")
    b = int(buckets)
    if b < 2 or b & (b - 1) or b > 1 << MAX_LOG2B:
        nxt = 1 << max(1, b.bit_length()) if 0 < b < 1 << MAX_LOG2B else None
        hint = f"; e.g. buckets={nxt}" if nxt else ""
        raise ValueError(f"buckets={buckets!r} must be a power of two from 2 to 2**{MAX_LOG2B}{hint}")
    return b.bit_length() - 1


def _validate(A, B, buckets, reps, method, dtype, algorithm, stabilizer, hash, check_finite,
              memory_budget):
    if isinstance(A, (list, tuple)):
        A = np.asarray(A)
    if isinstance(B, (list, tuple)):
        B = np.asarray(B)
    be = _be.for_arrays(A, B)
    A, B = _as_matrix(A, "A", be), _as_matrix(B, "B", be)
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"shapes {A.shape} and {B.shape} are not aligned: A has {A.shape[1]} "
                         f"columns, B has {B.shape[0]} rows")
    if max(A.shape[0], B.shape[1]) >= hashing.MAX_KEY:
        raise ValueError("A.shape[0] and B.shape[1] must be below 2**32")
    log2b = None if _is_auto(buckets) else check_buckets(buckets)
    if not _is_auto(reps):
        reps = _int_arg(reps, "reps", 1, " (odd, so that the median is one of the estimates; even: "
                        "the mean of the two middle ones), or 'auto'")
    if method not in METHODS:
        raise ValueError(f"method={method!r}; choose 'fwht' or 'fft'")
    hashing.check_family(hash)
    if dtype is None:
        rt = np.result_type(*(np.float32 if M.dtype == _fdt.bfloat16 else _fdt.native(M.dtype)
                              for M in (A, B)))
        dtype = np.float32 if rt.kind == "f" and rt.itemsize <= 4 else np.float64
    dtype = _fdt.resolve(dtype, "dtype")
    fwht_gpu.make_plan(1 << (log2b or auto.MIN_LOG2B), dtype, algorithm, stabilizer)     # validates both
    problem = sketchfile.settings_problem(method, _fdt.short_name(dtype), algorithm, stabilizer)
    if problem:
        raise ValueError(problem)
    if method == "fft" and (algorithm != "folklore" or stabilizer is not None):
        raise ValueError("algorithm and stabilizer choose how the FWHT is computed; method='fft' "
                         "uses numpy/cupy.fft instead: leave them at their defaults")
    if be.gpu and not _is_auto(reps) and reps > GPU_MAX_REPS:
        raise ValueError(f"reps={reps}: the GPU queries support at most {GPU_MAX_REPS} repetitions")
    if memory_budget is not None:
        memory_budget = _int_arg(memory_budget, "memory_budget", 1)
    A, B = canonical(A, 1, be), canonical(B, 2, be)       # sparse: CSC / CSR, once
    if check_finite:
        _check_finite(A, "A", be, B)
    return A, B, be, dtype, log2b, reps, memory_budget


# --- memory plan ----------------------------------------------------------------------------

def _block_size(sides, per_index: int, n: int, value_bytes: int, budget: int) -> int:
    """The largest power of two B such that every aligned block of B inner indices (with its
    sparse stored values) keeps its temporaries within ``budget``; 0 if not even one fits."""
    B = 1 << max(0, (max(n, 1) - 1).bit_length())
    if per_index > 0:           # no larger block fits its per-index bytes alone
        B = min(B, 1 << (max(1, budget // per_index).bit_length() - 1))
    while B >= 1 and _block_cost(sides, B, per_index, value_bytes) > budget:
        B //= 2
    return B


def _fused_bytes_per_index(sides, acc: Accumulator) -> int:
    """Temporaries one inner index adds to a block of the fused GPU kernel
    (:func:`_gpu_fused_terms`): at most one tree node and one pending slot of d x b values, the
    first ``tree_sum`` level (a 32nd), and two copies of each dense vector (float64, and the
    contiguous copy of a C-ordered factor)."""
    return 2 * acc.reps * acc.b * acc.value_dtype.itemsize + \
        acc.reps * acc.b * acc.value_dtype.itemsize // 32 + sum(16 * s.keys for s in sides)


def _plan_memory(sides, acc: Accumulator, n: int, m: int, p: int, be, memory_budget,
                 pairs: bool = False, gpu_fused: bool = False):
    """(block size, budget): the aligned block size within the memory budget, after checking
    that the whole compression fits the memory available (InsufficientMemoryError if not).
    ``pairs``: every inner index is added pair by pair (the GPU's pair route): blocks hold
    only their stored values' hashes, and the sums one time-domain table.  ``gpu_fused``: the
    fused GPU kernel computes the terms (no dense sketches per inner index: larger blocks,
    so that each launch fills the device many times over)."""
    d, b = acc.reps, acc.b
    per_index = PAIR_BYTES_PER_INDEX * len(sides) if pairs else \
        _fused_bytes_per_index(sides, acc) if gpu_fused else \
        acc.bytes_per_index(len(sides)) + sum(8 * s.keys for s in sides if not s.sparse)
    value_bytes = PAIR_BYTES + PAIR_BYTES_PER_REP * sides[0].distinct_count() if pairs else \
        SPARSE_BYTES * d
    term = d * b * acc.value_dtype.itemsize
    hint = (f"lower buckets (now 2**{b.bit_length() - 1}) or reps (now {d})"
            + ("" if memory_budget is None else " or memory_budget"))
    device = "gpu" if be.gpu else "cpu"
    have = memory.available(device)
    if memory_budget is None:
        base = MEMORY_BUDGET
        if be.gpu:
            base = max(MEMORY_BUDGET, min(2 << 30, (have or 0) // 8))
        # most_values(1) (a device reduction) only when its bound could exceed the base
        one = per_index + sum(min(s.keys, int(s.M.nnz)) for s in sides if s.sparse) * value_bytes
        budget = base if one <= base else max(base, _block_cost(sides, 1, per_index, value_bytes))
        if have is not None:
            budget = min(budget, max(have // 2, 1))
    else:
        budget = memory_budget
    B = _block_size(sides, per_index, n, value_bytes, budget)
    if B == 0:
        one = _block_cost(sides, 1, per_index, value_bytes)
        if memory_budget is not None:
            raise memory.InsufficientMemoryError(
                f"memory_budget={memory.gib(memory_budget)} is below what one inner index needs "
                f"({memory.gib(one)} for buckets=2**{b.bit_length() - 1}, reps={d}, m={m}, p={p}); "
                f"raise memory_budget to at least {one} or lower buckets or reps",
                need=one, available=memory_budget, device=device, hint="raise memory_budget")
        B, budget = 1, one
    levels = max(1, (max(n, 1) - 1).bit_length() - (B.bit_length() - 1) + 1)
    # the Hadamard-domain tree's pending nodes and the inverse transform's buffers, or the
    # pairs' time-domain table (finished in place) and the exactness check's row temporaries
    fixed = (term + 4 * b * 8 if pairs else (levels + 4) * term) + \
        sum(s.table_bytes() for s in sides)
    need = fixed + _block_cost(sides, B, per_index, value_bytes)
    memory.check(need, f"compressing a {m} x {n} by {n} x {p} product into {d} x {b} buckets",
                 hint, device=device)
    return B, budget


def _fused_engine(sides, acc: Accumulator, n: int, m: int, p: int, be, memory_budget,
                  allow_pairs: bool = True):
    """The compiled CPU engine (:class:`pagh_mm.compiled.Fused`) when it computes this
    compression (FWHT, a plan of plain compiled stages), with chunks whose dense vectors fit
    the memory budget; None otherwise.  Checks that the whole call fits the memory available.
    ``allow_pairs`` False: no inner index added pair by pair."""
    if be.gpu or acc.method != "fwht" or not compiled.fused_supported(acc.transform.plan):
        return None
    d, b = acc.reps, acc.b
    dense = 8 * sum(s.keys for s in sides if not s.sparse)

    def cost(engine):       # temporaries of one call (a pairs-only engine's table is the sum)
        return (0 if engine.direct_only else engine.bytes()) + engine.block * dense + \
            sum(s.most_values(engine.block) for s in sides) * (24 + 16 * d)

    pairs = allow_pairs and acc.dtype == np.float64 and all(s.sparse for s in sides) and \
        compiled.exact_integers(sides, _abs_product_bound(sides))

    direct_only = False
    if pairs:                   # every inner index added pair by pair: no transform buffers
        na = np.diff(sides[0].M.indptr).astype(np.int64)
        most = int((na * (na + 1) // 2 if len(sides) == 1 else
                    na * np.diff(sides[1].M.indptr)).max(initial=0))
        direct_only = most <= compiled.Fused.pair_limit_of(b, len(sides))

    def make(chunk, threads=None):
        return compiled.Fused(acc.transform.plan, d, chunk, threads, len(sides), pairs,
                              direct_only)

    chunk = compiled.CHUNK_DIRECT if direct_only else compiled.CHUNK
    engine = make(chunk)
    budget = MEMORY_BUDGET if memory_budget is None else memory_budget
    while cost(engine) > budget and engine.block > 1:    # smaller chunks, then fewer threads
        if chunk > 1:
            chunk //= 2
            engine = make(chunk)
        else:
            engine = make(1, engine.nchunk // 2)
    if memory_budget is not None and cost(engine) > memory_budget:
        one = cost(make(1, 1))
        raise memory.InsufficientMemoryError(
            f"memory_budget={memory.gib(memory_budget)} is below what one inner index needs "
            f"({memory.gib(one)} for buckets=2**{b.bit_length() - 1}, reps={d}, m={m}, p={p}); "
            f"raise memory_budget to at least {one} or lower buckets or reps",
            need=one, available=memory_budget, device="cpu", hint="raise memory_budget")
    levels = max(1, (max(n, 1) - 1).bit_length() + 1)
    need = cost(engine) + (engine.bytes() if engine.direct_only else 0) + \
        (3 if engine.direct_only else levels + 4) * d * b * acc.acc_dtype.itemsize \
        + sum(s.hash_bytes() for s in sides)
    memory.check(need, f"compressing a {m} x {n} by {n} x {p} product into {d} x {b} buckets",
                 f"lower buckets (now 2**{b.bit_length() - 1}) or reps (now {d})", device="cpu")
    return engine


def _gpu_fused(sides, acc: Accumulator, be) -> bool:
    """Whether the fused GPU kernel (``pagh_mm/cuda/fused.cu``) computes this compression's
    terms: dense factors, the FWHT in FP32 or FP64 by plain Folklore stages (the plan's
    compute dtype its storage dtype), buckets within the kernel's shared memory."""
    if not GPU_FUSED or not be.gpu or acc.method != "fwht" or any(s.sparse for s in sides):
        return False
    from .cuda import kernels
    plan = acc.transform.plan
    return not plan.stabilizer and plan.compute_dtype == plan.dtype and \
        all(st.kind == "radix2" for p in plan.passes for st in p.stages) and \
        kernels.fused_supported(acc.b.bit_length() - 1, acc.dtype)


def _gpu_pairs_add(sides, k0: int, k1: int, tab) -> None:
    from .cuda import kernels
    va = sides[0].hashed_values(k0, k1)
    vb = sides[1].hashed_values(k0, k1) if len(sides) == 2 else None
    kernels.pairs_direct(va, vb, sides[0].distinct_rows()[1], tab.shape[1], tab)


def _gpu_tree_sum(nodes):
    from .cuda import kernels
    return kernels.tree_sum(nodes)


def _gpu_fused_terms(sides, acc: Accumulator, k0: int, k1: int, block: int):
    """Nodes of the pairwise tree over the Hadamard-domain terms of the inner indices k0 ..
    k1 - 1 (an aligned block of ``block``) on the GPU: sums of 2^c consecutive terms."""
    from .cuda import kernels
    VA = sides[0].gpu_vectors(k0, k1)
    VB = None
    if len(sides) == 2:
        VB = sides[1].gpu_vectors(k0, k1)
        if VB.dtype != VA.dtype:            # one value type for the kernel: float64
            VA, VB = (sides[i].gpu_vectors(k0, k1, np.float64) for i in (0, 1))
    if GPU_FUSED_CONTIGUOUS:           # keys contiguous: (keys, vectors) views of C copies
        VA, VB = (V if V is None or V.strides[0] == V.itemsize or V.shape[0] < 2 else
                  kernels.transposed(V).T for V in (VA, VB))
    log2b = acc.b.bit_length() - 1
    gram = len(sides) == 1
    keyed = [kernels.fused_key_order(s.keys, log2b, acc.dtype, gram=gram) for s in sides]
    tables = [(*s.gpu_table(), s.gpu_positions(), *(s.gpu_codes() if key else (None,) * 5))
              for s, key in zip(sides, keyed)]
    return kernels.fused_terms(VA, tables[0], VB, None if VB is None else tables[1],
                               acc.reps, log2b, acc.dtype,
                               kernels.fused_group(log2b, acc.dtype, block, gram, keyed[0]))


def _pair_settings(be, method, dt, algorithm, stabilizer) -> bool:
    """Whether these settings let a compression add inner indices pair by pair (FP64 plain
    Folklore transforms, on the GPU or the compiled CPU engine)."""
    return method == "fwht" and (be.gpu or compiled.ENABLED) and np.dtype(dt) == np.float64 \
        and algorithm == "folklore" and not stabilizer


def _pair_accumulated(sides, be, method, dt, algorithm, stabilizer) -> bool:
    """Whether the compression will add the inner indices pair by pair (both factors sparse
    with integer values, FP64 plain Folklore transforms; the compiled CPU engine or the GPU's
    pair kernel): then more buckets cost no compression time (:func:`pagh_mm.auto.choose`'s
    ``cheap``), on either device alike."""
    if not _pair_settings(be, method, dt, algorithm, stabilizer) or \
            not all(s.sparse for s in sides):
        return False
    return all(s.integral() for s in sides)


def _gpu_pairs(sides, acc: Accumulator, be) -> bool:
    """Whether a GPU compression adds every inner index pair by pair (``pairs_direct`` in
    ``pagh_mm/cuda/scatter.cu``): sparse factors with integer values whose every sum stays an
    exact integer (as the CPU engine's direct pairs), FP64 plain Folklore transforms (whose
    route gives the same exact sums), and fewer pair updates than the transforms' butterflies
    (d per pair against 2 d b log2 b per inner index)."""
    if not be.gpu or acc.method != "fwht" or acc.dtype != np.float64 or \
            not all(s.sparse for s in sides):
        return False
    plan = acc.transform.plan
    if plan.stabilizer or plan.algorithm != "folklore" or plan.compute_dtype != plan.dtype:
        return False
    n = int(sides[0].M.indptr.size) - 1
    limit = n * 2 * acc.b * max(1, acc.b.bit_length() - 1)
    nnz = [int(s.M.nnz) for s in sides]
    # the pairs sum_k nnz(a_k) nnz(b_k) <= nnz(A) x the most values a vector of B can hold:
    # counted on the device only when that bound does not settle it
    if nnz[0] * min(nnz[-1], sides[-1].keys) > limit:
        counts = [s.M.indptr[1:] - s.M.indptr[:-1] for s in sides]
        if float((counts[0] * counts[-1]).astype(be.xp.float64).sum()) > limit:
            return False
    return compiled.exact_integers(sides, _abs_product_bound(sides))


#: What the inverse transform's sums are checked against (half of 2^53: a margin for the
#: rounding of the bound's own sums, and for a transformed part computed in float64).
INVERSE_EXACT_LIMIT = 2.0 ** 52


def _inverse_exact(sketch, direct, xp, bound: float | None = None) -> bool:
    """Whether the specification's inverse transform computes these sums exactly: the
    compression with some (or all) inner indices added pair by pair equals the NumPy engine's
    (which transforms every index and inverse-transforms the Hadamard-domain sum) when every
    sum of that inverse transform is an integer below 2^53.  After the Folklore stages of bits
    0 .. s - 1 the inverse's values are 2^s sum_{w_hi} +-c[w_hi, w_lo] (c the time-domain sums,
    w_lo the low s bits), bounded by 2^s times the largest sum of |c| over the buckets sharing
    their low s bits: O(b) per repetition, checked against INVERSE_EXACT_LIMIT on |sketch| +
    |direct| (which also bounds a part that went through the transforms).  Rows are folded
    INVERSE_EXACT_BYTES at a time on the CPU, on the GPU as many as a quarter of its free
    memory holds (the sketch may fill the device; each fold level costs a few launches per
    group of rows), with one synchronisation.  ``bound``: sum_k ||a_k||_1 ||b_k||_1 (or None),
    which bounds every row's sum of |c| (each product lands in one bucket): when 2 b bound is
    below the limit, so is everything the fold computes, and nothing is read."""
    rows, b = sketch.shape
    if bound is not None and 2.0 * b * bound < INVERSE_EXACT_LIMIT:
        return True
    most = INVERSE_EXACT_BYTES
    if xp is not np:                    # as many rows as a quarter of the free memory holds:
        most = max(most, (memory.available("gpu") or 0) // 4)   # four launches a row level
    group = max(1, most // (16 * max(1, b)))
    worst = []
    for r in range(0, rows, group):
        a = xp.abs(sketch[r:r + group])
        if direct is not sketch:
            a += xp.abs(direct[r:r + group])
        w = None
        while True:
            top = a.max(axis=1) * float(a.shape[1])              # 2^s x the largest fold
            w = top if w is None else xp.maximum(w, top)
            if a.shape[1] == 1:
                break
            h = a.shape[1] // 2
            a = a[:, :h] + a[:, h:]
        worst.append(w)
    return not worst or bool((xp.concatenate(worst) < INVERSE_EXACT_LIMIT).all())


#: Bytes of |sketch| folded at a time by :func:`_inverse_exact`.
INVERSE_EXACT_BYTES = 64 << 20


def _abs_product_bound(sides) -> float:
    """sum_k ||A[:, k]||_1 ||B[k, :]||_1 (a Gram product: sum_k ||x_k||_1^2) of sparse sides:
    a bound on every sum the compression forms before its inverse transform (the pairs' sums
    in a bucket, the forward transforms, their products and every Hadamard-domain partial
    sum); the inverse transform's own sums are checked on the result (:func:`_inverse_exact`)."""
    return sides[0].product_bound(sides[1] if len(sides) == 2 else sides[0])


def _block_cost(sides, B, per_index, value_bytes) -> int:
    """Bytes of temporaries of the largest aligned block of B inner indices (``value_bytes``
    per stored value)."""
    return B * per_index + sum(s.most_values(B) for s in sides) * value_bytes


# --- compression ----------------------------------------------------------------------------

def _draw(chosen, bits: int, hash: str, seed: int, be):
    """(rows of the sketch, the repetitions' hash parameters, those of the repetitions and
    bit sketches) for the chosen size, after checking the GPU's repetition limit and that
    d x b (and the bit sketches) fit at all, before anything is drawn or allocated."""
    reps, b = chosen.reps, chosen.buckets
    if be.gpu and reps > GPU_MAX_REPS:
        raise ValueError(f"reps={reps}: the GPU queries support at most {GPU_MAX_REPS} repetitions")
    every = reps + _decode.REPS * bits          # the repetitions and the bit sketches
    memory.check(every * (8 * 6 * b + (32768 if hash == "tabulation" else 64)),
                 f"{reps} repetitions of {b} buckets" +
                 (f" and {every - reps} bit sketches" if bits else ""),
                 "lower reps or buckets" + (", or decode=False" if bits else ""),
                 device="gpu" if be.gpu else "cpu")
    params = hashing.HashParams.draw(hash, seed, reps)
    return every, params, hashing.with_row_bits(params, _decode.REPS, bits) if bits else params


@dataclass(frozen=True)
class _Route:
    """How a compression adds its inner indices (:func:`_route`): the compiled CPU engine
    (or None), the GPU's pair kernel, the aligned block size, the fused GPU kernel, the live
    inner indices (None: all) and the first index of every block to visit."""

    fused: object
    gpu_pairs: bool
    block: int
    gpu_fused: bool
    live: object
    visit: object


def _route(sides, acc: Accumulator, n: int, m: int, p: int, be, memory_budget, pairs: bool,
           clock) -> _Route:
    """Every decision of :func:`_add_all` before it launches work: the routes, the memory plan
    (checked against the memory available) and the blocks to visit. Every read of the device
    the compression makes is here, so that a caller may make them ahead (a stream worker, on a
    stream of their own) while the device still computes the previous chunk."""
    fused = _fused_engine(sides, acc, n, m, p, be, memory_budget, pairs)
    gpu_pairs = pairs and _gpu_pairs(sides, acc, be)
    gpu_fused = _gpu_fused(sides, acc, be)
    clock("route")
    if fused:
        block = fused.block
    else:                       # pairs: blocks hold only their stored values' hashes
        block, _ = _plan_memory(sides, acc, n, m, p, be, memory_budget, gpu_pairs, gpu_fused)
        for s in sides:
            s.block_bounds(block)       # each block's stored-value range: no reads per block
    clock("plan")
    # (the pair kernel skips inner indices without values itself: no mask, no reads of it)
    live = None if gpu_pairs else _live(sides, n, be)
    visit = _blocks_to_visit(live, n, block, be)
    return _Route(fused, gpu_pairs, block, gpu_fused, live, visit)


def _add_all(sides, acc: Accumulator, n: int, m: int, p: int, be, memory_budget, every: int,
             log2b: int, pairs: bool, clock, progress, into=None, route: _Route | None = None):
    """Add every inner index of the product of ``sides`` to ``acc`` (begun here) by the routes
    this device and data take; returns the time-domain sums added pair by pair (None if no
    route did; ``pairs`` False: none may). ``into``: a GPU time-domain table (every, b) the
    pairs are added to (exact sums, so in any order) instead of a new one. ``route``: the
    decisions of :func:`_route`, made ahead by the caller (else made here)."""
    if route is None:
        route = _route(sides, acc, n, m, p, be, memory_budget, pairs, clock)
    fused, gpu_pairs, block, gpu_fused, live, visit = (
        route.fused, route.gpu_pairs, route.block, route.gpu_fused, route.live, route.visit)
    direct = None
    if gpu_pairs:
        direct = into if into is not None else be.xp.zeros((every, 1 << log2b), dtype=np.float64)
    acc.begin(block)
    k1 = 0
    clock("setup")
    for k0 in visit:
        k1 = min(n, k0 + block)
        if fused:               # scatter, transform, multiply and sum in one compiled kernel
            present = np.ones(k1 - k0, dtype=bool) if live is None else live[k0:k1]
            acc.sum.add_node(k0, fused.node(*(s.vectors(k0, k1) for s in sides),
                                            *(() if len(sides) == 2 else (None,)),
                                            present, k1 - k0))
            clock("fused")
            if progress:
                progress("inner", k1, n)
            continue
        if gpu_pairs:           # exact integer pairs straight into the time domain
            _gpu_pairs_add(sides, k0, k1, direct)
            clock("pairs")
            if progress:
                progress("inner", k1, n)
            continue
        if gpu_fused:           # sketch, transform and product of each index in one kernel
            nodes = _gpu_fused_terms(sides, acc, k0, k1, block)
            clock("fused")
            acc.sum.add_node(k0, _gpu_tree_sum(nodes))      # the tree above the kernel's
            del nodes
            clock("accumulate")
            if progress:
                progress("inner", k1, n)
            continue
        pos = None
        if live is not None:      # sparse: only the inner indices with values on both sides
            pos = be.xp.nonzero(live[k0:k1])[0]
            if int(pos.size) == k1 - k0:
                pos = None
        ks = None if pos is None else k0 + pos
        PA = sides[0].block(k0, k1, ks)
        PB = sides[1].block(k0, k1, ks) if len(sides) == 2 else None
        clock("scatter")
        acc.add_block(k0, PA, PB, clock, pos)
        del PA, PB
        if progress:
            progress("inner", k1, n)
    if progress and (n == 0 or k1 != n):
        progress("inner", n, n)             # the empty inner indices at the end
    return fused.direct() if fused else direct


def compress(A, B, *, buckets: int | str = AUTO, reps: int | str = AUTO, seed: int | None = None,
             k: int | None = None, threshold: float | None = None,
             failure_probability: float = certificate.DEFAULT_FAILURE_PROBABILITY,
             method: str = "fwht", dtype=None, algorithm: str = "folklore",
             stabilizer: str | None = None, hash: str | None = None, gram: bool | None = None,
             check_finite: bool = True, memory_budget: int | None = None,
             decode: bool | str = "auto", progress=None,
             profile: dict | None = None, devices=None) -> CompressedProduct:
    """Compress C = A @ B into ``reps`` Count-Sketches of ``buckets`` buckets (Pagh 2013).

    ``buckets="auto"`` (default) sizes the sketch for the query you state: ``k`` for the
    top-k entries, or ``threshold`` for the entries above it, so that a certified query
    (``verify=True``) with ``failure_probability`` succeeds in one scan (the rule and its
    assumptions: :mod:`pagh_mm.auto`); without either, 8 (m + p) buckets.  ``reps="auto"``
    is 5, or for a stated query of a large product compressed through the transforms the
    count of 5 .. 13 that costs the least (:data:`pagh_mm.auto.AUTO_REPS`).  What was chosen,
    and why: :attr:`CompressedProduct.chosen`.

    A (m x n) and B (n x p): NumPy/CuPy arrays (or array-likes NumPy accepts) or sparse
    matrices of any SciPy/cupyx format (converted once to CSC/CSR), on one device (the
    arrays decide where the work runs); integer, boolean or floating values, in any byte
    order.  Per repetition t the columns of A and rows of B are Count-Sketched with hash
    functions drawn from (``seed``, t) (``hash``: "multiply-add-shift" or "tabulation",
    both strongly universal), transformed by FWHTs of length ``buckets`` in ``dtype``
    (float64, float32, float16, bfloat16; default: float32 when both inputs are float32 (or
    narrower floats), else float64, but float32 for dense float64 factors that are not all
    integers when a stated query's automatic buckets allow it: their worst-case rounding,
    which certified queries add to their margin, at most a quarter of the noise,
    :func:`pagh_mm.auto.narrower_transforms`; ``chosen`` says so; unverified estimates then
    carry float32 rounding, far below the noise),
    multiplied and summed over the inner dimension in the Hadamard domain, and
    transformed back once.  ``method="fft"`` uses Pagh's cyclic convolution
    (h1 + h2 mod b) through numpy/cupy.fft instead.

    Reproducibility: the inner dimension is summed in one fixed order (a pairwise tree
    over the inner index, :mod:`pagh_mm.reduction`), so the same inputs, seed and
    parameters give the same bits whatever ``memory_budget`` and on the CPU or the GPU
    (``method="fwht"``; the FFT libraries of the two devices round differently).

    Memory: the inner dimension is processed in aligned blocks whose temporaries stay
    within ``memory_budget`` bytes (default 256 MiB on the CPU, min(2 GiB, free / 8) on
    the GPU, raised to what one inner index needs); what the whole call needs is checked
    against the memory available first (``fwht_gpu.memory.InsufficientMemoryError``,
    a ``MemoryError`` naming need, availability and what to change).  Sparse inputs
    cost O(reps nnz) time and memory, whatever their number of empty rows or columns.

    Gram products (``gram``; None: detected when ``A`` is a transposed view of ``B``, as
    ``compress(X.T, X)``): see :func:`compress_gram`.  ``hash`` None: "multiply-add-shift",
    or "polynomial" for a Gram product.

    ``decode``: also make the bit sketches that let verified queries decode the rows of
    the large entries instead of scanning for them (:mod:`pagh_mm.decode`: bit_length(m - 1)
    more sketches of the first repetition, in the same pass; not for Gram products); "auto":
    for products of sparse factors with at least 2**38 entries on the GPU, 2**34 on the CPU
    (:data:`pagh_mm.decode.AUTO_ENTRIES`: where it was measured to pay).

    ``devices`` (None: where A and B are): GPU ordinals (``[0, 1]``) or a count of GPUs to
    compress on, the factors staying where they are (host arrays, memory-mapped files, SciPy
    sparse, larger than a device's memory) and streamed to the GPUs a chunk of inner indices
    at a time (:mod:`pagh_mm.stream`); the same bits as one device.

    Costs O(reps (nnz(A) + nnz(B)) + reps n b log b).  ``seed``: any non-negative
    integer (None: a random one).  ``progress(stage, done, total)`` is called after
    each block.  ``profile``, a dict, receives the seconds spent in each stage
    (synchronizing the GPU between stages).
    """
    if devices is not None:
        if profile is not None:
            raise ValueError("profile= is not available with devices=: the chunks' stages "
                             "overlap; leave one of them out")
        from .stream import compress as streamed
        return streamed(A, B, devices=devices, buckets=buckets, reps=reps, seed=seed, k=k,
                        threshold=threshold, failure_probability=failure_probability,
                        method=method, dtype=dtype, algorithm=algorithm, stabilizer=stabilizer,
                        hash=hash, gram=gram, check_finite=check_finite,
                        memory_budget=memory_budget, decode=decode, progress=progress)
    gram = _detect_gram(A, B, gram, method, hash)
    if hash is None:
        hash = "polynomial" if gram else hashing.DEFAULT_FAMILY
    A, B, be, dt, log2b, reps, memory_budget = _validate(
        A, B, buckets, reps, method, dtype, algorithm, stabilizer, hash, check_finite, memory_budget)
    clock = _Clock(be, profile)
    seed = hashing.check_seed(seed)
    _check_query_hint(k, threshold, failure_probability)
    decode = _decode.check(decode)
    diagonal = _gram_diagonal(A, B, be, method, hash) if gram else None
    m, n = A.shape
    p = B.shape[1]
    bits = _decode.row_bits(m) if _decode.wanted(decode, _be.is_sparse(A) and _be.is_sparse(B),
                                                  gram, m, p, be.gpu) else 0
    sides = (Side(A, 1, None, 0, be),) if gram else (Side(A, 1, None, 0, be), Side(B, 2, None, 0, be))
    chosen = auto.choose(A, B, be, buckets, reps, k=k, threshold=threshold,
                         delta=failure_probability, seed=seed, diagonal=diagonal,
                         cheap=_pair_accumulated(sides, be, method, dt, algorithm, stabilizer),
                         decoding=bits > 0)
    dt, chosen, norms = _narrowed(dtype, dt, A, B, be, chosen, method, algorithm, stabilizer,
                                  gram, failure_probability, None if diagonal is None else
                                  (diagonal, diagonal))
    clock("choose")
    log2b, reps = chosen.buckets.bit_length() - 1, chosen.reps
    every, params, made = _draw(chosen, bits, hash, seed, be)
    for s in sides:
        s.hash_with(made, log2b)
    clock("sides")

    def one_pass(pairs: bool):
        """The sketch (every repetition and bit sketch) and the time-domain sums added pair by
        pair (None when no route added pairs; ``pairs`` False: none may)."""
        acc = Accumulator(method, every, log2b, dt, algorithm, stabilizer, be.xp)
        direct = _add_all(sides, acc, n, m, p, be, memory_budget, every, log2b, pairs, clock,
                          progress)
        sketch = acc.finish(direct)
        clock("inverse")
        return sketch, direct

    sketch, direct = one_pass(True)
    if direct is not None and not _inverse_exact(sketch, direct, be.xp, _abs_product_bound(sides)):
        sketch, _ = one_pass(False)     # the transforms' own sums would round: theirs
    bit_sketch = _decode.BitSketch(_decode.REPS, bits, sketch[reps:]) if bits else None
    out = CompressedProduct(sketch[:reps], params, (m, p), log2b, method, _fdt.short_name(dt),
                            algorithm, stabilizer, be, [(A, B)], chosen, diagonal, bit_sketch)
    return out.keep_norms(norms)


def _narrowed(dtype, dt, A, B, be, chosen, method: str, algorithm: str, stabilizer, gram: bool,
              delta: float, norms=None, integral: bool | None = None):
    """(the transforms' dtype, the choice, the factors' squared row and column norms or None):
    float32 where the automatic rule narrows the float64 transforms of dense floating
    factors that are not all integers (``dtype`` None; Folklore FWHTs without a stabilizer;
    a stated query; :func:`pagh_mm.auto.narrower_transforms`), else ``dt`` and ``chosen``.
    ``norms``: A's squared row norms and B's squared column norms when formed elsewhere (a
    Gram product's diagonal, the chunks' pass), ``integral`` likewise; the norms are kept by
    the product for :meth:`CompressedProduct.rounding`."""
    metas = [getattr(M, "_meta", M) for M in (A, B)]          # (dask arrays: their blocks)
    if dtype is not None or np.dtype(dt) != np.float64 or method != "fwht" or \
            algorithm != "folklore" or stabilizer is not None or \
            any(_be.is_sparse(M) for M in metas) or \
            not all(np.dtype(M.dtype).kind == "f" for M in metas) or chosen.cut is None:
        return dt, chosen, None
    if integral is None:
        integral = all(_integral(be, M) for M in ((A,) if gram else (A, B)))
    if integral:                        # integer-valued data keep exact integer sketches
        return dt, chosen, None
    if norms is None:
        from .exact import factor_norms
        norms = factor_norms(be, A, B, gram)
    chosen = auto.narrower_transforms(A, B, be, chosen, delta=delta, gram=gram,
                                      norms2=tuple(float(v.sum()) for v in norms))
    return (np.dtype(np.float32) if chosen.narrowed else dt), chosen, norms


def _integral(be, M) -> bool:
    """Whether every value of a dense factor is an integer (read a block of rows at a time,
    stopping at the first block that is not)."""
    xp = be.xp
    rows = max(1, (64 << 20) // (8 * max(1, M.shape[1])))
    for r0 in range(0, M.shape[0], rows):
        blk = xp.asarray(M[r0:r0 + rows])
        if not bool((xp.trunc(blk) == blk).all()):
            return False
    return True


def _detect_gram(A, B, gram, method: str, hash) -> bool:
    """``gram`` checked; None: whether A is a transposed view of B and the settings allow a
    Gram sketch (FWHT, a 4-independent or default hash)."""
    if gram is None:
        return method == "fwht" and hash in (None,) + hashing.FOUR_INDEPENDENT and \
            _is_transpose(A, B)
    if not isinstance(gram, (bool, np.bool_)):
        raise TypeError(f"gram={gram!r} must be True, False or None (detect A = B.T)")
    return bool(gram)


def compress_gram(X, **options) -> CompressedProduct:
    """Compress the Gram product C = X.T @ X (covariances, co-occurrences, similarities of
    the columns of the n x m ``X``; center or normalize the columns first for covariances
    or cosines).  The same as ``compress(X.T, X, gram=True, **options)``.

    One hash function on both sides (the 4-independent "polynomial" family: the variance
    bound then holds for off-diagonal entries): the two Count-Sketches of each inner index
    are equal, so each needs one forward transform (its square is the Hadamard-domain
    term), and every diagonal entry falls in bucket 0 with sign +1, leaving the other
    buckets.  An off-diagonal estimate is s(i) s(j) c_t[h(i) XOR h(j)] / 2 (the bucket
    holds C[i, j] and C[j, i]), with variance at most ||C - diag(C)||_F^2 / (2 b) per
    repetition; a repetition with h(i) = h(j) sees only bucket 0 and is left out of the
    median.  The diagonal is computed exactly (O(nnz(X))) and reported as it is; queries
    take ``exclude_diagonal=True`` to leave it out."""
    if isinstance(X, (list, tuple)):
        X = np.asarray(X)
    if getattr(X, "ndim", None) != 2:
        raise ValueError("X must be a 2-d matrix (n samples x m features)")
    return compress(X.T, X, gram=True, **options)


def _is_transpose(A, B) -> bool:
    """Whether ``A`` is the transpose of ``B`` by construction (a view of the same memory,
    as ``X.T`` and ``X``): checked without reading the values."""
    if getattr(A, "shape", None) != tuple(reversed(getattr(B, "shape", ()))) or A.ndim != 2:
        return False
    if _be.is_sparse(A) and _be.is_sparse(B):
        pairs = {("csc", "csr"), ("csr", "csc")}
        return (A.format, B.format) in pairs and all(
            _address(getattr(A, a)) == _address(getattr(B, a)) is not None and
            getattr(A, a).shape == getattr(B, a).shape for a in ("data", "indices", "indptr"))
    if _be.is_sparse(A) or _be.is_sparse(B):
        return False
    if getattr(A, "dtype", None) != getattr(B, "dtype", None):
        return False
    return _address(A) == _address(B) is not None and \
        tuple(A.strides) == tuple(reversed(B.strides))


def _address(a):
    """The address of an array's first element (NumPy or CuPy), None for other objects."""
    face = getattr(a, "__cuda_array_interface__", None) or getattr(a, "__array_interface__", None)
    return face["data"][0] if face else None


def _gram_diagonal(A, B, be, method: str, hash: str):
    """Check that a Gram sketch can be made of A @ B (A = B.T, the FWHT, a 4-independent
    hash family) and return the exact diagonal of the product."""
    if method != "fwht":
        raise ValueError("gram=True needs method='fwht' (the XOR convolution sends the diagonal "
                         "to bucket 0; the cyclic one does not)")
    if hash not in hashing.FOUR_INDEPENDENT:
        raise ValueError(f"gram=True with hash={hash!r}: one hash function on both sides needs a "
                         f"4-independent family; use hash={hashing.FOUR_INDEPENDENT[0]!r} (the "
                         "default for Gram products)")
    if A.shape != B.shape[::-1]:
        raise ValueError(f"gram=True needs A = B.T; got shapes {A.shape} and {B.shape}")
    if not _is_transpose(A, B) and not _equal_transpose(A, B, be):
        raise ValueError("gram=True needs A = B.T (a Gram product X.T @ X); A differs from B.T")
    from .exact import gram_diagonal
    return gram_diagonal(be, A)


def _equal_transpose(A, B, be) -> bool:
    if _be.is_sparse(A) or _be.is_sparse(B):
        As = A if _be.is_sparse(A) else be.sp.csr_matrix(A)
        Bs = B if _be.is_sparse(B) else be.sp.csr_matrix(B)
        return (As != Bs.T).nnz == 0
    step = max(1, (4 << 20) // max(1, A.shape[1]))
    return all(bool((A[r:r + step] == B[:, r:r + step].T).all())
               for r in range(0, A.shape[0], step))


def _check_query_hint(k, threshold, failure_probability) -> None:
    """Validate the query a caller states to size the sketch (compress's k, threshold)."""
    if k is not None:
        _int_arg(k, "k", 1, " (the number of largest entries you will ask for)")
    if threshold is not None:
        if isinstance(threshold, (bool, np.bool_)) or not isinstance(threshold, numbers.Real) \
                or not np.isfinite(threshold) or threshold == 0:
            raise ValueError(f"threshold={threshold!r} must be a finite non-zero number")
    if k is not None and threshold is not None:
        raise ValueError("give k= or threshold= (the query the sketch is sized for), not both")
    if isinstance(failure_probability, (bool, np.bool_)) or not isinstance(
            failure_probability, numbers.Real) or not 0 < failure_probability < 1:
        raise ValueError(f"failure_probability={failure_probability!r} must be a number in (0, 1)")


def _live(sides, n: int, be):
    """Per inner index: whether both A's column and B's row hold a value (None: all do, as
    for dense factors).  Inner indices without are exact zeros of the sum: never computed."""
    masks = [m for m in (s.nonempty() for s in sides) if m is not None]
    if not masks:
        return None
    live = masks[0] if len(masks) == 1 else masks[0] & masks[1]
    return None if bool(live.all()) else live


def _blocks_to_visit(live, n: int, block: int, be):
    """First inner index of every block with at least one live inner index."""
    if live is None or n == 0:
        return range(0, n, block)
    counts = be.xp.add.reduceat(live.astype(be.xp.int32), be.xp.arange(0, n, block)) \
        if not be.gpu else live.astype(be.xp.int32)[: n // block * block].reshape(-1, block).sum(1)
    if be.gpu and n % block:
        counts = be.xp.concatenate([counts, live[n // block * block:].sum(keepdims=True)])
    return (be.asnumpy(be.xp.nonzero(counts)[0]) * block).tolist()


class _Clock:
    """Adds the time since the previous call to profile[stage] (no-op without a profile)."""

    def __init__(self, be, profile):
        import time
        self.be, self.profile, self.time = be, profile, time.perf_counter
        self.t = self.time() if profile is not None else 0.0

    def __call__(self, stage: str) -> None:
        if self.profile is None:
            return
        if self.be.gpu:
            self.be.xp.cuda.Device().synchronize()
        now = self.time()
        self.profile[stage] = self.profile.get(stage, 0.0) + now - self.t
        self.t = now


def approx_matmul(A, B, *, buckets: int | None = None, reps: int | None = None,
                  seed: int | None = None, **options):
    """Dense estimate of ``A @ B`` in the input's array type (NumPy or CuPy).

    Defaults (only when the argument is None): ``buckets = default_buckets(m, p)`` (a power
    of two >= 8 (m + p)), ``reps = 5``; given values are validated as by :func:`compress`.
    One repetition's error on an entry has standard deviation at most
    ||A @ B||_F / sqrt(buckets); the median of d repetitions removes it unless more than
    half collide with other large entries.  For a product with N non-zeros, an entry is
    wrong with probability about C(d, (d+1)/2) (N / buckets)^((d+1)/2) (10 (N/b)^3 for
    d = 5): choose buckets well above N for an exact result.  Other options as :func:`compress`.
    """
    if buckets is None:
        if np.ndim(A) != 2 or np.ndim(B) != 2:
            raise ValueError(f"A and B must be 2-d matrices, got {np.ndim(A)} and {np.ndim(B)} "
                             "dimensions")
        m, p = np.shape(A)[0], np.shape(B)[1]
    cp_ = compress(A, B, buckets=default_buckets(m, p) if buckets is None else buckets,
                   reps=5 if reps is None else reps, seed=seed, **options)
    return cp_.to_dense()
