"""Transforms of lengths n = K * 2**k that are not powers of two: H_K (x) H_{2**k}.

Models need Hadamard rotations of sizes such as 12 * 2**k, 20 * 2**k and 28 * 2**k (a Llama
down-projection of 28672 = 28 * 1024, head sizes 96 and 192). For these lengths the transform
is the Kronecker product ``H_K (x) H_M`` (M = 2**k, H_M Sylvester's matrix, the power-of-two
transform) with one shipped Hadamard matrix H_K of order K:

=====  ==========================================  =========================================
K      construction                                 lengths
=====  ==========================================  =========================================
12     Paley I, q = 11 (``I + S``, S skew)          12, 24, 48, ... (odd part 3)
20     Paley I, q = 19                              20, 40, 80, ... (odd part 5)
28     Paley II, q = 13 (symmetric)                 28, 56, 112, ... (odd part 7)
36     Paley II, q = 17 (symmetric)                 36, 72, 144, ... (odd part 9)
44     Paley I, q = 43                              44, 88, 176, ... (odd part 11)
=====  ==========================================  =========================================

Paley I (q prime, q = 3 mod 4): ``Q[i, j] = chi(j - i)`` over GF(q) (chi the quadratic
character, chi(0) = 0); ``S = [[0, 1^T], [-1, Q]]``; ``H = I + S``. Paley II (q prime,
q = 1 mod 4): ``C = [[0, 1^T], [1, Q]]``; ``H = C (x) [[1, -1], [-1, -1]] + I (x) [[1, 1],
[1, -1]]``. Each is then normalized (columns, then rows, multiplied by -1 where the first
row, then column, holds -1: still ``H H^T = K I``, tested), so coefficient 0 is the sum of the
input, as for powers of two. A length is split with the K of its
odd part: n = 40 * 2**k is 20 * 2**(k + 1), so the matrix of order 40 is H_20 (x) H_2, one
transform whichever way the length is written.

Element ``a * M + b`` of the input is entry b of block a (K blocks of M contiguous values).
The transform runs in two stages, the same on every engine: the power-of-two transform of
each block (the plan of length M, with its algorithm, stabilizer and compute dtype), then the
K-point stage across the blocks: output block i is ``sum_c H_K[i, c] * block_c``, summed in
groups of four blocks: for the blocks a, b, c, d of columns c0 .. c0 + 3 and the signs
s_k = H_K[i, c0 + k] H_K[i, c0] relative to the first, ``p = a + s_1 b``, ``q = c + s_2 s_3 d``,
``e = p + s_2 q`` (a group's eight possible e are shared by the outputs with its sign pattern:
K^2/4 + 2K operations per position instead of K(K - 1)), then ``H_K[i, 0] e`` for the first
group and ``+ H_K[i, c0] e`` for the next ones in order; each sum an addition or a
subtraction rounded to the compute dtype (the data's dtype unless ``compute_dtype`` is
wider), the result rounded once to the data's dtype. The scale (``norm``) is applied last.
The inverse uses H_K^T in the K-point stage (Paley I matrices are not symmetric) and divides
by n.
"""
from __future__ import annotations

import functools

import numpy as np

from . import compiled, cpu, memory
from . import dtypes as _dt
from .overflow import overflowed_rows, recompute_rows
from .plan import Plan

#: The shipped orders: K -> (construction, q).
ORDERS = {12: ("paley1", 11), 20: ("paley1", 19), 28: ("paley2", 13), 36: ("paley2", 17),
          44: ("paley1", 43)}
#: The order for each odd part of a length.
_BY_ODD = {K // 4: K for K in ORDERS}


def _chi(q: int) -> np.ndarray:
    """The quadratic character of GF(q), q prime: chi[a] for a = 0 .. q - 1."""
    chi = -np.ones(q, dtype=np.int64)
    chi[0] = 0
    chi[np.unique(np.arange(1, q, dtype=np.int64) ** 2 % q)] = 1
    return chi


def _jacobsthal(q: int) -> np.ndarray:
    i = np.arange(q)
    return _chi(q)[(i[None, :] - i[:, None]) % q]


@functools.lru_cache(maxsize=None)
def matrix(K: int) -> np.ndarray:
    """The shipped Hadamard matrix of order K (int8, read-only); K = 1 and 2 give [[1]] and
    Sylvester's H_2. ValueError for other orders, naming the shipped ones."""
    if K == 1:
        H = np.ones((1, 1), dtype=np.int64)
    elif K == 2:
        H = np.array([[1, 1], [1, -1]], dtype=np.int64)
    elif K in ORDERS:
        kind, q = ORDERS[K]
        Q = _jacobsthal(q)
        if kind == "paley1":
            S = np.zeros((q + 1, q + 1), dtype=np.int64)
            S[0, 1:], S[1:, 0], S[1:, 1:] = 1, -1, Q
            H = np.eye(q + 1, dtype=np.int64) + S
        else:
            C = np.zeros((q + 1, q + 1), dtype=np.int64)
            C[0, 1:], C[1:, 0], C[1:, 1:] = 1, 1, Q
            H = np.kron(C, [[1, -1], [-1, -1]]) + np.kron(np.eye(q + 1, dtype=np.int64),
                                                          [[1, 1], [1, -1]])
    else:
        raise ValueError(f"no Hadamard matrix of order {K} is shipped; orders: 1, 2, "
                         f"{', '.join(map(str, ORDERS))}")
    H = H * H[0][None, :]                   # normalized: first row and column all ones
    H = H * H[:, 0][:, None]
    H = H.astype(np.int8)
    H.setflags(write=False)
    return H


def split(n: int, argname: str = "x") -> tuple[int, int]:
    """(K, M) with n = K * M, M a power of two and K = 1 or a shipped order; ValueError naming
    the nearest supported lengths otherwise."""
    n = int(n)
    if n < 1:
        raise ValueError(f"{argname}: transform length must be >= 1, got {n}")
    odd = n >> ((n & -n).bit_length() - 1)
    if odd == 1:
        return 1, n
    K = _BY_ODD.get(odd)
    if K is not None and n % K == 0:
        return K, n // K
    lo, hi = _nearest(n)
    raise ValueError(
        f"{argname}: transform length {n} is not a power of two nor K * 2**k with K in "
        f"({', '.join(map(str, ORDERS))}); pad to {hi} (e.g. numpy.pad) or truncate to {lo}")


def supported(n: int) -> bool:
    """Whether ``n`` is a transform length (a power of two, or K * 2**k, K shipped)."""
    try:
        split(n)
    except ValueError:
        return False
    return True


def _nearest(n: int) -> tuple[int, int]:
    """The largest supported length below n and the smallest above it."""
    cands = {1 << n.bit_length(), 1 << (n.bit_length() - 1)}
    for K in ORDERS:
        if n > K:
            cands.add(K << max(0, (n // K).bit_length() - 1))
        cands.add(K << max(0, (n // K).bit_length()))
    below = [c for c in cands if c < n]
    return (max(below) if below else 1), min(c for c in cands if c > n)


def k_stage(H: np.ndarray, z: np.ndarray, compute_dtype, dtype) -> np.ndarray:
    """The K-point stage along axis -2 of ``z`` (..., K, M), in the documented order: each
    operation rounded to ``compute_dtype``, the result to ``dtype``."""
    w = z.astype(_dt.work_dtype(compute_dtype), copy=False)
    if compiled.ENABLED:                    # the same operations, compiled
        K, M = H.shape[0], z.shape[-1]
        acc = compiled.k_stage(H, w.reshape(-1, K, M), compute_dtype)
        with np.errstate(over="ignore", invalid="ignore"):     # overflow: the caller's
            return acc.reshape(z.shape).astype(dtype, copy=False)
    ar = cpu._Arith(compute_dtype, None)

    def pm(x, y, minus):
        return ar.sub(x, y) if minus else ar.add(x, y)
    out = np.empty(z.shape, dtype=dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(H.shape[0]):
            for c0 in range(0, H.shape[1], 4):
                neg = H[i, c0] < 0
                n1, n2, n3 = ((H[i, c0 + k] < 0) != neg for k in (1, 2, 3))
                p = pm(w[..., c0, :], w[..., c0 + 1, :], n1)
                q = pm(w[..., c0 + 2, :], w[..., c0 + 3, :], n2 != n3)
                e = pm(p, q, n2)
                acc = (-e if neg else e) if c0 == 0 else pm(acc, e, neg)
            out[..., i, :] = acc
    return out


def _composed(plan: Plan, H: np.ndarray, x2: np.ndarray) -> np.ndarray:
    """The unscaled transform of the rows of ``x2`` (batch, K * M)."""
    K, M = H.shape[0], plan.n
    y = cpu.execute(plan, x2.reshape(-1, M)).reshape(-1, K, M)
    return k_stage(H, y, plan.compute_dtype, plan.dtype).reshape(x2.shape)


def transform(plan: Plan, K: int, x: np.ndarray, axis: int, factor: float = 1.0, out=None,
              inverse: bool = False) -> np.ndarray:
    """The NumPy engine's transform of length K * plan.n along ``axis`` (``inverse``: H_K^T in
    the K-point stage), times ``factor``, into ``out`` (or a new array). As the power-of-two
    engine: a transform of finite input that overflows is recomputed in float64 when scaled,
    else TransformOverflowError (neither under ``errstate(overflow="ignore")``)."""
    H = matrix(K).T if inverse else matrix(K)
    n = K * plan.n
    xm = np.moveaxis(x, axis % x.ndim, -1)
    shape = xm.shape
    x2 = np.ascontiguousarray(xm.reshape(-1, n), dtype=plan.dtype)
    if x2.shape[0] == 0:
        y2 = x2.copy()
    else:
        work = _dt.work_dtype(plan.compute_dtype).itemsize * x2.size
        memory.check(5 * x2.nbytes + 2 * work + cpu.work_bytes(plan, x2.shape[0] * K),
                     f"the {_dt.short_name(plan.dtype)} transform of {x2.shape[0]} x {n} values",
                     "transform fewer rows at a time")
        y2 = cpu.scale(_composed(plan, H, x2), factor)
        bad = overflowed_rows(x2, y2, np)
        if bad is not None:             # the power-of-two engine's rule and steps
            y2[bad] = recompute_rows(plan, x2[bad], factor,
                                     lambda wide, x64, f: cpu.scale(_composed(wide, H, x64), f),
                                     np)
    y = np.moveaxis(y2.reshape(shape), -1, axis % x.ndim)
    if out is None:
        return np.ascontiguousarray(y)
    out[...] = y
    return out


#: The header of the GPU kernels holding the shipped matrices' signs (generated by
#: :func:`cuda_sign_header`; a test checks that the shipped file is its output).
CUDA_SIGN_HEADER = "hadamard_signs.cuh"


def sign_masks(K: int) -> list[int]:
    """Row i of H_K as a bit mask: bit c set where H_K[i, c] = -1."""
    H = matrix(K)
    return [sum(1 << c for c in range(K) if H[i, c] < 0) for i in range(K)]


def cuda_sign_header() -> str:
    """The text of ``fwht_gpu/cuda/kernels/hadamard_signs.cuh``: per shipped order K,
    ``HadamardSigns<K>::row(i)`` (:func:`sign_masks`) as a constexpr function, so that the
    K-point stage's unrolled adds and subtracts are fixed at compile time."""
    lines = ["// Signs of the shipped Hadamard matrices H_K (fwht_gpu/hadamard.py), generated by",
             "// fwht_gpu.hadamard.cuda_sign_header(); do not edit (a test compares the two).",
             "// HadamardSigns<K>::row(i): bit c set where H_K[i, c] = -1.",
             "#pragma once", "", "template <int K> struct HadamardSigns;"]
    for K in ORDERS:
        kind, q = ORDERS[K]
        lines += ["", f"// K = {K}: {'Paley I' if kind == 'paley1' else 'Paley II'}, q = {q}, "
                      "normalized",
                  f"template <> struct HadamardSigns<{K}> {{",
                  "    __host__ __device__ static constexpr unsigned long long row(int i) {",
                  "        switch (i) {"]
        lines += [f"        case {i}: return 0x{m:016x}ULL;" for i, m in enumerate(sign_masks(K))]
        lines += ["        default: return 0ULL;", "        }", "    }", "};"]
    return "\n".join(lines) + "\n"
