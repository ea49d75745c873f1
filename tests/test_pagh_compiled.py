"""The compiled CPU engine of pagh_mm (pagh_mm.compiled, fwht_gpu.compiled) gives the bits of
the NumPy/SciPy specification: dense, sparse and Gram products, FWHT and FFT, FP64 and FP32,
any number of threads and any memory budget."""
import numba
import numpy as np
import pytest
import scipy.sparse as sps

import fwht_gpu.compiled
import pagh_mm
from pagh_mm import compiled


def _specification(*args, **kw):
    saved = compiled.ENABLED, fwht_gpu.compiled.ENABLED
    compiled.ENABLED = fwht_gpu.compiled.ENABLED = False
    try:
        return pagh_mm.compress(*args, **kw).sketch
    finally:
        compiled.ENABLED, fwht_gpu.compiled.ENABLED = saved


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and \
        np.array_equal(a.view(np.uint8), b.view(np.uint8))


def _factors(kind, rng):
    if kind == "dense":
        A = rng.standard_normal((70, 300)) * np.exp2(rng.integers(-30, 30, (70, 300)))
        B = rng.standard_normal((300, 50))
        A[:, 7] = 0.0
        B[11] = 0.0
        return A, B
    if kind == "sparse":
        A = sps.random(90, 500, density=0.03, random_state=1, format="csc")
        B = sps.random(500, 80, density=0.03, random_state=2, format="csr")
        return A, B
    if kind == "wide":                      # more keys than stored values: hashes per value
        A = sps.random(5000, 300, density=0.001, random_state=5, format="csc")
        B = sps.random(300, 4000, density=0.001, random_state=6, format="csr")
        return A, B
    if kind == "mixed":
        return rng.standard_normal((40, 130)), sps.random(130, 60, density=0.1, random_state=3)
    X = sps.random(400, 120, density=0.05, random_state=4, format="csr")
    X.data[:] = 1.0
    return X.T, X                                                   # a Gram product


@pytest.mark.parametrize("kind", ["dense", "sparse", "wide", "mixed", "gram"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_compiled_compression_has_the_specifications_bits(kind, dtype):
    A, B = _factors(kind, np.random.default_rng(0))
    kw = dict(buckets=1024, reps=3, seed=5, dtype=dtype)
    got = pagh_mm.compress(A, B, **kw).sketch
    assert _same(got, _specification(A, B, **kw))


@pytest.mark.parametrize("method", ["fwht", "fft"])
def test_threads_and_memory_budgets_do_not_change_the_bits(method):
    A, B = _factors("dense", np.random.default_rng(1))
    kw = dict(buckets=512, reps=5, seed=2, method=method)
    want = _specification(A, B, **kw)
    before = numba.get_num_threads()
    try:
        for threads in sorted({1, 2, before}):
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
            for budget in (1 << 19, 1 << 21, None):
                got = pagh_mm.compress(A, B, memory_budget=budget, **kw).sketch
                assert _same(got, want), (threads, budget)
    finally:
        numba.set_num_threads(before)


def test_scatter_kernel_matches_the_scatter_matrix():
    rng = np.random.default_rng(3)
    keys, nb, d, b = 37, 9, 4, 16
    X = rng.standard_normal((keys, nb))
    h = rng.integers(0, b, (keys, d))
    s = rng.choice([-1.0, 1.0], (keys, d))
    want = np.zeros((nb, d, b))
    for k in range(nb):
        for i in range(keys):               # 0.0 plus the keys' signed values, increasing key
            for t in range(d):
                want[k, t, h[i, t]] += s[i, t] * X[i, k]
    assert _same(compiled.scatter_dense(X, h, s, b), want)
    assert _same(compiled.scatter_dense(np.asfortranarray(X), h, s, b), want)
