"""Results users can trust (issue 12): exact values, device- and budget-independent bits,
per-transform overflow, validated parameters, memory checked before use, every input type."""
import pickle
import tracemalloc
import warnings

import numpy as np
import pytest
import scipy.sparse as sps

import fwht_gpu as F
import pagh_mm
from fwht_gpu import cpu as fwht_cpu
from fwht_gpu import memory
from pagh_mm.compressed import ExactValueWarning
from tests.params import DTYPES

SPARSE = {
    "csr": sps.csr_matrix, "csc": sps.csc_matrix, "coo": sps.coo_matrix, "dok": sps.dok_matrix,
    "lil": sps.lil_matrix, "bsr": sps.bsr_matrix, "dia": sps.dia_matrix,
    "csr_array": sps.csr_array, "dok_array": sps.dok_array, "coo_array": sps.coo_array,
}


def float_product(rng, m=70, n=45, p=60, density=0.2, dtype=np.float64):
    A = rng.standard_normal((m, n)) * (rng.random((m, n)) < density) * 10 ** rng.uniform(-3, 3, (m, n))
    B = rng.standard_normal((n, p)) * (rng.random((n, p)) < density)
    return A.astype(dtype), B.astype(dtype)


# --- 1. exact values: float64 accumulation, exact integers, every format --------------------

@pytest.mark.filterwarnings("ignore::scipy.sparse.SparseEfficiencyWarning")
@pytest.mark.parametrize("fmt", list(SPARSE))
def test_exact_values_of_int32_sparse_factors_do_not_overflow(fmt):
    A = np.zeros((4, 3), np.int32)
    A[1] = 100_000
    B = np.zeros((3, 5), np.int32)
    B[:, 2] = 100_000                      # C[1, 2] = 3e10, beyond int32
    sk = pagh_mm.compress(SPARSE[fmt](A), SPARSE[fmt](B), buckets=64, reps=3, seed=0)
    assert sk.exact([1], [2])[0] == 3e10
    top = sk.top_k(1, verify=True)
    assert (int(top.rows[0]), int(top.cols[0])) == (1, 2) and top.exact[0] == 3e10
    ab = sk.above(1e10, verify=True)
    assert ab.exact.tolist() == [3e10]


@pytest.mark.parametrize("sparse", [False, True])
def test_exact_values_of_huge_integers_warn_and_are_nearest(sparse):
    A = np.zeros((3, 2), np.int64)
    A[0] = 1_200_000_000_000
    B = np.zeros((2, 3), np.int64)
    B[:, 1] = 1_000_000_000_000              # C[0, 1] = 2.4e24 exactly
    if sparse:
        A, B = sps.csr_matrix(A), sps.csr_matrix(B)
    sk = pagh_mm.compress(A, B, buckets=16, reps=3, seed=0)
    with pytest.warns(ExactValueWarning, match="2\\*\\*53"):
        got = sk.exact([0, 0, 2], [1, 0, 1])
    assert got.tolist() == [float(2 * 1_200_000_000_000 * 1_000_000_000_000), 0.0, 0.0]
    small = pagh_mm.compress(np.array([[3, 4]]), np.array([[5], [6]]), buckets=16, reps=1, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert small.exact([0], [0])[0] == 39.0      # below 2**53: no warning


def test_exact_values_beyond_2_53_within_int64_are_exact_integers():
    A = np.array([[2**40 + 1, 3]], np.int64)
    B = np.array([[2**20 + 1], [5]], np.int64)     # (2^40+1)(2^20+1) + 15 > 2^53
    sk = pagh_mm.compress(A, B, buckets=16, reps=1, seed=0)
    with pytest.warns(ExactValueWarning):
        v = sk.exact([0], [0])[0]
    assert v == float((2**40 + 1) * (2**20 + 1) + 15)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int16])
def test_exact_values_accumulate_in_float64_for_dense_and_sparse(dtype):
    rng = np.random.default_rng(1)
    A, B = float_product(rng, density=0.5)
    if dtype == np.int16:
        A, B = np.round(A * 100).clip(-3e4, 3e4), np.round(B * 100)
    A, B = A.astype(dtype), B.astype(dtype)
    r, c = rng.integers(0, A.shape[0], 200), rng.integers(0, B.shape[1], 200)
    dense = pagh_mm.compress(A, B, buckets=64, reps=1, seed=0).exact(r, c)
    wide = np.float32 if dtype == np.float16 else dtype      # SciPy has no float16 sparse
    sparse = pagh_mm.compress(sps.csr_matrix(A.astype(wide)), sps.csc_matrix(B.astype(wide)),
                              buckets=64, reps=1, seed=0).exact(r, c)
    assert (dense == sparse).all()                       # one summation order for both
    from fractions import Fraction
    for q in range(0, 200, 23):
        ex = sum(Fraction(float(a)) * Fraction(float(b)) for a, b in zip(A[r[q]], B[:, c[q]]))
        assert abs(float(ex) - dense[q]) <= 1e-14 * max(1e-300, float(sum(
            abs(Fraction(float(a)) * Fraction(float(b))) for a, b in zip(A[r[q]], B[:, c[q]]))))


# --- 2. the CPU plan rounds where the GPU plan does ------------------------------------------

def test_plans_are_the_same_on_every_device():
    variants = [("folklore", None, None), ("alman", None, None), ("folklore", "kahan", None),
                ("folklore", "neumaier", None), ("folklore", "kahan-pass", None),
                ("folklore", "neumaier-pass", None), ("folklore", None, "wide"), ("alman", None, "wide")]
    for dtype in DTYPES:
        for alg, stab, wide in variants:
            cdt = {2: np.float32, 4: np.float64}.get(np.dtype(dtype).itemsize) if wide else None
            if wide and cdt is None:
                continue
            for L in range(1, 31):
                cpu = F.make_plan(1 << L, dtype, alg, stab, "cpu", cdt)
                gpu = F.make_plan(1 << L, dtype, alg, stab, "cuda", cdt)
                assert cpu.passes == gpu.passes and cpu.rounding == gpu.rounding, (dtype, alg, stab, L)
                # thread-block clusters regroup plain Folklore and the global stabilizers only
                # (whose bits do not depend on the grouping): every other variant keeps the
                # CPU's passes
                hopper = F.make_plan(1 << L, dtype, alg, stab, "cuda", cdt, clusters=4,
                                     tuning=F.Tuning(cluster_log=4))
                regroups = hopper.plain or (alg == "folklore" and stab in ("kahan", "neumaier")
                                            and not wide)
                assert hopper.passes == cpu.passes or (regroups and hopper.clustered), \
                    (dtype, alg, stab, L)


def test_default_cpu_call_rounds_at_the_gpu_pass_boundaries(rng):
    x = rng.standard_normal((2, 1 << 18)).astype(np.float16)
    gpu_plan = F.make_plan(1 << 18, np.float16, device="cuda", compute_dtype="float32")
    assert len(gpu_plan.passes) >= 2
    assert (F.fwht(x, compute_dtype="float32") == F.run_plan(gpu_plan, x)).all()
    y = x.astype(np.float32)
    local = F.make_plan(1 << 18, np.float32, stabilizer="neumaier-pass", device="cuda")
    assert (F.fwht(y, stabilizer="neumaier-pass") == F.run_plan(local, y)).all()


# --- 3./4. overflow per transform; no false overflow when the scaled result fits ------------

def test_nan_in_one_row_does_not_hide_overflow_in_another():
    x = np.ones((3, 1 << 10), np.float16)
    x[0, 5] = np.nan                                 # a NaN row: NaN out, not an overflow
    assert np.isnan(F.fwht(x[:1])).all()
    x[2] = 30000                                     # overflows: 30000 * 1024
    with pytest.raises(F.TransformOverflowError):
        F.fwht(x)
    with pytest.raises(F.TransformOverflowError):
        F.fwht(x.T.copy(), axis=0)
    with pytest.raises(F.TransformOverflowError):
        F.run_plan(F.make_plan(1 << 10, np.float16), x)


def test_scaled_transforms_that_fit_do_not_overflow():
    x = np.array([30000, 0, 0, 0], np.float16)
    assert (F.ifwht(F.fwht(x)) == x).all()
    assert (F.fwht(x, norm="forward") == np.full(4, 7500, np.float16)).all()
    assert (F.fwht(np.array([30000, 30000, 30000, 30000], np.float16), norm="ortho")
            == np.array([60000, 0, 0, 0], np.float16)).all()
    big = np.array([3e38, 3e38, 0, 0], np.float32)
    assert (F.ifwht(big, norm="ortho") == F.ifwht(big.astype(np.float64), norm="ortho")
            .astype(np.float32)).all()
    with pytest.raises(F.TransformOverflowError):     # a true overflow still raises
        F.fwht(np.full(8, 30000, np.float16))
    with pytest.raises(F.TransformOverflowError):     # the scaled result does not fit either
        F.fwht(np.full(4, 65000, np.float16), norm="ortho")          # 130000


def test_recomputed_rows_follow_the_documented_rule(rng):
    """Only the rows whose unscaled transform overflows are recomputed (float64, scaled,
    rounded through float32), whatever the batch holds; the other rows keep their bits."""
    x = (rng.standard_normal((4, 1 << 8)) * 100).astype(np.float16)
    x[1] = np.float16(60000) * np.sign(rng.standard_normal(1 << 8)).astype(np.float16)
    got = F.ifwht(x, norm="backward")
    plain = F.ifwht(x[[0, 2, 3]])
    assert (got[[0, 2, 3]] == plain).all()
    want = (F.ifwht(x[1].astype(np.float64))).astype(np.float32).astype(np.float16)
    assert (got[1] == want).all() and np.isfinite(got).all()
    for alg, stab in (("alman", None), ("folklore", "kahan"), ("folklore", "neumaier-pass")):
        z = np.array([[30000] + [0] * 7], np.float16)
        assert (F.ifwht(F.fwht(z, algorithm=alg, stabilizer=stab), algorithm=alg,
                        stabilizer=stab) == z).all()


def test_non_native_byte_order_and_masked_input():
    x = np.arange(8, dtype=">f8")
    assert (F.fwht(x) == F.fwht(x.astype("<f8"))).all()
    with pytest.raises(TypeError, match="masked"):
        F.fwht(np.ma.masked_array(np.ones(4), [0, 1, 0, 0]))


# --- 5. the same bits whatever the memory budget ------------------------------------------

@pytest.mark.parametrize("method", ["fwht", "fft"])
def test_sketch_bits_do_not_depend_on_memory_budget_or_sparsity(method):
    rng = np.random.default_rng(10)
    A, B = float_product(rng, n=45)
    kw = dict(buckets=256, reps=3, seed=1, method=method)
    ref = pagh_mm.compress(A, B, **kw).sketch
    per_index = pagh_mm.matmul.Accumulator(method, 3, 8, np.float64, "folklore", None,
                                           np).bytes_per_index() + 8 * (A.shape[0] + B.shape[1])
    for blocks in (1, 2, 3, 4, 8, 13, 32):
        for compiled in (False, True):    # the NumPy engine's blocks, the compiled one's chunks
            calls = []
            pagh_mm.compiled.ENABLED = compiled
            try:
                s = pagh_mm.compress(A, B, memory_budget=blocks * per_index,
                                     progress=lambda *a: calls.append(a), **kw).sketch
            finally:
                pagh_mm.compiled.ENABLED = True
            assert (s == ref).all(), blocks
            if not compiled:
                assert len(calls) == -(-45 // (1 << (blocks.bit_length() - 1)))
    for fa, fb in ((sps.csc_matrix, sps.csr_matrix), (sps.coo_matrix, sps.csc_matrix)):
        assert (pagh_mm.compress(fa(A), fb(B), **kw).sketch == ref).all()
        assert (pagh_mm.compress(fa(A), fb(B), memory_budget=2 * per_index, **kw).sketch == ref).all()


def test_top_k_ties_do_not_depend_on_tiles():
    A = np.zeros((40, 3))
    A[[3, 17, 30], [0, 1, 2]] = [5.0, 4.0, 3.0]
    B = np.ones((3, 50))                     # 150 non-zeros; most estimates exactly 0: ties
    sk = pagh_mm.compress(A, B, buckets=1 << 14, reps=3, seed=0)
    ref = sk.top_k(160)
    assert (np.abs(ref.estimates[:150]) > 0).all() and (ref.estimates[150:] == 0).all()
    zero_ids = ref.rows[150:] * 50 + ref.cols[150:]
    assert zero_ids.tolist() == sorted(zero_ids.tolist())     # ties: smaller index first
    old = pagh_mm.query.TILE_BUDGET
    try:
        for budget in (3000, 20000, 70000):
            pagh_mm.query.TILE_BUDGET = budget
            t = sk.top_k(160)
            assert (t.rows == ref.rows).all() and (t.cols == ref.cols).all()
    finally:
        pagh_mm.query.TILE_BUDGET = old


# --- 6./14. parameters validated everywhere ------------------------------------------------

def test_approx_matmul_validates_like_compress():
    A, B = np.ones((4, 3)), np.ones((3, 5))
    with pytest.raises(ValueError, match="reps=0"):
        pagh_mm.approx_matmul(A, B, reps=0)
    with pytest.raises(ValueError, match="buckets=0"):
        pagh_mm.approx_matmul(A, B, buckets=0)
    with pytest.raises(TypeError, match="reps=2.5"):
        pagh_mm.compress(A, B, buckets=16, reps=2.5)
    with pytest.raises(TypeError, match="buckets=16.0"):
        pagh_mm.compress(A, B, buckets=16.0, reps=3)
    for seed, err in ((1.5, TypeError), (-3, ValueError), (True, TypeError)):
        with pytest.raises(err, match="seed"):
            pagh_mm.compress(A, B, buckets=16, reps=3, seed=seed)
    with pytest.raises(ValueError, match="algorithm"):
        pagh_mm.compress(A, B, buckets=16, reps=3, algorithm="fast")
    with pytest.raises(ValueError, match="stabilizer"):
        pagh_mm.compress(A, B, buckets=16, reps=3, stabilizer="kahan", algorithm="alman")
    with pytest.raises(ValueError, match="memory_budget"):
        pagh_mm.compress(A, B, buckets=16, reps=3, memory_budget=0)
    # even reps: the median is the mean of the two middle estimates (documented)
    sk = pagh_mm.compress(np.random.default_rng(0).standard_normal((6, 4)), np.ones((4, 5)),
                          buckets=4, reps=4, seed=2)
    per = np.sort(sk.estimate_reps(np.arange(6)[:, None], np.arange(5)[None]), axis=0)
    assert (sk.estimate(np.arange(6)[:, None], np.arange(5)[None]) == (per[1] + per[2]) / 2).all()


def test_any_non_negative_seed_is_kept(tmp_path):
    A, B = np.ones((4, 3)), np.ones((3, 5))
    sk = pagh_mm.compress(A, B, buckets=16, reps=3, seed=2**64 + 5)
    assert sk.params.seed == 2**64 + 5
    again = pagh_mm.compress(A, B, buckets=16, reps=3, seed=2**64 + 5)
    assert (again.sketch == sk.sketch).all()
    sk.save(tmp_path / "s.npz")                          # a seed beyond int64 is saved too
    back = pagh_mm.CompressedProduct.load(tmp_path / "s.npz")
    assert back.params.same_as(sk.params) and (back.sketch == sk.sketch).all()


# --- 7./8. memory: checked before use, O(nnz) sketches, no whole copies -----------------------

def _peak(fn):
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_empty_inner_indices_cost_nothing_and_change_no_bits():
    """A sparse product whose inner dimension is mostly empty: only the inner indices with
    values on both sides are computed, and the sketch equals the dense computation's."""
    A = sps.random(30, 2000, density=0.002, random_state=1, format="csc")
    B = sps.random(2000, 40, density=0.002, random_state=2, format="csr")
    kw = dict(buckets=128, reps=3, seed=5)
    ref = pagh_mm.compress(A.toarray(), B.toarray(), **kw).sketch
    calls = []
    got = pagh_mm.compress(A, B, memory_budget=200_000, progress=lambda *a: calls.append(a), **kw)
    assert (got.sketch == ref).all()
    assert calls[-1] == ("inner", 2000, 2000) and len(calls) < 2000 // 4
    A10 = sps.csc_matrix((np.array([2.0]), (np.array([3]), np.array([9_999_999]))), shape=(5, 10**7))
    B10 = sps.csr_matrix((np.array([7.0]), (np.array([9_999_999]), np.array([4]))), shape=(10**7, 6))
    sk = pagh_mm.compress(A10, B10, buckets=64, reps=3, seed=0)
    assert sk.estimate([3], [4])[0] == 14.0 and sk.exact([3], [4])[0] == 14.0


def test_sketch_memory_does_not_grow_with_empty_rows():
    A = sps.csc_matrix((np.array([1.0, 2.0, 3.0]), (np.array([5, 10**8 - 1, 777]), np.array([0, 1, 4]))),
                       shape=(10**8, 5))
    B = sps.csr_matrix(np.arange(1.0, 36.0).reshape(5, 7))
    sk, peak = _peak(lambda: pagh_mm.compress(A, B, buckets=1 << 10, reps=5, seed=0))
    assert peak < 40 << 20, peak
    assert sk.exact([10**8 - 1], [3])[0] == 2.0 * B[1, 3]
    assert sk.estimate([10**8 - 1], [3])[0] == 2.0 * B[1, 3]


def test_requests_that_cannot_fit_are_refused_up_front(monkeypatch):
    A, B = np.ones((4, 3)), np.ones((3, 5))
    with pytest.raises(memory.InsufficientMemoryError, match="needs .* available; lower reps or buckets"):
        pagh_mm.compress(A, B, buckets=2**31, reps=5, seed=0)
    with pytest.raises(ValueError, match="buckets"):
        pagh_mm.compress(A, B, buckets=2**41, reps=5, seed=0)
    monkeypatch.setattr(memory, "host_available", lambda: 100 << 20)
    with pytest.raises(MemoryError, match="100.00 MiB is available"):
        pagh_mm.compress(A, B, buckets=2**22, reps=5, seed=0)
    with pytest.raises(MemoryError, match="dense"):
        pagh_mm.compress(sps.csr_matrix((10**5, 3)), sps.csr_matrix((3, 10**5)), buckets=16, reps=1,
                         seed=0).to_dense()
    with pytest.raises(MemoryError, match="transform fewer rows"):
        F.fwht(np.ones((256, 1 << 16), np.float32))


def test_memory_budget_is_honoured_or_refused():
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((20000, 64)), rng.standard_normal((64, 300))
    budget = 4 << 20
    _, peak = _peak(lambda: pagh_mm.compress(A, B, buckets=1 << 10, reps=3, seed=0,
                                             memory_budget=budget))
    fixed = 24 * 3 * (20000 + 300) * 2 + 16 * 3 * 1024 * 8          # hash tables, partial sums
    assert peak < budget + fixed + (2 << 20), (peak, budget + fixed)
    with pytest.raises(MemoryError, match="memory_budget=.*below what one inner index needs"):
        pagh_mm.compress(A, B, buckets=1 << 10, reps=3, seed=0, memory_budget=100_000)


def test_pair_route_plans_only_its_table(monkeypatch):
    """Sparse factors added pair by pair (the GPU's pair route) need one (d, b) time-domain
    table and their stored values' hashes, not the transform route's per-index buffers and
    Hadamard-domain tree: a sketch of 2^24 buckets plans within a few of its tables."""
    from pagh_mm import backend, hashing, matmul
    from pagh_mm.convolution import Accumulator
    A = sps.random(5000, 4096, density=0.002, random_state=1, format="csc")
    B = sps.random(4096, 5000, density=0.002, random_state=2, format="csr")
    be = backend.cpu()
    params = hashing.HashParams.draw("multiply-add-shift", 0, 5)
    sides = (matmul.Side(A, 1, params, 24, be), matmul.Side(B, 2, params, 24, be))
    acc = Accumulator("fwht", 5, 24, np.float64, "folklore", None, np)
    table = 5 * (1 << 24) * 8
    monkeypatch.setattr(memory, "host_available", lambda: 8 * table)
    block, _ = matmul._plan_memory(sides, acc, 4096, 5000, 5000, be, None, pairs=True)
    assert block == 4096                                 # every stored value's hashes at once
    with pytest.raises(MemoryError, match="lower buckets"):
        matmul._plan_memory(sides, acc, 4096, 5000, 5000, be, None)


@pytest.mark.parametrize("base", [256 << 20, 4096])
@pytest.mark.parametrize("pairs", [False, True])
def test_memory_plan_skips_the_one_index_cost_only_where_it_cannot_matter(monkeypatch, base, pairs):
    """_plan_memory reads most_values(1) only when its bound min(keys, nnz) could raise the
    budget; its (block, budget) equal the definition's max(base, cost of one index) either way
    (a small base forces the exact cost)."""
    from pagh_mm import backend, hashing, matmul
    from pagh_mm.convolution import Accumulator
    A = sps.random(3000, 2048, density=0.004, random_state=3, format="lil")
    A[:, 5] = 1.0                                        # one long vector: most_values(1) = 3000
    A = A.tocsc()
    B = sps.random(2048, 2500, density=0.004, random_state=4, format="csr")
    be = backend.cpu()
    params = hashing.HashParams.draw("multiply-add-shift", 0, 5)
    acc = Accumulator("fwht", 5, 12, np.float64, "folklore", None, np)
    monkeypatch.setattr(matmul, "MEMORY_BUDGET", base)
    have = memory.available("cpu")

    def sides():
        return (matmul.Side(A, 1, params, 12, be), matmul.Side(B, 2, params, 12, be))

    got = matmul._plan_memory(sides(), acc, 2048, 3000, 2500, be, None, pairs=pairs)
    s = sides()                                          # the definition, by hand
    per_index = matmul.PAIR_BYTES_PER_INDEX * 2 if pairs else acc.bytes_per_index(2)
    value_bytes = matmul.PAIR_BYTES + matmul.PAIR_BYTES_PER_REP * s[0].distinct_count() \
        if pairs else matmul.SPARSE_BYTES * 5
    budget = max(base, matmul._block_cost(s, 1, per_index, value_bytes))
    budget = min(budget, max(have // 2, 1)) if have is not None else budget
    assert got == (matmul._block_size(s, per_index, 2048, value_bytes, budget), budget)


def test_finite_check_reads_transposed_inputs_without_copying_them():
    X = np.random.default_rng(0).standard_normal((4096, 1024))       # 32 MiB
    _, peak = _peak(lambda: pagh_mm.matmul._check_finite(X.T, "A", pagh_mm.backend.cpu()))
    assert peak < 6 << 20                                             # blocks of 4 Mi values
    Y = X.T.copy()
    Y[5, 7] = np.inf
    with pytest.raises(ValueError, match="NaN or Inf"):
        pagh_mm.matmul._check_finite(Y.T, "A", pagh_mm.backend.cpu())


def test_above_a_tiny_threshold_is_refused_not_killed(monkeypatch):
    sk = pagh_mm.compress(np.ones((300, 2)), np.ones((2, 300)), buckets=64, reps=3, seed=0)
    monkeypatch.setattr(memory, "host_available", lambda: 1 << 20)
    with pytest.raises(MemoryError, match="raise the threshold"):
        sk.above(0.0)


# --- 15. every input type NumPy and SciPy accept ------------------------------------------------

@pytest.mark.filterwarnings("ignore::scipy.sparse.SparseEfficiencyWarning")
def test_every_sparse_format_and_array_like_gives_the_same_sketch():
    rng = np.random.default_rng(4)
    A, B = float_product(rng)
    kw = dict(buckets=1 << 9, reps=3, seed=9)
    ref = pagh_mm.compress(A, B, **kw)
    for name, fmt in SPARSE.items():
        assert (pagh_mm.compress(fmt(A), fmt(B), **kw).sketch == ref.sketch).all(), name
    assert (pagh_mm.compress(np.matrix(A), np.matrix(B), **kw).sketch == ref.sketch).all()
    assert (pagh_mm.compress(A.tolist(), B.tolist(), **kw).sketch == ref.sketch).all()
    assert (pagh_mm.compress(A.astype(">f8"), B.astype(">f8"), **kw).sketch == ref.sketch).all()
    bf = pagh_mm.compress(A.astype(F.bfloat16), B.astype(F.bfloat16), **kw)
    assert bf.dtype == "fp32"
    with pytest.raises(TypeError, match="masked array.*filled"):
        pagh_mm.compress(np.ma.masked_array(A, A > 1), B, **kw)
    with pytest.raises(TypeError, match="not a matrix of numbers|dtype"):
        pagh_mm.compress(np.array([["a", "b"]]), np.ones((2, 2)), **kw)
    dk = pagh_mm.compress(sps.dok_matrix(A), sps.dok_array(B), **kw)
    r, c = np.arange(5), np.arange(5)
    assert (dk.top_k(5, verify=True).exact == ref.top_k(5, verify=True).exact).all()
    assert np.allclose(dk.exact(r, c), (A @ B)[r, c], rtol=1e-13, atol=1e-13)


# --- 16. pickling ------------------------------------------------------------------------------

def test_compressed_product_pickles_with_its_factors():
    rng = np.random.default_rng(5)
    A, B = float_product(rng)
    for fa in (lambda M: M, sps.csr_matrix):
        sk = pagh_mm.compress(fa(A), B, buckets=256, reps=3, seed=4)
        sk.top_k(3, verify=True)                           # fills caches
        back = pickle.loads(pickle.dumps(sk))
        assert (back.sketch == sk.sketch).all() and back.params.same_as(sk.params)
        i, j = rng.integers(0, 70, 20), rng.integers(0, 60, 20)
        assert (back.estimate(i, j) == sk.estimate(i, j)).all()
        assert (back.top_k(5, verify=True).exact == sk.top_k(5, verify=True).exact).all()
        assert back.backend.name == "cpu"


# --- second reading (review of this change): siblings found and fixed ------------------------

def test_a_sum_with_a_loaded_sketch_has_no_partial_factors(tmp_path):
    rng = np.random.default_rng(21)
    A1, B1, A2, B2 = (rng.standard_normal(s) for s in ((5, 4), (4, 6), (5, 3), (3, 6)))
    kw = dict(buckets=64, reps=3, seed=0)
    pagh_mm.compress(A1, B1, **kw).save(tmp_path / "c1.npz")
    S = pagh_mm.CompressedProduct.load(tmp_path / "c1.npz") + pagh_mm.compress(A2, B2, **kw)
    with pytest.raises(ValueError, match="attach"):
        S.exact([0], [0])
    S.attach(np.hstack([A1, A2]), np.vstack([B1, B2]))
    assert np.isclose(S.exact([0], [0])[0], (A1 @ B1 + A2 @ B2)[0, 0], rtol=1e-14)


def test_exact_validates_indices_and_top_k_its_candidates():
    sk = pagh_mm.compress(np.ones((5, 4)), np.ones((4, 6)), buckets=64, reps=3, seed=0)
    with pytest.raises(TypeError, match="integer"):
        sk.exact([1.7], [0])
    with pytest.raises(TypeError, match="integer"):
        sk.exact(np.array([True]), [0])
    with pytest.raises(IndexError, match="out of range"):
        sk.exact([5], [0])
    with pytest.raises(IndexError, match="out of range"):
        sk.exact(np.array([2**64 - 1], np.uint64), [0])
    assert sk.exact([-1], [-1])[0] == 4.0
    for bad in (-5, 2, 4.5, True):
        with pytest.raises(ValueError, match="candidates"):
            sk.top_k(5, verify=True, candidates=bad)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32, np.bool_])
def test_duplicate_sparse_entries_are_added_as_toarray_adds_them(dtype):
    rng = np.random.default_rng(22)
    kw = dict(buckets=16, reps=2, seed=0)
    for _ in range(30):
        r, c = rng.integers(0, 3, 30), rng.integers(0, 3, 30)
        v = (rng.standard_normal(30) * 10 ** rng.uniform(-10, 10, 30)).astype(dtype) \
            if dtype != np.int32 else rng.integers(-5, 5, 30).astype(dtype)
        A = sps.coo_matrix((v, (r, c)), shape=(3, 3))
        raw = sps.csr_matrix((v[np.argsort(r, kind="stable")], c[np.argsort(r, kind="stable")],
                              np.searchsorted(np.sort(r), np.arange(4))), shape=(3, 3))  # duplicates kept
        for M in (A, raw, sps.csc_matrix(A)):
            dense = pagh_mm.compress(M.toarray(), np.eye(3), **kw)      # its own dense form
            sk = pagh_mm.compress(M, np.eye(3), **kw)
            assert (sk.sketch == dense.sketch).all()
            assert (sk.exact([0, 1, 2], [0, 1, 2]) == dense.exact([0, 1, 2], [0, 1, 2])).all()


def test_exact_with_mixed_dense_and_sparse_factors_of_every_dtype():
    rng = np.random.default_rng(23)
    Bs = sps.random(6, 5, density=0.5, format="csr", random_state=3)
    for dt in (np.float16, F.bfloat16, np.int8, np.float32):
        A = (rng.standard_normal((4, 6)) * 4).astype(dt)
        ref = pagh_mm.compress(A, Bs.toarray(), buckets=8, reps=1, seed=0).top_k(3, verify=True)
        got = pagh_mm.compress(A, Bs, buckets=8, reps=1, seed=0).top_k(3, verify=True)
        assert (got.exact == ref.exact).all()
    assert pagh_mm.compress(np.zeros((5, 0)), np.zeros((0, 6)), buckets=8, reps=1,
                            seed=0).exact([0], [0]).tolist() == [0.0]
    with pytest.raises(ValueError, match="2-d"):
        pagh_mm.approx_matmul(np.ones((3, 3)), np.ones(3))


def test_exact_reads_only_the_rows_and_columns_it_needs():
    rng = np.random.default_rng(24)
    A = sps.csc_matrix((np.ones(100), (rng.integers(0, 2**31, 100), rng.integers(0, 10, 100))),
                       shape=(2**31, 10))
    B = sps.csr_matrix((np.arange(1.0, 101.0), (rng.integers(0, 10, 100), rng.integers(0, 2**31, 100))),
                       shape=(10, 2**31))
    sk = pagh_mm.compress(A, B, buckets=64, reps=3, seed=0)
    r, c = A.tocoo().row[:3], B.tocoo().col[:3]
    got, peak = _peak(lambda: sk.exact(r, c))
    assert peak < 1 << 20
    a, b = A.tocoo(), B.tocoo()
    want = [sum(av * bv for ar, ak, av in zip(a.row, a.col, a.data) if ar == i
                for bk, bc, bv in zip(b.row, b.col, b.data) if bc == j and bk == ak) for i, j in zip(r, c)]
    assert got.tolist() == want
    Ad = rng.standard_normal((200, 2000))
    skd = pagh_mm.compress(Ad, sps.random(2000, 30, density=0.01, format="csr", random_state=1),
                           buckets=64, reps=1, seed=0)
    _, peak = _peak(lambda: skd.exact([3], [4]))
    assert peak < 1 << 20                                   # never the whole dense factor as CSR


def test_huge_integer_exact_values_read_only_the_stored_values():
    n = 3_000_000
    A = sps.csr_matrix((np.array([3 * 10**12, 7], np.int64), ([0, 0], [5, n - 1])), shape=(2, n))
    B = sps.csc_matrix((np.array([10**12, 2], np.int64), ([5, n - 1], [1, 1])), shape=(n, 2))
    sk = pagh_mm.compress(A, B, buckets=16, reps=1, seed=0)
    with pytest.warns(ExactValueWarning):
        got, peak = _peak(lambda: sk.exact([0], [1]))
    assert got[0] == float(3 * 10**24 + 14) and peak < 64 << 20


def test_cpu_transform_memory_check_covers_the_measured_peak():
    x = np.random.default_rng(25).standard_normal((1, 1 << 20)).astype(np.float32)
    for alg, stab in (("folklore", None), ("alman", None), ("folklore", "kahan"),
                      ("folklore", "neumaier")):
        plan = F.make_plan(1 << 20, np.float32, alg, stab)
        need = 3 * x.nbytes + fwht_cpu.work_bytes(plan, 1)
        _, peak = _peak(lambda: F.ifwht(x, algorithm=alg, stabilizer=stab))
        assert peak <= need, (alg, stab, peak, need)


def test_smaller_validation_gaps():
    A, B = np.ones((4, 3)), np.ones((3, 5))
    with pytest.raises(ValueError, match="method='fft'"):
        pagh_mm.compress(A, B, buckets=16, reps=1, method="fft", stabilizer="kahan")
    with pytest.raises(ValueError, match="2 to 2\\*\\*32"):
        pagh_mm.compress(A, B, buckets=2**33, reps=1)
    with pytest.raises(ValueError, match="bits"):
        pagh_mm.compress(A, B, buckets=16, reps=1, seed=1 << 5000)
    assert pagh_mm.compress(A.astype(np.float16), B.astype(np.float16), buckets=16, reps=1,
                            seed=0).dtype == "fp32"
    x = np.arange(8, dtype=">f8")
    o = np.empty(8, ">f8")
    assert F.fwht(x, out=o) is o and (o == F.fwht(x.astype("<f8"))).all()


def test_fused_kernel_constants_match_its_source():
    """fused.cu's constants are the host's: the key codes' and slow lists' bits and the
    chunks of keys the slow lists are ordered by (pagh_mm.sketch), RegLogVpt
    (kernels.FUSED_REG_LOG_VPT), the kernels above it, whose bits fixed_logb fixes at
    log2(values per thread) + 10, are launched with 1024 threads for exactly those bucket
    counts, and those compiled for one bucket count (FIXED) only at it."""
    import re
    from pagh_mm import sketch
    from pagh_mm.cuda import kernels
    src = open(kernels.FUSED.path).read()
    for name, value in (("CODE_SLOW", sketch.CODE_SLOW), ("CODE_NEG", sketch.CODE_NEG),
                        ("SKEY_ZERO", sketch.SKEY_ZERO), ("SKEY_NEG", sketch.SKEY_NEG)):
        assert int(re.search(name + r" = 1u << (\d+)", src).group(1)) == value.bit_length() - 1
    assert "CODE_BUCKET = (1u << %d) - 1" % sketch.CODE_BUCKET_BITS in src
    assert "constexpr int SLOW_CHUNK = %d;" % sketch.SLOW_CHUNK in src   # the slow lists' chunks
    assert "return LOG_VPT > RegLogVpt<T>::value ? LOG_VPT + 10 : FIXED;" in src
    for name in ("float", "double"):
        reg = int(re.search(r"struct RegLogVpt<%s> \{ static constexpr int value = (\d+);" % name,
                            src).group(1))
        assert reg == kernels.FUSED_REG_LOG_VPT[name]
        top = 0
        for log2b in range(1, kernels.FUSED_MAX_LOG2B[name] + 1):
            v = kernels.fused_log_vpt(log2b, name)
            assert v <= kernels.FUSED_LOG_VPT[name] and (1 << log2b) >> v <= 1024
            if v > reg:
                assert log2b == v + 10 and (1 << log2b) >> v == 1024
                top += 1
        assert top == kernels.FUSED_LOG_VPT[name] - reg   # the largest kernels exist
        # the kernels compiled for one size (FIXED): launched at exactly that size, with the
        # RegLogVpt values per thread fixed_logb asserts, and compiled
        names = {nm for nm, t, _ in kernels.fused_names() if t == name}
        for log2b in range(1, kernels.FUSED_MAX_LOG2B[name] + 1):
            v = kernels.fused_log_vpt(log2b, name)
            fixed = kernels._fixed(log2b, v, name)
            assert fixed in (0, log2b)
            assert (fixed == log2b) == (log2b in kernels.FUSED_FIXED_LOG2B[name])
            for s in ("float", "double"):
                assert f"fused_dense_terms<{name},{s},{v},true,1,{fixed}>" in names
        for log2b in kernels.FUSED_FIXED_LOG2B[name]:
            assert kernels.fused_log_vpt(log2b, name) == reg and 0 < log2b - reg <= 10


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")   # 0 x inf
@pytest.mark.parametrize("family", ["multiply-add-shift", "tabulation"])
@pytest.mark.parametrize("log2b", [1, 4, 9, 12])
@pytest.mark.parametrize("chunk", [None, 64])
def test_fused_key_codes_rebuild_the_scatter_matrix_sketch(family, log2b, chunk, monkeypatch):
    """The fused GPU kernel's sketch in key order (fused.cu's sketch_keys, from
    Side.gpu_codes): a bucket of one key with sign +-1 is 0.0 + s x, each slow bucket (several
    keys, or a key masked by a decoding row bit) its keys' values summed in key order from its
    compact list (key and sign packed in 32 bits), the rest 0.0.  That rule, run here in NumPy
    on the codes, gives the bits of the scatter matrix's product (the specification's sketch),
    signed zeros, infinities and NaN included (a masked key's 0 x inf is NaN), with and without
    decoding masks; the compact lists are the bucket lists' slow runs, listed by the chunk
    (SLOW_CHUNK keys; 64 too) of their last key, then by bucket."""
    from pagh_mm import backend, hashing, sketch
    if chunk:                                # several chunks of keys (the kernel's: 4096)
        monkeypatch.setattr(sketch, "SLOW_CHUNK", chunk)
    be = backend.cpu()
    rng = np.random.default_rng(log2b)
    keys = 300
    x = rng.standard_normal(keys)
    x[::7] = -0.0                            # -0.0 alone in a bucket is +0.0 there
    x[3::11] = rng.integers(-3, 4, x[3::11].size)
    x[5::37], x[6::41], x[8::43] = np.inf, -np.inf, np.nan     # masked: 0 x inf is NaN
    base = hashing.HashParams.draw(family, 4, 3)
    for params in (base, hashing.with_row_bits(base, 2, 3)):
        side = sketch.Side(np.zeros((keys, 1)), 1, params, log2b, be)
        d, b = params.reps, 1 << log2b
        code, cptr, slow, sptr, skeys = side.gpu_codes()
        indptr, kl, sl = side.gpu_table()
        nc = -(-keys // sketch.SLOW_CHUNK)
        assert code.shape == (d, keys) and code.dtype == np.uint32
        assert cptr.shape == (d * nc + 1,) and (np.diff(cptr) >= 0).all() and cptr[0] == 0
        assert cptr[-1] == slow.size and np.unique(slow).size == slow.size
        assert set(np.flatnonzero(np.diff(indptr) >= 2).tolist()) <= set(slow.tolist())
        assert sptr.shape == (slow.size + 1,) and sptr.dtype == np.int32 and sptr[0] == 0
        assert skeys.dtype == np.uint32 and skeys.size == sptr[-1]
        spec = sketch.Side(np.zeros((keys, 1)), 1, params, log2b, be)._cpu_table() @ x
        got = np.zeros(d * b)
        for t in range(d):
            c = code[t]
            fast = (c & sketch.CODE_SLOW) == 0
            u = (c & (sketch.CODE_SLOW - 1)).astype(np.int64)
            assert (u < b).all()
            neg = np.where(c & sketch.CODE_NEG, -1.0, 1.0)
            got[t * b + u[fast]] = 0.0 + neg[fast] * x[fast]
            assert len(set(u[fast].tolist())) == int(fast.sum())     # one key per fast bucket
            for ch in range(nc):                 # by the chunk of the last key, then bucket
                lo, hi = cptr[t * nc + ch], cptr[t * nc + ch + 1]
                assert (np.diff(slow[lo:hi]) > 0).all()
                for w in slow[lo:hi]:
                    assert kl[indptr[w + 1] - 1] // sketch.SLOW_CHUNK == ch
            for r in range(cptr[t * nc], cptr[t * nc + nc]):
                w = int(slow[r])
                assert t * b <= w < t * b + b
                e = skeys[sptr[r]:sptr[r + 1]].astype(np.int64)
                assert (e & (sketch.SKEY_ZERO - 1)).tolist() == kl[indptr[w]:indptr[w + 1]].tolist()
                sign = np.where(e & sketch.SKEY_ZERO, 0.0, 1.0)
                sign = np.where(e & sketch.SKEY_NEG, -sign, sign)
                assert sign.tobytes() == sl[indptr[w]:indptr[w + 1]].tobytes()   # +-1, +-0
                total = 0.0
                for sg, key in zip(sign, e & (sketch.SKEY_ZERO - 1)):
                    total = total + sg * x[key]
                got[w] = total
        nan = np.isnan(spec)
        assert (np.isnan(got) == nan).all() and nan.any()
        assert got[~nan].tobytes() == spec[~nan].tobytes()
        assert (np.diff(indptr)[slow] >= 1).all()
    one = sketch.Side(np.zeros((1, 1)), 1, base, log2b, be).gpu_codes()     # no slow bucket
    assert one[1].tolist() == [0] * (base.reps + 1) and one[2].size == 0 and one[4].size == 0
