"""pagh_mm.corpus and pagh_mm.cpubench: the co-occurrence corpus and the CPU benchmark on tiny
sizes (timings are not checked: they belong in benchmarks)."""
import sys
import types

import numpy as np
import pytest
import scipy.sparse as sps

from fwht_gpu import provenance
from pagh_mm import corpus, cpubench


def _tree(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(
        "import os\n"                     # doc 0: import os
        "def alpha(beta):\n"              # doc 0
        "    return beta + gamma\n"       # doc 1: return beta gamma
        "x = alpha(beta)  # beta\n")      # doc 1: x (one char: not a term) alpha beta
    (tmp_path / "pkg" / "b.py").write_text(
        "class Foo:\n"                    # doc 2: Foo
        "    pass\n"                      # doc 2: (keyword)
        "\n"                              # doc 3: no identifier at all: dropped
        "\n"
        "gamma = 'os beta'\n")            # doc 4: gamma os beta
    (tmp_path / "pkg" / "notes.txt").write_text("alpha beta gamma\n")  # not a .py file
    for skipped in ("site-packages", "__pycache__"):
        (tmp_path / "pkg" / skipped).mkdir()
        (tmp_path / "pkg" / skipped / "c.py").write_text("alpha beta gamma os Foo\n" * 9)
    return tmp_path / "pkg"


def test_corpus_small_tree(tmp_path):
    root = _tree(tmp_path)
    c = corpus.cooccurrence(max_terms=100, min_df=1, lines_per_doc=2, roots=[root])
    # document frequencies: beta 3, gamma 2, os 2, alpha 2, Foo 1 (ties: by the string)
    assert c.terms == ["beta", "alpha", "gamma", "os", "Foo"]
    assert sps.isspmatrix_csr(c.X) and c.X.dtype == np.float64
    assert c.X.shape == (4, 5)                         # the empty chunk is dropped
    assert set(np.unique(c.X.data)) == {1.0}           # binary, no duplicates summed
    dense = c.X.toarray()
    expect = np.array([[1, 1, 0, 1, 0],                # import os / def alpha(beta)
                       [1, 1, 1, 0, 0],                # return beta + gamma / x = alpha(beta)
                       [0, 0, 0, 0, 1],                # class Foo: pass
                       [1, 0, 1, 1, 0]], float)        # gamma = 'os beta'
    np.testing.assert_array_equal(dense, expect)
    d = c.description
    assert (d["files"], d["docs"], d["terms"], d["nnz"]) == (2, 4, 5, 10)
    assert d["build_s"] >= 0 and d["python"]


def test_corpus_filters_and_determinism(tmp_path):
    root = _tree(tmp_path)
    c = corpus.cooccurrence(max_terms=2, min_df=2, lines_per_doc=2, roots=[root])
    assert c.terms == ["beta", "alpha"]
    assert c.X.shape == (3, 2)                         # docs left without a kept term dropped
    c2 = corpus.cooccurrence(max_terms=2, min_df=2, lines_per_doc=2, roots=[str(root)])
    assert c2.terms == c.terms
    assert (c2.X != c.X).nnz == 0
    assert corpus.cooccurrence(min_df=3, lines_per_doc=2, roots=[root]).terms == ["beta"]
    with pytest.raises(ValueError, match="lines_per_doc"):
        corpus.cooccurrence(lines_per_doc=0, roots=[root])
    assert all(not p.endswith(("txt",)) and "site-packages" not in p
               for p in corpus.source_files([root]))


def test_selections():
    key = np.array([3.0, 5.0, 5.0, 1.0, 5.0])
    assert cpubench._select(key, 2).tolist() == [1, 2]          # ties: smaller position
    C = sps.csr_matrix(np.array([[9.0, 2.0, -7.0], [2.0, 8.0, 1.0], [-7.0, 1.0, 9.0]]))
    r, c, v = cpubench._csr_topk(C, 2, "value", offdiag=True)
    assert list(zip(r.tolist(), c.tolist(), v.tolist())) == [(0, 1, 2.0), (1, 0, 2.0)]
    r, c, v = cpubench._csr_topk(C, 3, "abs", offdiag=True)
    assert list(zip(r.tolist(), c.tolist())) == [(0, 2), (2, 0), (0, 1)]
    r, c, v = cpubench._merge_topk([(np.array([0, 1]), np.array([1, 1]), np.array([4.0, -1.0])),
                                    (np.array([2]), np.array([0]), np.array([-6.0]))], 2, "abs", 3)
    assert list(zip(r.tolist(), c.tolist(), v.tolist())) == [(2, 0, -6.0), (0, 1, 4.0)]


def _no_peers(monkeypatch):
    monkeypatch.setattr(cpubench, "_import_peer",
                        lambda name: (None, cpubench.PEER_NOTES[name] + " (test)"))


TINY = {"sizes": (64,), "planted": 4, "buckets": 1024, "reps": 3, "repeats": 1, "sparse_n": 256,
        "sparse_per_vector": 4, "sparse_magnitude": 64, "corpus_terms": 50, "corpus_lines": 2,
        "corpus_min_df": 1, "k": 3}


def test_run_without_peers(tmp_path, monkeypatch):
    _no_peers(monkeypatch)
    lines = []
    rec = cpubench.run(**TINY, corpus_roots=[_tree(tmp_path)], isolate=False, echo=lines.append)
    provenance.validate(rec)
    assert rec["kind"] == cpubench.KIND and rec["device"]["name"] == "cpu"
    assert rec["settings"]["peers"] == {"compmatmul": None, "sparse_dot_topn": None}
    assert "numba_threads" in rec["settings"] and "OMP_NUM_THREADS" in rec["settings"]["thread_env"]
    assert "BUILD.md" in rec["notes"]
    got = {(r["case"], r["impl"]): r for r in rec["rows"]}
    assert set(got) == {("dense", i) for i in ("ours-fwht", "ours-fft", "numpy", "compmatmul-fwht",
                                                "compmatmul-fft")} | \
        {("sparse", i) for i in ("ours-fwht", "scipy", "sparse_dot_topn", "compmatmul-fwht")} | \
        {("cooccurrence", i) for i in ("ours", "scipy", "sparse_dot_topn")}
    for key, r in got.items():
        if "compmatmul" in key[1] or key[1] == "sparse_dot_topn":
            assert r["skipped"] and "not importable" in r["note"]
            continue
        assert not r["skipped"], r
        assert r["total_s"] > 0 and r["recall"] == 1.0
        peer = {"dense": "numpy", "sparse": "scipy", "cooccurrence": "scipy"}[key[0]]
        if key[1] != peer:
            assert r["best_peer"] == peer
            assert r["ratio_best_peer"] == pytest.approx(r["total_s"] / got[key[0], peer]["total_s"])
        assert set(r["ratios"]) == {i for (c, i), o in got.items()
                                    if c == key[0] and i != key[1] and not o["skipped"]}
    assert got["dense", "ours-fwht"]["ratios"]["ours-fft"] > 0
    assert got["cooccurrence", "ours"]["same_set"] and got["cooccurrence", "ours"]["values_exact"]
    assert got["dense", "ours-fwht"]["certified"] in (True, False)
    text = "\n".join(lines)
    assert "skipped: compmatmul not importable" in text and "sparse_dot_topn not importable" in text


def test_missing_module_is_a_note(monkeypatch):
    monkeypatch.setitem(sys.modules, "compmatmul", None)         # import fails
    mod, note = cpubench._import_peer("compmatmul")
    assert mod is None and "BUILD.md" in note


def test_compmatmul_call_convention(monkeypatch):
    """The compmatmul path with a stand-in that checks the documented conventions."""
    calls = []

    def matmul(C, AT, B, d, b, seed=None, hash=None):
        for M in (C, AT, B):
            assert M.dtype == np.float64 and M.flags.c_contiguous and M.ctypes.data % 64 == 0
        assert hash == "multiply add shift" and (d, b) == (3, 1024)
        calls.append(AT.shape)
        C[...] = AT.T @ B

    fake = types.SimpleNamespace(matmul_fwht=matmul, matmul_fft=matmul, __file__="fake")
    monkeypatch.setitem(sys.modules, "compmatmul", fake)
    monkeypatch.setattr(cpubench, "_import_peer", lambda name: (fake, None) if name == "compmatmul"
                        else (None, cpubench.PEER_NOTES[name]))
    rec = cpubench.run(**TINY, cases=("dense",), echo=lambda s: None)
    rows = {r["impl"]: r for r in rec["rows"]}
    for impl in ("compmatmul-fwht", "compmatmul-fft"):
        assert not rows[impl]["skipped"] and rows[impl]["recall"] == 1.0
        assert "compmatmul-" + impl.split("-")[1] in rows["ours-" + impl.split("-")[1]]["sketch_ratios"]
    assert calls and all(s == (64, 64) for s in calls)


def test_isolated_children_measure_memory(tmp_path, monkeypatch):
    _no_peers(monkeypatch)
    rec = cpubench.run(**TINY, cases=("cooccurrence",), corpus_roots=[_tree(tmp_path)],
                       echo=lambda s: None)
    rows = {r["impl"]: r for r in rec["rows"]}
    for impl in ("ours", "scipy"):
        r = rows[impl]
        assert not r["skipped"], r
        assert r["recall"] == 1.0 and r["peak_mib"] is not None and r["peak_mib"] >= 0
        assert r["memory_method"]
    assert rows["ours"]["certified"] is True


def test_bad_case():
    with pytest.raises(ValueError, match="cases"):
        cpubench.run(cases=("gpu",), echo=lambda s: None)


def test_scale_rows_use_automatic_parameters(monkeypatch):
    """``scale=(n,)``: the large sparse case with automatic parameters (ours-auto: compress(A, B,
    k=k) + a certified top-k) against SciPy, with recall, the buckets used and the ratios."""
    _no_peers(monkeypatch)
    rec = cpubench.run(**dict(TINY, planted=20), cases=(), scale=(2048,), isolate=False,
                       echo=lambda s: None)
    provenance.validate(rec)
    got = {(r["case"], r["impl"]): r for r in rec["rows"]}
    assert set(got) == {("scale", i) for i in ("ours-auto", "scipy", "sparse_dot_topn")}
    ours = got["scale", "ours-auto"]
    assert not ours["skipped"] and ours["recall"] == 1.0 and ours["certified"]
    assert ours["buckets"] >= 1024 and "automatic" in ours["answer"]
    assert ours["best_peer"] == "scipy" and got["scale", "scipy"]["recall"] == 1.0
    assert rec["settings"]["scale"] == [2048]


def test_gpu_bench_tiled_exact_routes_select_like_the_whole_product(monkeypatch):
    """pagh-mm bench's exact routes (GEMM + top-k, the FP16 screen) tile the product, or sum
    it over chunks of inner indices, when it does not fit the device: the selection is the
    whole product's, for a Gram product (A = X.T, converted once) too."""
    from pagh_mm import bench
    from pagh_mm.backend import cpu
    be = cpu()
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((300, 200)), rng.standard_normal((200, 250))
    X = rng.standard_normal((200, 180)).astype(np.float32)
    assert bench._is_transpose(X.T, X) and not bench._is_transpose(A, B)
    assert not bench._is_transpose(X[:, :90].T, X[:, 90:])
    for L, R, gram in ((A, B, False), (np.asfortranarray(A), B, False), (X.T, X, True)):
        C = L.astype(np.float64) @ R.astype(np.float64)
        if gram:
            np.fill_diagonal(C, 0)
        flat = np.abs(C).ravel()
        want = set(np.argsort(-flat)[:20].tolist())
        p = R.shape[1]
        for plan in (("whole", 0), ("inner", 64), ("inner", 37), ("tiles", 300), ("tiles", 64),
                     ("tiles", 37)):
            monkeypatch.setattr(bench, "_gemm_plan", lambda be, A, B, dt, plan=plan: plan)
            r, c = (bench._tiled_largest(be, L, R, 20, np.float64, True) if gram else
                    bench._exact_topk(be, L, R, 20, np.float64))
            assert set((r * p + c).tolist()) == want, plan
            r, c = bench._screen_topk(be, L, R, 20, gram)
            assert set((r * p + c).tolist()) == want, plan


def test_gpu_bench_exact_routes_plan_within_the_memory_a_pool_may_take():
    """The exact routes' plan counts the pool's cached blocks as available (a second timed run
    must not fall back to tiles because the first one's blocks are cached), converts a Gram
    product's X once, sums a covariance screen over chunks of samples when X does not fit
    converted, and tiles what else does not fit."""
    from pagh_mm import bench
    state = {"free": 0, "cached": 0}
    pool = types.SimpleNamespace(free_bytes=lambda: state["cached"])
    xp = types.SimpleNamespace(
        cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(
            memGetInfo=lambda: (state["free"], 1 << 40))),
        get_default_memory_pool=lambda: pool)
    be = types.SimpleNamespace(gpu=True, xp=xp)
    X = np.empty((1 << 14, 256), dtype=np.float32)       # samples x features
    product = 256 * 256 * (8 + 16)
    once = X.size * 8                                   # X converted to float64, once
    for free, cached, want in ((once + product + 1000, 0, "whole"),
                               (0, (once + product) / 0.7 + 1, "whole"),
                               (once + product - 1000, 0, "inner")):
        state.update(free=int(free / 0.7) if cached == 0 else 0, cached=int(cached))
        how, c = bench._gemm_plan(be, X.T, X, np.float64)
        assert how == want, (free, cached)
        if how == "inner":
            assert c >= bench.GEMM_CHUNK_MIN and c & (c - 1) == 0
            assert c * 512 * 8 + 256 * 256 * (8 + 8 + 16) <= state["free"] * 0.7
    A, B = np.empty((512, 1 << 14)), np.empty((1 << 14, 512))
    state.update(free=int((A.size + B.size) * 4 / 0.7), cached=0)   # no room for both
    how, t = bench._gemm_plan(be, A, B, np.float32)
    assert how == "tiles" and 64 <= t < 512
    assert bench._gemm_plan(be, A, B, np.float64)[0] == "whole"     # nothing converted


class _NotNumPy:
    """NumPy under another name: drives the GPU's branch of ``bench.largest``; records the
    sizes of its compactions."""

    def __init__(self):
        self.listed = []

    def flatnonzero(self, a):
        out = np.flatnonzero(a)
        self.listed.append(out.size)
        return out

    def __getattr__(self, name):
        return getattr(np, name)


@pytest.mark.parametrize("case", ["normal", "ties", "mostly_nan", "few", "sampled_large",
                                  "sampled_small"])
def test_gpu_bench_selection_by_threshold_picks_the_largest(monkeypatch, case):
    """The exact routes' selection on the GPU (a sample's threshold, a count, a compaction:
    no sort of the whole product) chooses the values argpartition chooses, NaN last, with its
    fallbacks (ties; a sample that overstates, whose thresholds admit fewer than q; one that
    understates, whose thresholds admit most values), and lists few values when the sample is
    fair."""
    from pagh_mm import bench
    monkeypatch.setattr(bench, "SELECT_DIRECT", 1000)
    monkeypatch.setattr(bench, "SELECT_SAMPLE", 4096)
    rng = np.random.default_rng(7)
    n = 200_003
    step = (n // bench.SELECT_SAMPLE) | 1
    v = np.abs(rng.standard_normal(n)).astype(np.float32)
    if case == "ties":
        v = np.ones(n, np.float32)
    elif case == "mostly_nan":
        v[rng.permutation(n)[:n - 60]] = np.nan
    elif case == "few":
        v[rng.permutation(n)[:40]] = np.inf
    elif case == "sampled_large":
        v[::step] *= 100
    elif case == "sampled_small":
        v[::step] /= 100
    v[rng.integers(0, n, 5)] = np.nan
    for q in (1, 7, 50, 100, 3000):
        xp = _NotNumPy()
        got = bench.largest(xp, v, q)
        assert got.size == q and np.unique(got).size == q
        want = np.argpartition(-v, q - 1)[:q]
        np.testing.assert_array_equal(np.sort(v[got]), np.sort(v[want]))
        assert all(k <= bench.SELECT_MOST * n for k in xp.listed)
        if case == "normal":        # about twice q's share, plus the sample's 64 ranks
            assert xp.listed == [pytest.approx(2 * q + 64 * step, rel=0.5, abs=200)]


def test_gpu_bench_flow_times_the_query_itself():
    """pagh-mm bench's automatic flow (a fresh sketch and its certified query) times the query
    inside each run, so its share is a measured time (never total minus a separately measured
    compression, which noise can make negative), and reports the same answer as a direct call."""
    from pagh_mm import bench
    from pagh_mm.backend import cpu
    be = cpu()
    rng = np.random.default_rng(5)
    A, B = rng.standard_normal((60, 40)), rng.standard_normal((40, 50))
    A[:, 0] *= 50
    t_sk, t_total, t_top, top, final, prof, sk = bench._flow(be, A, B, 5, 3, False)
    assert 0 < t_top <= t_total and t_sk > 0 and final >= sk.buckets and prof
    want = _exact_top(A, B)
    assert set(zip(top.rows.tolist(), top.cols.tolist())) == want
    state: dict = {}
    assert bench._queried(be, state, lambda: 7) == 7 and len(state["query_s"]) == 1


def _exact_top(A, B, k=5):
    flat = np.abs(A @ B).ravel()
    return {(int(i) // B.shape[1], int(i) % B.shape[1]) for i in np.argsort(-flat)[:k]}


def test_gpu_bench_dense_row_reports_the_arithmetic_floor(monkeypatch):
    """pagh-mm bench's dense row (run here on the CPU backend) reports the transforms'
    additions, their time at the device's add rate and the sketch's ratio to the larger of
    that and one read of A and B (the physical floor)."""
    from pagh_mm import bench
    from pagh_mm.backend import cpu
    monkeypatch.setattr(bench, "_add_rate", lambda be, dt: 1e12)
    row = bench._case(cpu(), 256, "fp64", 8, None, 1, 1e10, lambda *a: None)
    d, b = row["reps"], row["buckets"]
    assert row["transform_adds"] == 2 * d * 256 * b * (b.bit_length() - 1)
    assert row["arithmetic_floor_s"] == row["transform_adds"] / 1e12
    once = row["floor_s"] / d
    assert row["sketch_ratio_physical"] == row["sketch_s"] / max(row["arithmetic_floor_s"], once)
    assert row["recall"] == 1.0 and row["certified"]
