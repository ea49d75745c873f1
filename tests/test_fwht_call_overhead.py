"""The per-call fast paths of the GPU engine, on the CPU: the cached launches equal the ones
computed afresh (the former per-call computation, re-stated here), the cache keys separate
plans, element counts and devices, the flag buffers are reused only when they are known to be
zero and idle, and the framework/array shortcuts answer as the general paths do.  No GPU: the
CuPy calls are played by small fakes."""
import ctypes
import dataclasses
import itertools
import threading
import types

import numpy as np
import pytest

import fwht_gpu as F
from fwht_gpu import frameworks, transform
from fwht_gpu.cuda import arrays, config, engine
from fwht_gpu.cuda.device import A100, H100, Limits

SMALL = Limits("small", 40, 48 * 1024, 64 * 1024)


def _plans():
    """A spread of the plans the engines execute (every variant and dtype, split and
    interleaved ones), a few hundred."""
    plans = list(config.plans_for_compile_check())
    return plans[::7] + [p for p in plans if p.stabilizer is not None][::3]


def _reference_launches(plan, total, lim, resident):
    """engine.run's former per-call computation: (cfg, grid, threads, smem, arguments) per pass."""
    shift = plan.interleave
    log2row = plan.log2n + shift
    cfgs = config.configs_for(plan, total, lim)
    last = len(cfgs) - 1
    out = []
    for i, (p, cfg) in enumerate(zip(plan.passes, cfgs)):
        ntiles = total // cfg.tile
        grid = min(ntiles, 2**31 - 1)
        if isinstance(cfg, config.KernelConfig) and cfg.pipelined:
            res = lim.sm_count * resident(cfg)
            if ntiles <= res:
                cfg = config.unpipelined(cfg)
            grid = min(grid, res)
        common = dict(src="SRC", dst="DST", ntiles=ntiles, log_inner=p.first_bit + shift,
                      log2n=log2row, check_input=i == 0, last=i == last, scale=0.25,
                      flags="FLAGS", rows="ROWS", row_shift=shift)
        if isinstance(cfg, config.StabilizedConfig):
            args = cfg.arguments(err="ERR", first=i == 0, **common)
        else:
            args = cfg.arguments(fbits=plan.prefix_bits, **common)
        out.append((cfg, grid, 1 << cfg.log_t, cfg.smem_bytes, args))
    return out


def _same_args(a, b):
    return len(a) == len(b) and all(type(x) is type(y) and x == y for x, y in zip(a, b))


def _call(launch, i):
    """The launch's arguments for the reference's per-call values (pass i)."""
    ci = np.int32(i == 0)
    if launch.stabilized:
        return launch.args("SRC", "DST", "ERR", ci, np.float64(0.25), "FLAGS", "ROWS")
    return launch.args("SRC", "DST", ci, np.float64(0.25), "FLAGS", "ROWS")


# --- argument templates ---------------------------------------------------------------------

def test_argument_templates_give_the_arguments_of_every_configuration():
    cfgs = list(config.all_configs())[::5]
    assert any(isinstance(c, config.StabilizedConfig) for c in cfgs)
    rng = np.random.default_rng(3)
    for cfg in cfgs:
        names = [n for n, _ in cfg.PARAMS]
        values = {n: (int(rng.integers(0, 1 << 40)) if t == "i64" else int(rng.integers(0, 30))
                      if t == "int" else float(rng.standard_normal()) if t == "double" else object())
                  for n, t in cfg.PARAMS}
        want = cfg.arguments(**values)
        for k in (0, 3, len(names)):                       # any split of the parameters
            dynamic = tuple(rng.permutation(names)[:k])
            tmpl = cfg.bind(dynamic, **{n: v for n, v in values.items() if n not in dynamic})
            assert _same_args(tmpl(*(values[n] for n in dynamic)), want), cfg.name
            # pre-converted scalars are taken as they are, others converted
            conv = [config._SCALARS[dict(cfg.PARAMS)[n]](values[n])
                    if dict(cfg.PARAMS)[n] in config._SCALARS else values[n] for n in dynamic]
            assert _same_args(tmpl(*conv), want)


def test_argument_templates_refuse_a_wrong_split_or_count():
    cfg = next(iter(config.all_configs()))
    with pytest.raises(TypeError):
        cfg.bind(("src",), dst=1)                          # parameters missing
    with pytest.raises(TypeError):
        cfg.bind(("src", "src"), **{n: 0 for n, _ in cfg.PARAMS if n != "src"})
    with pytest.raises(TypeError):
        cfg.bind(("src",), **{n: 0 for n, _ in cfg.PARAMS})     # src both fixed and dynamic
    tmpl = cfg.bind(("src", "dst"), **{n: 0 for n, _ in cfg.PARAMS if n not in ("src", "dst")})
    with pytest.raises(TypeError):
        tmpl("only one")


# --- launches ---------------------------------------------------------------------------------

@pytest.mark.parametrize("lim", [H100, A100, SMALL], ids=["h100", "a100", "small"])
def test_pass_launches_equal_the_per_call_computation(lim):
    plans = _plans()
    assert len(plans) > 100
    checked = 0
    for plan in plans:
        row = plan.n << plan.interleave
        for log_batch, blocks in itertools.product((0, 1, 5, 12), (1, 3)):
            total = row << log_batch
            resident = lambda cfg, b=blocks: b   # noqa: E731
            got = config.pass_launches(plan, total, lim, resident)
            want = _reference_launches(plan, total, lim, resident)
            assert len(got) == len(want) == len(plan.passes)
            for i, (g, (cfg, grid, threads, smem, args)) in enumerate(zip(got, want)):
                assert (g.cfg, g.grid, g.threads, g.smem) == (cfg, grid, threads, smem), plan
                assert _same_args(_call(g, i), args), (plan, i)
                checked += 1
    assert checked > 1000


def test_launch_cache_keys_plan_elements_and_device():
    cache = config.LaunchCache(maxsize=8)
    calls = []

    def make(tag):
        calls.append(tag)
        return tag

    a = F.make_plan(1024, np.float32, device="cuda")
    assert F.make_plan(1024, np.float32, device="cuda") is a   # planned once per request
    b = dataclasses.replace(a)                                 # equal, another object
    assert a == b and a is not b
    assert cache.get(a, 4096, 0, lambda: make("a")) == "a"
    assert cache.get(a, 4096, 0, lambda: make("again")) == "a"   # a dict hit
    assert cache.get(b, 4096, 0, lambda: make("b")) == "b"       # identity, not equality
    assert cache.get(a, 8192, 0, lambda: make("a8")) == "a8"     # other element count
    assert cache.get(a, 4096, 1, lambda: make("a-dev1")) == "a-dev1"   # other device
    assert calls == ["a", "b", "a8", "a-dev1"]
    for k in range(20):                                        # bounded
        cache.get(a, 1 << (20 + k), 0, lambda: 0)
        assert len(cache) <= 8


def test_a_collected_plan_never_answers_for_a_new_one():
    """Entries keep their plans alive: a new plan never finds another's entry by a reused id."""
    cache = config.LaunchCache()
    for k in range(200):
        plan = F.make_plan(1 << (1 + k % 12), np.float32, device="cuda")
        assert cache.get(plan, plan.n, 0, lambda p=plan: p) is plan


def _fake_engine(monkeypatch, lim=H100):
    """engine's device queries and kernels played on the CPU: the kernel of a config is its name."""
    monkeypatch.setattr(engine, "limits", lambda device=None: lim)
    monkeypatch.setattr(engine, "kernel", lambda cfg: ("kernel", cfg.name))
    monkeypatch.setattr(engine, "_resident_blocks", lambda cfg, smem: 2)
    monkeypatch.setattr(engine, "_LAUNCHES", config.LaunchCache())   # (no fakes left behind)


def test_cached_launches_equal_fresh_ones_for_layouts_and_batches(monkeypatch):
    """Plans of other layouts (interleaved axes: the strides), dtypes and batches each get
    their own launches, equal to those computed afresh."""
    _fake_engine(monkeypatch)
    seen = {}
    for dt in ("float64", "float32", "float16", "bfloat16"):
        t = F.FWHT(1 << 10, F.dtypes.resolve(dt), device="cuda")
        for interleave, batch in itertools.product((0, 1, 3, 6), (1, 7, 64, 4096)):
            key = (dt, interleave, batch)
            plan = F.make_plan(t.n, t.dtype, device="cuda", batch=batch, interleave=interleave,
                               sms=H100.sm_count)
            total = batch * (plan.n << plan.interleave)
            steps, errvec = engine.launches(plan, total, 0)
            assert engine.launches(plan, total, 0)[0] is steps          # cached
            want = _reference_launches(plan, total, H100, lambda cfg: 2)
            assert not errvec
            for i, ((s, fn), (cfg, grid, threads, smem, args)) in enumerate(zip(steps, want)):
                assert fn == ("kernel", cfg.name)
                assert (s.cfg, s.grid, s.threads, s.smem) == (cfg, grid, threads, smem), key
                assert _same_args(_call(s, i), args)
            seen[key] = tuple((s.cfg, s.grid) for s, _ in steps)
    # the layout changes the kernels (strided passes), the batch the grids
    assert seen[("float32", 0, 64)] != seen[("float32", 3, 64)]
    assert seen[("float32", 0, 1)] != seen[("float32", 0, 4096)]
    assert seen[("float32", 0, 64)] != seen[("float16", 0, 64)]


def test_stabilized_launches_ask_for_the_error_vector(monkeypatch):
    _fake_engine(monkeypatch)
    plan = F.make_plan(1 << 22, np.float32, stabilizer="kahan", device="cuda")
    steps, errvec = engine.launches(plan, plan.n, 0)
    assert errvec == any(s.cfg.errvec for s, _ in steps) and len(steps) > 1
    assert all(s.stabilized for s, _ in steps)


# --- the flag buffers ---------------------------------------------------------------------

class _Mem:
    def __init__(self, ptr):
        self.ptr = ptr


class _DevArray:
    """A device array played by host memory (its pointer is real)."""

    def __init__(self, host):
        self.host = host
        self.data = _Mem(host.ctypes.data)
        self.size, self.nbytes = host.size, host.nbytes

    def __getitem__(self, k):
        return _DevArray(self.host[k])

    @property
    def shape(self):
        return self.host.shape

    def reshape(self, *shape):
        return _DevArray(self.host.reshape(*shape))


class _Stream:
    ptr = 12345
    syncs = 0

    def synchronize(self):
        type(self).syncs += 1


def _fake_cupy():
    rt = types.SimpleNamespace(
        memcpyDeviceToHost=2, getDevice=lambda: 0,
        memcpyAsync=lambda dst, src, n, kind, stream: ctypes.memmove(dst, src, n))
    cuda = types.SimpleNamespace(runtime=rt, get_current_stream=lambda: _Stream(),
                                 alloc_pinned_memory=lambda n: bytearray(n))
    return types.SimpleNamespace(cuda=cuda, uint32=np.uint32,
                                 zeros=lambda n, dtype: _DevArray(np.zeros(n, dtype)),
                                 float64=np.float64)


def test_flag_buffers_are_zero_reused_and_never_shared(monkeypatch):
    cp = _fake_cupy()
    monkeypatch.setattr(engine, "_FLAG_POOL", {})
    a = engine._take_flags(cp, 0, 2)
    b = engine._take_flags(cp, 0, 2)
    assert a is not b and a.buf.data.ptr != b.buf.data.ptr     # two calls at once: two buffers
    assert not a.buf.host.any() and a.rows.data.ptr == a.buf.data.ptr + 4
    engine._give_back_flags(0, a)
    assert engine._take_flags(cp, 0, 2) is a                   # reused
    assert engine._take_flags(cp, 1, 2) is not a               # per device
    engine._give_back_flags(0, a)
    big = engine._take_flags(cp, 0, 1000)                      # too small: a new one
    assert big is not a and big.words >= 1000
    huge = engine._take_flags(cp, 0, engine.FLAG_POOL_WORDS + 1)
    engine._give_back_flags(0, huge)
    assert huge not in engine._FLAG_POOL.get(0, [])            # large ones are not kept
    a.buf.host[0] = 6
    assert a.read(cp, _Stream()) == 6                         # the pinned word, after a sync


def test_flag_buffers_across_threads(monkeypatch):
    cp = _fake_cupy()
    monkeypatch.setattr(engine, "_FLAG_POOL", {})
    held, lock = [], threading.Lock()

    def work():
        for _ in range(200):
            s = engine._take_flags(cp, 0, 4)
            with lock:
                assert all(s is not h for h in held)       # never handed to two users
                held.append(s)
            with lock:
                held.remove(s)
            engine._give_back_flags(0, s)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(engine._FLAG_POOL[0]) <= engine._FLAG_POOL_KEEP


def _run_with_fake_kernels(monkeypatch, flag_value):
    """engine.run on fake arrays with kernels that record their arguments and set ``flag_value``."""
    cp = _fake_cupy()
    monkeypatch.setattr(engine, "cupy", lambda: cp)
    monkeypatch.setattr(engine, "limits", lambda device=None: H100)
    monkeypatch.setattr(engine, "_resident_blocks", lambda cfg, smem: 2)
    launched = []

    def kernel(cfg):
        def fn(grid, block, args, shared_mem=0):
            launched.append((cfg, grid, block, args, shared_mem))
            flags = args[[n for n, _ in cfg.PARAMS].index("flags")]
            flags.host[0] |= flag_value
        return fn
    monkeypatch.setattr(engine, "kernel", kernel)
    monkeypatch.setattr(engine, "_LAUNCHES", config.LaunchCache())   # (no fakes left behind)
    plan = F.make_plan(1 << 20, np.float32, device="cuda", compute_dtype="float64")
    x = _DevArray(np.zeros((4, plan.n), np.float32))
    return cp, plan, x, launched


def test_run_launches_the_reference_arguments_and_reuses_clean_flags(monkeypatch):
    monkeypatch.setattr(engine, "_FLAG_POOL", {})
    cp, plan, x, launched = _run_with_fake_kernels(monkeypatch, 0)
    assert engine.run(plan, x, x, 0.5) is None
    want = _reference_launches(plan, x.size, H100, lambda cfg: 2)
    assert len(launched) == len(want) == len(plan.passes) > 1
    slot = engine._FLAG_POOL[0][-1]                          # clean: back in the pool
    for i, ((cfg, grid, block, args, smem), ref) in enumerate(zip(launched, want)):
        assert (cfg, grid[0], block[0], smem) == ref[:4]
        names = [n for n, _ in cfg.PARAMS]
        exp = list(ref[4])
        for n, v in (("src", x), ("dst", x), ("scale", np.float64(0.5)), ("flags", slot.flags),
                     ("rows", slot.rows)):
            exp[names.index(n)] = v
        assert all(a is e or (type(a) is type(e) and a == e) for a, e in zip(args, exp)), i
        assert args[names.index("flags")].data.ptr == slot.buf.data.ptr
    launched.clear()
    engine.run(plan, x, x, 0.5)
    assert engine._FLAG_POOL[0] == [slot]                    # the same buffer again
    engine.run(plan, x, x, 0.5, check=False)                 # unchecked: the scratch word
    assert all(a[3][[n for n, _ in a[0].PARAMS].index("check_input")] == 0 for a in launched[-2:])


def _reference_k_launch(plan, K, rows, inverse, lim):
    """engine.run_k's former per-call computation: (config, grid, threads, smem, arguments
    without src, dst, scale and flags) of its last launch."""
    launch = config.k_launch(plan, K, rows, inverse, lim)
    if launch.pair:
        q = launch.rows_cfg.q           # blocks per cluster
        return (launch.rows_cfg, q * min(launch.ntiles, 2**31 // q - 1), launch.threads, launch.smem,
                dict(nrows=launch.ntiles, log_mu=launch.log_mu))
    if launch.fused:
        return (launch.rows_cfg, min(launch.ntiles, 2**31 - 1), launch.threads, launch.smem,
                dict(ntiles=launch.ntiles, log_mu=launch.log_mu, log_rows=launch.log_rows))
    npos = rows * plan.n
    return (launch.stage_cfg, max(1, min(-(-npos // 256), lim.sm_count * 16)), 256, 0,
            dict(npos=npos, log_m=plan.log2n))


@pytest.mark.parametrize("lim", [H100, A100], ids=["H100", "A100"])
def test_k_launches_are_cached_and_launch_the_launchers_choice(monkeypatch, lim):
    """run_k's launch (one-block tiles, two- and four-block clusters, the passes and the K-point stage)
    is computed once per (plan, rows, K, direction, device) and launches what the launcher
    chose, with the call's arrays, scale and flags in parameter order."""
    monkeypatch.setattr(engine, "_FLAG_POOL", {})
    cp, _, _, launched = _run_with_fake_kernels(monkeypatch, 0)
    monkeypatch.setattr(engine, "limits", lambda device=None: lim)

    class Module:
        def function(self, name, smem=0, cluster_blocks=0):
            cfg = next(c for c in config.all_k_configs() if c.name == name)

            def fn(grid, block, args, shared_mem=0):
                launched.append((cfg, grid, block, args, shared_mem))
            return fn
    monkeypatch.setattr(engine, "K_KERNELS", Module())
    monkeypatch.setattr(engine, "_K_LAUNCHES", config.LaunchCache())   # (no fakes left behind)
    routes = set()
    for dt, K, M, rows, inverse in itertools.product(
            (np.float64, np.float32, np.float16), (12, 20, 28), (16, 256, 1024, 1 << 13),
            (1, 7, 4096), (False, True)):
        plan = F.make_plan(M, dt, device="cuda")
        step = engine.k_launches(plan, K, rows, inverse, 0)
        assert engine.k_launches(plan, K, rows, inverse, 0) is step           # cached
        assert engine.k_launches(plan, K, rows, not inverse, 0) is not step   # per direction
        cfg, grid, threads, smem, fixed = _reference_k_launch(plan, K, rows, inverse, lim)
        routes.add((step.launch.pair, step.launch.fused))
        x = _DevArray(np.zeros((rows, K * M), dt))
        y = _DevArray(np.zeros((rows, K * M), dt))
        launched.clear()
        assert engine.run_k(plan, K, x, y, 0.25, inverse) is False
        got_cfg, got_grid, got_block, args, got_smem = launched[-1]
        assert (got_cfg, got_grid[0], got_block[0], got_smem) == (cfg, grid, threads, smem)
        passes = 0 if step.launch.fused else len(plan.passes)
        assert len(launched) == 1 + passes
        slot = engine._FLAG_POOL[0][-1]
        # the K-point stage reads what the power-of-two passes wrote into dst
        src = y if passes else x
        want = dict(fixed, src=src, dst=y, scale=np.float64(0.25), flags=slot.flags)
        assert [type(a) for a in args] == [type(a) for a in cfg.arguments(**want)]
        assert all(a is w or (not isinstance(w, _DevArray) and a == w)
                   for a, w in zip(args, cfg.arguments(**want)))
    assert routes == ({(False, True), (True, True), (False, False)} if lim is H100
                      else {(False, True), (False, False)})


def test_run_drops_a_written_flags_buffer(monkeypatch):
    monkeypatch.setattr(engine, "_FLAG_POOL", {})
    cp, plan, x, launched = _run_with_fake_kernels(monkeypatch, 1)   # non-finite input only
    assert engine.run(plan, x, x) is None
    assert not engine._FLAG_POOL.get(0)                      # not zero any more: never reused
    first = launched[0][3]
    engine.run(plan, x, x)
    assert launched[-1][3][[n for n, _ in launched[-1][0].PARAMS].index("flags")] is not \
        first[[n for n, _ in launched[0][0].PARAMS].index("flags")]


def test_a_failed_launch_waits_and_keeps_the_buffer_out(monkeypatch):
    monkeypatch.setattr(engine, "_FLAG_POOL", {})
    cp, plan, x, launched = _run_with_fake_kernels(monkeypatch, 0)

    def broken(cfg):
        def fn(*a, **k):
            raise RuntimeError("launch failed")
        return fn
    monkeypatch.setattr(engine, "kernel", broken)
    monkeypatch.setattr(engine, "_LAUNCHES", config.LaunchCache())   # (no fakes left behind)
    before = _Stream.syncs
    with pytest.raises(RuntimeError, match="launch failed"):
        engine.run(plan, x, x)
    assert _Stream.syncs == before + 1 and not engine._FLAG_POOL.get(0)


# --- memory checks, layouts -----------------------------------------------------------------

def test_device_memory_is_queried_only_when_the_pool_cannot_answer(monkeypatch):
    asked = []
    monkeypatch.setattr(arrays, "check_memory", lambda need, what: asked.append(need))
    pool = types.SimpleNamespace(free_bytes=lambda: 1 << 20)
    cp = types.SimpleNamespace(get_default_memory_pool=lambda: pool)
    arrays.check_device_memory(cp, 0, "w")
    arrays.check_device_memory(cp, 1 << 20, "w")
    assert asked == []
    arrays.check_device_memory(cp, (1 << 20) + 1, "w")
    assert asked == [(1 << 20) + 1]


class _Arr:
    """What arrays.layout reads of a CuPy array."""

    def __init__(self, shape, ptr=0, contiguous=True):
        self.shape, self.ndim = shape, len(shape)
        self.size = int(np.prod(shape))
        self.flags = types.SimpleNamespace(c_contiguous=contiguous)
        self.data = _Mem(ptr)


def _layout_reference(x, axis, out):
    n = x.shape[axis]
    batch = x.size // n if n else 0
    inner = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    if (axis != x.ndim - 1 and arrays._usable(x) and inner & (inner - 1) == 0
            and (out is None or arrays._usable(out))):
        return batch, inner.bit_length() - 1
    return batch, 0


def test_layout_answers_as_before():
    shapes = [(8,), (4, 8), (3, 8, 4), (2, 16, 6), (5, 0, 4), (2, 4, 8, 2), (1, 1, 1)]
    for shape in shapes:
        for axis in range(len(shape)):
            for ptr, contiguous, out in itertools.product((0, 8), (True, False), (None, "o")):
                x = _Arr(shape, ptr, contiguous)
                o = None if out is None else _Arr(shape, 16 - ptr, contiguous)
                assert arrays.layout(x, axis, o) == _layout_reference(x, axis, o), (shape, axis)


# --- array types, frameworks ----------------------------------------------------------------

def test_is_cupy_answers_by_type_and_caches_only_cupy_arrays(monkeypatch):
    monkeypatch.setattr(transform, "_CUPY_TYPES", set())
    fake_nd = type("ndarray", (), {"__module__": "cupy", "__cuda_array_interface__": {}})
    sparse = type("csr_matrix", (), {"__module__": "cupyx.scipy.sparse._csr"})
    other = type("Thing", (), {"__module__": "mylib", "__cuda_array_interface__": {}})
    assert transform._is_cupy(fake_nd()) and fake_nd in transform._CUPY_TYPES
    assert transform._is_cupy(fake_nd())
    assert not transform._is_cupy(sparse()) and not transform._is_cupy(other())
    assert not transform._is_cupy(np.zeros(2)) and not transform._is_cupy([1.0])
    assert transform._CUPY_TYPES == {fake_nd}


def test_through_passes_numpy_as_it_is():
    x = np.arange(8.0)
    assert frameworks.through(x, None, lambda a, o: ("ran", a is x, o)) == ("ran", True, None)
    out = np.empty(8)
    assert frameworks.through(x, out, lambda a, o: "ignored") is out
    assert not frameworks.is_foreign(None) and not frameworks.is_foreign(x)


def test_stream_wrappers_use_the_stream_protocol_when_cupy_has_it(monkeypatch):
    made = []

    class Device:
        def __init__(self, i):
            self.i = i

        def __enter__(self):
            made.append(("device", self.i))

        def __exit__(self, *a):
            pass

    class Stream:
        @classmethod
        def from_external(cls, obj):
            made.append(("from_external", obj.__cuda_stream__()))
            return ("stream", obj.__cuda_stream__()[1])

    def external(ptr, device):
        made.append(("ExternalStream", ptr, device))
        return ("ext", ptr)

    monkeypatch.setattr(frameworks, "_STREAMS", {})
    cp14 = types.SimpleNamespace(cuda=types.SimpleNamespace(Stream=Stream, Device=Device,
                                                            ExternalStream=external))
    s = frameworks._cupy_stream(cp14, 77, 1)
    assert s == ("stream", 77) and made == [("device", 1), ("from_external", (0, 77))]
    assert frameworks._cupy_stream(cp14, 77, 1) is s and len(made) == 2      # cached
    monkeypatch.setattr(frameworks, "_STREAMS", {})
    cp13 = types.SimpleNamespace(cuda=types.SimpleNamespace(Stream=object, Device=Device,
                                                            ExternalStream=external))
    assert frameworks._cupy_stream(cp13, 78, 0) == ("ext", 78)
    assert made[-1] == ("ExternalStream", 78, 0)


def test_cpu_tensors_and_refused_tensors_take_the_general_path():
    torch = pytest.importorskip("torch")
    x = torch.randn(4, 16, dtype=torch.float64)
    assert frameworks._torch_cuda_through(x, None, None) == (False, None)
    assert torch.equal(F.fwht(x), torch.from_numpy(F.fwht(x.numpy())))
    g = torch.randn(2, 16, requires_grad=True)
    with pytest.raises(TypeError, match="fwht_gpu.torch"):
        F.fwht(g)
