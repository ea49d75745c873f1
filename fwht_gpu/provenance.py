"""Benchmark results as data with provenance: one JSON schema for every result file.

A result file is one *record*::

    {"schema": "fwht-gpu-bench/1",
     "kind": "fwht-bench" | "fwht-host" | "fwht-variants" | "pagh-bench" | "hash-speed" | "tiles" | ...,
     "created": "2026-11-22T06:39:00Z",          # ISO-8601 UTC (null: not recorded)
     "command": "fwht bench --json out.json",     # the command line (null: not recorded)
     "commit": "<git commit of the working tree>" | null,
     "dirty": true | false | null,                # tracked files changed since the commit
     "device": {"name", "sm_count", "memory_gib", "driver", "cuda_runtime",
                "compute_capability"}             # a GPU, or
               | {"name": "cpu", "cpu_model", "cores"},
     "versions": {"python", "numpy", "scipy", "cupy", "fwht_gpu"},
     "settings": {"tuning": {...Tuning fields...}, ...the run's own options},
     "provenance": "recorded" | "migrated: ...",
     "notes": null | "free text",
     "rows": [...the measurements, one dict each...]}

:func:`record` builds one for the current process (git, device, versions); :func:`write`
writes it atomically; :func:`load` reads and checks one; :func:`device_folder` names the
folder of ``benchmarks/results/`` it belongs in (``h100``, ``h200``, ``cpu-<model>``).
GPU facts come from :mod:`fwht_gpu.gpu`, and only when a GPU is used: without CuPy the
record names the CPU.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys
from importlib import metadata

import numpy as np

from .files import write_json
from .tuning import Tuning

#: The schema name and version every result file carries.
SCHEMA = "fwht-gpu-bench/1"
#: The provenance of a record measured by this code.
RECORDED = "recorded"
#: The provenance of a result converted from a file written before records were kept.
MIGRATED = "migrated: recorded before provenance was kept"
#: Every key of a record (``notes`` may be null).
KEYS = ("schema", "kind", "created", "command", "commit", "dirty", "device", "versions",
        "settings", "provenance", "notes", "rows")
GPU_FIELDS = ("name", "sm_count", "memory_gib", "driver", "cuda_runtime", "compute_capability")
CPU_FIELDS = ("name", "cpu_model", "cores")
VERSION_FIELDS = ("python", "numpy", "scipy", "cupy", "fwht_gpu")
#: 1-minute load average above which a CPU benchmark says the cores are shared.
BUSY_LOAD = 0.5

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


# --- the pieces of a record ----------------------------------------------------------------

def _git(*args: str) -> str | None:
    """Stdout of ``git args`` run in the package directory, or None (no git, not a checkout)."""
    try:
        r = subprocess.run(["git", *args], cwd=_PACKAGE_DIR, capture_output=True, text=True,
                           timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def git_state() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the working tree holding this package; (None, None) without git.

    ``dirty``: tracked files differ from the commit (untracked files do not count); read
    without taking the index lock (``--no-optional-locks``)."""
    commit = _git("rev-parse", "HEAD")
    if not commit:
        return None, None
    status = _git("--no-optional-locks", "status", "--porcelain", "--untracked-files=no")
    return commit, None if status is None else bool(status)


def _cuda_version(v: int) -> str:
    """12040 -> '12.4' (the CUDA runtime/driver API version numbering)."""
    return f"{v // 1000}.{(v % 1000) // 10}"


def gpu_device() -> dict | None:
    """The current GPU's record (through :mod:`fwht_gpu.gpu`), or None without one."""
    from . import gpu
    if not gpu.available():
        return None
    cp = gpu.cupy()
    rt = cp.cuda.runtime
    lim = gpu.limits()
    cc = str(lim.compute_capability)
    return {"name": lim.name, "sm_count": lim.sm_count,
            "memory_gib": round(rt.memGetInfo()[1] / 2**30, 1),
            "driver": _cuda_version(rt.driverGetVersion()),
            "cuda_runtime": _cuda_version(rt.runtimeGetVersion()),
            "compute_capability": f"{cc[:-1]}.{cc[-1]}" if len(cc) >= 2 else cc or None}


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo`` on Linux), or what platform knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def load_average() -> float | None:
    """The 1-minute load average (None where the platform has none): above
    :data:`BUSY_LOAD`, other processes share the cores and CPU times are not clean."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def cpu_device() -> dict:
    """The CPU's record."""
    return {"name": "cpu", "cpu_model": cpu_model(), "cores": os.cpu_count()}


def device_record(device: str = "auto") -> dict:
    """The record of ``device``: 'gpu' (the current GPU; RuntimeError without one), 'cpu',
    or 'auto' (the GPU when one is available, else the CPU)."""
    if device not in ("auto", "gpu", "cpu"):
        raise ValueError(f"device={device!r}; choose 'auto', 'gpu' or 'cpu'")
    if device != "cpu":
        rec = gpu_device()
        if rec is not None:
            return rec
        if device == "gpu":
            from . import gpu
            raise RuntimeError(f"no GPU to record: {gpu.status()}")
    return cpu_device()


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict:
    """Versions of Python, NumPy, SciPy, CuPy (null when it cannot be used) and fwht_gpu."""
    from . import __version__, gpu
    cupy = sys.modules.get("cupy")
    if cupy is None and gpu.available():     # imports CuPy (never raises)
        cupy = sys.modules.get("cupy")
    return {"python": platform.python_version(), "numpy": np.__version__,
            "scipy": _dist_version("scipy"), "cupy": getattr(cupy, "__version__", None),
            "fwht_gpu": __version__}


def _plain(obj):
    """``obj`` with NumPy scalars/arrays and tuples turned into JSON types."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, range)):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _plain(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Tuning):
        return obj.as_dict()
    return obj


def utc_now() -> str:
    """The current time, ISO-8601 UTC to the second (``2026-11-22T06:39:00Z``)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


# --- records ---------------------------------------------------------------------------------

def record(kind: str, rows: list, settings: dict, command: str | None = None, *,
           device: str = "auto", notes: str | None = None) -> dict:
    """A result record of this process: ``rows`` (the measurements) of benchmark ``kind``
    under ``settings`` (a ``"tuning"`` entry - a :class:`Tuning` or its dict - defaults to
    ``Tuning().as_dict()``), with the time, the command line (``sys.argv`` unless given),
    the git commit, the device (``device``: see :func:`device_record`) and versions."""
    settings = {"tuning": Tuning(), **settings}
    commit, dirty = git_state()
    rec = {"schema": SCHEMA, "kind": str(kind), "created": utc_now(),
           "command": shlex.join(sys.argv) if command is None else str(command),
           "commit": commit, "dirty": dirty, "device": device_record(device),
           "versions": versions(), "settings": _plain(settings), "provenance": RECORDED,
           "notes": notes, "rows": _plain(list(rows))}
    validate(rec)
    return rec


def validate(rec: dict) -> dict:
    """``rec`` when it is a record of this schema; ValueError naming what is wrong."""
    schema = rec.get("schema") if isinstance(rec, dict) else type(rec).__name__
    if schema != SCHEMA:
        raise ValueError(f"schema {schema!r}; expected a JSON object of schema {SCHEMA!r}")
    missing = [k for k in KEYS if k not in rec]
    if missing:
        raise ValueError(f"result record without {', '.join(missing)}")
    checks = [("kind", str, False), ("created", str, True), ("command", str, True),
              ("commit", str, True), ("dirty", bool, True), ("device", dict, False),
              ("versions", dict, False), ("settings", dict, False), ("provenance", str, False),
              ("notes", str, True), ("rows", list, False)]
    for key, typ, nullable in checks:
        v = rec[key]
        if not (isinstance(v, typ) or (nullable and v is None)):
            raise ValueError(f"result record field {key!r} is {type(v).__name__}, "
                             f"expected {typ.__name__}{' or null' if nullable else ''}")
    dev = rec["device"]
    fields = CPU_FIELDS if dev.get("name") == "cpu" else GPU_FIELDS
    if not isinstance(dev.get("name"), str) or any(f not in dev for f in fields):
        raise ValueError(f"device {dev!r}: expected the fields {', '.join(fields)}")
    if any(f not in rec["versions"] for f in VERSION_FIELDS):
        raise ValueError(f"versions {rec['versions']!r}: expected {', '.join(VERSION_FIELDS)}")
    if not all(isinstance(r, dict) for r in rec["rows"]):
        raise ValueError("result record rows must be JSON objects")
    return rec


def write(rec: dict, path) -> None:
    """Write the record ``rec`` (checked first) to ``path`` as indented JSON, atomically;
    the parent directory is created when missing."""
    validate(rec)
    parent = os.path.dirname(os.path.abspath(os.fspath(path)))
    os.makedirs(parent, exist_ok=True)
    write_json(path, rec)


def load(path) -> dict:
    """The record in the file ``path`` (ValueError when it is not of this schema)."""
    with open(path, encoding="utf-8") as f:
        rec = json.load(f)
    try:
        return validate(rec)
    except ValueError as exc:
        raise ValueError(f"{os.fspath(path)}: {exc}") from None


# --- where a record goes ------------------------------------------------------------------------

_VENDOR = {"nvidia", "geforce", "tesla", "quadro", "intel", "amd", "apple", "arm", "(r)", "(tm)",
           "cpu", "processor"}


def _slug(words: list[str]) -> str:
    return re.sub(r"[^a-z0-9]+", "-", " ".join(words).lower()).strip("-")


def _gpu_folder(name: str) -> str:
    words = [w for w in re.split(r"[\s_]+", name) if w.lower() not in _VENDOR]
    if not words:
        return "gpu"
    first = words[0].split("-")[0]
    if re.fullmatch(r"[A-Za-z]{1,3}\d+[A-Za-z]*", first):   # H100, A100, GH200, L40S, T4
        return _slug([first])
    return _slug(words[:2]) or "gpu"                      # RTX A6000 -> rtx-a6000


def _cpu_folder(model: str | None) -> str:
    text = re.sub(r"\((r|tm)\)", " ", (model or "").lower())
    text = re.sub(r"@.*$", " ", text)                         # "@ 2.00GHz"
    text = re.sub(r"\b\d+-core\b|\bwith\b.*$", " ", text)      # "64-Core", "with Radeon..."
    words = [w for w in text.split() if w not in _VENDOR]
    return "cpu-" + (_slug(words[:3]) or "unknown")


def device_folder(rec: dict) -> str:
    """The folder of ``benchmarks/results/`` for a record (or a device record): ``h100``
    for "NVIDIA H100 80GB HBM3", ``h200`` for "NVIDIA H200", ``cpu-<model>`` for a CPU
    (``cpu-epyc-7763`` for "AMD EPYC 7763 64-Core Processor")."""
    dev = rec.get("device", rec)
    name = str(dev.get("name") or "")
    if name == "cpu":
        return _cpu_folder(dev.get("cpu_model"))
    return _gpu_folder(name)
