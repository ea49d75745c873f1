"""compress(A, B) and approx_matmul(A, B): the public entry points."""
from __future__ import annotations

import numpy as np

import fwht_gpu.dtypes as _fdt
from . import backend as _be
from . import hashing
from .compressed import CompressedProduct
from .convolution import METHODS, Accumulator
from .sketch import scatter_matrix, sketch_block

#: Default bytes of inner-dimension temporaries per block (CPU; the GPU default is
#: min(2 GiB, 1/8 of free device memory)).
MEMORY_BUDGET = 256 << 20


def _default_budget(be) -> int:
    if not be.gpu:
        return MEMORY_BUDGET
    free = be.xp.cuda.runtime.memGetInfo()[0]
    return int(max(MEMORY_BUDGET, min(2 << 30, free // 8)))


def _as_matrix(M, name, be):
    if not (be.sp.issparse(M) or isinstance(M, be.xp.ndarray)):
        M = be.xp.asarray(M)
    if M.ndim != 2:
        raise ValueError(f"{name} must be a 2-d matrix, got {M.ndim} dimensions")
    kind = np.dtype(M.dtype).kind
    if kind not in "biuf":
        raise TypeError(f"{name} has dtype {M.dtype}; pass a real (integer or floating) matrix")
    return M


def _check_finite(M, name, be):
    data = M.data if be.sp.issparse(M) else M
    if data.dtype.kind != "f":
        return
    flat = data.reshape(-1) if data.flags.c_contiguous or data.flags.f_contiguous else None
    if flat is None or be.gpu:
        ok = bool(be.xp.isfinite(data).all())
    else:                        # in chunks: a memory-mapped file is never loaded whole
        step = 1 << 24
        ok = all(bool(np.isfinite(flat[k:k + step]).all()) for k in range(0, flat.size, step))
    if not ok:
        raise ValueError(f"{name} contains NaN or Inf; remove them, or pass check_finite=False "
                         "to skip this check (the sketch would be poisoned)")


def _validate(A, B, buckets, reps, method, dtype, hash, check_finite):
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
    if isinstance(buckets, bool) or not isinstance(buckets, (int, np.integer)) or buckets < 2 \
            or buckets & (buckets - 1):
        nxt = 1 << max(1, int(buckets).bit_length()) if isinstance(buckets, (int, np.integer)) else None
        hint = f"; e.g. buckets={nxt}" if nxt else ""
        raise ValueError(f"buckets={buckets!r} must be a power of two >= 2{hint}")
    if isinstance(reps, bool) or not isinstance(reps, (int, np.integer)) or reps < 1:
        raise ValueError(f"reps={reps!r} must be an integer >= 1 (odd, so the median is an estimate)")
    if method not in METHODS:
        raise ValueError(f"method={method!r}; choose 'fwht' or 'fft'")
    hashing.check_family(hash)
    if dtype is None:
        rt = np.result_type(A.dtype, B.dtype)
        dtype = rt if rt in (np.float32, np.float64) else np.float64
    dtype = _fdt.resolve(dtype, "dtype")
    if method == "fft" and dtype.itemsize == 2:
        raise ValueError("method='fft' supports dtype float64 and float32 only")
    if check_finite:
        _check_finite(A, "A", be)
        _check_finite(B, "B", be)
    return A, B, be, dtype


def compress(A, B, *, buckets: int, reps: int, seed: int | None = None, method: str = "fwht",
             dtype=None, algorithm: str = "folklore", stabilizer: str | None = None,
             hash: str = "multiply-shift", check_finite: bool = True,
             memory_budget: int | None = None, progress=None,
             profile: dict | None = None) -> CompressedProduct:
    """Compress C = A @ B into ``reps`` Count-Sketches of ``buckets`` buckets (Pagh 2013).

    A (m x n) and B (n x p): NumPy/CuPy arrays or SciPy/cupyx sparse matrices, on one
    device (the arrays decide where the work runs).  Per repetition t the columns of A
    and rows of B are Count-Sketched with hash functions drawn from (``seed``, t),
    transformed by FWHTs of length ``buckets`` in ``dtype`` (float64, float32, float16,
    bfloat16; default: the inputs' float type, else float64), multiplied and summed
    over the inner dimension in the Hadamard domain in blocks that keep temporaries
    within ``memory_budget`` bytes (default 256 MiB on the CPU, min(2 GiB, free / 8)
    on the GPU), and transformed back once.  ``method="fft"`` uses
    Pagh's cyclic convolution (h1 + h2 mod b) through numpy/cupy.fft instead.

    Costs O(reps (nnz(A) + nnz(B)) + reps n b log b); memory O(reps b) plus one block.
    ``progress(stage, done, total)`` is called after each block.  ``profile``, a dict,
    receives the seconds spent in each stage (synchronizing the GPU between stages).
    """
    A, B, be, dt = _validate(A, B, buckets, reps, method, dtype, hash, check_finite)
    if seed is None:
        seed = int(np.random.default_rng().integers(2**63))
    log2b = int(buckets).bit_length() - 1
    params = hashing.HashParams.draw(hash, int(seed), int(reps))
    m, n = A.shape
    p = B.shape[1]
    S1 = scatter_matrix(params, 1, m, log2b, be)
    S2 = scatter_matrix(params, 2, p, log2b, be)
    acc = Accumulator(method, int(reps), log2b, dt, algorithm, stabilizer, be.xp)
    if memory_budget is None:
        memory_budget = _default_budget(be)
    per_col = int(reps) * int(buckets) * 8 * 6       # float64 sketches, casts, transforms, product
    nb = int(max(1, min(n, memory_budget // per_col)))
    Ac = be.sp.csc_matrix(A) if be.sp.issparse(A) else A
    Br = be.sp.csr_matrix(B) if be.sp.issparse(B) else B
    clock = _Clock(be, profile)
    for k0 in range(0, n, nb):
        k1 = min(n, k0 + nb)
        PA = sketch_block(S1, Ac[:, k0:k1], be, transpose_input=False)
        PB = sketch_block(S2, Br[k0:k1, :], be, transpose_input=True)
        clock("scatter")
        acc.add_block(PA, PB, clock)
        if progress:
            progress("inner", k1, n)
    sketch = acc.finish()
    clock("inverse")
    return CompressedProduct(sketch, params, (m, p), log2b, method, _fdt.short_name(dt),
                             algorithm, stabilizer, be, [(A, B)])


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


def default_buckets(m: int, p: int) -> int:
    """Default for approx_matmul: the power of two >= 8 (m + p), at least 1024, at most 2**24."""
    want = max(1024, 8 * (m + p))
    return min(1 << 24, 1 << (want - 1).bit_length())


def approx_matmul(A, B, *, buckets: int | None = None, reps: int | None = None,
                  seed: int | None = None, **options):
    """Dense estimate of ``A @ B`` in the input's array type (NumPy or CuPy).

    Defaults: ``buckets = default_buckets(m, p)`` (a power of two >= 8 (m + p)), ``reps = 5``.
    One repetition's error on an entry has standard deviation at most
    ||A @ B||_F / sqrt(buckets); the median of d repetitions removes it unless more than
    half collide with other large entries.  For a product with N non-zeros, an entry is
    wrong with probability about C(d, (d+1)/2) (N / buckets)^((d+1)/2) (10 (N/b)^3 for
    d = 5): choose buckets well above N for an exact result.  Other options as :func:`compress`.
    """
    m, p = np.shape(A)[0], np.shape(B)[1]
    cp_ = compress(A, B, buckets=buckets or default_buckets(m, p), reps=reps or 5, seed=seed,
                   **options)
    return cp_.to_dense()
