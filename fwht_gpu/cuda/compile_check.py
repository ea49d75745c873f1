"""Compile every kernel instantiation the launcher can choose with ``nvcc --ptx``.

    python -m fwht_gpu.cuda.compile_check [--arch sm_80 --arch sm_90] [--module pagh_mm.cuda.kernels]

``--module`` adds another package's kernels: a module with ``names()`` (its instantiations)
and ``instantiation_source()`` (one translation unit holding them), imported by name, so
that fwht_gpu does not depend on the packages built on it.  Exits non-zero when nvcc fails; prints a skip line when nvcc is not on the PATH
(unless --require).  CI runs this so a kernel that does not compile cannot land.
"""
from __future__ import annotations

import argparse
import importlib
import os
import shutil
import subprocess
import sys
import tempfile

from .launch import all_configs, instantiation_source


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", action="append", default=None, help="sm_XX (repeatable)")
    ap.add_argument("--require", action="store_true", help="fail when nvcc is missing")
    ap.add_argument("--module", action="append", default=[],
                    help="another package's kernel module to compile too (repeatable)")
    args = ap.parse_args(argv)
    archs = args.arch or ["sm_80", "sm_90"]
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("compile_check: nvcc not on PATH, skipped")
        return 1 if args.require else 0
    configs = list(all_configs())
    units = {"fwht_gpu": (instantiation_source(configs), len(configs))}
    for name in args.module:
        mod = importlib.import_module(name)
        units[name.split(".")[0]] = (mod.instantiation_source(), len(mod.names()))
    with tempfile.TemporaryDirectory() as tmp:
        for name, (code, count) in units.items():
            src = os.path.join(tmp, f"{name}.cu")
            with open(src, "w") as f:
                f.write(code)
            for arch in archs:
                cmd = [nvcc, "-std=c++17", f"-arch={arch}", "--ptx", "-o",
                       os.path.join(tmp, f"{name}-{arch}.ptx"), src]
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    print(r.stdout + r.stderr)
                    print(f"compile_check: nvcc failed on {name} for {arch}")
                    return 1
                print(f"compile_check: {count} {name} kernel instantiations compile for {arch}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
