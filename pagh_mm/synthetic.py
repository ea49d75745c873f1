"""Planted heavy hitters: A @ B = a dense Gaussian background plus a few large entries."""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np


class Planted(NamedTuple):
    A: object
    B: object
    rows: np.ndarray          # planted (rows[l], cols[l]) on the host
    cols: np.ndarray
    magnitude: float          # expected |C| at a planted entry
    background: float         # standard deviation of the other entries


def planted_product(n: int, planted: int = 300, *, magnitude: float | None = None, seed: int = 0,
                    dtype=np.float64, xp=np) -> Planted:
    """Square n x n factors whose product has N(0, 1) entries plus ``planted`` entries of
    about +-``magnitude`` (default n / 16) at distinct rows and columns.

    A = X / n**0.25 and B = Y / n**0.25 with Gaussian X, Y give the background; planted
    pair l adds ``sqrt(magnitude) * z_l`` (||z_l||^2 = 1 on average per entry... scaled so
    that A[i_l] . B[:, j_l] gains +-magnitude) to row i_l of A and column j_l of B.
    """
    if planted > n:
        raise ValueError(f"planted={planted} must be <= n={n}")
    magnitude = float(n / 16 if magnitude is None else magnitude)
    host = np.random.default_rng(seed)
    rows = host.choice(n, planted, replace=False)
    cols = host.choice(n, planted, replace=False)
    signs = host.choice([-1.0, 1.0], planted)
    rng = xp.random.default_rng(seed + 1)
    s = 1.0 / n ** 0.25
    A = rng.standard_normal((n, n), dtype=xp.float32 if dtype == np.float32 else xp.float64) * s
    B = rng.standard_normal((n, n), dtype=A.dtype) * s
    Z = rng.standard_normal((planted, n), dtype=A.dtype) * math.sqrt(magnitude / n)
    A[xp.asarray(rows)] += Z
    B[:, xp.asarray(cols)] += (Z * xp.asarray(signs, dtype=A.dtype)[:, None]).T
    return Planted(A.astype(dtype, copy=False), B.astype(dtype, copy=False), rows, cols,
                   magnitude, 1.0)


def choose_buckets(n: int, planted: int, magnitude: float, reps: int, margin: float = 6.0) -> int:
    """Smallest power of two b with (1) noise ||C||_F / sqrt(b) <= magnitude / margin and
    (2) fewer than ``planted`` background entries expected to look planted: an entry's
    median is as large as a planted value when more than half of the d repetitions
    collide with a planted entry of the same sign, probability C(d, h) (P / 2b)^h with
    h = (d + 1) // 2, over n^2 entries."""
    fro = math.sqrt(n * n * 1.0 + planted * magnitude ** 2)
    b_noise = (margin * fro / magnitude) ** 2
    h = (reps + 1) // 2
    b_coll = planted / 2 * (math.comb(reps, h) * n * n / planted) ** (1.0 / h)
    return 1 << max(10, math.ceil(math.log2(max(b_noise, b_coll))))


def recall(rows, cols, found_rows, found_cols) -> float:
    """Fraction of the planted (row, col) pairs among the found ones."""
    want = set(zip(np.asarray(rows).tolist(), np.asarray(cols).tolist()))
    got = set(zip(np.asarray(found_rows).tolist(), np.asarray(found_cols).tolist()))
    return len(want & got) / max(1, len(want))


def sparse_planted(n: int, per_vector: int = 16, planted: int = 100, magnitude: int = 256, *,
                   seed: int = 0) -> Planted:
    """Sparse n x n factors (CSR) with ``per_vector`` random +-1 values in every column of A
    and every row of B, plus ``planted`` entries of about +-``magnitude``: for each, A's row
    i_l and B's column j_l share ``magnitude`` inner indices (a co-occurrence screen's
    strong pairs).  The product's background entries are small integers."""
    import scipy.sparse as sps
    if planted > n or magnitude > n:
        raise ValueError(f"planted={planted} and magnitude={magnitude} must be <= n={n}")
    rng = np.random.default_rng(seed)
    inner = np.repeat(np.arange(n), per_vector)
    a_rows = rng.integers(0, n, n * per_vector)
    b_cols = rng.integers(0, n, n * per_vector)
    sa = rng.choice([-1.0, 1.0], n * per_vector)
    sb = rng.choice([-1.0, 1.0], n * per_vector)
    rows = rng.choice(n, planted, replace=False)
    cols = rng.choice(n, planted, replace=False)
    signs = rng.choice([-1.0, 1.0], planted)
    ks = np.concatenate([rng.choice(n, magnitude, replace=False) for _ in range(planted)]) \
        if planted else np.zeros(0, np.int64)
    A = sps.coo_matrix((np.concatenate([sa, np.ones(planted * magnitude)]),
                        (np.concatenate([a_rows, np.repeat(rows, magnitude)]),
                         np.concatenate([inner, ks]))), shape=(n, n)).tocsr()
    B = sps.coo_matrix((np.concatenate([sb, np.repeat(signs, magnitude)]),
                        (np.concatenate([inner, ks]),
                         np.concatenate([b_cols, np.repeat(cols, magnitude)]))), shape=(n, n)).tocsr()
    background = float(np.sqrt(per_vector * per_vector / n))
    return Planted(A, B, rows, cols, float(magnitude), background)
