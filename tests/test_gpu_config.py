"""The GPU configuration layer on the CPU: every configuration fits the device limits it is
given, and the shared-memory formula equals the kernel's (checked by nvcc when present)."""
import os
import shutil
import subprocess

import numpy as np
import pytest

import fwht_gpu as F
from fwht_gpu.cuda import config, engine, modules
from fwht_gpu.cuda.device import A100, H100, Limits


def _configs(limits):
    return list(config.all_configs(limits=limits))


@pytest.mark.parametrize("limits", [H100, A100], ids=["h100", "a100"])
def test_every_configuration_fits_the_device(limits):
    cfgs = _configs(limits)
    assert len(cfgs) > 1000
    for c in cfgs:
        assert c.smem_bytes <= limits.smem_per_block, c.name
        assert 1 << c.log_t <= 1024 and (1 << c.log_t) <= limits.max_threads_per_sm, c.name
        assert c.tile % (1 << c.log_t) == 0 or c.tile // c.vec >= 1, c.name


def test_the_h100_configurations_are_the_measured_ones():
    """The queried H100 limits give exactly the configurations the constants used to give
    (1731 instantiations, the count CI compiled before the limits were queried)."""
    assert len(_configs(H100)) == 1731


def test_limits_change_the_configurations():
    """A GPU with less shared memory gets smaller thread counts or no staging buffer."""
    small = Limits("small", 40, 48 * 1024, 64 * 1024)
    plan = F.make_plan(1 << 24, np.float32, device="cuda", compute_dtype="float64")
    big_cfgs = config.configs_for(plan, 1 << 24, H100)
    small_cfgs = config.configs_for(plan, 1 << 24, small)
    assert big_cfgs != small_cfgs
    assert all(c.smem_bytes <= small.smem_per_block or not c.pipelined for c in small_cfgs)


def test_kernel_names_declarations_and_arguments_come_from_one_table():
    plan = F.make_plan(1 << 20, np.float16, stabilizer="kahan", device="cuda")
    (c0, c1) = config.configs_for(plan, 1 << 20)
    assert c0.name.startswith("fwht_stabilized_pass<__half,") and c0.errvec
    decl = c0.declaration()
    params = decl[decl.index(">(") + 2:]
    assert params.count(",") == len(config.STABILIZED_PARAMS) - 1 and "const __half*" in params
    vals = {n: 0 for n, _ in config.STABILIZED_PARAMS}
    args = c0.arguments(**vals)
    assert [type(a).__name__ for a in args][3:6] == ["int64", "int32", "int32"]
    with pytest.raises(TypeError, match="missing"):
        c0.arguments(src=0)


def test_include_expansion_inlines_each_header_once(tmp_path):
    (tmp_path / "a.cuh").write_text('#pragma once\n#include "b.cuh"\nint a;\n')
    (tmp_path / "b.cuh").write_text('#pragma once\nint b;\n')
    (tmp_path / "main.cu").write_text('#include "a.cuh"\n#include "b.cuh"\n#include <cuda_fp16.h>\nint m;\n')
    text = modules.expand_includes(str(tmp_path / "main.cu"))
    assert text == "int b;\nint a;\n#include <cuda_fp16.h>\nint m;\n"
    k = modules.KernelModule(str(tmp_path / "main.cu"))
    before = k.digest
    (tmp_path / "b.cuh").write_text("#pragma once\nint c;\n")
    assert modules.KernelModule(str(tmp_path / "main.cu")).digest != before   # headers count


def test_every_kernel_package_is_registered():
    units = modules.compile_units()
    assert {"fwht_gpu", "pagh_mm"} <= set(units)
    code, count = units["fwht_gpu"]
    # 1731 power-of-two passes, 221 K * 2**k kernels (100 of one block, 40 of them compiled for
    # two or three blocks per SM, 12 plain FP64 ones with direct copies; 59 a row per two
    # blocks, 15 of them for three per SM, 4 direct; 6 per four, direct, 3 for two per SM and 3
    # for three; 56 K stages), 64 plain and 96 stabilized cluster passes
    assert count == 2112 and code.count("template __global__ void") == count
    cfgs = list(config.all_cluster_configs())
    assert len(cfgs) == 160 and sum(isinstance(c, config.StabilizedClusterConfig) for c in cfgs) == 96


def test_cluster_configurations_fit_the_h100_and_need_clusters():
    """Every cluster pass fits a block's shared memory with three blocks per SM, threads and
    slices divide its tile, and a device without clusters gets none (a clear error)."""
    cfgs = list(config.all_cluster_configs())
    assert {c.log_cl for c in cfgs} == {1, 2, 3, 4}
    for c in cfgs:
        assert 3 * (c.smem_bytes + config.BLOCK_RESERVED_SMEM) <= H100.smem_per_sm, c.name
        units = c.tile // (2 if getattr(c, "paired", False) else 1)
        assert (units >> c.log_cl) % (1 << c.log_t) == 0 and c.log_t == 8, c.name
        assert c.strided or c.log_g == 0
    t = F.Tuning(cluster_log=4)
    plan = F.make_plan(1 << 30, np.float32, device="cuda", tuning=t, clusters=4)
    c0, c1 = config.configs_for(plan, 1 << 30, H100)
    assert (c0.log_r, c0.log_g, c0.log_cl, c0.strided) == (14, 0, 4, False)     # the exploration's
    assert (c1.log_r, c1.log_g, c1.log_cl, c1.strided) == (8, 6, 4, True)       # best shape
    launches = config.pass_launches(plan, 1 << 30, H100)
    assert [s.grid for s in launches] == [1 << 16, 1 << 16] and launches[0].threads == 256
    assert all(s.grid % 16 == 0 for s in launches)
    with pytest.raises(ValueError, match="clusters of at most 1"):
        config.configs_for(plan, 1 << 30, A100)
    # the global stabilizers' (values and errors: rows of 2^9 in 64-byte segments)
    plan = F.make_plan(1 << 30, np.float32, stabilizer="kahan", device="cuda", clusters=4,
                       tuning=F.Tuning(cluster_stabilized=True, cluster_neumaier_itemsize=0))
    c0, c1 = config.configs_for(plan, 1 << 30, H100)
    assert (c0.log_r, c0.log_g, c0.log_cl, c0.strided) == (13, 0, 4, False)
    assert (c1.log_r, c1.log_g, c1.log_cl, c1.strided) == (9, 4, 4, True)
    assert [s.grid for s in config.pass_launches(plan, 1 << 30, H100)] == [1 << 17, 1 << 17]
    with pytest.raises(ValueError, match="clusters of at most 1"):
        config.configs_for(plan, 1 << 30, A100)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on the PATH")
def test_cluster_passes_compile_for_hopper_and_trap_before(tmp_path):
    """The cluster kernels carry their cluster size from sm_90 (.reqnctapercluster), compile
    without it for sm_80 (the same translation unit), and their shared memory is the formula's."""
    cfgs = list(config.all_cluster_configs())
    lines = [f'#include "{engine.CLUSTER_SOURCE}"'] + [c.declaration() for c in cfgs[::7]]
    for c in cfgs:
        traits = c.name.replace("fwht_stabilized_cluster_pass<", "StabilizedClusterTraits<").replace(
            "fwht_cluster_pass<", "ClusterPassTraits<")
        lines.append(f'static_assert({traits}::SMEM_BYTES == {c.smem_bytes}, "{c.name}");')
    src = tmp_path / "cluster.cu"
    src.write_text("\n".join(lines) + "\n")
    for arch, want in (("sm_90", True), ("sm_80", False)):
        out = tmp_path / f"{arch}.ptx"
        r = subprocess.run(["nvcc", "-std=c++17", "--ptx", f"-arch={arch}", "-o", str(out),
                            str(src)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-3000:]
        assert (".reqnctapercluster" in out.read_text()) == want


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on the PATH")
def test_shared_memory_formula_equals_the_kernels(tmp_path):
    """nvcc evaluates each kernel's SMEM_BYTES at compile time against the Python formula."""
    lines = [f'#include "{engine.SOURCE}"']
    for c in config.all_configs():
        traits = c.name.replace("fwht_stabilized_pass<", "StabilizedPassTraits<").replace(
            "fwht_pass<", "PassTraits<")
        lines.append(f'static_assert({traits}::SMEM_BYTES == {c.smem_bytes}, "{c.name}");')
    src = tmp_path / "smem.cu"
    src.write_text("\n".join(lines) + "\n")
    r = subprocess.run(["nvcc", "-std=c++17", "--ptx", "-arch=sm_90", "-o", os.devnull, str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
