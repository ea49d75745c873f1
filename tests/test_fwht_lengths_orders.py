"""Lengths K * 2**k (H_K (x) H_{2**k} with the shipped Hadamard matrices) and the coefficient
orders (natural, sequency, dyadic), checked against their definitions: the dense Kronecker
product, sign changes of the implied rows, products of Rademacher functions."""
import ml_dtypes
import numpy as np
import pytest
import scipy.linalg as sl

import fwht_gpu as F
from fwht_gpu import gpu, hadamard, orders

KS = sorted(hadamard.ORDERS)


def _dense(K, M):
    return np.kron(hadamard.matrix(K).astype(np.float64), sl.hadamard(M).astype(np.float64))


@pytest.mark.parametrize("K", KS)
def test_shipped_matrices_are_hadamard(K):
    H = hadamard.matrix(K).astype(np.int64)
    assert H.shape == (K, K) and set(np.unique(H)) == {-1, 1}
    assert np.array_equal(H @ H.T, K * np.eye(K, dtype=np.int64))
    assert not hadamard.matrix(K).flags.writeable
    kind, q = hadamard.ORDERS[K]
    assert K == (q + 1 if kind == "paley1" else 2 * (q + 1))
    assert (H[0] == 1).all() and (H[:, 0] == 1).all()     # normalized
    if kind == "paley2":            # symmetric (and stays so when normalized)
        assert np.array_equal(H, H.T)
    else:                           # I + S with S skew; normalized, its rows but the first
        Q = -H[1:, 1:] - np.eye(K - 1, dtype=np.int64)      # negated: -(I + Q), Q skew
        assert np.array_equal(Q, -Q.T) and (np.diag(Q) == 0).all()


def test_lengths_split_and_refuse_with_the_nearest():
    assert hadamard.split(1024) == (1, 1024)
    assert hadamard.split(28672) == (28, 1024)            # a Llama down-projection
    assert hadamard.split(96) == (12, 8) and hadamard.split(12) == (12, 1)
    assert hadamard.split(40 * 64) == (20, 128)           # 40 * 2**k = 20 * 2**(k + 1)
    assert not hadamard.supported(13696)                   # 107 * 128: no H_107 is shipped
    for n, lo, hi in ((13, 12, 16), (1000, 896, 1024), (6, 4, 8), (100, 96, 112), (50, 48, 56)):
        with pytest.raises(ValueError, match=rf"length {n} is not a power of two.*pad to {hi}"
                                             rf".*truncate to {lo}"):
            F.fwht(np.ones(n))
        assert not hadamard.supported(n)
    with pytest.raises(ValueError, match="orders: 1, 2, 12"):
        hadamard.matrix(24)
    with pytest.raises(ValueError, match=">= 1"):
        hadamard.split(0)


@pytest.mark.parametrize("K", KS)
@pytest.mark.parametrize("M", [1, 2, 8, 64])
def test_integer_transforms_equal_the_kronecker_product(K, M):
    rng = np.random.default_rng(K * 100 + M)
    n = K * M
    x = rng.integers(-9, 10, (5, n)).astype(np.float64)
    D = _dense(K, M)
    y = F.fwht(x)
    assert np.array_equal(y, x @ D.T)
    assert np.array_equal(F.ifwht(y), x)                         # exact: H_K^T, then / n
    assert np.array_equal(F.ifwht(x, norm="forward"), x @ D)     # the inverse is H^T
    z = F.fwht(x, norm="ortho")
    assert np.allclose(z, x @ D.T / np.sqrt(n)) and np.allclose(F.ifwht(z, norm="ortho"), x)


def test_coefficient_zero_is_the_sum():
    x = np.random.default_rng(2).integers(-9, 10, (3, 28672)).astype(np.float64)
    assert np.array_equal(F.fwht(x)[:, 0], x.sum(axis=1))
    assert np.array_equal(F.fwht(np.ones(44 * 4))[0], 44 * 4.0)


def test_any_axis_out_and_the_planned_transform():
    rng = np.random.default_rng(1)
    x = rng.integers(-5, 6, (20 * 4, 3, 2)).astype(np.float32)
    want = np.einsum("ij,jab->iab", _dense(20, 4), x.astype(np.float64)).astype(np.float32)
    assert np.array_equal(F.fwht(x, axis=0), want)
    out = np.empty_like(x)
    assert F.fwht(x, axis=0, out=out) is out and np.array_equal(out, want)
    t = F.FWHT(80, np.float32)
    assert t.K == 20 and t.plan.n == 4 and "20-point stage" in t.describe()
    assert np.array_equal(t(x, axis=0), want)
    assert np.array_equal(t(t(x, axis=0), axis=0, inverse=True), x)
    with pytest.raises(ValueError, match="planned for n=80"):
        t(np.ones(96, np.float32))
    with pytest.raises(ValueError, match="not a power of two"):
        F.FWHT(100, np.float64)


def _reference_16bit(K, x, dtype):
    """Blocks by the power-of-two engine, then the K-point stage with NumPy scalars of the
    dtype in the documented order (groups of four blocks: p = a +- b, q = c +- d, e = p +- q,
    added group after group; each addition rounded to the dtype)."""
    M = x.shape[-1] // K
    blocks = F.fwht(x.reshape(-1, K, M), axis=-1)
    H = hadamard.matrix(K)
    out = np.empty_like(blocks)

    def pm(u, v, s):                    # u + s v, rounded to the dtype
        return dtype(u + v) if s > 0 else dtype(u - v)
    for r in range(blocks.shape[0]):
        for i in range(K):
            for j in range(M):
                for c0 in range(0, K, 4):
                    h = H[i, c0:c0 + 4] * H[i, c0]          # signs relative to the first
                    a, b, c, d = blocks[r, c0:c0 + 4, j]
                    e = pm(pm(a, b, h[1]), pm(c, d, h[2] * h[3]), h[2])
                    acc = (e if H[i, 0] > 0 else -e) if c0 == 0 else pm(acc, e, H[i, c0])
                out[r, i, j] = acc
    return out.reshape(x.shape)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32])
def test_rounded_dtypes_follow_the_documented_order(dtype):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 12 * 4)) * 3).astype(dtype)
    got = F.fwht(x)
    assert got.dtype == np.dtype(dtype)
    want = _reference_16bit(12, x, dtype)
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("dtype,compute", [(np.float64, None), (np.float32, None),
                                           (np.float16, None), (ml_dtypes.bfloat16, None),
                                           (np.float16, "float32"), (np.float32, "float64")])
def test_the_compiled_k_stage_gives_the_array_paths_bits(dtype, compute, monkeypatch):
    from fwht_gpu import compiled
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((5, 3, 44 * 4)) * 50).astype(dtype)
    x[0, 0, 3], x[1, 2, 7], x[2, 1, 0] = np.nan, np.inf, -np.inf    # poisoned transforms
    y = F.fwht(x, compute_dtype=compute)
    monkeypatch.setattr(compiled, "ENABLED", False)
    want = F.fwht(x, compute_dtype=compute)
    assert np.array_equal(y.view(np.uint8), want.view(np.uint8))


def test_compute_dtype_rounds_once_and_overflow_is_recomputed_when_scaled():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 28 * 2)).astype(np.float16)
    wide = F.fwht(x, compute_dtype="float32")
    blocks = F.fwht(x.reshape(2, 28, 2), axis=-1, compute_dtype="float32").astype(np.float32)
    want = np.einsum("ij,rjm->rim", hadamard.matrix(28).astype(np.float32), blocks)
    assert np.array_equal(wide, want.astype(np.float16).reshape(2, 56))
    big = np.full((2, 12 * 4), 3000.0, np.float16)      # sums of 48 values of 3000 > 65504
    big[1] = 1.0
    with pytest.raises(F.TransformOverflowError, match="fp16"):
        F.fwht(big)
    y = F.ifwht(big)                                      # scaled by 1/48: recomputed
    want = (F.ifwht(big.astype(np.float64)).astype(np.float32)).astype(np.float16)
    assert np.array_equal(y[0], want[0]) and np.isfinite(y).all()
    assert np.array_equal(y[1], F.ifwht(big[1:])[0])      # the other row: not recomputed


def test_dyadic_and_sequency_orders_follow_their_definitions():
    n = 32
    m = n.bit_length() - 1
    eye = np.eye(n)
    for order in ("sequency", "dyadic"):
        rows = F.fwht(eye, axis=0, order=order)          # row k: the k-th function
        assert sorted(map(tuple, rows)) == sorted(map(tuple, sl.hadamard(n).astype(float)))
        if order == "sequency":
            changes = (np.diff(np.sign(rows), axis=1) != 0).sum(axis=1)
            assert np.array_equal(changes, np.arange(n))
        else:
            j = np.arange(n)
            rademacher = [(-1.0) ** ((j * (1 << (i + 1))) // n) for i in range(m)]
            for k in range(n):
                w = np.ones(n)
                for i in range(m):
                    if k >> i & 1:
                        w = w * rademacher[i]
                assert np.array_equal(rows[k], w), k
    x = np.random.default_rng(5).standard_normal((4, n))
    for order in orders.ORDERS:
        y = F.fwht(x, order=order)
        assert np.allclose(F.ifwht(y, order=order), x)
        out = np.empty_like(x)
        assert F.ifwht(y, order=order, out=out) is out and np.allclose(out, x)
        assert F.FWHT(n, np.float64)(x, order=order).tobytes() == y.tobytes()
    # MATLAB: fwht([1 2 3 4]) (sequency, scaled by 1/n) is [2.5 -1 0 -0.5]
    assert np.array_equal(F.fwht([1.0, 2.0, 3.0, 4.0], order="sequency", norm="forward"),
                          [2.5, -1.0, 0.0, -0.5])


def test_order_errors():
    with pytest.raises(ValueError, match="order='gray'"):
        F.fwht(np.ones(8), order="gray")
    with pytest.raises(ValueError, match="natural order only"):
        F.fwht(np.ones(24), order="sequency")
    assert np.array_equal(F.fwht(np.ones(2), order="dyadic"), [2.0, 0.0])


@pytest.mark.gpu
@pytest.mark.skipif(not gpu.available(), reason=f"no GPU: {gpu.status()}")
def test_cupy_arrays_give_the_cpu_bits_for_lengths_and_orders():
    cp = gpu.cupy()
    rng = np.random.default_rng(6)
    for dtype in (np.float64, np.float32, np.float16):
        x = rng.standard_normal((3, 20 * 16)).astype(dtype)
        want = F.fwht(x)
        got = F.fwht(cp.asarray(x))
        assert isinstance(got, cp.ndarray) and np.array_equal(cp.asnumpy(got), want)
        z = rng.standard_normal((3, 64)).astype(dtype)
        for order in ("sequency", "dyadic"):
            y = F.fwht(cp.asarray(z), order=order)
            assert np.array_equal(cp.asnumpy(y), F.fwht(z, order=order))
            assert np.array_equal(cp.asnumpy(F.ifwht(y, order=order)),
                                  F.ifwht(F.fwht(z, order=order), order=order))
