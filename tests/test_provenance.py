"""Benchmark records (fwht_gpu.provenance), the result files and README's generated tables (CPU)."""
import glob
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest

from fwht_gpu import Tuning, provenance

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "benchmarks")
RESULTS = os.path.join(BENCH, "results")


def _script(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(BENCH, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def no_git(monkeypatch):
    """Records without running git (and on the CPU, whatever this machine has)."""
    monkeypatch.setattr(provenance, "_git", lambda *args: None)
    monkeypatch.setattr(provenance, "gpu_device", lambda: None)


def test_record_fields(no_git):
    rows = [{"n": np.int64(4), "t": np.float32(0.5), "shape": (1, 2), "a": np.arange(2)}]
    rec = provenance.record("fwht-bench", rows, {"sizes": range(3)})
    assert tuple(rec) == provenance.KEYS
    assert rec["schema"] == provenance.SCHEMA == "fwht-gpu-bench/1"
    assert rec["kind"] == "fwht-bench"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", rec["created"])
    assert rec["command"] == shlex.join(sys.argv)
    assert rec["commit"] is None and rec["dirty"] is None
    assert rec["device"]["name"] == "cpu" and set(rec["device"]) == set(provenance.CPU_FIELDS)
    assert rec["device"]["cores"] == os.cpu_count()
    assert set(rec["versions"]) == set(provenance.VERSION_FIELDS)
    assert rec["versions"]["numpy"] == np.__version__
    assert rec["settings"] == {"tuning": Tuning().as_dict(), "sizes": [0, 1, 2]}
    assert rec["provenance"] == provenance.RECORDED and rec["notes"] is None
    assert rec["rows"] == [{"n": 4, "t": 0.5, "shape": [1, 2], "a": [0, 1]}]
    json.dumps(rec)                                   # plain JSON types only
    t = Tuning(tile_bytes=1 << 15)
    rec = provenance.record("tiles", [], {"tuning": t}, command="x --y", device="cpu")
    assert rec["settings"]["tuning"] == t.as_dict() and rec["command"] == "x --y"


def test_record_git_and_gpu(monkeypatch):
    answers = {"rev-parse": "0123abcd" * 5, "--no-optional-locks": " M fwht_gpu/bench.py"}
    monkeypatch.setattr(provenance, "_git", lambda *args: answers[args[0]])
    gpu = {"name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "memory_gib": 79.2, "driver": "13.0",
           "cuda_runtime": "13.0", "compute_capability": "9.0"}
    monkeypatch.setattr(provenance, "gpu_device", lambda: gpu)
    rec = provenance.record("fwht-bench", [], {})
    assert rec["commit"] == "0123abcd" * 5 and rec["dirty"] is True
    assert rec["device"] == gpu and provenance.device_folder(rec) == "h100"
    answers["--no-optional-locks"] = ""
    assert provenance.git_state() == ("0123abcd" * 5, False)
    assert provenance.record("x", [], {}, device="cpu")["device"]["name"] == "cpu"
    monkeypatch.setattr(provenance, "gpu_device", lambda: None)
    with pytest.raises(RuntimeError, match="no GPU"):
        provenance.device_record("gpu")
    with pytest.raises(ValueError, match="device="):
        provenance.device_record("tpu")


def test_git_missing(monkeypatch):
    def no_git(*args, **kw):
        raise FileNotFoundError("git")
    monkeypatch.setattr(subprocess, "run", no_git)
    assert provenance.git_state() == (None, None)


@pytest.mark.parametrize("name, folder", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"), ("NVIDIA H100 PCIe", "h100"),
    ("NVIDIA A100-SXM4-80GB", "a100"), ("Tesla V100-SXM2-16GB", "v100"), ("NVIDIA L40S", "l40s"),
    ("NVIDIA GH200 480GB", "gh200"), ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("NVIDIA RTX A6000", "rtx-a6000")])
def test_device_folder_gpu(name, folder):
    assert provenance.device_folder({"device": {"name": name}}) == folder
    assert provenance.device_folder({"name": name}) == folder


@pytest.mark.parametrize("model, folder", [
    ("AMD EPYC 7763 64-Core Processor", "cpu-epyc-7763"),
    ("Intel(R) Xeon(R) Platinum 8480+", "cpu-xeon-platinum-8480"),
    ("Intel(R) Core(TM) i7-9700K CPU @ 3.60GHz", "cpu-core-i7-9700k"),
    ("Apple M2 Pro", "cpu-m2-pro"), ("AMD EPYC", "cpu-epyc"), (None, "cpu-unknown")])
def test_device_folder_cpu(model, folder):
    assert provenance.device_folder({"device": {"name": "cpu", "cpu_model": model}}) == folder


def test_round_trip(no_git, tmp_path):
    rec = provenance.record("hash-speed", [{"x": 1.5, "nan": float("nan")}], {"keys": 16})
    path = tmp_path / "sub" / "r.json"
    provenance.write(rec, path)
    back = provenance.load(path)
    assert back["rows"][0]["x"] == 1.5 and np.isnan(back["rows"][0]["nan"])
    back["rows"][0]["nan"] = rec["rows"][0]["nan"] = None
    assert back == rec
    assert not [p for p in os.listdir(path.parent) if p.startswith(".tmp-")]


def test_load_rejects_other_layouts(tmp_path, no_git):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"device": "gpu", "rows": []}))
    with pytest.raises(ValueError, match="schema"):
        provenance.load(old)
    old.write_text("[]")
    with pytest.raises(ValueError, match="schema"):
        provenance.load(old)
    rec = provenance.record("x", [], {})
    for key, bad in [("rows", {}), ("dirty", "yes"), ("device", {"name": "cpu"}),
                     ("versions", {"python": "3"})]:
        with pytest.raises(ValueError, match=key if key != "device" else "device"):
            provenance.validate({**rec, key: bad})
    with pytest.raises(ValueError, match="without"):
        provenance.validate({k: v for k, v in rec.items() if k != "command"})


def result_files():
    return sorted(glob.glob(os.path.join(RESULTS, "*", "*.json")))


def test_result_files_follow_the_schema():
    files = result_files()
    assert files, "no result files under benchmarks/results/"
    assert not glob.glob(os.path.join(BENCH, "*.json")), "result JSON outside benchmarks/results/"
    for path in files:
        rec = provenance.load(path)
        folder = os.path.basename(os.path.dirname(path))
        assert provenance.device_folder(rec) == folder, path
        if rec["provenance"] != provenance.RECORDED:
            assert rec["provenance"] == provenance.MIGRATED, path


def test_readme_tables_in_sync():
    tables = _script("tables")
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    bodies = {name: tables.render(name) for name in tables.TABLES}
    for name, body in bodies.items():
        assert f"<!-- table:{name} -->\n{body}\n<!-- /table:{name} -->" in readme, (
            f"README.md table {name} is out of date: python benchmarks/tables.py --write")
        assert "Generated by `benchmarks/tables.py`" in body and "commit" in body
    assert tables.replace_tables(readme, bodies) == readme
    with pytest.raises(ValueError, match="table:nope"):
        tables.replace_tables(readme, {"nope": ""})


def test_explore_variants_settings(monkeypatch):
    for key in [k for k in os.environ if k.startswith("FWHT_")]:
        monkeypatch.delenv(key)
    ev = _script("explore_variants")
    assert ev.parse_env("FWHT_LOG_E=3, tile_bytes=32768") == {"FWHT_LOG_E": "3",
                                                            "FWHT_TILE_BYTES": "32768"}
    assert ev.tuning_for({"FWHT_ASYNC_PASSES": "all"}).changes() == {"async_passes": "all"}
    with pytest.raises(Exception, match="not a Tuning setting"):
        ev.parse_env("FWHT_ASYNC=none")
