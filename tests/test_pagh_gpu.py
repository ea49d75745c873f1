"""pagh_mm on the GPU against the CPU path (``pytest -m gpu``; skipped without a GPU)."""
import itertools

import numpy as np
import pytest
import scipy.sparse as sps

import pagh_mm
from fwht_gpu import gpu
from pagh_mm import backend, hashing
from tests.test_pagh_cpu import sparse_int_product

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not gpu.available(), reason=f"no GPU: {gpu.status()}")]


def _cp():
    return gpu.cupy()


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
    # float data: the same summation order on both devices (FFT libraries round differently)
    Af, Bf = rng.standard_normal((300, 200)), rng.standard_normal((200, 250))
    cf = pagh_mm.compress(Af, Bf, **kw)
    gf = pagh_mm.compress(cp.asarray(Af), cp.asarray(Bf), **kw)
    if method == "fwht":
        assert (gf.sketch.get() == cf.sketch).all()
    else:
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
    assert (sp.sketch.get() == dense.sketch.get()).all()      # compared on the host
    C = A @ B
    for dt in ("float32", "float16", "bfloat16"):     # the CPU's bits (estimates: see the CPU tests)
        kw = dict(buckets=1 << 14, reps=5, seed=2, dtype=dt)
        g = pagh_mm.compress(cp.asarray(A), cp.asarray(B), **kw)
        c = pagh_mm.compress(A, B, **kw)
        assert (g.sketch.get() == c.sketch).all() and (g.to_dense().get() == c.to_dense()).all()
        assert np.mean(g.to_dense().get() == C) > 0.999
        kw = dict(buckets=1 << 16, reps=3, seed=2, dtype=dt)    # 2^16: split lone / 2-pass transforms
        a, b = A[:, :30], B[:30]
        assert (pagh_mm.compress(cp.asarray(a), cp.asarray(b), **kw).sketch.get()
                == pagh_mm.compress(a, b, **kw).sketch).all()
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


def test_all_finite_on_the_gpu_agrees_with_numpy():
    """``backend.all_finite`` on CuPy (one reduction kernel for float16/32/64) gives NumPy's
    answer: those dtypes and integers, contiguous, transposed and strided views, one NaN / inf
    / -inf at the first, a middle and the last position, empty arrays, deferred."""
    cp = gpu.cupy()
    rng = np.random.default_rng(4)
    for dt in (np.float16, np.float32, np.float64, np.int32):
        base = rng.standard_normal((37, 300)).astype(dt)
        for bad in (None, np.nan, np.inf, -np.inf):
            for at in ((0, 0), (18, 151), (36, 299)):
                h = base.copy()
                if bad is not None:
                    if np.dtype(dt).kind == "i":
                        continue
                    h[at] = bad
                d = cp.asarray(h)
                for hv, dv in ((h, d), (h.T, d.T), (h[::2, 1::3], d[::2, 1::3]), (h[:0], d[:0]),
                               (h[5], d[5])):
                    want = bool(np.isfinite(hv.astype(np.float64)).all())
                    assert backend.all_finite(dv, cp) is want, (dt, bad, at, dv.shape)
                    flag = backend.all_finite(dv, cp, defer=True)
                    assert isinstance(flag, cp.ndarray) and bool(flag) is want


def test_gpu_planted_recall():
    cp = _cp()
    from pagh_mm import synthetic
    d = synthetic.planted_product(2048, 100, seed=0, xp=cp)
    b = synthetic.choose_buckets(2048, 100, d.magnitude, 5)
    top = pagh_mm.compress(d.A, d.B, buckets=b, reps=5, seed=0).top_k(100, verify=True)
    assert synthetic.recall(d.rows, d.cols, top.rows.get(), top.cols.get()) >= 0.99


@pytest.mark.parametrize("method", ["fwht", "fft"])
# (7-13: reps="auto" for dense queries; 8: an even median in registers; 14: past SCAN_REG)
@pytest.mark.parametrize("reps", [1, 4, 5, 7, 8, 9, 11, 13, 14])
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


# --- issue 12: same bits on both devices, exact values, memory, pickling ----------------------

@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_gpu_sketch_bits_equal_cpu_for_every_budget_and_format(dtype):
    cp = _cp()
    import cupyx.scipy.sparse as csp
    rng = np.random.default_rng(11)
    A = rng.standard_normal((300, 130)) * (rng.random((300, 130)) < 0.1)
    B = rng.standard_normal((130, 250)) * (rng.random((130, 250)) < 0.1)
    kw = dict(buckets=1 << 12, reps=5, seed=3, dtype=dtype)
    ref = pagh_mm.compress(A, B, **kw).sketch
    for budget in (None, 3 << 20, 7 << 20, 16 << 20):          # blocks of 1 .. 8 inner indices
        g = pagh_mm.compress(cp.asarray(A), cp.asarray(B), memory_budget=budget, **kw)
        assert (g.sketch.get() == ref).all(), budget
        gs = pagh_mm.compress(csp.csr_matrix(cp.asarray(A)), csp.csc_matrix(cp.asarray(B)),
                              memory_budget=budget, **kw)
        assert (gs.sketch.get() == ref).all(), budget
    At = cp.asfortranarray(cp.asarray(A))                      # other strides, same bits
    assert (pagh_mm.compress(At, cp.asarray(B), **kw).sketch.get() == ref).all()
    # a mostly empty inner dimension: only inner indices with values on both sides are computed
    As = sps.random(300, 3000, density=0.002, random_state=1, format="csc")
    Bs = sps.random(3000, 250, density=0.002, random_state=2, format="csr")
    want = pagh_mm.compress(As, Bs, memory_budget=3 << 20, **kw).sketch
    got = pagh_mm.compress(csp.csc_matrix(As), csp.csr_matrix(Bs), memory_budget=3 << 20, **kw)
    assert (got.sketch.get() == want).all()


def test_gpu_exact_values_equal_cpu_and_are_exact_for_integers():
    cp = _cp()
    import cupyx.scipy.sparse as csp
    rng = np.random.default_rng(12)
    A = (rng.standard_normal((200, 150)) * (rng.random((200, 150)) < 0.3)).astype(np.float32)
    B = (rng.standard_normal((150, 180)) * (rng.random((150, 180)) < 0.3)).astype(np.float32)
    r, c = rng.integers(0, 200, 300), rng.integers(0, 180, 300)
    want = pagh_mm.compress(A, B, buckets=64, reps=1, seed=0).exact(r, c)
    g = pagh_mm.compress(cp.asarray(A), cp.asarray(B), buckets=64, reps=1, seed=0)
    assert (g.exact(cp.asarray(r), cp.asarray(c)).get() == want).all()
    gs = pagh_mm.compress(csp.csr_matrix(cp.asarray(A)), csp.csr_matrix(cp.asarray(B)), buckets=64,
                          reps=1, seed=0)
    assert (gs.exact(cp.asarray(r), cp.asarray(c)).get() == want).all()
    Ai = np.zeros((4, 3), np.int32)
    Ai[1] = 100_000
    Bi = np.zeros((3, 5), np.int32)
    Bi[:, 2] = 100_000
    for conv in (cp.asarray, lambda M: csp.csr_matrix(cp.asarray(M.astype(np.float64)))):
        sk = pagh_mm.compress(conv(Ai), conv(Bi), buckets=64, reps=3, seed=0)
        assert float(sk.exact(cp.asarray([1]), cp.asarray([2]))[0]) == 3e10
        assert float(sk.top_k(1, verify=True).exact[0]) == 3e10


def test_gpu_memory_refused_up_front_and_pickle():
    cp = _cp()
    A, B = cp.ones((4, 3)), cp.ones((3, 5))
    with pytest.raises(MemoryError, match="GPU memory"):
        pagh_mm.compress(A, B, buckets=2**32, reps=5, seed=0)
    import pickle
    rng = np.random.default_rng(13)
    Af, Bf = cp.asarray(rng.standard_normal((60, 40))), cp.asarray(rng.standard_normal((40, 70)))
    sk = pagh_mm.compress(Af, Bf, buckets=256, reps=3, seed=4)
    back = pickle.loads(pickle.dumps(sk))
    assert isinstance(back.sketch, cp.ndarray) and back.backend.gpu
    assert (back.sketch.get() == sk.sketch.get()).all()
    assert (back.top_k(5, verify=True).exact.get() == sk.top_k(5, verify=True).exact.get()).all()


def test_gpu_duplicates_exact_rows_and_devices():
    """Duplicate sparse entries summed in one order (the same bits as the CPU, run after run);
    exact values from the stored values only; factors stay on their device."""
    cp = _cp()
    import cupyx.scipy.sparse as csp
    rng = np.random.default_rng(14)
    r, c = rng.integers(0, 40, 400), rng.integers(0, 30, 400)
    v = rng.standard_normal(400) * 10 ** rng.uniform(-8, 8, 400)
    A = sps.coo_matrix((v, (r, c)), shape=(40, 30))
    B = rng.standard_normal((30, 20))
    kw = dict(buckets=64, reps=3, seed=1)
    want = pagh_mm.compress(A, B, **kw)
    Ag = csp.coo_matrix((cp.asarray(v), (cp.asarray(r), cp.asarray(c))), shape=(40, 30))
    for _ in range(3):
        g = pagh_mm.compress(Ag, cp.asarray(B), **kw)
        assert (g.sketch.get() == want.sketch).all()
    i, j = rng.integers(0, 40, 50), rng.integers(0, 20, 50)
    assert (g.exact(cp.asarray(i), cp.asarray(j)).get() == want.exact(i, j)).all()
    Bs = sps.random(30, 20, density=0.3, format="csr", random_state=4)
    g2 = pagh_mm.compress(Ag, csp.csr_matrix(Bs), **kw)
    assert (g2.exact(cp.asarray(i), cp.asarray(j)).get()
            == pagh_mm.compress(A, Bs, **kw).exact(i, j)).all()
    assert g.to("cpu").factors == [] and len(g.to("gpu").factors) == 1
    with pytest.raises(ValueError, match="at most 127"):
        pagh_mm.compress(cp.asarray(B[:4]).T, cp.asarray(B[:4]), buckets=16, reps=128)


def test_gpu_certified_queries_equal_cpu_bit_for_bit():
    """Scan, verify, peel and certify: the same candidates, answer, margin and noise on both
    devices (fixed-order sums everywhere), for top_k, above and per-row, dense and sparse."""
    cp = _cp()
    rng = np.random.default_rng(3)
    A = rng.standard_normal((220, 90))
    B = rng.standard_normal((90, 170))
    A[7, :60] += 2.0
    B[:60, 11] += 2.0
    A[50, :60] -= 1.5
    B[:60, 60] += 1.5
    for sparse in (False, True):
        a, b = (sps.csr_matrix(A), sps.csr_matrix(B)) if sparse else (A, B)
        ga, gb = (cupyx_sparse().csr_matrix(a), cupyx_sparse().csr_matrix(b)) if sparse \
            else (cp.asarray(a), cp.asarray(b))
        kw = dict(buckets=1 << 12, reps=5, seed=7)
        c, g = pagh_mm.compress(a, b, **kw), pagh_mm.compress(ga, gb, **kw)
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pagh_mm.CertificateWarning)
            for q in (lambda s: s.top_k(6, verify=True), lambda s: s.above(60.0, verify=True),
                      lambda s: s.top_k(4, verify=True, by="value"),
                      lambda s: s.top_k_per_row(2, threshold=40.0, verify=True, format="entries")):
                ec, eg = q(c), q(g)
                for f in ("rows", "cols", "estimates", "exact"):
                    assert (cp.asnumpy(getattr(eg, f)) == getattr(ec, f)).all(), f
                assert (eg.certified, eg.margin, eg.noise, eg.verified) == \
                    (ec.certified, ec.margin, ec.noise, ec.verified)
        M = g.top_k_per_row(2, threshold=40.0)
        assert type(M).__module__.startswith("cupyx") and M.shape == (220, 170)


def cupyx_sparse():
    import cupyx.scipy.sparse as csp
    return csp


def test_gpu_auto_parameters_certify_the_sparse_planted_product():
    """The issue's case at 32768: default parameters, certified, recall 1 (131072 in the
    benchmark script, benchmarks/certified_sparse.py)."""
    from pagh_mm import synthetic
    d = synthetic.sparse_planted(32768, 16, 100, 256, seed=0)
    csp = cupyx_sparse()
    sk = pagh_mm.compress(csp.csr_matrix(d.A), csp.csr_matrix(d.B), k=100, seed=1)
    top = sk.top_k(100, verify=True)
    assert top.certified
    assert synthetic.recall(d.rows, d.cols, top.rows.get(), top.cols.get()) == 1.0


def test_gpu_gram_sketch_estimates_and_certified_queries_equal_cpu_bit_for_bit():
    """Gram products (one polynomial hash, squared transforms, blind repetitions left out of
    the median, the diagonal exact): the same sketch, diagonal, tile medians (GPU kernel vs
    NumPy), certified answers, margins and blind pairs on both devices, dense and sparse."""
    import warnings
    from pagh_mm import query
    cp = _cp()
    rng = np.random.default_rng(4)
    X = rng.standard_normal((300, 150))
    X[:, 3] += 2 * X[:, 90]
    X[:, 40] -= 1.5 * X[:, 41]
    X[rng.random(X.shape) < 0.4] = 0.0
    for sparse in (False, True):
        x = sps.csr_matrix(X) if sparse else X
        gx = cupyx_sparse().csr_matrix(x) if sparse else cp.asarray(x)
        for b in (1 << 12, 4):                  # 4 buckets: many blind pairs
            kw = dict(buckets=b, reps=5, seed=11)
            c, g = pagh_mm.compress(x.T, x, **kw), pagh_mm.compress(gx.T, gx, **kw)
            assert c.gram and g.gram and g.params.family == "polynomial"
            assert (cp.asnumpy(g.sketch) == c.sketch).all()
            assert (cp.asnumpy(g.diagonal) == c.diagonal).all()
            assert (cp.asnumpy(g.to_dense()) == c.to_dense()).all()          # kernel medians
            i, j = np.arange(150), np.arange(150)[::-1].copy()
            assert (cp.asnumpy(g.estimate(cp.asarray(i), cp.asarray(j))) ==
                    c.estimate(i, j)).all()                                   # masked_median
            assert (cp.asnumpy(query.blind_pairs(g)) == query.blind_pairs(c)).all()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", pagh_mm.CertificateWarning)
                for q in (lambda s: s.top_k(6, verify=True, exclude_diagonal=True),
                          lambda s: s.top_k(4, verify=True),
                          lambda s: s.above(150.0, verify=True, exclude_diagonal=True),
                          lambda s: s.top_k_per_row(2, threshold=60.0, verify=True,
                                                    exclude_diagonal=True, format="entries")):
                    ec, eg = q(c), q(g)
                    for f in ("rows", "cols", "estimates", "exact"):
                        assert (cp.asnumpy(getattr(eg, f)) == getattr(ec, f)).all(), f
                    assert (eg.certified, eg.margin, eg.noise, eg.verified) == \
                        (ec.certified, ec.margin, ec.noise, ec.verified)


# --- issue 16: the fused dense kernel -----------------------------------------------------

def _fused_inputs(rng, inner: int):
    """(A0, B0, the factor pairs of the fused tests): float64 C and F layouts, float32, mixed,
    integer values with a transposed view."""
    A0 = rng.standard_normal((97, inner))
    B0 = rng.standard_normal((inner, 83))
    return A0, B0, [(A0, B0), (np.asfortranarray(A0), B0),
                    (A0.astype(np.float32), B0.astype(np.float32)), (A0.astype(np.float32), B0),
                    (np.round(A0 * 8).astype(np.int32), B0.T.copy().T)]


def _assert_fused_bits(cp, log2b: int, dtype, products, budgets, X) -> None:
    """Each (hash family, A, B) of ``products`` compressed on the GPU's fused route with each
    memory budget, and X's Gram product (C and F layouts): the CPU's bits."""
    for family, A, B in products:
        kw = dict(buckets=1 << log2b, reps=3, seed=5, dtype=dtype, hash=family)
        want = pagh_mm.compress(A, B, **kw).sketch
        for budget in budgets:
            prof = {}
            got = pagh_mm.compress(cp.asarray(A), cp.asarray(B), profile=prof,
                                   memory_budget=budget, **kw)
            assert "fused" in prof and "scatter" not in prof
            assert (got.sketch.get() == want).all(), (log2b, family, A.dtype, budget)
    for x in (X, np.asfortranarray(X)):
        kw = dict(buckets=1 << log2b, reps=3, seed=9, dtype=dtype)
        want = pagh_mm.compress_gram(x, **kw)
        prof = {}
        got = pagh_mm.compress_gram(cp.asarray(x), profile=prof, **kw)
        assert got.gram and "fused" in prof
        assert (got.sketch.get() == want.sketch).all(), log2b


def _assert_staged_bits(cp, A0, B0, log2b: int, dtype) -> None:
    """The staged GPU path (matmul.GPU_FUSED off) gives the CPU's bits too."""
    from pagh_mm import matmul
    before = matmul.GPU_FUSED
    try:
        matmul.GPU_FUSED = False
        kw = dict(buckets=1 << log2b, reps=3, seed=5, dtype=dtype)
        prof = {}
        staged = pagh_mm.compress(cp.asarray(A0), cp.asarray(B0), profile=prof, **kw)
        assert "fused" not in prof
        assert (staged.sketch.get() == pagh_mm.compress(A0, B0, **kw).sketch).all()
    finally:
        matmul.GPU_FUSED = before


FAMILIES = ("multiply-add-shift", "tabulation")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fused_kernel_gives_the_cpu_bits_for_every_size_layout_family_and_gram(dtype):
    """The fused dense kernel (sketch, transform and product of each inner index in one
    thread block): the CPU's bits for buckets from 2 to the kernel's largest, float64,
    float32, mixed and integer values, C and F layouts and transposed views, every hash
    family, blocks of the inner dimension that do not divide it, and Gram products; the
    staged GPU path gives the same bits (matmul.GPU_FUSED off)."""
    cp = _cp()
    from pagh_mm.cuda import kernels
    rng = np.random.default_rng(7)
    top = kernels.FUSED_MAX_LOG2B["float" if dtype == "float32" else "double"]
    A0, B0, inputs = _fused_inputs(rng, 70)
    regs = kernels.FUSED_REG_LOG_VPT["float" if dtype == "float32" else "double"] + 10
    fixed = kernels.FUSED_FIXED_LOG2B["float" if dtype == "float32" else "double"]
    # top: A's values wait in the output row; fixed: kernels compiled for that size alone
    for log2b in sorted({1, 2, 3, 4, 5, 9, regs, top, *fixed}):
        products = [(f, A, B) for f in FAMILIES
                    for A, B in (inputs if log2b in (3, regs, top) else inputs[:1])]
        # blocks of the inner dimension (70) from 1 to 128 inner indices: groups of 1 and 2
        # summed in the kernel, the last one partial
        _assert_fused_bits(cp, log2b, dtype, products,
                           (1 << 20,) if log2b <= 9 else (None, 8 << 20, 16 << 20),
                           rng.standard_normal((150, 60)))
    _assert_staged_bits(cp, A0, B0, top, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_key_order_sketch_gives_the_cpu_bits_at_its_load_limit(dtype, monkeypatch):
    """The one-block kernels of the most buckets per block (FP32 2^15, FP64 2^14) sketch a
    factor with at most FUSED_KEY_ORDER_MAX_LOAD keys per bucket in key order: at that limit
    (thousands of slow buckets summed from their lists, several passes of the key loop), with
    the other factor over it (one factor in key order, the other by position), decoding masks,
    -0.0 alone in its bucket, a factor of -0.0 only, integer columns, both hash families and
    Gram products in both layouts: the CPU's bits, and the same bits as the sketch by position
    (the load set to 0)."""
    cp = _cp()
    from pagh_mm.cuda import kernels
    name = "float" if dtype == "float32" else "double"
    lb = kernels.FUSED_MAX_LOG2B[name]
    b = 1 << lb
    if kernels._cluster_log(lb, dtype)[1]:
        pytest.skip("one block does not hold the most buckets on this GPU")
    limit = int(kernels.FUSED_KEY_ORDER_MAX_LOAD[name] * b)
    assert kernels.fused_key_order(limit, lb, dtype) and not kernels.fused_key_order(limit + 1, lb, dtype)
    rng = np.random.default_rng(13)
    positional = {"float": 0.0, "double": 0.0}
    library = kernels.FUSED_KEY_ORDER_MAX_LOAD

    def both(f, args, kw):
        want = f(*args, **kw)
        for load in (library, positional):
            monkeypatch.setattr(kernels, "FUSED_KEY_ORDER_MAX_LOAD", load)
            prof = {}
            got = f(*(cp.asarray(x) for x in args), profile=prof, **kw)
            assert "fused" in prof
            assert got.sketch.get().tobytes() == want.sketch.tobytes(), (args[0].shape, kw)
            if kw.get("decode"):
                assert got.bits.sketch.get().tobytes() == want.bits.sketch.tobytes()
    # the last two: one factor over the limit (by position), the other at it (key order)
    # (40, 1): factors without a slow bucket (an empty slow list)
    for m, p in ((limit, b + 1), (b + 1, limit), (limit, limit // 4), (limit, limit + 1),
                 (limit + 1, limit), (40, 1)):
        A = rng.standard_normal((m, 6))
        B = rng.standard_normal((6, p))
        A[::3, 1] = -0.0
        B[2] = 0.0
        A[:, 3] = np.round(A[:, 3] * 4)
        for family in FAMILIES:
            for decode in (False, True):
                both(pagh_mm.compress, (A, B), dict(buckets=b, reps=3, seed=5, dtype=dtype,
                                                    hash=family, decode=decode))
    zero = np.full((limit, 4), -0.0)
    both(pagh_mm.compress, (zero, rng.standard_normal((4, b // 4))),
         dict(buckets=b, reps=3, seed=5, dtype=dtype))
    X = rng.standard_normal((5, limit))
    X[1] = -0.0
    for x in (X, np.asfortranarray(X)):
        both(pagh_mm.compress_gram, (x,), dict(buckets=b, reps=3, seed=9, dtype=dtype))
    A, B = rng.standard_normal((b, 6)), rng.standard_normal((6, 50))   # A in key order
    kw = dict(buckets=b, reps=3, seed=5, dtype=dtype)
    want = pagh_mm.compress(A, B, **kw).sketch.tobytes()
    _poison_one_key_code(monkeypatch, cp)
    for load, same in ((library, False), (positional, True)):
        monkeypatch.setattr(kernels, "FUSED_KEY_ORDER_MAX_LOAD", load)
        got = pagh_mm.compress(cp.asarray(A), cp.asarray(B), **kw).sketch.get().tobytes()
        assert (got == want) == same, load


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_gram_kernels_of_fewer_buckets_sketch_in_key_order_with_the_cpu_bits(dtype,
                                                                                  monkeypatch):
    """The Gram kernels of fewer buckets than the most per block sketch in key order (inlined)
    at up to FUSED_KEY_ORDER_MAX_LOAD keys per bucket, products of two factors by position:
    at the load limit and over it, -0.0 columns, integer columns, both layouts, several
    chunks of keys (SLOW_CHUNK; 1024 threads at RegLogVpt + 10: the next chunk's loads ahead):
    the CPU's bits, and the bits of the sketch by position (the load set to 0); with one key's
    code poisoned the kernel's sketch changes (it reads the codes) unless the load is 0.  In
    key order the block holds no sketch stage, and the FP32 blocks of 1024 threads sum two
    levels of the tree on Hopper (kernels.fused_group without the stage): inner dimensions of
    7 and 13 (groups of 4, the last of 3 or 1 terms)."""
    cp = _cp()
    from pagh_mm.cuda import kernels
    name = "float" if dtype == "float32" else "double"
    top = kernels.FUSED_MAX_LOG2B[name]
    rng = np.random.default_rng(17)
    positional = {"float": 0.0, "double": 0.0}
    library = kernels.FUSED_KEY_ORDER_MAX_LOAD
    levels = []                               # the tree levels of each fused launch
    real_terms = kernels.fused_terms
    monkeypatch.setattr(kernels, "fused_terms",
                        lambda *args: levels.append(args[7]) or real_terms(*args))
    for lb in (3, 10, top - 2, kernels.FUSED_REG_LOG_VPT[name] + 10):
        b = 1 << lb
        # (the library's load: the loop below leaves the load at 0)
        monkeypatch.setattr(kernels, "FUSED_KEY_ORDER_MAX_LOAD", library)
        limit = int(library[name] * b)
        assert kernels.fused_key_order(limit, lb, dtype, gram=True)
        assert not kernels.fused_key_order(limit + 1, lb, dtype, gram=True)
        assert not kernels.fused_key_order(limit, lb, dtype)          # products: by position
        keyed = kernels.fused_group(lb, dtype, 1 << 20, gram=True, keyed=True)
        if lb == kernels.FUSED_REG_LOG_VPT[name] + 10 and gpu.limits().smem_per_block >= 200 << 10:
            assert keyed == kernels.FUSED_KEYS_MAX_LOG_G[name], keyed   # 1024 threads (Hopper)
        for m, rows in ((limit, 7), (limit + 1, 7), (b // 2 + 3, 13)):
            X = rng.standard_normal((rows, m))
            X[1] = -0.0
            X[:, ::5] = -0.0
            X[4] = np.round(X[4] * 8)
            for x in (X, np.asfortranarray(X)):
                kw = dict(buckets=b, reps=3, seed=9, dtype=dtype)
                want = pagh_mm.compress_gram(x, **kw).sketch.tobytes()
                for load in (library, positional):
                    monkeypatch.setattr(kernels, "FUSED_KEY_ORDER_MAX_LOAD", load)
                    prof = {}
                    del levels[:]
                    got = pagh_mm.compress_gram(cp.asarray(x), profile=prof, **kw)
                    assert got.gram and "fused" in prof
                    assert got.sketch.get().tobytes() == want, (lb, m, load)
                    # key order (at the limit, by the library's load): the stageless levels
                    assert levels == [keyed if load is library and m <= limit else
                                      kernels.FUSED_MAX_LOG_G], (lb, m, load, levels)
    X = rng.standard_normal((5, 3000))
    kw = dict(buckets=1 << 10, reps=3, seed=9, dtype=dtype)
    want = pagh_mm.compress_gram(X, **kw).sketch.tobytes()
    _poison_one_key_code(monkeypatch, cp)
    for load, same in ((library, False), (positional, True)):
        monkeypatch.setattr(kernels, "FUSED_KEY_ORDER_MAX_LOAD", load)
        got = pagh_mm.compress_gram(cp.asarray(X), **kw).sketch.get().tobytes()
        assert (got == want) == same, load


def _poison_one_key_code(monkeypatch, cp) -> None:
    """Side.gpu_codes with the sign of repetition 0's first one-key code flipped (a negative
    control: a kernel that sketches in key order then differs from the CPU)."""
    from pagh_mm import sketch
    real = sketch.Side.gpu_codes

    def poisoned(self):
        code, *rest = real(self)
        code = code.copy()
        first = int(cp.nonzero((code[0] & np.uint32(sketch.CODE_SLOW)) == 0)[0][0])
        code[0, first] ^= np.uint32(sketch.CODE_NEG)
        return (code, *rest)
    monkeypatch.setattr(sketch.Side, "gpu_codes", poisoned)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fused_cluster_kernel_gives_the_cpu_bits_beyond_one_block(dtype):
    """Buckets beyond one block's shared memory (thread-block clusters of 4, 8 and 16 blocks,
    sm_90; every cluster shape the device launches): the CPU's bits for float64, float32,
    mixed and integer values, C and F layouts, both hash families, blocks of the inner
    dimension with a partial last group, Gram products; the staged GPU path gives the same
    bits."""
    cp = _cp()
    from pagh_mm.cuda import kernels
    name = "float" if dtype == "float32" else "double"
    most = min(kernels.FUSED_CLUSTER_MAX_LOG_CL, gpu.limits().max_cluster_log)
    first = kernels.FUSED_CLUSTER_FROM[name]
    sizes = [lb for lb in range(first, first + 8) if kernels._cluster_shape(lb, name, most)[1]]
    if not sizes:
        pytest.skip("no thread-block clusters on this GPU")
    rng = np.random.default_rng(11)
    A0, B0, inputs = _fused_inputs(rng, 69)
    for log2b in sizes:
        products = [(f, A, B) for f in FAMILIES
                    for A, B in (inputs if f == "tabulation" and log2b < first + 2 else inputs[:2])]
        # one block of the inner dimension (groups of 4, the last one partial); blocks of 2
        # (groups of 2, the last block of one inner index); blocks of 1 (no tree in the kernel)
        _assert_fused_bits(cp, log2b, dtype, products,
                           (None, 4 << 20 << (log2b - first), 2 << 20 << (log2b - first)),
                           rng.standard_normal((150, 61)))
    _assert_staged_bits(cp, A0, B0, first, dtype)


def test_gpu_direct_pairs_give_the_cpu_bits_for_exact_integer_sparse_products():
    """Sparse factors with integer values (FP64 transforms): every inner index is added pair
    by pair into the time domain (pairs_direct), exact, so the CPU's bits whatever route the
    CPU took; Gram products too; float values or FP32 transforms keep the transform route;
    automatic buckets are the same on both devices (pair-accumulated on either)."""
    cp = _cp()
    csp = cupyx_sparse()
    rng = np.random.default_rng(21)
    A, B = sparse_int_product(rng, m=400, n=300, p=350, density=0.03)
    As, Bs = sps.csc_matrix(A), sps.csr_matrix(B)
    for b in (1 << 4, 1 << 12):
        kw = dict(buckets=b, reps=5, seed=3)
        prof = {}
        g = pagh_mm.compress(csp.csc_matrix(cp.asarray(A)), csp.csr_matrix(cp.asarray(B)),
                             profile=prof, memory_budget=3 << 20, **kw)
        assert "pairs" in prof
        assert (g.sketch.get() == pagh_mm.compress(As, Bs, **kw).sketch).all(), b
    X = sps.csr_matrix(np.round(rng.standard_normal((500, 80)) * (rng.random((500, 80)) < 0.05)))
    gx = csp.csr_matrix(cp.asarray(X.toarray()))
    prof = {}
    g = pagh_mm.compress(gx.T, gx, buckets=1 << 10, reps=5, seed=4, profile=prof)
    assert g.gram and "pairs" in prof
    assert (g.sketch.get() == pagh_mm.compress(X.T, X, buckets=1 << 10, reps=5, seed=4).sketch).all()
    prof = {}
    pagh_mm.compress(csp.csc_matrix(cp.asarray(A * 0.5)), csp.csr_matrix(cp.asarray(B)),
                     buckets=1 << 10, reps=5, seed=3, profile=prof)
    assert "pairs" not in prof                                    # half-integers: transforms
    ka = pagh_mm.compress(As, Bs, k=10, seed=3)
    kg = pagh_mm.compress(csp.csc_matrix(cp.asarray(A)), csp.csr_matrix(cp.asarray(B)), k=10, seed=3)
    assert ka.buckets == kg.buckets and (kg.sketch.get() == ka.sketch).all()
    # large integers: pairs while the specification's inverse transform stays exact on the
    # sums (buckets x sum_k |a_k|_1 |b_k|_1 beyond 2^53), the transforms once it could round
    big = np.where(A != 0, np.sign(A) * (1 << 16) + A, 0.0)
    bigB = np.where(B != 0, np.sign(B) * (1 << 16) + B, 0.0)
    for extra in (False, True):
        if extra:
            big[0, 0] = bigB[0, 0] = 2.0 ** 26
        kw = dict(buckets=1 << 12, reps=5, seed=3)
        prof = {}
        g = pagh_mm.compress(csp.csc_matrix(cp.asarray(big)), csp.csr_matrix(cp.asarray(bigB)),
                             profile=prof, **kw)
        assert "pairs" in prof and (("scatter" in prof) or ("fused" in prof)) == extra
        assert (g.sketch.get() == pagh_mm.compress(sps.csc_matrix(big), sps.csr_matrix(bigB),
                                                   **kw).sketch).all(), extra


@pytest.mark.parametrize("family", hashing.FAMILIES)
def test_gpu_pairs_hash_in_one_kernel_with_the_cpu_bits_for_every_family_and_bit_sketch(family):
    """The pair route hashes each block's stored values in one kernel (hash_values) for the
    distinct repetitions only, and derives the decoding bit sketches from them by their row
    bit: the CPU's sketch and bit sketches, bit for bit, for every family, with stored zeros
    and a block size that splits the inner dimension; the kernels give the same values for
    int64 index arrays as for int32 ones."""
    cp = _cp()
    csp = cupyx_sparse()
    from pagh_mm.cuda import kernels
    rng = np.random.default_rng(22)
    A, B = sparse_int_product(rng, m=700, n=300, p=350, density=0.03)
    A[3, :40] = 0.0                                   # rows of A with no value,
    As, Bs = sps.csc_matrix(A), sps.csr_matrix(B)
    As.data[::7] = 0.0                                # and stored zeros
    kw = dict(buckets=1 << 11, reps=5, seed=9, hash=family, decode=True)
    want = pagh_mm.compress(As, Bs, **kw)
    assert want.bits is not None and want.bits.bits == 10
    prof = {}
    got = pagh_mm.compress(csp.csc_matrix(As), csp.csr_matrix(Bs), profile=prof,
                           memory_budget=1 << 16, **kw)
    assert "pairs" in prof
    assert (got.sketch.get() == want.sketch).all()
    assert (got.bits.sketch.get() == want.bits.sketch).all()
    # the kernels on int64 keys: the same hashes and pair sums as on int32 keys
    params = hashing.with_row_bits(hashing.HashParams.draw(family, 9, 5), 3, 10)
    sides = [pagh_mm.sketch.Side(M, w, None, 0, backend.gpu()).hash_with(params, 11)
             for M, w in ((csp.csc_matrix(As), 1), (csp.csr_matrix(Bs), 2))]
    tabs = []
    for wide in (False, True):
        vals = []
        for s in sides:
            ptr, keys, h, w = s.hashed_values(0, 300)
            if wide:
                keys = keys.astype(cp.int64)
                h, w = kernels.hash_values(keys, s.M.data.astype(cp.float64), family,
                                           s.distinct_rows()[0], s.which, 11)
            vals.append((ptr, keys, h, w))
        tab = cp.zeros((params.reps, 1 << 11))
        kernels.pairs_direct(vals[0], vals[1], sides[0].distinct_rows()[1], 1 << 11, tab)
        tabs.append((tab, vals[0][2], vals[0][3]))
    assert all((x == y).all() for x, y in zip(*tabs))


# --- issue 16 item 3: the selecting query kernel --------------------------------------------

def _selection(D, window, by, lim, cut, skip_diagonal, upper):
    """What scan_select must return for the window (r0, c0, rows, cols) of the dense
    estimates D: {flat id: estimate} of the entries whose key reaches lim, and the largest
    key below cut of the others."""
    r0, c0, rows, cols = window
    p = D.shape[1]
    i, j = np.indices(D.shape)
    K = np.abs(D) if by == "abs" else D.copy()
    K[(i == j) & skip_diagonal] = -np.inf
    K[(i > j) & upper] = -np.inf
    w = (slice(r0, r0 + rows), slice(c0, c0 + cols))
    K, i, j = K[w], i[w], j[w]
    sel = K >= lim if lim > -np.inf else K > lim
    rest = K[~sel & (K < cut)]
    return ({int(a) * p + int(b): D[a, b] for a, b in zip(i[sel], j[sel])},
            float(rest.max()) if rest.size else -np.inf)


@pytest.mark.parametrize("method,reps,gram", [("fwht", 5, False), ("fft", 4, False),
                                              ("fwht", 11, False), ("fwht", 13, False),
                                              ("fwht", 15, False), ("fwht", 5, True),
                                              ("fwht", 9, True), ("fwht", 13, True)])
def test_gpu_scan_kernel_selects_exactly_what_the_tile_holds(method, reps, gram):
    """scan_select (estimates and selection in one pass, behind the heavy-bucket filter with
    0, some or all repetitions' bitmaps in shared memory, one bit per bucket or per group of
    four) returns exactly the entries of the
    dense tile whose key reaches the limit, with their bits; the largest key below the cut
    of the entries it evaluated, which with the filter's bound covers every other entry."""
    from pagh_mm.cuda import kernels
    cp = _cp()
    rng = np.random.default_rng(reps)
    if gram:
        X = rng.standard_normal((200, 700))
        X[:, 5] += 3 * X[:, 600]
        c = pagh_mm.compress(X.T, X, buckets=1 << 9, reps=reps, seed=2)
    else:
        A, B = rng.standard_normal((700, 60)), rng.standard_normal((60, 590))
        A[3, :] += 2.0
        B[:, 9] += 2.0
        c = pagh_mm.compress(A, B, buckets=1 << 9, reps=reps, seed=2, method=method)
    g = c.to("gpu")
    D = c.to_dense()
    assert (g.to_dense().get() == D).all()
    m, p = D.shape
    for window in ((0, 0, m, p), (37, 101, 333, 450)):
        r0, c0, rows, cols = window
        h1, s1 = g._hashes(1, cp.arange(r0, r0 + rows, dtype=cp.int64))
        h2, s2 = g._hashes(2, cp.arange(c0, c0 + cols, dtype=cp.int64))
        mags = np.sort(np.abs(D[r0:r0 + rows, c0:c0 + cols]).ravel())[::-1]
        for by in ("abs", "value"):
            for lim, cut in ((-np.inf, -np.inf), (float(mags[40]), float(mags[60])),
                             (float(mags[5]), float(mags[5])), (0.0, 1.0)):
                for skip in (False, True):
                    want, low = _selection(D, window, by, lim, cut, skip, gram)
                    for log2g, staged in ((None, 0), (None, 1), (None, None), (2, None)):
                        bits, bound = kernels.heavy_bits(g.sketch, 0.5 if gram else 1.0, lim,
                                                         log2g) if lim > 0 else (None, -np.inf)
                        v, ids, lo = kernels.scan_select(
                            h1, s1, h2, s2, g.sketch, g.log2b, method == "fwht", gram, r0=r0,
                            c0=c0, p=p, diagonal=g.diagonal if gram else None,
                            by_abs=by == "abs", skip_diagonal=skip, upper=gram, lim=lim,
                            cut=cut, bits=bits, room=7, staged=staged)
                        got = dict(zip(ids.get().tolist(), v.get().tolist()))
                        assert len(got) == ids.size and got == want, (window, by, lim, staged)
                        assert lo <= low, (window, by, lim, staged)
                        if bits is None:
                            assert lo == low
                        else:
                            assert max(lo, bound if bound < cut else -np.inf) >= low or \
                                bound >= cut


def test_gpu_scans_in_many_chunks_give_the_cpu_answers(monkeypatch):
    """Chunked GPU scans (the limit rising between chunks, the filter rebuilt) give the
    certified answers of the CPU, for top_k, above and Gram products."""
    import warnings
    from pagh_mm import query
    monkeypatch.setattr(query, "SEED_ENTRIES", 1)
    monkeypatch.setattr(query, "GPU_CHUNK", 2048)
    monkeypatch.setattr(query, "GPU_CHUNK_OPEN", 1024)
    rng = np.random.default_rng(8)
    A, B = rng.standard_normal((900, 50)), rng.standard_normal((50, 800))
    A[[4, 90, 400], :] += 1.5
    B[:, [7, 300]] -= 1.5
    X = rng.standard_normal((120, 700))
    X[:, 5] += 2 * X[:, 600]
    X[:, 70] -= 2 * X[:, 71]
    cp = _cp()
    gX = cp.asarray(X)
    for (a, b), (ga, gb) in (((A, B), (cp.asarray(A), cp.asarray(B))), ((X.T, X), (gX.T, gX))):
        c = pagh_mm.compress(a, b, buckets=1 << 11, reps=5, seed=5)
        g = pagh_mm.compress(ga, gb, buckets=1 << 11, reps=5, seed=5)
        assert c.gram == g.gram and (g.sketch.get() == c.sketch).all()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pagh_mm.CertificateWarning)
            for q in (lambda s: s.top_k(20, verify=True), lambda s: s.top_k(7, by="value"),
                      lambda s: s.above(float(np.sort(np.abs(c.to_dense()).ravel())[-50]),
                                        verify=True)):
                ec, eg = q(c), q(g)
                for f in ("rows", "cols", "estimates", "exact"):
                    if getattr(ec, f) is not None:
                        assert (_cp().asnumpy(getattr(eg, f)) == getattr(ec, f)).all(), f
                assert (eg.certified, eg.verified) == (ec.certified, ec.verified)


@pytest.mark.parametrize("reps,gram", [(5, False), (4, False), (3, False), (13, False), (5, True),
                                       (4, True), (9, True)])
def test_gpu_pruned_search_selects_exactly_what_the_scan_selects(reps, gram):
    """The sub-quadratic search (heavy buckets of the first d - (d + 1) // 2 + 1 repetitions,
    the columns they point to, each entry once): exactly the entries whose key reaches the
    limit, with their bits, for any d, Gram products (blind repetitions, the diagonal)
    included; its bound on the other keys covers every entry it skipped; and scan() on the
    GPU returns the CPU scan's pool."""
    from pagh_mm import query
    cp = _cp()
    rng = np.random.default_rng(30 + reps)
    if gram:
        X = rng.standard_normal((150, 500))
        X[:, 5] += 3 * X[:, 400]
        X[:, 7] -= 2 * X[:, 8]
        gX = cp.asarray(X)
        c = pagh_mm.compress(X.T, X, buckets=1 << 8, reps=reps, seed=4)
        g = pagh_mm.compress(gX.T, gX, buckets=1 << 8, reps=reps, seed=4)
        assert c.gram and g.gram
    else:
        A, B = rng.standard_normal((600, 50)), rng.standard_normal((50, 450))
        A[[3, 70], :] += 2.0
        B[:, [9, 200]] -= 2.0
        c = pagh_mm.compress(A, B, buckets=1 << 9, reps=reps, seed=4)
        g = pagh_mm.compress(cp.asarray(A), cp.asarray(B), buckets=1 << 9, reps=reps, seed=4)
    assert (g.sketch.get() == c.sketch).all()
    D = c.to_dense()
    m, p = D.shape
    factor = 0.5 if gram else 1.0
    h1, s1 = g._hashes(1, cp.arange(m, dtype=cp.int64))
    h2, s2 = g._hashes(2, cp.arange(p, dtype=cp.int64))
    from pagh_mm.cuda import kernels
    starts, members = kernels.bucket_members(h2, g.buckets)
    mags = np.sort(np.abs(D).ravel())[::-1]
    for by in ("abs", "value"):
        for lim, cut in ((float(mags[30]), float(mags[50])), (float(mags[3]), float(mags[3])),
                         (float(mags[200]), -np.inf)):
            for skip in (False, True):
                want, low = _selection(D, (0, 0, m, p), by, lim, cut, skip, gram)
                heavy, _, bits, bound = query._gpu_heavy(g, g.sketch, factor, lim)
                v, ids, lo = query._gpu_pruned(g, g.sketch, h1, s1, h2, s2, heavy, bits, starts,
                                               members, by, skip, lim, cut)
                got = dict(zip(ids.get().tolist(), v.get().tolist()))
                assert len(got) == ids.size and got == want, (by, lim, skip)
                assert lo <= low
                assert max(lo, bound if bound < cut else -np.inf) >= low or bound >= cut
    for cap, cut in ((20, -np.inf), (400, float(mags[40]))):
        sc, sg = query.scan(c, "abs", cap, cut), query.scan(g, "abs", cap, cut)
        assert (sg.ids.get() == sc.ids).all() and (sg.values.get() == sc.values).all()


@pytest.mark.parametrize("kind", ["sparse-int", "sparse-float", "dense-fp64", "dense-fp32"])
def test_gpu_bit_sketches_and_decoding_equal_cpu(kind):
    """Bit sketches (decode=True) on every GPU route (direct pairs, sparse scatter, the fused
    dense kernel) equal the CPU's bit for bit; decoding answers equal the CPU's."""
    from pagh_mm import synthetic
    cp = _cp()
    if kind.startswith("sparse"):
        S = synthetic.sparse_planted(8192, 8, 40, 128, seed=3)
        A, B = S.A, S.B
        if kind == "sparse-float":
            A = A * 1.5
        kw = dict(buckets=1 << 16)
    else:
        P = synthetic.planted_product(1024, 40, magnitude=256, seed=2,
                                      dtype=np.float32 if kind == "dense-fp32" else np.float64)
        A, B = P.A, P.B
        kw = dict(buckets=1 << 13)
    import cupyx.scipy.sparse as csp

    def dev(M):
        return csp.csr_matrix(M) if sps.issparse(M) else cp.asarray(M)
    c = pagh_mm.compress(A, B, seed=5, decode=True, **kw)
    g = pagh_mm.compress(dev(A), dev(B), seed=5, decode=True, **kw)
    assert (g.sketch.get() == c.sketch).all()
    assert g.bits.sketch.shape == c.bits.sketch.shape and (g.bits.sketch.get() == c.bits.sketch).all()
    t = float(np.abs(c.top_k(30, verify=True).exact).min())
    for query in (lambda s: s.top_k(30, verify=True, method="decode"),
                  lambda s: s.above(t, verify=True, method="decode"),
                  lambda s: s.top_k_per_row(2, threshold=t, verify=True, format="entries",
                                            method="decode")):
        tg, tc = query(g), query(c)
        assert tg.certified and tc.certified
        assert (tg.rows.get() == tc.rows).all() and (tg.cols.get() == tc.cols).all()
        assert (tg.exact.get() == tc.exact).all()


def test_tree_sum_of_nodes_is_the_pairwise_tree():
    """kernels.tree_sum (32 nodes into one per pass, pending siblings in registers): the bits
    of pagh_mm.reduction.block_sum for any count, partial last blocks included."""
    cp = _cp()
    from pagh_mm import reduction
    from pagh_mm.cuda import kernels
    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.float64):
        # rows of 21 values (one per thread) and of 5 x 8 (16-byte vectors), and vector rows
        # that start off a 16-byte boundary (a view one value in: one per thread again)
        for shape in ((3, 7), (5, 8)):
            for count in (*range(1, 67), 1000, 1024, 1057, 33 * 32 + 5):
                x = (rng.standard_normal((count, *shape))
                     * 10.0 ** rng.integers(-3, 4, (count, 1, 1))).astype(dtype)
                x[rng.random(x.shape) < 0.01] = -0.0
                got = kernels.tree_sum(cp.asarray(x)).get()
                want = reduction.block_sum(x.copy(), np)
                assert got.dtype == want.dtype and (got == want).all(), (dtype, count)
                assert np.array_equal(np.signbit(got), np.signbit(want))
        flat = cp.asarray(rng.standard_normal(1 + 40 * 40).astype(dtype))
        nodes = flat[1:].reshape(40, 5, 8)
        assert nodes.data.ptr % 16 and nodes.flags.c_contiguous
        assert (kernels.tree_sum(nodes).get() == reduction.block_sum(nodes.get(), np)).all()


def test_frobenius_sketch_matches_cpu():
    """The ||AB||_F estimate's per-vector sketches (sparse: one hashing kernel and the
    sketches' scatter) equal the CPU's bits; the estimate agrees to rounding."""
    from pagh_mm import auto
    cp = _cp()
    cpu, dev = backend.cpu(), backend.gpu()
    import cupyx.scipy.sparse as csp
    rng = np.random.default_rng(4)
    A, B = sparse_int_product(rng, 300, 200, 250, density=0.05)
    A, B = sps.csc_matrix(A, dtype=np.float64), sps.csr_matrix(B, dtype=np.float64)
    dense = (A.toarray(), cp.asarray(A.toarray()), 1)        # integers: exact in any order
    A.data = rng.standard_normal(A.nnz)                      # sparse: the same order, any values
    B.data = rng.standard_normal(B.nnz)
    Ag, Bg = csp.csc_matrix(A), csp.csr_matrix(B)
    params = auto._jl_params(5)
    for M, Mg, which in ((A, Ag, 1), (B, Bg, 2), dense):
        c = auto._JLSide(M, which, params, 6, cpu).block(10, 190)
        g = auto._JLSide(Mg, which, params, 6, dev).block(10, 190)
        assert np.array_equal(c, cp.asnumpy(g))
    assert auto.frobenius_estimate(Ag, Bg, dev, seed=5) == pytest.approx(
        auto.frobenius_estimate(A, B, cpu, seed=5), rel=1e-12)
    with pytest.MonkeyPatch.context() as mp:        # chunks of the inner dimension
        mp.setattr(auto, "INNER_CHUNK", 32)
        mp.setattr(auto, "VALUE_CHUNK", 64)
        assert auto.frobenius_estimate(Ag, Bg, dev, seed=5) == pytest.approx(
            auto.frobenius_estimate(A, B, cpu, seed=5), rel=1e-12)


@pytest.mark.parametrize("gram", [False, True])
def test_narrowed_transforms_and_their_rounding_equal_the_cpu(gram):
    """The automatic float32 transforms of float64 data: the GPU decides as the CPU does,
    its sketch has the CPU's bits, its rounding bound (the certified margin's part) the CPU's
    value, and the certified answer the CPU's."""
    cp = _cp()
    from pagh_mm import synthetic
    if gram:
        rng = np.random.default_rng(3)
        X = rng.standard_normal((4096, 512))
        X[:, 1] = X[:, 0] + 0.1 * rng.standard_normal(4096)
        runs = [pagh_mm.compress_gram(M, k=2, seed=1) for M in (X, cp.asarray(X))]
        q = dict(verify=True, exclude_diagonal=True)
        k = 2
    else:
        d = synthetic.planted_product(1024, 50, seed=2, dtype=np.float64)
        runs = [pagh_mm.compress(a, b, k=50, seed=1)
                for a, b in ((d.A, d.B), (cp.asarray(d.A), cp.asarray(d.B)))]
        q = dict(verify=True)
        k = 50
    c, g = runs
    assert c.dtype == g.dtype == "fp32" and c.chosen.narrowed and g.chosen.narrowed
    assert np.array_equal(c.sketch, g.sketch.get())
    assert c.rounding() == g.rounding() > 0
    tc, tg = c.top_k(k, **q), g.top_k(k, **q)
    assert tc.certified and tg.certified and tc.margin == tg.margin
    assert np.array_equal(tc.rows, tg.rows.get()) and np.array_equal(tc.exact, tg.exact.get())


@pytest.mark.parametrize("n", [1, 2, 3, 255, 256, 257, 1000, 4096, 70000])
def test_row_square_sums_kernel_has_the_pairwise_trees_bits(n):
    """kernels.row_square_sums (squared_norms of C-ordered factors on the GPU) equals
    reduction.row_sums of the squares on the CPU bit for bit, any length."""
    cp = _cp()
    from pagh_mm.cuda import kernels
    from pagh_mm.reduction import row_sums
    rng = np.random.default_rng(n)
    X = rng.standard_normal((37, n)) * np.exp(rng.uniform(-20, 20, (37, n)))
    want = row_sums(X * X, np)
    got = kernels.row_square_sums(cp.asarray(X)).get()
    assert np.array_equal(got, want)
    wide = cp.asarray(np.concatenate([X, X[:, :5]], axis=1))[:, :n]     # rows at a longer step
    assert np.array_equal(kernels.row_square_sums(wide).get(), want)
    X32 = X.astype(np.float32)
    X64 = X32.astype(np.float64)
    assert np.array_equal(kernels.row_square_sums(cp.asarray(X32)).get(), row_sums(X64 * X64, np))


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 255, 256, 257, 1000, 4096, 70000])
def test_col_square_sums_kernel_has_the_pairwise_trees_bits(rows):
    """kernels.col_square_sums (squared column norms of C-ordered factors, a Gram product's
    diagonal) equals reduction.block_sum of the squares over the rows bit for bit: float32 and
    float64 values, rows at a longer step, column counts off the block size."""
    cp = _cp()
    from pagh_mm.cuda import kernels
    from pagh_mm.reduction import block_sum
    rng = np.random.default_rng(rows)
    cols = 3 if rows == 70000 else 133
    X = rng.standard_normal((rows, cols)) * np.exp(rng.uniform(-20, 20, (rows, cols)))
    assert np.array_equal(kernels.col_square_sums(cp.asarray(X)).get(), block_sum(X * X, np))
    part = cp.asarray(X)[:, 1:cols - 1]                              # a row step of cols
    assert np.array_equal(kernels.col_square_sums(part).get(),
                          block_sum(X[:, 1:cols - 1] ** 2, np))
    X64 = X.astype(np.float32).astype(np.float64)
    assert np.array_equal(kernels.col_square_sums(cp.asarray(X.astype(np.float32))).get(),
                          block_sum(X64 * X64, np))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_squared_norms_and_frobenius_sketch_of_dense_factors_match_the_cpu(dtype, monkeypatch):
    """The factors' squared row and column norms (the rounding bound's) by the square-sum
    kernels equal the CPU's bits in every layout; so do the ||AB||_F estimate's dense sketches
    G A and H B^T (scatter.cu's kernels in SciPy's CSR order: in place in both layouts, views at
    steps and reversed, other dtypes converted in chunks, 8, 64 and 128 rows, one vector, 512
    keys, a CSR without packed keys) and the CSR on both devices; the estimate (their 64 x 64
    product by cuBLAS) agrees to rounding."""
    cp = _cp()
    from pagh_mm import auto, exact
    cpu, dev = backend.cpu(), backend.gpu()
    rng = np.random.default_rng(8)
    # values over a wide range of exponents: any other order of a sum shows in its bits
    A = (rng.standard_normal((300, 200)) * 2.0 ** rng.integers(-30, 30, (300, 200))).astype(dtype)
    B = (rng.standard_normal((200, 250)) * 2.0 ** rng.integers(-30, 30, (200, 250))).astype(dtype)
    for a, b in ((A, B), (np.asfortranarray(A), np.asfortranarray(B))):
        want = exact.factor_norms(cpu, a, b)
        got = exact.factor_norms(dev, cp.asarray(a), cp.asarray(b))
        for w, g in zip(want, got):
            assert np.array_equal(w, g.get())
        for axis in (0, 1):                                      # slices: rows at a step
            assert np.array_equal(exact.squared_norms(cpu, a[3:290, 5:190], axis),
                                  exact.squared_norms(dev, cp.asarray(a)[3:290, 5:190], axis).get())
    rng2 = np.random.default_rng(3)
    for keys, rows in ((0, 2), (1, 2), (5, 8), (300, 64), (129, 3), (70000, 128)):   # _csr
        row, sign = rng2.integers(0, rows, keys), rng2.choice([-1.0, 1.0], keys)
        got = auto._csr(cp.asarray(row), cp.asarray(sign), rows, cp)
        for w, g in zip(auto._csr(row, sign, rows, np), got):
            assert g.dtype == w.dtype and np.array_equal(g.get(), w)

    def same_bits(g, c):
        g = g.get()
        nan = np.isnan(c)
        return g.dtype == np.float64 and np.array_equal(np.isnan(g), nan) and \
            np.array_equal(g[~nan].view(np.uint64), c[~nan].view(np.uint64))

    S = A.copy()                            # inside the compared inner indices 11 .. 189:
    S[4, 50], S[7, 60], S[9, 61] = -0.0, np.inf, -np.inf       # a signed zero, infs, a NaN
    T = B.copy()
    T[100, 3], T[120, 5] = -0.0, np.nan
    W = np.ascontiguousarray(rng.standard_normal((512, 200)).astype(dtype))    # 512 keys
    ints = rng.integers(-1000, 1000, (300, 200), dtype=np.int32), B[:, :40] > 0
    views = (lambda M: M, lambda M: M[::2, 1:] if M.shape[0] == 300 else M[:, ::-3],
             lambda M: M[:, ::-1], lambda M: M[::-1])                         # on the device
    params = auto._jl_params(5)
    for chunk in (auto.DENSE_CHUNK_BYTES, 200 * 8 * 7):   # whole, and chunks of a few vectors
        monkeypatch.setattr(auto, "DENSE_CHUNK_BYTES", chunk)
        for a, b in ((S, T), (np.asfortranarray(S), np.asfortranarray(T)), ints,
                     (W, np.asfortranarray(W.T))):
            for M, which, view, log2r in itertools.product((a, b), (1, 2), views, (6, 3, 7)):
                if (M is a) != (which == 1):
                    continue
                for k0, k1 in ((11, 190), (20, 21)):               # and one vector
                    c = auto._JLSide(view(M), which, params, log2r, cpu).block(k0, k1)
                    g = auto._JLSide(view(cp.asarray(M)), which, params, log2r, dev).block(k0, k1)
                    assert same_bits(g, c)
    side = auto._JLSide(cp.asarray(S), 1, params, 6, dev)          # a CSR without packed keys
    c = auto._JLSide(S, 1, params, 6, cpu).block(11, 190)
    assert same_bits(auto._dense_sketch_gpu(cp.asarray(np.asfortranarray(S))[:, 11:190].T,
                                            side.csr()[:3] + (None,), 64, cp), c)
    for a, b in ((A, B), (np.asfortranarray(A), np.asfortranarray(B))):
        assert auto.frobenius_estimate(cp.asarray(a), cp.asarray(b), dev, seed=5) == \
            pytest.approx(auto.frobenius_estimate(a, b, cpu, seed=5), rel=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32])
def test_transposed_copy_equals_cupys(dtype):
    """kernels.transposed (cuBLAS geam, the fused route's keys-contiguous copy of a C-ordered
    factor's column block) equals cupy.ascontiguousarray(V.T) exactly: column blocks of a
    wider array, a whole array, on another stream; other dtypes and layouts fall back."""
    cp = _cp()
    from pagh_mm.cuda import kernels
    rng = np.random.default_rng(5)
    M = cp.asarray((rng.standard_normal((300, 517)) * 1e3).astype(dtype))
    with cp.cuda.Stream(non_blocking=True):
        for V in (M[:, 7:140], M, M[5:6, :], M[:, 3:4], M.T, M[::2, 1:50]):
            got = kernels.transposed(V)
            assert got.flags.c_contiguous and got.dtype == V.dtype
            assert bool((got == cp.ascontiguousarray(V.T)).all())


def test_bench_exact_routes_on_the_gpu_select_like_numpy(monkeypatch):
    """pagh-mm bench's exact routes on CuPy arrays (the threshold selection, each plan: whole,
    summed over chunks of samples for a Gram product, tiles) choose NumPy's largest entries,
    and the selection by threshold equals argpartition's on CuPy (NaN, inf, ties)."""
    cp = _cp()
    from pagh_mm import bench
    be = backend.gpu()
    monkeypatch.setattr(bench, "SELECT_DIRECT", 4096)
    monkeypatch.setattr(bench, "SELECT_SAMPLE", 1024)
    rng = np.random.default_rng(11)
    v = np.abs(rng.standard_normal(300_001)).astype(np.float32)
    v[rng.permutation(v.size)[:30]] = np.inf
    v[rng.permutation(v.size)[:7]] = np.nan
    for q in (1, 40, 500):
        got = cp.asnumpy(bench.largest(cp, cp.asarray(v), q))
        assert np.unique(got).size == q
        np.testing.assert_array_equal(np.sort(v[got]), np.sort(v[np.argpartition(-v, q - 1)[:q]]))
    X = rng.standard_normal((3000, 180)).astype(np.float32)
    A, B = rng.standard_normal((200, 150)), rng.standard_normal((150, 170))
    real = bench._gemm_plan
    for L, R, gram in ((A, B, False), (X.T, X, True)):
        C = L.astype(np.float64) @ R.astype(np.float64)
        if gram:
            np.fill_diagonal(C, 0)
        q = 24 if gram else 25          # whole pairs (i, j), (j, i) of a symmetric product
        want = set(np.argsort(-np.abs(C).ravel())[:q].tolist())
        dL = cp.asarray(R).T if gram else cp.asarray(L)
        dR = cp.asarray(R)
        plans = [None, ("tiles", 64), ("tiles", 37)] + ([("inner", 1024)] if gram else [])
        for plan in plans:
            monkeypatch.setattr(bench, "_gemm_plan", real if plan is None else
                                (lambda be, A, B, dt, plan=plan: plan))
            r, c = bench._tiled_largest(be, dL, dR, q, np.float64, gram)
            assert set(cp.asnumpy(r * R.shape[1] + c).tolist()) == want, plan
            r, c = bench._screen_topk(be, dL, dR, q, gram)
            assert set(cp.asnumpy(r * R.shape[1] + c).tolist()) == want, plan


def test_planted_demo_on_the_gpu_reports_both_routes():
    """``pagh-mm demo`` on the GPU: both routes warmed up and timed, the exact one's answer
    through the bench's selection (recall 1.000 on the planted entries)."""
    from pagh_mm import demo
    lines = []
    out = demo.planted(lines.append, backend.gpu(), 2048, 64, 5, 0)
    assert out["recall"] == 1.0 and out["seconds_exact"] > 0 and out["seconds_ours"] > 0
    assert any("exact A @ B + top-64" in s and "recall 1.000" in s for s in lines)
