"""The transforms' rounding in certified queries (CompressedProduct.rounding, a worst-case
bound), and the automatic rule that runs float64 products' transforms in float32 when that
bound is a small share of the noise (pagh_mm.auto.narrower_transforms)."""
import numpy as np
import pytest
import scipy.sparse as sps

import pagh_mm
from pagh_mm import auto, certificate, synthetic


def _pair(A, B, dt, b=1024, d=5, **kw):
    narrow = pagh_mm.compress(A, B, buckets=b, reps=d, seed=3, dtype=dt, **kw)
    wide = pagh_mm.compress(A, B, buckets=b, reps=d, seed=3, dtype=np.float64, **kw)
    return narrow, wide


def _cases():
    rng = np.random.default_rng(0)
    n = 512
    X = rng.standard_normal((n, 64))
    A = rng.standard_normal((200, n)) * 1e3
    yield "gaussian", rng.standard_normal((300, n)), rng.standard_normal((n, 400)), {}
    yield "ones", np.ones((300, n)), np.ones((n, 400)), {}          # every error the same sign
    yield "cancelling", A, np.linalg.pinv(A)[:, :150], {}              # product ~ I, norms large
    yield "gram", X.T, X, {"gram": True}
    yield "sparse", sps.random(300, n, 0.05, random_state=1, format="csc"), \
        sps.random(n, 300, 0.05, random_state=2, format="csr"), {}
    yield "long", rng.standard_normal((60, 5000)), rng.standard_normal((5000, 70)), {}


@pytest.mark.parametrize("dt", [np.float32, np.float16, "bfloat16"])
@pytest.mark.parametrize("case", list(_cases()), ids=lambda c: c[0])
def test_rounding_bounds_every_estimate(case, dt):
    """|narrow sketch - float64 sketch| <= rounding() in every bucket (halved for Gram:
    its estimates are half a bucket), whatever the data; the bound is a worst case, so it
    is loose on random data but must hold on structured data too."""
    name, A, B, kw = case
    scale = 1.0 if dt == np.float32 else 1e-3          # 16-bit ranges
    A = A * scale
    B = B * scale if kw.get("gram") else B
    narrow, wide = _pair(A, B, dt, **kw)
    err = float(np.abs(narrow.sketch - wide.sketch).max()) * (0.5 if narrow.gram else 1.0)
    rho = narrow.rounding()
    assert 0 < rho and err <= rho, (name, err, rho)
    assert narrow.rounding() == rho                      # cached


def test_rounding_is_zero_where_it_is_left_to_the_model(tmp_path):
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((50, 64)), rng.standard_normal((64, 40))
    assert pagh_mm.compress(A, B, buckets=256, seed=1, dtype=np.float64).rounding() == 0.0
    assert pagh_mm.compress(A, B, buckets=256, seed=1, dtype=np.float32,
                            method="fft").rounding() == 0.0
    sk = pagh_mm.compress(A, B, buckets=256, seed=1, dtype=np.float32)
    sk.save(tmp_path / "s.npz")
    bare = pagh_mm.CompressedProduct.load(tmp_path / "s.npz")
    assert bare.rounding() == 0.0                       # no factors: nothing to verify with
    assert bare.attach(A, B).rounding() == sk.rounding() > 0


def test_coefficients_grow_with_the_unit_roundoff_and_the_stages():
    e32, f32, c32, q32 = certificate.rounding_coefficients(np.float32, 15, 16384, 7)
    e16, _, c16, _ = certificate.rounding_coefficients(np.float16, 15, 16384, 7)
    e64, _, c64, q64 = certificate.rounding_coefficients(np.float64, 15, 16384, 7)
    ea = certificate.rounding_coefficients(np.float32, 15, 16384, 7, "alman")[0]
    assert e64 < 1e-13 < e32 < 1e-5 < e16 and ea > e32 and f32 < e32
    assert c64 == q64 == 0 < c32 < 1e-44 < c16 and 0 < q32 < 1e-40
    # about (2 (L + 1) + 1 + depth) u: 2 x 16 + 1 + 15 roundings at n = 16384
    assert e32 == pytest.approx(48 * 2.0 ** -24, rel=0.05)


def test_certified_margin_includes_the_rounding(monkeypatch):
    d = synthetic.planted_product(256, 20, seed=5, dtype=np.float64)
    sk = pagh_mm.compress(d.A, d.B, k=20, seed=1, dtype=np.float32)
    base = sk.top_k(20, verify=True)
    assert base.certified and base.margin >= sk.rounding() > 0
    # a rounding bound beyond the cut: not certified, and the advice is a wider dtype
    monkeypatch.setattr(pagh_mm.CompressedProduct, "rounding",
                        lambda self: float(abs(base.exact).max()) * 4)
    with pytest.warns(pagh_mm.CertificateWarning, match="dtype=float64"):
        top = sk.top_k(20, verify=True)
    assert not top.certified


def test_rule_narrows_dense_float64_products_for_a_stated_query():
    d = synthetic.planted_product(512, 50, seed=2, dtype=np.float64)
    sk = pagh_mm.compress(d.A, d.B, k=50, seed=1)
    assert sk.dtype == "fp32" and sk.chosen.narrowed and "float32 transforms" in sk.chosen.reason
    ref = pagh_mm.compress(d.A, d.B, buckets=sk.buckets, reps=sk.reps, seed=1,
                           dtype=np.float32)
    assert np.array_equal(sk.sketch, ref.sketch)
    # the norms the choice formed serve the rounding bound: the same as formed again
    assert "_norms" in sk.__dict__ and "_norms" not in ref.__dict__
    assert sk.rounding() == pytest.approx(ref.rounding(), rel=1e-12)
    # the chunked routes decide the same (the chunks' norms)
    st = pagh_mm.compress(d.A, d.B, k=50, seed=1, devices="cpu")
    assert st.dtype == "fp32" and np.array_equal(st.sketch, sk.sketch)
    top = sk.top_k(50, verify=True)
    want = pagh_mm.compress(d.A, d.B, k=50, seed=1, dtype=np.float64).top_k(50, verify=True)
    assert top.certified and want.certified
    for f in ("rows", "cols", "exact"):
        assert np.array_equal(getattr(top, f), getattr(want, f))


@pytest.mark.parametrize("what", ["given", "no query", "integers", "sparse", "stabilizer",
                                  "share"])
def test_rule_keeps_float64_otherwise(what, monkeypatch):
    d = synthetic.planted_product(256, 20, seed=3, dtype=np.float64)
    A, B = d.A, d.B
    kw = dict(k=20, seed=1)
    if what == "given":
        kw["dtype"] = np.float64
    elif what == "no query":
        kw.pop("k")
    elif what == "integers":
        A, B = np.rint(A * 10).astype(np.int64), np.rint(B * 10).astype(np.int64)
    elif what == "sparse":
        A, B = sps.csc_matrix(A), sps.csr_matrix(B)
    elif what == "stabilizer":
        kw["stabilizer"] = "kahan"
    else:
        monkeypatch.setattr(auto, "ROUNDING_SHARE", 0.0)
    sk = pagh_mm.compress(A, B, **kw)
    assert sk.dtype == "fp64" and not (sk.chosen and sk.chosen.narrowed)


def test_rule_narrows_gram_products():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((2000, 300))
    X[:, 1] = X[:, 0] + 0.1 * rng.standard_normal(2000)
    sk = pagh_mm.compress_gram(X, k=2, seed=1)
    assert sk.dtype == "fp32" and sk.chosen.narrowed
    top = sk.top_k(2, verify=True, exclude_diagonal=True)
    assert top.certified and {(0, 1), (1, 0)} <= set(zip(top.rows.tolist(), top.cols.tolist()))


def test_rounding_advice_redoes_a_narrowed_sketch_in_float64():
    d = synthetic.planted_product(256, 20, seed=6, dtype=np.float64)
    sk = pagh_mm.compress(d.A, d.B, k=20, seed=1)
    assert sk.chosen.narrowed
    b = sk.buckets
    calls = []

    def run():
        calls.append(sk.dtype)
        if len(calls) < 2:
            return [], False, 0.0, 1.0, ("dtype", "rounding", None)
        return [], True, 0.0, 1.0, None
    assert sk._certified(run)[1]
    assert calls == ["fp32", "fp64"] and sk.dtype == "fp64" and sk.buckets == b
    assert sk.chosen.reason.startswith("auto: redone in float64") and not sk.chosen.narrowed
    ref = pagh_mm.compress(d.A, d.B, buckets=b, reps=sk.reps, seed=1, dtype=np.float64)
    assert np.array_equal(sk.sketch, ref.sketch)


def test_dask_route_narrows_as_compress_does():
    da = pytest.importorskip("dask.array")
    import pagh_mm.dask as pd
    d = synthetic.planted_product(512, 50, seed=2, dtype=np.float64)
    sk = pagh_mm.compress(d.A, d.B, k=50, seed=1)
    A, B = da.from_array(d.A, chunks=(512, 128)), da.from_array(d.B, chunks=(128, 512))
    dk = pd.compress(A, B, k=50, seed=1)
    assert dk.dtype == sk.dtype == "fp32" and np.array_equal(dk.sketch, sk.sketch)


@pytest.mark.parametrize("scale", [1e-24, 1e-40])
def test_rounding_bounds_underflow(scale):
    """Values near or below float32's smallest: the underflowing casts and products lose
    absolute amounts the bound covers, and the rule keeps float64 (the certified answer is
    then right: the narrowed one would have been all zeros)."""
    rng = np.random.default_rng(7)
    A, B = rng.standard_normal((200, 300)), rng.standard_normal((300, 150)) * scale
    narrow, wide = _pair(A, B, np.float32)
    err = float(np.abs(narrow.sketch - wide.sketch).max())
    assert err <= narrow.rounding()
    d = synthetic.planted_product(256, 20, seed=8, dtype=np.float64)
    sk = pagh_mm.compress(d.A * scale, d.B * scale, k=20, seed=1)
    assert sk.dtype == "fp64"
    top = sk.top_k(20, verify=True)
    assert top.certified and synthetic.recall(d.rows, d.cols, top.rows, top.cols) == 1.0


def test_rule_keeps_float64_near_overflow():
    d = synthetic.planted_product(256, 20, seed=8, dtype=np.float64)
    sk = pagh_mm.compress(d.A * 1e18, d.B * 1e18, k=20, seed=1)
    assert sk.dtype == "fp64" and sk.top_k(20, verify=True).certified


def test_rule_keeps_float64_for_integer_valued_data_and_alman():
    d = synthetic.planted_product(256, 20, seed=8, dtype=np.float64)
    sk = pagh_mm.compress(np.rint(d.A * 8), np.rint(d.B * 8), k=20, seed=1)
    assert sk.dtype == "fp64"
    assert pagh_mm.compress(d.A, d.B, k=20, seed=1, algorithm="alman").dtype == "fp64"


def test_rounding_of_a_sum_covers_each_part():
    rng = np.random.default_rng(9)
    A, B = rng.standard_normal((100, 256)), rng.standard_normal((256, 90))
    kw = dict(buckets=512, reps=3, seed=2)
    n1 = pagh_mm.compress(A, B, dtype=np.float32, **kw)
    n2 = pagh_mm.compress(-A, B, dtype=np.float32, **kw)          # cancels the first
    w1 = pagh_mm.compress(A, B, dtype=np.float64, **kw)
    w2 = pagh_mm.compress(-A, B, dtype=np.float64, **kw)
    total, exact = n1 + n2, w1 + w2
    err = float(np.abs(total.sketch - exact.sketch).max())
    assert err <= total.rounding() and total.rounding() >= n1.rounding()
