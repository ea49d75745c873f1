"""Compile every kernel instantiation the launcher can choose with ``nvcc --ptx``.

    python -m fwht_gpu.cuda.compile_check [--arch sm_80 --arch sm_90]

Exits non-zero when nvcc fails; prints a skip line when nvcc is not on the PATH
(unless --require).  CI runs this so a kernel that does not compile cannot land.
"""
from __future__ import annotations

import argparse
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
    args = ap.parse_args(argv)
    archs = args.arch or ["sm_80", "sm_90"]
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("compile_check: nvcc not on PATH, skipped")
        return 1 if args.require else 0
    from pagh_mm.cuda import kernels as pagh_kernels
    configs = list(all_configs())
    units = {"fwht_gpu": (instantiation_source(configs), len(configs)),
             "pagh_mm": (pagh_kernels.instantiation_source(), len(pagh_kernels.names()))}
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
