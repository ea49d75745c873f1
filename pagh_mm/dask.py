"""Compressed products of dask arrays (the optional extra ``pagh-mm[dask]``).

The sketch of A @ B is a sum over the inner dimension. :func:`compress` makes one dask task
per inner chunk; each task compresses its chunk where it lives, on whatever scheduler is
active: threads, processes or a ``dask.distributed`` cluster. The chunks' Hadamard-domain
sums are then added in the pairwise tree of :mod:`pagh_mm.reduction`. Inner chunks of one
power of two (the last may be shorter) are aligned nodes of that tree. So the sketch has
the bits of :func:`pagh_mm.compress` of the whole arrays for the same seed, buckets and
repetitions, on any cluster and worker count.

Verified queries on the result fetch only the rows of A and the columns of B they need
(:func:`exact_pair`). An automatic sketch that a certified query grows is rebuilt here too.

Blocks may be NumPy arrays or SciPy sparse matrices (``dask.array.from_array(M,
chunks=..., asarray=False)``), and CuPy arrays for GPU workers. Gram products
(:func:`compress_gram`, X chunked along its rows, the samples) are made the same way, their
exact diagonal from the chunks' pairwise sums.
"""
from __future__ import annotations

import math
import threading

import numpy as np

import fwht_gpu.dtypes as _fdt

from . import auto, certificate, compiled, exact, hashing, matmul, query, reduction
from . import backend as _be
from . import decode as _decode
from .compressed import CompressedProduct
from .convolution import Accumulator
from .sketch import Side, canonical


def _dask():
    try:
        import dask
        import dask.array as da
    except ImportError as exc:                      # pragma: no cover - the extra is missing
        raise ImportError("pagh_mm.dask needs dask: pip install 'pagh-mm[dask]'") from exc
    return dask, da


def inner_chunk(A, B) -> int:
    """The inner chunk size c of dask arrays A (m x n) and B (n x p): A's column chunks and
    B's row chunks must be equal, each c = 2**j but the last (at most c); or one chunk."""
    ca, cb = tuple(A.chunks[1]), tuple(B.chunks[0])
    if ca != cb:
        raise ValueError(f"A's column chunks {ca[:4]}... and B's row chunks {cb[:4]}... differ: "
                         "rechunk both along the inner dimension with the same power of two, "
                         "e.g. A.rechunk({1: 4096}) and B.rechunk({0: 4096})")
    c = ca[0]
    if len(ca) == 1:                    # one chunk: its own tree is the whole sum's
        return c
    if c & (c - 1) or any(x != c for x in ca[:-1]) or ca[-1] > c:
        fix = 1 << max(0, c.bit_length() - 1)
        raise ValueError(f"the inner chunks {ca[:4]}... must be one power of two (the last may "
                         f"be smaller), so that each is a node of the summation tree: rechunk "
                         f"with A.rechunk({{1: {fix}}}) and B.rechunk({{0: {fix}}})")
    return c


def _whole(M):
    """The dask array ``M`` as one block (delayed)."""
    return M.rechunk({0: -1, 1: -1}).to_delayed().ravel()[0]


def _slabs(A, B, c: int, gram: bool):
    """Per inner chunk, (A's columns, B's rows) as single blocks (delayed); ``gram``: (the
    chunk of X = B, None)."""
    n = B.shape[0]
    return [(_whole(B[k0:k0 + c, :]), None) if gram else
            (_whole(A[:, k0:k0 + c]), _whole(B[k0:k0 + c, :])) for k0 in range(0, n, c)]


def _sliceable(M):
    """M with sparse blocks that dask can slice and concatenate (CSR; CSC and LIL as they
    are): COO, DIA, BSR and DOK blocks are converted block by block."""
    meta = M._meta
    if _be.is_sparse(meta) and getattr(meta, "format", "csr") not in ("csr", "csc", "lil"):
        return M.map_blocks(lambda blk: blk.tocsr(), dtype=M.dtype, meta=meta.tocsr())
    return M


def _matrices(a, b):
    be = _be.for_arrays(a, b)
    a, b = matmul._as_matrix(a, "A", be), matmul._as_matrix(b, "B", be)
    return canonical(a, 1, be), canonical(b, 2, be), be


#: One task at a time per process runs the compiled engine (its own threads use the cores;
#: numba's workqueue threading layer also forbids concurrent calls).
_ENGINE = threading.Lock()


def _chunk_stats(a, b, seed, check_finite: bool, estimate: bool, gram: bool):
    """(every stored value an integer, sum_k |a_k|_1 |b_k|_1, the chunk's share G A_c B_c of
    the Frobenius estimate (None unless ``estimate``), its share of the Gram diagonal (None
    unless ``gram``)) of one inner chunk (``gram``: ``a`` is the chunk of X, ``b`` unused)."""
    if gram:
        a, b = a.T, a                   # a chunk of X: its rows are inner indices
    a, b, be = _matrices(a, b)
    if check_finite:
        matmul._check_finite(a, "A", be)
        matmul._check_finite(b, "B", be)
    sides = (Side(a, 1, None, 0, be),) if gram else (Side(a, 1, None, 0, be), Side(b, 2, None, 0, be))
    sparse = all(s.sparse for s in sides)        # pairs (and so these two) need sparse sides
    integral = sparse and compiled.exact_integers(sides, 0.0)
    bound = matmul._abs_product_bound(sides) if sparse else math.inf
    with _ENGINE:
        part = auto.frobenius_sketch(a, b, be, seed) if estimate else None
        diagonal = exact.gram_diagonal(be, a) if gram else None
    return integral, bound, part, diagonal


def _chunk_sums(a, b, params, log2b, every, method, dt, algorithm, stabilizer, memory_budget,
                pairs: bool, gram: bool):
    """(the chunk's Hadamard-domain pairwise sum or None, its time-domain pair sums or
    None): what :func:`pagh_mm.matmul.compress` adds for these inner indices (``gram``: of
    the Gram product of the chunk ``a`` of X)."""
    if gram:
        a, b = a.T, a                   # a chunk of X: its rows are inner indices
    a, b, be = _matrices(a, b)
    sides = (Side(a, 1, params, log2b, be),) if gram else \
        (Side(a, 1, params, log2b, be), Side(b, 2, params, log2b, be))
    acc = Accumulator(method, every, log2b, dt, algorithm, stabilizer, be.xp)
    with _ENGINE:
        direct = matmul._add_all(sides, acc, a.shape[1], a.shape[0], b.shape[1], be,
                                 memory_budget, every, log2b, pairs, lambda stage: None, None)
        return acc.sum.total(), direct


def _plus_parts(left, right):
    """Two adjacent nodes of the tree: Hadamard-domain sums added (absent ones skipped), and
    the exact time-domain pair sums in any order."""
    (lt, ld), (rt, rd) = left, right
    return reduction._plus(lt, rt), (ld if rd is None else rd if ld is None else ld + rd)


def _tree(parts, combine):
    """The pairwise tree over ``parts`` (chunk nodes, delayed or not), level by level, an
    unpaired last part moving up unchanged: the reduction module's order."""
    level = list(parts)
    while len(level) > 1:
        nxt = [combine(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def compress(A, B, *, buckets: int | str = auto.AUTO, reps: int | str = auto.AUTO,
             seed: int | None = None, k: int | None = None, threshold: float | None = None,
             failure_probability: float = certificate.DEFAULT_FAILURE_PROBABILITY,
             method: str = "fwht", dtype=None, algorithm: str = "folklore",
             stabilizer: str | None = None, hash: str | None = None, gram: bool = False,
             check_finite: bool = True, memory_budget: int | None = None,
             decode: bool | str = "auto") -> CompressedProduct:
    """:func:`pagh_mm.compress` of dask arrays A (m x n) and B (n x p), one task per inner
    chunk (see the module docstring). The options are :func:`pagh_mm.compress`'s (no
    ``progress`` or ``profile``). ``memory_budget`` applies to each task. Bit sketches
    (``decode``) are made in the same tasks. Each task holds A's columns and B's rows of its
    chunk whole, whatever the chunks of the other axes. Tasks run one at a time per process
    (each uses the compiled engine's threads).

    With given ``buckets`` (and ``reps``) the sketch is bit for bit that of
    ``pagh_mm.compress(A.compute(), B.compute(), ...)`` with the same seed. Automatic buckets
    come from the same estimate of ||AB||_F, summed over the chunks, so they can differ from a
    single-process call only where the estimate sits within rounding of the rule's
    power-of-two boundary."""
    dask, _ = _dask()
    if not (_be.is_dask(A) and _be.is_dask(B)):
        raise TypeError("pagh_mm.dask.compress takes dask arrays (dask.array.from_array(M, "
                        "chunks=...)); for in-memory arrays use pagh_mm.compress")
    if A.ndim != 2 or B.ndim != 2:
        raise ValueError(f"A and B must be 2-d (got {A.ndim}-d and {B.ndim}-d)")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"shapes {A.shape} and {B.shape} are not aligned: A has {A.shape[1]} "
                         f"columns, B has {B.shape[0]} rows")
    if max(A.shape[0], B.shape[1]) >= hashing.MAX_KEY:
        raise ValueError("A.shape[0] and B.shape[1] must be below 2**32")
    c = inner_chunk(A, B) if A.shape[1] else 1
    if gram:
        if A.name != B.T.name:
            raise ValueError("gram=True needs A = X.T and B = X of one dask array X: use "
                             "pagh_mm.dask.compress_gram(X)")
        if method != "fwht":
            raise ValueError("gram=True needs method='fwht' (the XOR convolution sends the "
                             "diagonal to bucket 0; the cyclic one does not)")
        if hash is not None and hash not in hashing.FOUR_INDEPENDENT:
            raise ValueError(f"gram=True with hash={hash!r}: one hash function on both sides "
                             f"needs a 4-independent family; use "
                             f"hash={hashing.FOUR_INDEPENDENT[0]!r} (the default)")
    if hash is None:
        hash = "polynomial" if gram else hashing.DEFAULT_FAMILY
    be = _be.for_arrays(A._meta, B._meta)
    if not gram:                        # (a Gram pair keeps X's graph: A is X.T)
        A, B = _sliceable(A), _sliceable(B)
    _, _, _, dt, _, reps, memory_budget = matmul._validate(
        np.zeros((1, 1), A.dtype), np.zeros((1, 1), B.dtype), buckets, reps, method, dtype,
        algorithm, stabilizer, hash, False, memory_budget)
    seed = hashing.check_seed(seed)
    matmul._check_query_hint(k, threshold, failure_probability)
    decode = _decode.check(decode)
    m, p = A.shape[0], B.shape[1]
    sparse = _be.is_sparse(A._meta) and _be.is_sparse(B._meta)
    bits = _decode.row_bits(m) if _decode.wanted(decode, sparse, gram, m, p, be.gpu) else 0
    slabs = _slabs(A, B, c, gram)
    estimate = matmul._is_auto(buckets) and (k is not None or threshold is not None)
    stats = [dask.delayed(_chunk_stats)(a, b, seed, check_finite, estimate, gram)
             for a, b in slabs]
    stats = dask.compute(*stats) if stats else []
    integral = all(s[0] for s in stats)
    bound = sum(s[1] for s in stats)
    diagonal = _gram_diagonal(be, A, B, [s[3] for s in stats]) if gram else None
    F = None
    if estimate:                        # the chunks' shares of G A B, summed in order
        F = auto.frobenius_of(sum(s[2] for s in stats), seed, diagonal, be.xp) if stats else 0.0
    cheap = integral and matmul._pair_accumulated(A._meta, B._meta, be, method, dt, algorithm,
                                                  stabilizer)
    chosen = auto.choose(A, B, be, buckets, reps, k=k, threshold=threshold,
                         delta=failure_probability, seed=seed, diagonal=diagonal, cheap=cheap,
                         decoding=bits > 0, frobenius=F)
    log2b, reps = chosen.buckets.bit_length() - 1, chosen.reps
    every, params, made = matmul._draw(chosen, bits, hash, seed, be)
    # pair sums are exact, so any mix of routes gives the specification's bits, only when
    # every value is an integer and every sum before the inverse transform stays below 2**53
    pairs = integral and bound < 2.0 ** 53

    def sums(allow):
        parts = [dask.delayed(_chunk_sums)(a, b, made, log2b, every, method, dt, algorithm,
                                           stabilizer, memory_budget, allow, gram)
                 for a, b in slabs]
        if not parts:
            return None, None
        return dask.compute(_tree(parts, dask.delayed(_plus_parts)))[0]

    total, direct = sums(pairs)
    acc = Accumulator(method, every, log2b, dt, algorithm, stabilizer, be.xp)
    sketch = acc.finish(direct, total=total)
    if direct is not None and not matmul._inverse_exact(sketch, direct, be.xp):
        total, _ = sums(False)          # the transforms' own sums would round: theirs
        sketch = acc.finish(None, total=total)
    bit_sketch = _decode.BitSketch(_decode.REPS, bits, sketch[reps:]) if bits else None
    return CompressedProduct(sketch[:reps], params, (m, p), log2b, method, _fdt.short_name(dt),
                             algorithm, stabilizer, be, [(A, B)], chosen, diagonal, bit_sketch)


def compress_gram(X, **options) -> CompressedProduct:
    """:func:`pagh_mm.compress_gram` of a dask array X (n samples x m features) chunked along
    its rows (the inner dimension) in one power of two: ``compress(X.T, X, gram=True)``."""
    _dask()
    if not _be.is_dask(X):
        raise TypeError("pagh_mm.dask.compress_gram takes a dask array; for an in-memory one "
                        "use pagh_mm.compress_gram")
    if X.ndim != 2:
        raise ValueError("X must be a 2-d matrix (n samples x m features)")
    X = _sliceable(X)
    return compress(X.T, X, gram=True, **options)


def _gram_diagonal(be, A, B, parts):
    """The exact diagonal of the Gram product from the chunks' shares: their pairwise sums
    added in the tree (the single-process bits); integer sums beyond 2**53 recomputed
    exactly from the columns of X they belong to (:func:`exact_pair`)."""
    xp = be.xp
    if not parts:
        return xp.zeros(A.shape[0], dtype=xp.float64)
    out = _tree([xp.asarray(d) for d in parts], lambda x, y: x + y)
    if np.dtype(A.dtype).kind in "biu":
        big = xp.nonzero(out > exact._EXACT_FLOAT)[0]
        if big.size:
            out[big] = exact_pair(be, A, B, big, big)
    return out


def exact_pair(be, A, B, r, c):
    """Exact C[r[q], c[q]] (see :meth:`CompressedProduct.exact`) of dask factors: only the
    rows of A and the columns of B asked for are computed and brought here, a tile of
    entries at a time, and their dot products are :func:`pagh_mm.exact.exact_pair`'s (the
    same bits). The factors are computed again: a source that changes between calls gives
    values of its new state."""
    dask, _ = _dask()
    xp = be.xp
    r, c = be.asnumpy(r), be.asnumpy(c)
    out = xp.zeros(r.size, dtype=xp.float64)
    step = max(1, query.TILE_BUDGET // (2 * 8 * max(1, A.shape[1])))   # rows + columns held
    for q0 in range(0, r.size, step):
        rows, ri = np.unique(r[q0:q0 + step], return_inverse=True)
        cols, ci = np.unique(c[q0:q0 + step], return_inverse=True)
        a, b = dask.compute(A[rows, :], B[:, cols])
        a, b, _ = _matrices(a, b)
        out[q0:q0 + step] = exact.exact_pair(be, a, b, xp.asarray(ri.astype(np.int64)),
                                             xp.asarray(ci.astype(np.int64)))
    return out
