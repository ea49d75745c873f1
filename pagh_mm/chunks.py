"""A compression as a sum over inner chunks: the work of one chunk, and the flow around it.

The sketch of A @ B is a sum over the inner dimension. Chunks of 2**j consecutive inner
indices (the last may be shorter) are aligned nodes of the pairwise tree of
:mod:`pagh_mm.reduction`, so a chunk's sum can be formed anywhere (a dask task, another GPU,
a block streamed from the host) and the chunks' sums added in the tree give the bits of
:func:`pagh_mm.compress` of the whole arrays. :func:`compress` is that flow: the chunks'
statistics (integrality and the pair bound of sparse factors, the shares of the ||AB||_F
estimate for automatic buckets), the choice of the sketch, the chunks' sums, and the finish
(the inverse transform, its exactness check, the Gram diagonal). The statistics are a pass
of their own only where the choice of the sketch needs them (automatic buckets for a stated
query); otherwise the sums pass gathers them, adding pairs speculatively, and is made again
without pairs only when the gathered statistics forbid the pairs some chunk added.
:mod:`pagh_mm.dask` and :mod:`pagh_mm.stream` give it the chunks' work to run where they
run it.
"""
from __future__ import annotations

import contextlib
import math
import threading
from dataclasses import dataclass, replace
from functools import partial
from typing import Callable

import numpy as np

import fwht_gpu.dtypes as _fdt

from . import auto, compiled, exact, matmul, reduction
from . import backend as _be
from . import decode as _decode
from .compressed import CompressedProduct
from .convolution import Accumulator
from .sketch import Side, canonical

#: One chunk at a time per process runs the compiled CPU engine (its own threads use the
#: cores; numba's workqueue threading layer also forbids concurrent calls).
ENGINE = threading.Lock()


def _lock(be):
    return contextlib.nullcontext() if be.gpu else ENGINE


def matrices(a, b, check_finite: bool = False):
    """(A, B, backend) of one chunk, in the layouts the compression reads (``check_finite``:
    NaN and Inf refused, naming the factor)."""
    be = _be.for_arrays(a, b)
    a = canonical(matmul._as_matrix(a, "A", be), 1, be)
    b = canonical(matmul._as_matrix(b, "B", be), 2, be)
    if check_finite:
        matmul._check_finite(a, "A", be, b)
    return a, b, be


def _pair(a, b, gram: bool):
    """The chunk's (A part, B part): ``gram``: ``a`` is the chunk of X (its rows are inner
    indices), ``b`` unused."""
    return (a.T, a) if gram else (a, b)


def _pair_statistics(sides) -> tuple:
    """(every stored value an integer, sum_k |a_k|_1 |b_k|_1) of one chunk's sides: what
    decides, over all chunks, whether pairs may be added (False, inf unless all sparse)."""
    sparse = all(s.sparse for s in sides)        # pairs (and so these two) need sparse sides
    integral = sparse and compiled.exact_integers(sides, 0.0)
    bound = matmul._abs_product_bound(sides) if sparse else math.inf
    return integral, bound


def pairs_allowed(stats) -> bool:
    """Whether the chunks' statistics ``stats`` [(integral, bound)], in chunk order, let pairs
    be added: every value an integer and the bounds' sum (in that order) below 2**53, so that
    pair sums are exact and any mix of routes gives the specification's bits."""
    integral = bool(stats) and all(s[0] for s in stats)
    bound = sum(s[1] for s in stats) if stats else 0.0
    return integral and bound < 2.0 ** 53


def chunk_stats(a, b, seed: int, check_finite: bool, estimate: bool, gram: bool):
    """(every stored value an integer, sum_k |a_k|_1 |b_k|_1, the chunk's share G A_c B_c H^T of
    the Frobenius estimate (None unless ``estimate``), its share of the Gram diagonal (None
    unless ``gram``), (the squared row norms of A_c, the column norms of B_c, whether all
    their values are integers) of dense factors with ``estimate`` (else None: what
    :func:`pagh_mm.matmul._narrowed` weighs)) of one inner chunk."""
    a, b, be = matrices(*_pair(a, b, gram), check_finite)
    sides = (Side(a, 1, None, 0, be),) if gram else (Side(a, 1, None, 0, be), Side(b, 2, None, 0, be))
    integral, bound = _pair_statistics(sides)
    norms2 = None
    with _lock(be):
        part = auto.frobenius_sketch(a, b, be, seed) if estimate else None
        diagonal = exact.gram_diagonal(be, a) if gram else None
        if estimate and not any(s.sparse for s in sides):
            norms2 = exact.factor_norms(be, a, b, gram) + \
                (all(matmul._integral(be, M) for M in ((a,) if gram else (a, b))),)
    return integral, bound, part, diagonal, norms2


@dataclass(frozen=True)
class Plan:
    """What every chunk's sums are made with (picklable: dask ships it to the workers)."""

    params: object          # the hash parameters of the repetitions and bit sketches
    log2b: int
    every: int              # rows of the sketch: repetitions and bit sketches
    method: str
    dt: object
    algorithm: str
    stabilizer: str | None
    memory_budget: int | None
    gram: bool
    check_finite: bool      # the statistics pass did not check the values: check them here
    diagonal: bool          # ... nor form the Gram diagonal: form its share here
    stats: bool = False     # ... nor gather the pair statistics: gather them here


@dataclass
class Prepared:
    """One chunk's work up to its first launch (:func:`chunk_prepare`): its factors, sides,
    statistics, accumulator and route, every read of the device made."""

    a: object
    b: object
    be: object
    sides: tuple
    stats: list | None
    acc: Accumulator | None
    route: object
    diagonal: object = None


def chunk_prepare(a, b, plan: Plan, pairs: bool, cache: dict | None = None) -> Prepared:
    """The part of :func:`chunk_sums` that reads the device (the finiteness check, the
    statistics, the routes and the memory plan): a GPU stream worker makes it on a stream of
    its own once the chunk's copy is queued, while the compute stream still adds the previous
    chunk, so that no read waits for that chunk. ``cache``: as :func:`chunk_sums`' (the GPU
    sides' distinct hash functions)."""
    a, b, be = matrices(*_pair(a, b, plan.gram), plan.check_finite)
    sides = (Side(a, 1, plan.params, plan.log2b, be),) if plan.gram else \
        (Side(a, 1, plan.params, plan.log2b, be), Side(b, 2, plan.params, plan.log2b, be))
    # (before the sums' buffers: its temporaries are those of the routes' own check)
    stats = [_pair_statistics(sides)] if plan.stats else None
    if cache is not None and be.gpu:
        for s in sides:
            s.share_distinct(cache)
    acc = Accumulator(plan.method, plan.every, plan.log2b, plan.dt, plan.algorithm,
                      plan.stabilizer, be.xp)
    with _lock(be):             # (the CPU engine's memory check sees no other chunk's engine)
        route = matmul._route(sides, acc, a.shape[1], a.shape[0], b.shape[1], be,
                              plan.memory_budget, pairs, lambda stage: None)
        # the Gram diagonal's share reads the device: here too
        diagonal = exact.gram_diagonal(be, a) if plan.gram and plan.diagonal else None
    if cache is not None and be.gpu:
        for s in sides:
            s.share_distinct(cache)
    return Prepared(a, b, be, sides, stats, acc, route, diagonal)


def chunk_launch(prep: Prepared, plan: Plan, pairs: bool, cache: dict | None = None):
    """The rest of :func:`chunk_sums` after :func:`chunk_prepare`: the chunk's sums (on the GPU
    queued on the current stream, with no read of the device); the same return value."""
    a, b, be, sides, acc = prep.a, prep.b, prep.be, prep.sides, prep.acc
    dense = [s for s in sides if not s.sparse] if cache is not None else []
    for s in dense:
        if (s.which, s.keys) in cache:
            s.adopt(cache[s.which, s.keys])
    with _lock(be):
        into = cache.get("direct") if cache is not None and be.gpu else None
        direct = matmul._add_all(sides, acc, a.shape[1], a.shape[0], b.shape[1], be,
                                 plan.memory_budget, plan.every, plan.log2b, pairs,
                                 lambda stage: None, None, into, prep.route)
    diagonal = prep.diagonal
    if diagonal is not None and be.gpu:     # made on the stream of the prepare: a copy on
        diagonal = diagonal.copy()          # this one outlives it in the caller's sums
    for s in dense:
        cache[s.which, s.keys] = s
    if cache is not None and be.gpu and direct is not None:
        cache["direct"] = direct            # the next chunks' pairs go into the same table
    total = acc.sum.total()
    prep.acc = None                         # (its pending nodes: not kept with the chunk)
    return total, direct, diagonal, prep.stats


def chunk_sums(a, b, plan: Plan, pairs: bool, cache: dict | None = None):
    """(the chunk's Hadamard-domain pairwise sum or None, its time-domain pair sums or None,
    its share of the Gram diagonal or None, [its pair statistics (:func:`chunk_stats`'s
    first two)] or None): what :func:`pagh_mm.compress` adds for these inner indices (the
    statistics where ``plan.stats``). ``pairs`` False: no route adds pairs; True: the routes
    that add pairs where this chunk's own values allow (the chunks' statistics decide
    afterwards whether the sums stand). ``cache``: a dict kept across the
    chunks of one plan on one device, where dense sides leave their per-key hash tables for
    the next chunk (they do not depend on the inner indices), and the GPU's pair route its
    time-domain table: the next chunks add to it (then the returned table is that one).
    :func:`chunk_prepare` then :func:`chunk_launch`."""
    return chunk_launch(chunk_prepare(a, b, plan, pairs, cache), plan, pairs, cache)


def plus_parts(left, right):
    """Two adjacent nodes of the tree: Hadamard-domain sums added (absent ones skipped), the
    exact time-domain pair sums in any order, the diagonal shares added, the lists of the
    chunks' statistics joined (left first: chunk order)."""
    return tuple(reduction._plus(x, y) for x, y in zip(left, right))


def tree(parts, combine):
    """The pairwise tree over ``parts`` (chunk nodes, delayed or not), level by level, an
    unpaired last part moving up unchanged: the reduction module's order."""
    level = list(parts)
    while len(level) > 1:
        nxt = [combine(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def gram_diagonal(be, A, total, exact_of):
    """The exact Gram diagonal from the tree sum ``total`` of the chunks' shares (the
    single-process bits); integer sums beyond 2**53 recomputed exactly by ``exact_of(r, c)``
    from the columns of X they belong to."""
    xp = be.xp
    if total is None:
        return xp.zeros(A.shape[0], dtype=xp.float64)
    out = xp.asarray(total)
    if np.dtype(A.dtype).kind in "biu":
        big = xp.nonzero(out > exact._EXACT_FLOAT)[0]
        if big.size:
            out[big] = exact_of(big, big)
    return out


def compress(A, B, be, *, sparse: bool, gram: bool, buckets, reps, seed: int, k, threshold,
             failure_probability: float, method: str, dt, algorithm: str, stabilizer, hash: str,
             check_finite: bool, memory_budget, decode,
             stats: Callable[[Callable], list], sums: Callable[[Plan, bool], tuple],
             exact_of: Callable, dtype=None) -> CompressedProduct:
    """The compression of A @ B from its chunks (validated arguments; ``A``, ``B`` the
    factors the result keeps for verification, shapes and dtypes read from them).

    ``stats(fn)``: [fn(a, b) for every chunk (a, b)], fn a partial of :func:`chunk_stats`;
    ``sums(plan, pairs)``: the tree sum (:func:`plus_parts`) of :func:`chunk_sums` over the
    chunks (its statistics in chunk order), (None, None, None, None) for none;
    ``exact_of(r, c)``: exact entries of the product (the Gram diagonal's large integers).
    ``dtype``: the caller's argument (None: the rule may narrow ``dt``, as compress's).

    The statistics pass runs only where the choice of the sketch needs it: automatic buckets
    for a stated query. Otherwise the sums pass checks the values, forms the Gram diagonal
    and, for sparse factors, gathers the pair statistics while it adds pairs where each
    chunk's own values allow them. The gathered statistics then decide as the statistics
    pass would have; where they forbid pairs that some chunk added (values not all integers,
    or the bound at 2**53 or more), the sums pass is made again without pairs, as it would
    have been. Where no chunk added pairs, the sums are those of a pass without pairs. So
    the factors are read once, but in that rare case."""
    m, p = A.shape[0], B.shape[1]
    bits = _decode.row_bits(m) if _decode.wanted(decode, sparse, gram, m, p, be.gpu) else 0
    estimate = matmul._is_auto(buckets) and (k is not None or threshold is not None)
    diagonal = None
    integral, allowed, F, bound = False, False, None, None
    ran = estimate                  # the statistics pass; otherwise the sums pass gathers them
    fold = sparse and not ran       # (the choice below needs neither integral nor F then)
    if ran:
        parts = stats(partial(chunk_stats, seed=seed, check_finite=check_finite,
                              estimate=estimate, gram=gram))
        integral = bool(parts) and all(s[0] for s in parts)
        allowed = pairs_allowed(parts)
        bound = sum(s[1] for s in parts)
        if gram:
            diagonal = gram_diagonal(be, A, tree([be.xp.asarray(s[3]) for s in parts],
                                                 lambda x, y: x + y) if parts else None, exact_of)
        if estimate:                    # the chunks' shares of G A B, summed in order
            F = auto.frobenius_of(sum(s[2] for s in parts), seed, diagonal, be) \
                if parts else 0.0
    cheap = integral and sparse and matmul._pair_settings(be, method, dt, algorithm, stabilizer)
    chosen = auto.choose(A, B, be, buckets, reps, k=k, threshold=threshold,
                         delta=failure_probability, seed=seed, diagonal=diagonal, cheap=cheap,
                         decoding=bits > 0, frobenius=F)
    norms = None
    if ran and parts and all(s[4] is not None for s in parts):
        norms = tuple(tree([be.xp.asarray(s[4][i]) for s in parts], lambda x, y: x + y)
                      for i in (0, 1))          # (summed in chunk order)
        dt, chosen, norms = matmul._narrowed(dtype, dt, A, B, be, chosen, method, algorithm,
                                             stabilizer, gram, failure_probability, norms,
                                             all(s[4][2] for s in parts))
    log2b, reps = chosen.buckets.bit_length() - 1, chosen.reps
    every, params, made = matmul._draw(chosen, bits, hash, seed, be)
    plan = Plan(made, log2b, every, method, dt, algorithm, stabilizer, memory_budget, gram,
                check_finite and not ran, gram and not ran, fold)
    # pair sums are exact, so any mix of routes gives the specification's bits, only when
    # every value is an integer and every sum before the inverse transform stays below 2**53
    # (pairs_allowed); a pass in which no chunk added pairs is a pass without pairs
    if fold:                        # pairs where each chunk allows them; then the decision
        total, direct, share, seen = sums(plan, True)
        bound = sum(s[1] for s in seen or [])
        if direct is not None and not pairs_allowed(seen or []):
            # some chunk added pairs that the whole forbids: the pass without pairs (the
            # values checked, the diagonal formed already)
            total, direct, _, _ = sums(replace(plan, check_finite=False, diagonal=False,
                                               stats=False), False)
    else:
        total, direct, share, _ = sums(plan, allowed)
    if gram and not ran:
        diagonal = gram_diagonal(be, A, share, exact_of)
    acc = Accumulator(method, every, log2b, dt, algorithm, stabilizer, be.xp)
    sketch = acc.finish(direct, total=total)
    if direct is not None and not matmul._inverse_exact(sketch, direct, be.xp, bound):
        total, _, _, _ = sums(replace(plan, check_finite=False, diagonal=False, stats=False),
                              False)        # the transforms' own sums would round: theirs
        sketch = acc.finish(None, total=total)
    bit_sketch = _decode.BitSketch(_decode.REPS, bits, sketch[reps:]) if bits else None
    out = CompressedProduct(sketch[:reps], params, (m, p), log2b, method, _fdt.short_name(dt),
                            algorithm, stabilizer, be, [(A, B)], chosen, diagonal, bit_sketch)
    return out.keep_norms(norms)

