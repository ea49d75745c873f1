"""Where the GPU suite's time goes: a pytest plugin (``bash benchmarks/gpu_suite.sh -p
gpu_suite_profile``, which puts benchmarks/ on PYTHONPATH).
Writes $OUT/profile.txt: per test, wall and seconds in the main thread spent in CuPy compiles,
the NumPy FWHT engine, CPU pagh_mm.compress, and waiting for our kernels."""
import os, threading, time, functools, collections
import pytest

T0 = time.perf_counter()
MAIN = threading.get_ident()
acc = collections.defaultdict(float)
cnt = collections.defaultdict(int)
rows = []
compiles = []
CURRENT = [""]
bg = {"last": 0.0, "n": 0, "busy": 0.0}
_depth = threading.local()


def _wrap(obj, name, key, cond=None):
    f = getattr(obj, name)

    @functools.wraps(f)
    def g(*a, **k):
        main = threading.get_ident() == MAIN
        d = getattr(_depth, key, 0)
        if not main or d or (cond and not cond(a, k)):
            if not main and key == "cupy_compile":
                t = time.perf_counter()
                try:
                    return f(*a, **k)
                finally:
                    bg["busy"] += time.perf_counter() - t
                    bg["last"] = time.perf_counter() - T0
                    bg["n"] += 1
            return f(*a, **k)
        setattr(_depth, key, d + 1)
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            dt = time.perf_counter() - t
            acc[key] += dt
            cnt[key] += 1
            setattr(_depth, key, d)
            if key == "cupy_compile" and a and isinstance(a[0], str):
                import re
                names = re.findall(r"__global__\s+void\s+(\w+)", a[0])
                compiles.append((dt, CURRENT[0], ",".join(names)[:120]))
    setattr(obj, name, g)


def pytest_configure(config):
    import cupy.cuda.compiler as cc
    for nm in ("_compile_module_with_cache", "compile_with_cache"):
        if hasattr(cc, nm):
            _wrap(cc, nm, "cupy_compile")
            break
    import fwht_gpu.cpu as cpu
    _wrap(cpu, "transform", "numpy_fwht")
    import fwht_gpu.cuda.modules as m
    orig = m.KernelModule.function

    def function(self, name, smem_bytes=0):
        if threading.get_ident() != MAIN or (m.current_id(), name) in self._functions:
            return orig(self, name, smem_bytes)
        t = time.perf_counter()
        try:
            return orig(self, name, smem_bytes)
        finally:
            acc["kernel_wait"] += time.perf_counter() - t
            cnt["kernel_wait"] += 1
    m.KernelModule.function = function
    import pagh_mm, pagh_mm.matmul as mm

    def is_cpu(a, k):
        return type(a[0]).__module__.split(".")[0] in ("numpy", "scipy")
    for mod in (pagh_mm, mm):
        if hasattr(mod, "compress"):
            _wrap(mod, "compress", "cpu_compress", is_cpu)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    before = dict(acc)
    CURRENT[0] = item.nodeid
    t = time.perf_counter()
    yield
    w = time.perf_counter() - t
    rows.append((w, {k: acc[k] - before.get(k, 0.0) for k in acc}, item.nodeid, time.perf_counter() - T0))


def pytest_sessionfinish(session):
    out = os.path.join(os.environ.get("OUT", "."), "profile.txt")
    with open(out, "w") as f:
        keys = ["cupy_compile", "numpy_fwht", "cpu_compress", "kernel_wait"]
        f.write(f"background compiles: {bg['n']} done, last at {bg['last']:.1f}s, busy {bg['busy']:.1f} thread-s\n")
        f.write("totals: " + " ".join(f"{k}={acc[k]:.1f}s/{cnt[k]}" for k in keys) + "\n")
        f.write("  wall  " + "  ".join(f"{k[:10]:>10}" for k in keys) + "   end  test\n")
        for dt, nid, names in compiles:
            f.write(f"compile {dt:6.2f} {nid} {names}\n")
        for w, d, nid, end in rows:
            f.write(f"{w:6.2f}  " + "  ".join(f"{d.get(k, 0):10.2f}" for k in keys) + f"  {end:6.1f}  {nid}\n")
