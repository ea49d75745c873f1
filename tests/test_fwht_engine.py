"""The NumPy engine against exact references: dense Hadamard products, integer
exactness, the Alman-Rao scaling rule, stabilizers, compute_dtype (runs in CI)."""

import numpy as np
import pytest
import scipy.linalg
from hypothesis import given, settings
from hypothesis import strategies as hst

import fwht_gpu as F
from fwht_gpu import cpu, dtypes as _dt, reference as R
from tests.params import DTYPE_IDS, DTYPES, VARIANT_IDS, VARIANTS


# error bound factor c in |y - Hx| <= (c * log2(n) + 1) * u * sum|x| per output
BOUND = {"folklore": 1.0, "kahan": 1.0, "neumaier": 1.0, "alman": 3.0}


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("alg,stab", VARIANTS, ids=VARIANT_IDS)
def test_dense_hadamard_with_error_bound(dtype, alg, stab, rng):
    for L in range(0, 11):
        n = 1 << L
        x = rng.standard_normal((3, n)).astype(dtype)
        y = F.fwht(x, algorithm=alg, stabilizer=stab)
        assert y.dtype == dtype and y.shape == x.shape
        x64 = x.astype(np.float64)
        ref = R.dd_fwht(x64)
        if L <= 6:  # the dense matrix itself, exact on these sums in float64's dd reference
            dense = x64 @ scipy.linalg.hadamard(n).T
            assert np.allclose(dense, ref.to_float64(), rtol=1e-13, atol=1e-13)
        err = R.absolute_errors(y, ref)
        bound = (BOUND[alg or "folklore"] * L + 1) * _dt.eps(dtype) * np.abs(x64).sum(1, keepdims=True)
        assert (err <= bound).all(), (L, float((err / bound).max()))


@pytest.mark.parametrize("alg,stab", VARIANTS, ids=VARIANT_IDS)
def test_integer_inputs_exact_against_dense_up_to_4096(alg, stab, rng):
    for L in range(0, 13):
        n = 1 << L
        x = rng.integers(-8, 9, (2, n)).astype(np.float64)
        y = F.fwht(x, algorithm=alg, stabilizer=stab)
        assert (y == x @ scipy.linalg.hadamard(n).T).all(), L


def _alman_with_thesis_scaling(x, log2n):
    """Alman-Rao with thesis Alg. 10's exponent rule taken literally (digits of i, unshifted)."""
    plan = F.make_plan(1 << log2n, np.float64, "alman")
    orig = cpu.alman_exponents
    try:
        cpu.alman_exponents = lambda n, b: orig(n, 0)
        return cpu.execute(plan, x[None, :])[0]
    finally:
        cpu.alman_exponents = orig


def test_alman_scaling_rule_needs_the_folklore_shift(rng):
    """Thesis Alg. 10 counts octal digits of i; the derived rule counts those of i >> (log2 n mod 3)."""
    for L in range(3, 13):
        n = 1 << L
        x = rng.integers(-4, 5, n).astype(np.float64)
        dense = scipy.linalg.hadamard(n) @ x
        assert (F.fwht(x, algorithm="alman") == dense).all()
        literal = _alman_with_thesis_scaling(x, L)
        if L % 3 == 0:
            assert (literal == dense).all()
        else:
            assert not (literal == dense).all(), L


def test_alman_exponents_rule():
    e = cpu.alman_exponents(1 << 7, 1)   # f = 1 prefix bit, then two octal digits
    for i in range(1 << 7):
        j = i >> 1
        assert e[i] == ((j & 7) != 0) + ((j >> 3 & 7) != 0)


def test_operation_counts():
    # one H8 block: 22 additions/subtractions + 1 halving = 23 operations (Folklore: 24)
    c8 = F.operation_count(8, "alman")
    assert c8["add_sub"] == 22 and c8["halving"] == 1 and c8["add_sub"] + c8["halving"] == 23
    assert c8["scaling"] == 7
    assert F.operation_count(8)["add_sub"] == 24
    for L in range(1, 16):
        N, f, q = 1 << L, L % 3, L // 3
        c = F.operation_count(N, "alman")
        ops = c["add_sub"] + c["halving"]
        # Alman-Rao: 23/24 N log N + N/24 (log N mod 3) operations, N - 2**f scalings
        assert ops * 24 == 23 * N * L + N * f
        assert c["halving"] == (N // 8) * q
        assert c["scaling"] == (N - (1 << f) if q else 0)
        assert F.operation_count(N)["add_sub"] == N * L
    k = F.operation_count(1 << 10, stabilizer="kahan")
    assert k["add_sub"] == 10 * (1 << 9) * 12 + (1 << 10)  # 12 per butterfly + final fold
    assert F.operation_count(1 << 10, stabilizer="neumaier")["compare"] > 0


@pytest.mark.parametrize("dtype,nmax,amp", [
    (np.float64, 1 << 12, 100), (np.float32, 1 << 10, 8),
    (np.float16, 32, 1), (_dt.bfloat16, 16, 1)], ids=DTYPE_IDS)
@pytest.mark.parametrize("alg,stab", VARIANTS, ids=VARIANT_IDS)
def test_involution_exact(dtype, nmax, amp, alg, stab, rng):
    n = 2
    while n <= nmax:
        x = rng.integers(-amp, amp + 1, (2, n)).astype(dtype)
        y = F.fwht(F.fwht(x, algorithm=alg, stabilizer=stab), algorithm=alg, stabilizer=stab)
        assert (y == (n * x.astype(np.float64)).astype(dtype)).all(), n
        assert (F.ifwht(F.fwht(x, algorithm=alg), algorithm=alg) == x).all()
        n *= 2




# --- stabilizers against the high-precision reference ----------------------

def _mre(dtype, alg, stab, n, seeds):
    out = []
    for s in seeds:
        x = np.random.default_rng(s).standard_normal(n).astype(dtype)
        ref = R.dd_fwht(x)
        out.append(R.mean_relative_error(F.fwht(x, algorithm=alg, stabilizer=stab), ref))
    return float(np.median(out))


@pytest.mark.parametrize("dtype", [np.float32, _dt.bfloat16], ids=["fp32", "bf16"])
def test_stabilizers_reduce_error_norm_2_14(dtype):
    seeds = range(5)
    n = 1 << 14
    base = _mre(dtype, "folklore", None, n, seeds)
    kahan = _mre(dtype, "folklore", "kahan", n, seeds)
    neu = _mre(dtype, "folklore", "neumaier", n, seeds)
    alman = _mre(dtype, "alman", None, n, seeds)
    red_k, red_n = 1 - kahan / base, 1 - neu / base
    print(f"{_dt.short_name(dtype)} n=2^14 NORM: folklore {base:.3e}, kahan {kahan:.3e} "
          f"({red_k:.1%}), neumaier {neu:.3e} ({red_n:.1%}), alman {alman:.3e} ({alman / base - 1:+.1%})")
    assert red_k > 0.10
    assert red_n > 0.50 and red_n > red_k



# --- properties ----------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(shape=hst.lists(hst.integers(1, 4), min_size=0, max_size=2),
       L=hst.integers(0, 7), where=hst.integers(0, 2), seed=hst.integers(0, 2**31),
       alg=hst.sampled_from(["folklore", "alman"]))
def test_property_any_axis_integer_exact(shape, L, where, seed, alg):
    where = min(where, len(shape))
    full = shape[:where] + [1 << L] + shape[where:]
    x = np.random.default_rng(seed).integers(-50, 50, full).astype(np.float64)
    y = F.fwht(x, axis=where, algorithm=alg)
    H = scipy.linalg.hadamard(1 << L)
    assert (y == np.moveaxis(np.tensordot(H, x, axes=([1], [where])), 0, where)).all()
    assert (F.ifwht(y, axis=where, algorithm=alg) == x).all()



def test_any_plan_grouping_gives_the_same_bits(rng):
    """Variants that round every operation to the dtype give the same bits whatever the
    grouping of their stages into passes (here: the planned passes and a single one)."""
    for dtype in DTYPES:
        for alg, stab in VARIANTS:
            x = rng.standard_normal((2, 1 << 18)).astype(dtype)
            g = F.make_plan(1 << 18, dtype, alg, stab)
            one = F.Plan(g.n, g.dtype, alg, stab, "cpu", (F.Pass(0, 18, g.stages),), g.compute_dtype)
            assert len(g.passes) > 1
            assert (F.run_plan(g, x) == F.run_plan(one, x)).all()


# --- compute_dtype and pass-local stabilizers (issue 4) ----------------------------------

def test_compute_dtype_semantics(rng):
    x = rng.standard_normal((2, 1 << 12)).astype(np.float16)
    # one pass: computed in FP32 throughout, rounded to FP16 once at the end
    y = F.fwht(x, compute_dtype="float32")
    assert y.dtype == np.float16
    assert (y == F.fwht(x.astype(np.float32)).astype(np.float16)).all()
    # several passes: rounded to FP16 where each pass writes back
    plan = F.make_plan(1 << 18, np.float16, device="cuda", compute_dtype="fp32")
    assert len(plan.passes) >= 2 and "rounded to fp16 where each pass writes back" in plan.rounding
    z = rng.standard_normal((1, 1 << 18)).astype(np.float16)
    got = F.run_plan(plan, z)
    w = z.astype(np.float32)
    for p in plan.passes:
        w = F.run_plan(F.Plan(plan.n, np.dtype(np.float32), "folklore", None, "cpu", (p,),
                              np.dtype(np.float32)), w).astype(np.float16).astype(np.float32)
    assert (got == w.astype(np.float16)).all()
    ref = R.dd_fwht(z)
    native = R.mean_relative_error(F.run_plan(F.make_plan(1 << 18, np.float16, device="cuda"), z), ref)
    assert R.mean_relative_error(got, ref) < 0.5 * native           # measured: 62% lower
    with pytest.raises(ValueError, match="compute_dtype"):
        F.fwht(x, compute_dtype="float64")
    with pytest.raises(ValueError, match="compute_dtype"):
        F.fwht(x.astype(np.float64), compute_dtype="float32")
    with pytest.raises(ValueError, match="alternatives"):
        F.fwht(x, compute_dtype="float32", stabilizer="kahan")


@pytest.mark.parametrize("kind", ["kahan", "neumaier"])
def test_pass_local_stabilizers(kind):
    n = 1 << 18
    g = dict(device="cuda")
    local_plan = F.make_plan(n, np.float32, stabilizer=f"{kind}-pass", **g)
    assert len(local_plan.passes) >= 2 and local_plan.fold_each_pass
    base, glob, local = [], [], []
    for seed in range(5):            # single vectors vary; the median over seeds is the claim
        x = np.random.default_rng(seed).standard_normal((1, n)).astype(np.float32)
        ref = R.dd_fwht(x)
        g_out = F.run_plan(F.make_plan(n, np.float32, stabilizer=kind, **g), x)
        l_out = F.run_plan(local_plan, x)
        assert not (l_out == g_out).all()                 # folding per pass changes the bits
        base.append(R.mean_relative_error(F.run_plan(F.make_plan(n, np.float32, **g), x), ref))
        glob.append(R.mean_relative_error(g_out, ref))
        local.append(R.mean_relative_error(l_out, ref))
    assert np.median(local) < np.median(base) and np.median(glob) < np.median(base)
    # one pass (the CPU plan): identical to the global variant
    x = np.random.default_rng(9).standard_normal((1, 1 << 12)).astype(np.float32)
    assert (F.fwht(x, stabilizer=f"{kind}-pass") == F.fwht(x, stabilizer=kind)).all()


