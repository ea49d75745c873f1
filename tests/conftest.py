import os
import zlib

import numpy as np
import pytest


@pytest.fixture
def rng(request):
    # a fresh, reproducible stream per test (crc32: str hash() is randomized per process)
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


_GPU_ITEMS = []
_PRECOMPILE = {}


@pytest.hookimpl(trylast=True)        # after -m/-k deselection
def pytest_collection_modifyitems(config, items):
    _GPU_ITEMS[:] = [it for it in items if it.get_closest_marker("gpu")]


@pytest.fixture(scope="session", autouse=True)
def _precompile_gpu_kernels(request):
    """With GPU tests selected and a GPU present: compile every kernel the suite launches
    (tests/gpu_cases.py, in the order the tests need them) in parallel threads in the
    background while the tests run; a test needing a kernel not compiled yet compiles it.
    Not in pytest-xdist's workers (``-n``): each would start its own threads and processes on
    the one GPU; there the tests compile what they launch."""
    from fwht_gpu import gpu
    if not _GPU_ITEMS or not gpu.available() or os.environ.get("FWHT_TEST_NO_PRECOMPILE") or \
            os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    from fwht_gpu.cuda import engine
    from tests.gpu_cases import suite_plans
    cores = len(os.sched_getaffinity(0))   # leave cores to the tests' NumPy references and warm-up
    workers = max(2, cores - 6)
    _PRECOMPILE["kernels"] = engine.precompile(suite_plans(gpu.limits()),
                                               workers=workers, wait=False)
    from pagh_mm.cuda import kernels as pagh_kernels          # the pagh_mm tests' kernels too
    _PRECOMPILE["kernels"] += pagh_kernels.ESTIMATE.precompile(pagh_kernels.names(), 4, wait=False)
    _PRECOMPILE["kernels"] += pagh_kernels.SCATTER.precompile(["scatter_dense"], 1, wait=False)
    _PRECOMPILE["kernels"] += pagh_kernels.FUSED.precompile(
        [nm for nm, _, _ in pagh_kernels.fused_names()] + list(pagh_kernels.TREE_NAMES) +
        [nm for nm, _, _ in pagh_kernels.fused_cluster_names(gpu.limits().max_cluster_log)],
        4, wait=False)
    from tests.gpu_cases import warm_cupy_kernels           # and CuPy's own kernels
    _PRECOMPILE["warm"] = warm_cupy_kernels(str(request.config.rootpath))
    yield
    for module in (engine.KERNELS, engine.CLUSTER_KERNELS, pagh_kernels.ESTIMATE, pagh_kernels.SCATTER,
                   pagh_kernels.FUSED):
        module.cancel_pending()
    for proc in _PRECOMPILE["warm"]:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def pytest_terminal_summary(terminalreporter):
    if not _PRECOMPILE:
        return
    from fwht_gpu.cuda import engine
    late = sorted(set(engine.KERNELS.on_demand))
    terminalreporter.write_line(
        f"GPU kernels: {_PRECOMPILE['kernels']} compiled in parallel in the background; "
        f"{len(late)} not listed in tests/gpu_cases.py (compiled at their first launch)")
    for name in late[:20]:
        terminalreporter.write_line(f"  {name}")
    warm = _PRECOMPILE.get("warm", [])
    failed = [p for p in warm if p.returncode not in (0, None, -9)]
    terminalreporter.write_line(
        f"CuPy's kernels: compiled in {len(warm)} background processes (tests/gpu_cases.py)"
        + (f"; {len(failed)} failed" if failed else ""))
    for proc in failed:
        proc.err.seek(0)
        terminalreporter.write_line(proc.err.read()[-2000:])


def pytest_runtest_logreport(report):
    """FWHT_TEST_TIMES=path: append each test's duration as it finishes (profiling the suite)."""
    path = os.environ.get("FWHT_TEST_TIMES")
    if path and report.when == "call":
        with open(path, "a") as f:
            f.write(f"{report.duration:8.2f} {report.nodeid}\n")
