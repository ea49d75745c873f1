"""pagh_mm on the GPU against the CPU path (``pytest -m gpu``; skipped without a GPU)."""
import numpy as np
import pytest
import scipy.sparse as sps

import pagh_mm
from fwht_gpu.cuda import launch
from pagh_mm import hashing
from tests.test_pagh_cpu import sparse_int_product

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not launch.available(), reason=f"no GPU: {launch.status()}")]


def _cp():
    return launch.cupy()


@pytest.mark.parametrize("family", list(pagh_mm.HASH_FAMILIES))
def test_hash_values_identical_on_gpu(family):
    cp = _cp()
    p = hashing.HashParams.draw(family, 123, 4)
    keys = np.arange(100_000)
    for t in range(4):
        for which in (1, 2):
            assert (hashing.buckets(p, t, which, cp.asarray(keys), 13, cp).get()
                    == hashing.buckets(p, t, which, keys, 13)).all()
            assert (hashing.signs(p, t, which, cp.asarray(keys), cp).get()
                    == hashing.signs(p, t, which, keys)).all()


@pytest.mark.parametrize("method", ["fwht", "fft"])
def test_gpu_equals_cpu(method):
    cp = _cp()
    rng = np.random.default_rng(0)
    A, B = sparse_int_product(rng, m=300, n=200, p=250, density=0.03)
    C = A @ B
    kw = dict(buckets=1 << 14, reps=5, seed=3, method=method)
    c = pagh_mm.compress(A, B, **kw)
    g = pagh_mm.compress(cp.asarray(A), cp.asarray(B), **kw)
    assert isinstance(g.sketch, cp.ndarray)
    if method == "fwht":        # integer data: every step is exact on both devices
        assert (g.sketch.get() == c.sketch).all()
    else:                        # cuFFT and pocketfft round differently
        assert np.allclose(g.sketch.get(), c.sketch, rtol=0, atol=1e-9)
    D = g.to_dense()
    assert isinstance(D, cp.ndarray) and np.allclose(D.get(), c.to_dense(), atol=1e-9)
    tg, tc = g.top_k(30, verify=True), c.top_k(30, verify=True)
    # integer products have ties: compare the values found, not which of equal entries
    assert (np.sort(np.abs(tg.exact.get())) == np.sort(np.abs(tc.exact))).all()
    assert (tg.exact.get() == C[tg.rows.get(), tg.cols.get()]).all()
    # float data: same up to summation order
    Af, Bf = rng.standard_normal((300, 200)), rng.standard_normal((200, 250))
    cf = pagh_mm.compress(Af, Bf, **kw)
    gf = pagh_mm.compress(cp.asarray(Af), cp.asarray(Bf), **kw)
    assert np.allclose(gf.sketch.get(), cf.sketch, rtol=1e-10, atol=1e-9 * np.abs(cf.sketch).max())


def test_gpu_sparse_and_dtypes_and_errors(tmp_path):
    cp = _cp()
    import cupyx.scipy.sparse as csp
    rng = np.random.default_rng(1)
    A, B = sparse_int_product(rng, m=200, n=150, p=180, density=0.012)
    assert np.count_nonzero(A @ B) < 1000
    dense = pagh_mm.compress(cp.asarray(A), cp.asarray(B), buckets=1 << 13, reps=3, seed=1)
    sp = pagh_mm.compress(csp.csr_matrix(cp.asarray(A)), csp.csr_matrix(cp.asarray(B)),
                          buckets=1 << 13, reps=3, seed=1)
    assert (sp.sketch == dense.sketch).all()
    C = A @ B
    for dt, tol in (("float32", 1e-4), ("float16", 0.1), ("bfloat16", 0.5)):
        g = pagh_mm.compress(cp.asarray(A), cp.asarray(B), buckets=1 << 16, reps=5, seed=2, dtype=dt)
        assert np.abs(g.to_dense().get() - C).max() <= tol * np.abs(C).max()
    with pytest.raises(ValueError, match="same device"):
        pagh_mm.compress(A, cp.asarray(B), buckets=16, reps=1)
    with pytest.raises(ValueError, match="same device"):
        pagh_mm.compress(sps.csr_matrix(A), csp.csr_matrix(cp.asarray(B)), buckets=16, reps=1)
    bad = cp.asarray(A)
    bad[0, 0] = cp.nan
    with pytest.raises(ValueError, match="NaN"):
        pagh_mm.compress(bad, cp.asarray(B), buckets=16, reps=1)
    dense.save(tmp_path / "g.npz")
    back = pagh_mm.CompressedProduct.load(tmp_path / "g.npz")
    assert (back.sketch == dense.sketch.get()).all()
    assert isinstance(pagh_mm.CompressedProduct.load(tmp_path / "g.npz", device="gpu").sketch, cp.ndarray)
    D = pagh_mm.approx_matmul(cp.asarray(A), cp.asarray(B), buckets=1 << 16, seed=0)
    assert isinstance(D, cp.ndarray) and (D.get() == C).all()


def test_gpu_planted_recall():
    cp = _cp()
    from pagh_mm import synthetic
    d = synthetic.planted_product(2048, 100, seed=0, xp=cp)
    b = synthetic.choose_buckets(2048, 100, d.magnitude, 5)
    top = pagh_mm.compress(d.A, d.B, buckets=b, reps=5, seed=0).top_k(100, verify=True)
    assert synthetic.recall(d.rows, d.cols, top.rows.get(), top.cols.get()) >= 0.99


@pytest.mark.parametrize("method", ["fwht", "fft"])
@pytest.mark.parametrize("reps", [1, 4, 5])
def test_gpu_query_kernel_equals_numpy(method, reps):
    """Same sketch on both devices: the GPU tile kernel returns the NumPy medians bit for bit."""
    rng = np.random.default_rng(reps)
    A, B = rng.standard_normal((130, 40)), rng.standard_normal((40, 170))
    c = pagh_mm.compress(A, B, buckets=256, reps=reps, seed=1, method=method)
    g = c.to("gpu")
    assert (g.to_dense().get() == c.to_dense()).all()
    tg, tc = g.top_k(50), c.top_k(50)
    assert (np.sort(np.abs(tg.estimates.get())) == np.sort(np.abs(tc.estimates))).all()
    ag, ac = g.above(3.0), c.above(3.0)
    assert set(zip(ag.rows.get().tolist(), ag.cols.get().tolist())) == \
        set(zip(ac.rows.tolist(), ac.cols.tolist()))
