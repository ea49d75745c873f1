"""``fwht bench`` peer rows (fwht_gpu.peers) on the CPU: the harness on NumPy arrays with fake
timers (ratios, absent / n/a / error rows, agreement), the PyTorch baselines against the
definition on CPU tensors, fast-hadamard-transform's function choice and matrix probe, the
timer's arithmetic on a fake CuPy, and the command's options."""
import itertools
import sys
import types

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.linalg import hadamard as sylvester

from fwht_gpu import fwht, hadamard, peers
from fwht_gpu.cli import main as fwht_main


def _timer(times: dict, default: float = 1.0):
    """A fake timer: calls fn twice (so a failing call raises), returns times[label]."""
    def timer(fn, label):
        fn(0)
        fn(1)
        return times.get(label, default), 2, 5.0
    return timer


def _backend(times, **kw):
    return peers.Backend(np, _timer(times), **kw)


def _ours():
    return peers.Impl("ours", "xp", lambda case: fwht, ours=True)


def _definition(x):
    """kron(H_K, H_M) @ row, in float64."""
    n = x.shape[-1]
    K, M = hadamard.split(n)
    H = np.kron(hadamard.matrix(K), sylvester(M)).astype(np.float64)
    return x.astype(np.float64) @ H.T


# --- lengths and cases -------------------------------------------------------------------------

@pytest.mark.parametrize("text, n", [("1024", 1024), ("2^10", 1024), ("2**10", 1024),
                                     ("28*2^10", 28672), ("28x1024", 28672), ("40*2^10", 40960),
                                     (" 12 * 2^7 ", 1536), (256, 256)])
def test_parse_length(text, n):
    assert peers.parse_length(text) == n


@pytest.mark.parametrize("text, msg", [("1000", "pad to 1024"), ("2^", "expected"),
                                       ("a*2", "expected"), ("2*3*4", "expected"),
                                       ("", "expected"), ("2^99", "too large"),
                                       ("52*2^3", "not a power of two")])
def test_parse_length_refuses(text, msg):
    with pytest.raises(ValueError, match=msg.replace("^", r"\^")):
        peers.parse_length(text)


def test_labels_and_cases():
    assert [peers.length_label(n) for n in (256, 12 << 7, 28 << 10, 40 << 10, 20 << 10, 36 << 4)] \
        == ["2^8", "12*2^7", "28*2^10", "40*2^10", "20*2^10", "36*2^4"]
    cs = peers.cases(("fp32", "bfloat16"), (256, 28 << 10), 1 << 20)
    assert [(c.dtype, c.batch, c.n, c.K, c.M) for c in cs] == [
        ("fp32", 1024, 256, 1, 256), ("fp32", 9, 28672, 28, 1024),
        ("bf16", 2048, 256, 1, 256), ("bf16", 18, 28672, 28, 1024)]
    assert peers.cases(("fp16",), (1 << 20,), 1 << 10)[0].batch == 1      # at least one row
    assert cs[0].tol == pytest.approx(2 * 8 * 2.0**-24)
    assert set(peers.SIZES) >= {1 << L for L in range(8, 16)}
    assert all(hadamard.supported(n) for n in peers.SIZES)


# --- ratios ------------------------------------------------------------------------------------

def test_finish_rows_ratios_to_the_fastest_peer_and_strongest_torch():
    rows = [{"impl": "ours", "ours": True, "status": "ok", "time_ms": 1.0},
            {"impl": "fht", "ours": False, "status": "ok", "time_ms": 2.0},
            {"impl": "bf", "ours": False, "torch_baseline": True, "status": "ok", "time_ms": 8.0},
            {"impl": "kron", "ours": False, "torch_baseline": True, "status": "ok", "time_ms": 4.0},
            {"impl": "dense", "ours": False, "torch_baseline": True, "status": "n/a"},
            {"impl": "gone", "ours": False, "status": "absent"}]
    peers.finish_rows(rows)
    assert [r.get("ratio_best_peer") for r in rows] == [0.5, 1.0, 4.0, 2.0, None, None]
    assert {r["best_peer"] for r in rows} == {"fht"}
    assert [r.get("torch_best") for r in rows] == [None, None, False, True, False, None]


def test_finish_rows_without_a_timed_peer():
    rows = peers.finish_rows([{"impl": "ours", "ours": True, "status": "ok", "time_ms": 1.0},
                              {"impl": "fht", "ours": False, "status": "absent"}])
    assert rows[0]["ratio_best_peer"] is None and rows[0]["best_peer"] is None


# --- the harness on NumPy with fake timers -----------------------------------------------------

def test_measure_case_rows_statuses_and_ratios():
    case = peers.Case("fp32", 8, 64)
    calls = []

    def broken(case):
        def call(x):
            raise RuntimeError("boom\nsecond line")
        return call

    def wrong(case):
        return lambda x: fwht(x) + 1.0          # disagrees

    impls = [_ours(),
             peers.Impl("absent one", "torch", lambda c: "unused", absent="not importable (x)"),
             peers.Impl("too long", "xp", lambda c: "powers of two up to 2^5"),
             peers.Impl("broken", "xp", broken),
             peers.Impl("wrong", "xp", wrong),
             peers.Impl("twice", "xp", lambda c: (lambda x: calls.append(1) or fwht(x)))]
    times = {"copy": 0.5, "ours": 1.0, "wrong": 3.0, "twice": 4.0}
    rows = peers.measure_case(case, impls, _backend(times), fwht)
    by = {r["impl"]: r for r in rows}
    assert [r["impl"] for r in rows] == [i.name for i in impls]
    assert {r["status"] for r in rows} == {"ok", "absent", "n/a", "error"}
    assert by["absent one"]["status"] == "absent" and "not importable" in by["absent one"]["reason"]
    assert by["too long"]["status"] == "n/a" and by["too long"]["reason"].endswith("2^5")
    assert by["broken"]["status"] == "error" and by["broken"]["reason"] == "RuntimeError: boom"
    assert "time_ms" not in by["broken"]
    r = by["ours"]
    assert r["copy_ms"] == 0.5 and r["ratio_copy"] == 2.0 and r["time_ms"] == 1.0
    assert r["gbps"] == pytest.approx(2 * 8 * 64 * 4 / 1.0 / 1e6)
    assert r["best_peer"] == "wrong" and r["ratio_best_peer"] == pytest.approx(1 / 3)
    assert by["twice"]["ratio_best_peer"] == pytest.approx(4 / 3)
    assert r["rel_diff"] == 0.0 and r["agree"] is True and r["matrix"] == "ours"
    assert by["wrong"]["agree"] is False and by["wrong"]["rel_diff"] > 0.01
    assert len(calls) == 3                    # two timed, one checked
    assert r["kind"] == "peer" and r["log2n"] == 6 and r["length"] == "2^6"
    assert r["bytes"] == 8 * 64 * 4 and r["tol"] == case.tol


def test_measure_case_copy_is_the_fastest_copy_and_setup_failures_are_rows():
    case = peers.Case("fp16", 4, 32)
    fns = lambda xs, dst: {"memcpy": lambda i: None, "copy_kernel": lambda i: None}  # noqa: E731
    freed = []
    be = peers.Backend(np, _timer({"memcpy": 0.3, "copy_kernel": 0.2}), copy_fns=fns,
                       free=lambda: freed.append(1))
    row = peers.measure_case(case, [_ours()], be, fwht)[0]
    assert (row["memcpy_ms"], row["copy_kernel_ms"], row["copy_ms"]) == (0.3, 0.2, 0.2)
    assert freed == [1]

    def no_memory(fn, label):
        raise MemoryError("out of memory allocating 64 MB")
    be = peers.Backend(np, no_memory, free=lambda: freed.append(2))
    rows = peers.measure_case(case, [_ours(), peers.Impl("p", "xp", lambda c: fwht)], be, fwht)
    assert [r["status"] for r in rows] == ["error", "error"]
    assert rows[0]["reason"].startswith("MemoryError: out of memory") and freed == [1, 2]


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_agreement_with_tolerance_per_dtype(dtype):
    """A transform rounded once in FP32 agrees with ours in every dtype; a sign error does not."""
    def once(case):
        return lambda x: _definition(x).astype(x.dtype)

    def flipped(case):
        return lambda x: (-_definition(x)).astype(x.dtype)
    impls = [_ours(), peers.Impl("once", "xp", once), peers.Impl("flipped", "xp", flipped)]
    for n in (256, 12 * 16):
        rows = peers.measure_case(peers.Case(dtype, 16, n), impls, _backend({}), fwht)
        assert [r["agree"] for r in rows] == [True, True, False], rows
        assert 0 < rows[0]["rel_diff"] <= rows[0]["tol"] or dtype == "fp32"


def test_run_cases_echoes_every_row():
    lines = []
    rows = peers.run_cases(peers.cases(("fp32",), (16, 12 * 4), 1 << 10),
                           [_ours(), peers.Impl("gone", "torch", lambda c: "", absent="absent: x")],
                           _backend({}), fwht, echo=lines.append)
    assert lines[0] == peers.HEADER and len(lines) == len(rows) + 2
    assert "gone" in lines[2] and "absent: absent: x" in lines[2]
    assert "5x12*2^2" in lines[3] and lines[3].rstrip().endswith("yes")


# --- fast-hadamard-transform: function choice, matrix probe, absence ---------------------------

class _FakeFHT:
    def __init__(self, Hs=None):
        self.Hs = Hs or {}
        for K in peers.FHT_K:
            setattr(self, f"hadamard_transform_{K}N", self._kn(K))

    def hadamard_transform(self, x, scale=1.0):
        return (fwht(np.asarray(x, np.float32)) * scale).astype(x.dtype)

    def _kn(self, K):
        def fn(x, scale=1.0):
            H = self.Hs.get(K, hadamard.matrix(K if K != 40 else 20)).astype(np.float32)
            M = x.shape[-1] // K
            y = fwht(np.asarray(x, np.float32).reshape(-1, K, M))
            return (np.matmul(H, y).reshape(x.shape) * scale).astype(x.dtype)
        return fn


def test_fht_function_choice():
    mod = _FakeFHT()
    for n, want in [(256, 1), (1 << 15, 1), (12 << 7, 12), (20 << 10, 20), (40 << 10, 40),
                    (20 << 8, 20), (28 << 2, 28)]:
        fn, k = peers.fht_function(mod, n)
        assert fn is not None and k == want, n
    for n, msg in [(1 << 16, "up to 2^15"), (36 << 4, "no 36*2^4"), (12 << 11, "no 12*2^11"),
                   (12 << 1, "no 12*2^1"), (44 << 3, "no 44*2^3")]:
        fn, why = peers.fht_function(mod, n)
        assert fn is None and msg in why, n


def test_probe_reads_the_peers_order_k_matrix():
    rng = np.random.default_rng(0)
    H12 = hadamard.matrix(12)[rng.permutation(12)] * rng.choice([-1, 1], 12)[:, None]
    mod = _FakeFHT({12: H12})
    fn, K = peers.fht_function(mod, 12 << 3)

    def unit(K, n, fn):
        e = np.zeros((K, n), np.float32)
        e[np.arange(K), np.arange(K) * (n // K)] = 1
        return fn(e, 1.0)
    assert np.array_equal(peers.probe_matrix(fn, K, 12 << 3, unit), H12)
    assert peers.probe_matrix(lambda x, s: x[:, ::-1] + 0, 12, 12 << 3, unit) is None   # no kron
    assert peers.probe_matrix(lambda x, s: 2 * fn(x, s), 12, 12 << 3, unit) is None     # not +-1


def test_load_fht_absent(monkeypatch):
    monkeypatch.setitem(sys.modules, "fast_hadamard_transform", None)
    mod, why = peers.load_fht()
    assert mod is None and why.startswith("not importable (ModuleNotFoundError")
    broken = types.ModuleType("fast_hadamard_transform")      # its extension did not load
    broken.__path__ = []
    monkeypatch.setitem(sys.modules, "fast_hadamard_transform", broken)
    mod, why = peers.load_fht()
    assert mod is None and why.startswith("not importable (") and "interface" in why


def test_absent_peers_give_absent_rows_and_never_fail():
    """Without PyTorch (and so without fast-hadamard-transform): our NumPy/CuPy row is timed,
    every other row says absent, with the reason."""
    impls = peers.gpu_impls(None, None, "PyTorch not importable (x)", None,
                            "PyTorch not importable (x)")
    assert [i.name for i in impls] == ["fwht_gpu.fwht(cupy)", "fwht_gpu.fwht(torch)",
                                       "fwht_gpu.fwht(cupy) unchecked",
                                       "fwht_gpu.fwht(torch) unchecked",
                                       "fast_hadamard_transform", *peers.TORCH_BASELINES]
    rows = peers.measure_case(peers.Case("fp16", 4, 28 << 2), impls, _backend({}), fwht)
    assert [r["status"] for r in rows] == ["ok", "absent", "ok"] + ["absent"] * 5
    assert all(r["reason"] == "PyTorch not importable (x)" for r in rows if r["status"] == "absent")
    assert rows[0]["agree"] is True and rows[0]["best_peer"] is None
    assert rows[2]["agree"] is True and rows[2]["rel_diff"] == rows[0]["rel_diff"]


# --- with PyTorch on the CPU -------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 16, 256, 12, 12 * 8, 20 * 4, 28 * 2, 36 * 4, 44 * 2, 40 * 4])
def test_torch_baselines_match_the_definition(n):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(n).standard_normal((3, 2, n))
    want = _definition(x.reshape(-1, n)).reshape(x.shape)
    t = torch.from_numpy(x)
    K, M = hadamard.split(n)
    H1, H2 = peers.kron_factors(n)
    assert np.array_equal(np.kron(H1, H2), peers.dense_matrix(n))
    assert H1.shape[0] * H2.shape[0] == n and max(H1.shape[0], H2.shape[0]) <= 2 * n ** 0.5 * 4
    got = {"butterfly": peers.torch_butterfly(t, K),
           "kron": peers.torch_kron(t, torch.from_numpy(H1).double(),
                                    torch.from_numpy(H2).double()),
           "dense": peers.torch_dense(t, torch.from_numpy(peers.dense_matrix(n)).double())}
    for name, y in got.items():
        assert y.shape == t.shape, name
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-12, atol=1e-9, err_msg=name)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_torch_rows_on_cpu_tensors(dtype):
    """The whole flow with PyTorch CPU tensors as the peers' framework: ours through DLPack
    (views both ways, bfloat16 through int16), the three baselines and a fake
    fast-hadamard-transform with another H_12 (probed, then agreeing with kron(H'_12, H_M))."""
    torch = pytest.importorskip("torch")
    to_torch, from_torch = peers.dlpack_views(np, torch)
    x = peers._inputs(np, peers.Case(dtype, 2, 8), 1, 0)[0]
    assert np.shares_memory(from_torch(to_torch(x)), x)
    H12 = -hadamard.matrix(12)[::-1]

    class TorchFHT:               # the fake, on tensors
        def __init__(self):
            self.np = _FakeFHT({12: H12})

        def __getattr__(self, name):
            f = getattr(self.np, name)
            return lambda t, s=1.0: to_torch(np.ascontiguousarray(f(from_torch(t), s)))
    impls = (peers.ours_impls(fwht, "numpy", True)
             + [peers.fht_impl(TorchFHT(), None, to_torch, from_torch, np)]
             + peers.torch_impls(torch, "cpu", dense_max=512))
    cnt = itertools.count(1)
    be = peers.Backend(np, lambda fn, label: (fn(0), (next(cnt), 1, 1.0))[1], to_torch, from_torch)
    for n in (256, 12 * 64):
        rows = peers.measure_case(peers.Case(dtype, 8, n), impls, be, fwht)
        by = {r["impl"]: r for r in rows}
        assert all(r["status"] == "ok" for r in rows if r["impl"] != "torch x@H"), rows
        assert by["torch x@H"]["status"] == ("ok" if n <= 512 else "n/a")
        assert all(r["agree"] for r in rows if r["status"] == "ok"), rows
        for name in ("fwht_gpu.fwht(torch)", "fwht_gpu.fwht(numpy) unchecked",
                     "fwht_gpu.fwht(torch) unchecked"):
            assert by[name]["rel_diff"] == by["fwht_gpu.fwht(numpy)"]["rel_diff"], name
        fht = by["fast_hadamard_transform"]
        assert fht["matrix"] == ("ours" if n == 256 else "its H_12 (probed)")
        assert sum(bool(r.get("torch_best")) for r in rows) == 1
        assert fht["best_peer"] == "fast_hadamard_transform"      # timed first: fastest


# --- the timer's arithmetic on a fake CuPy -----------------------------------------------------

class _FakeEvent:
    def __init__(self, cp):
        self.cp = cp

    def record(self, stream=None):
        self.t = self.cp.clock

    def synchronize(self):
        pass


class _FakeCupy:
    """Events read a clock that each call of the timed function advances by ``per_call`` ms."""
    def __init__(self, per_call):
        self.clock, self.per_call = 0.0, per_call
        stream = types.SimpleNamespace(synchronize=lambda: None)
        self.cuda = types.SimpleNamespace(get_current_stream=lambda: stream,
                                          Event=lambda: _FakeEvent(self),
                                          get_elapsed_time=lambda a, b: b.t - a.t)

    def fn(self, i):
        self.clock += self.per_call


@pytest.mark.parametrize("per_call, k, reps", [(0.1, 20, 30), (0.5, 4, 30), (10.0, 1, 12),
                                               (80.0, 1, 3)])
def test_event_timer_groups_calls(per_call, k, reps):
    cp = _FakeCupy(per_call)
    seen = []
    t, calls, host = peers.event_timer(cp)(lambda i: (seen.append(i), cp.fn(i)), "x")
    assert t == pytest.approx(per_call) and calls == k * reps and host >= 0
    warm = 2 if per_call > 50 else 3
    assert seen == list(range(warm)) + list(range(3, 3 + calls))


# --- the command -------------------------------------------------------------------------------

@pytest.fixture
def bench_kw(monkeypatch):
    seen = {}
    monkeypatch.setattr("fwht_gpu.cli._device", lambda device: "gpu" if device != "cpu" else "cpu")
    monkeypatch.setattr("fwht_gpu.bench.main", lambda out, **kw: seen.update(kw) or {"rows": []})
    monkeypatch.setattr("fwht_gpu.cpubench.main", lambda out, **kw: seen.update(kw) or {"rows": []})
    return seen


def _bench(tmp_path, *args):
    res = CliRunner().invoke(fwht_main, ["bench", "--json", str(tmp_path / "b.json"), *args])
    return res.exit_code, res.output


def test_cli_peer_options(tmp_path, bench_kw):
    code, out = _bench(tmp_path)
    assert code == 0, out
    assert bench_kw["peer_sizes"] == peers.SIZES and bench_kw["peer_bytes"] == peers.BATCH_BYTES
    code, out = _bench(tmp_path, "--force", "--peer-size", "28*2^10", "--peer-size", "256",
                       "--peer-size", "2^8", "--peer-mb", "16")
    assert code == 0, out
    assert bench_kw["peer_sizes"] == (28672, 256) and bench_kw["peer_bytes"] == 16 << 20
    code, out = _bench(tmp_path, "--force", "--no-peers")
    assert code == 0 and bench_kw["peer_sizes"] == ()


@pytest.mark.parametrize("args, msg", [
    (["--peer-size", "1000"], "pad to 1024"),
    (["--peer-size", "2^x"], "expected N, 2^k or K*2^k"),
    (["--peer-mb", "0"], "--peer-mb"),
    (["--no-peers", "--peer-size", "256"], "--no-peers turns off"),
    (["--device", "cpu", "--no-peers"], "applies to the GPU benchmark only"),
    (["--device", "cpu", "--peer-size", "256"], "applies to the GPU benchmark only"),
])
def test_cli_peer_option_errors(tmp_path, bench_kw, args, msg):
    code, out = _bench(tmp_path, *args)
    assert code == 2 and msg in out, out
    assert not bench_kw and not (tmp_path / "b.json").exists()


def test_cli_cpu_bench_takes_no_peer_arguments(tmp_path, bench_kw):
    code, out = _bench(tmp_path, "--device", "cpu")
    assert code == 0, out
    assert "peer_sizes" not in bench_kw


def test_bench_run_records_peer_rows_versions_and_settings(monkeypatch):
    """bench.run's plumbing (no GPU: CuPy, the device and the peer table faked): the peer rows
    join the record, whose versions name PyTorch and fast_hadamard_transform."""
    from fwht_gpu import bench, provenance
    cp = types.SimpleNamespace(cuda=types.SimpleNamespace(
        runtime=types.SimpleNamespace(memGetInfo=lambda: (1 << 34, 1 << 35))))
    monkeypatch.setattr(bench.gpu, "cupy", lambda: cp)
    monkeypatch.setattr(bench.gpu, "status", lambda: "fake GPU")
    monkeypatch.setattr(bench, "bench_axis", lambda *a, **kw: [])
    monkeypatch.setattr(provenance, "gpu_device", lambda: {f: "x" for f in provenance.GPU_FIELDS})
    seen = {}

    def fake_bench(cp_, dtypes, sizes, batch_bytes, echo, tuning, plan_for):
        seen.update(dtypes=dtypes, sizes=sizes, batch_bytes=batch_bytes)
        return ([{"kind": "peer", "impl": "x"}],
                {"torch": "2.11.0+cu130", "fast_hadamard_transform": None},
                {"peer_sizes": list(sizes), "peer_method": peers.METHOD})
    monkeypatch.setattr(bench.peers, "bench", fake_bench)
    kw = dict(dtypes=("fp32", "fp64"), single=(), batched=(), host=False, echo=lambda s: None,
              command="fwht bench")
    rec = bench.run(peer_sizes=(256, 28 << 10), peer_bytes=1 << 20, **kw)
    assert seen == {"dtypes": ("fp32", "fp64"), "sizes": (256, 28 << 10), "batch_bytes": 1 << 20}
    assert rec["rows"] == [{"kind": "peer", "impl": "x"}]
    assert rec["versions"]["torch"] == "2.11.0+cu130"
    assert rec["versions"]["fast_hadamard_transform"] is None
    assert rec["settings"]["peers"] is True and rec["settings"]["peer_sizes"] == [256, 28672]
    assert provenance.validate(rec) is rec
    seen.clear()
    rec = bench.run(**kw)                                  # no peer sizes: no peer table
    assert not seen and rec["settings"]["peers"] is False and "torch" not in rec["versions"]
