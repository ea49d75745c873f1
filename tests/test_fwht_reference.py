"""The references (mpmath, double-double) and the accuracy study."""
import math

import numpy as np
import pytest
import scipy.linalg

import fwht_gpu as F
from fwht_gpu import reference as R
from tests.params import DTYPE_IDS, DTYPES


# --- references --------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_references_agree(dtype, rng):
    k = 6 if dtype == np.float16 else 20
    x = (rng.standard_normal((2, 256)) * np.exp2(rng.integers(-k, k, (2, 256)))).astype(dtype)
    a, b = R.mp_fwht(x), R.dd_fwht(x)
    diff = np.abs((a.hi - b.hi) + (a.lo - b.lo))
    scale = np.abs(x.astype(np.float64)).sum(1, keepdims=True)
    assert (diff <= 2.0**-100 * scale).all()


def test_dd_reference_exact_on_integers_and_large_n(rng):
    x = rng.integers(-1000, 1000, 1 << 12).astype(np.float64)
    r = R.dd_fwht(x)
    assert (r.hi == scipy.linalg.hadamard(1 << 12) @ x).all() and (r.lo == 0).all()
    big = rng.standard_normal(1 << 20)
    r = R.dd_fwht(big)
    # involution in double-double: H H x = n x to ~1e-30 relative
    back = R.dd_fwht(r)
    assert np.abs((back.hi - (1 << 20) * big) + back.lo).max() <= 1e-20 * (1 << 20)


def test_reference_norms(rng):
    x = rng.standard_normal(64)
    assert np.allclose(R.reference_fwht(x, norm="ortho").to_float64(), F.fwht(x, norm="ortho"),
                       rtol=1e-14)
    assert np.allclose(R.reference_fwht(x, norm="backward", inverse=True).to_float64(),
                       F.ifwht(x), rtol=1e-14)
    with pytest.raises(ValueError, match="113"):
        R.mp_fwht(x, prec=64)


def test_metrics():
    ref = np.array([1.0, -2.0, 0.0, 4.0])
    y = np.array([1.1, -2.0, 0.5, 3.0])
    assert math.isclose(R.mean_relative_error(y, ref), (0.1 + 0 + 0.25) / 3, rel_tol=1e-12)
    assert math.isclose(R.max_relative_error(y, ref), 0.25)
    assert math.isclose(R.mean_absolute_error(y, ref), (0.1 + 0 + 0.5 + 1.0) / 4, rel_tol=1e-12)



def test_accuracy_study_reproduces_the_thesis_direction(tmp_path):
    from fwht_gpu import accuracy as A
    recs = A.study(range(9, 12), dtypes=("fp32", "bf16"),
                   variants=("folklore", "kahan", "neumaier", "alman", "neumaier-pass", "compute"))
    assert {r["experiment"] for r in recs} == set(A.EXPERIMENTS)
    assert {r["distribution"] for r in recs} == set(A.DISTRIBUTIONS)
    tab = A.reduction_table(recs)
    for d in ("fp32", "bf16"):
        for L in (10, 11):
            red = tab[d][L]
            assert 0.1 < red["kahan"] < red["neumaier"] and red["neumaier"] > 0.6
            assert red["alman"] < 0 and red["compute"] > 0.6
    out = A.write(recs, str(tmp_path))
    assert "median" in open(out["markdown"]).read() and len(out["plots"]) == 2
    x = A.draw("PAGH_PMONE", 64, np.random.default_rng(0))
    assert np.count_nonzero(x) <= 8 and set(np.abs(x[x != 0])) <= {1.0, 2.0}

