"""Compile every kernel instantiation the launchers can choose with ``nvcc --ptx``.

    python -m fwht_gpu.cuda.compile_check [--arch sm_80 --arch sm_90]

The kernel packages are found through the ``fwht_gpu.kernels`` entry-point group (see
:func:`fwht_gpu.cuda.modules.compile_units`): fwht_gpu's own, and those of the packages
built on it, so fwht_gpu does not depend on them.  Exits non-zero when nvcc fails; prints a
skip line when nvcc is not on the PATH (unless --require).  CI runs this so a kernel that
does not compile cannot land.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile

from .modules import compile_units


def _nvcc(nvcc: str, src: str, arch: str, tmp: str) -> subprocess.CompletedProcess:
    out = os.path.join(tmp, f"{os.path.basename(src)}-{arch}.ptx")
    return subprocess.run([nvcc, "-std=c++17", f"-arch={arch}", "--ptx", "-o", out, src],
                          capture_output=True, text=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", action="append", default=None, help="sm_XX (repeatable)")
    ap.add_argument("--require", action="store_true", help="fail when nvcc is missing")
    args = ap.parse_args(argv)
    archs = args.arch or ["sm_80", "sm_90"]
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("compile_check: nvcc not on PATH, skipped")
        return 1 if args.require else 0
    units = compile_units()
    if "fwht_gpu" not in units:
        print("compile_check: fwht_gpu's kernels are not registered: pip install -e . first")
        return 1
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
        jobs = {}
        for name, (code, count) in units.items():
            src = os.path.join(tmp, f"{name}.cu")
            with open(src, "w") as f:
                f.write(code)
            for arch in archs:
                jobs[pool.submit(_nvcc, nvcc, src, arch, tmp)] = (name, count, arch)
        failed = False
        for fut, (name, count, arch) in jobs.items():
            r = fut.result()
            if r.returncode != 0:
                print(r.stdout + r.stderr)
                print(f"compile_check: nvcc failed on {name} for {arch}")
                failed = True
            else:
                print(f"compile_check: {count} {name} kernel instantiations compile for {arch}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
