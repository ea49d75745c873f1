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

import numpy as np

from . import auto, certificate, chunks, exact, hashing, matmul, query
from . import backend as _be
from . import decode as _decode
from .compressed import CompressedProduct


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


def _run(dask, fn, slabs):
    """[fn(a, b) for the chunks], as one dask computation."""
    return list(dask.compute(*[dask.delayed(fn)(a, b) for a, b in slabs])) if slabs else []


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
    sparse = _be.is_sparse(A._meta) and _be.is_sparse(B._meta)
    slabs = _slabs(A, B, c, gram)

    def sums(plan, pairs):
        parts = [dask.delayed(chunks.chunk_sums)(a, b, plan, pairs) for a, b in slabs]
        if not parts:
            return None, None, None, None
        return dask.compute(chunks.tree(parts, dask.delayed(chunks.plus_parts)))[0]

    return chunks.compress(
        A, B, be, sparse=sparse, gram=gram, buckets=buckets, reps=reps, seed=seed, k=k,
        threshold=threshold, failure_probability=failure_probability, method=method, dt=dt,
        algorithm=algorithm, stabilizer=stabilizer, hash=hash, check_finite=check_finite,
        memory_budget=memory_budget, decode=decode, stats=lambda fn: _run(dask, fn, slabs),
        sums=sums, exact_of=lambda r, c: exact_pair(be, A, B, r, c), dtype=dtype)


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
        a, b, _ = chunks.matrices(a, b)
        out[q0:q0 + step] = exact.exact_pair(be, a, b, xp.asarray(ri.astype(np.int64)),
                                             xp.asarray(ci.astype(np.int64)))
    return out
