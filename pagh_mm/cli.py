"""The ``pagh-mm`` command."""
from __future__ import annotations

import sys
import time

import click
import numpy as np

from . import __version__


def _gpu_available() -> bool:
    from fwht_gpu.cuda import launch
    return launch.available()


def _device(device: str) -> str:
    if device == "gpu" and not _gpu_available():
        from fwht_gpu.cuda import launch
        raise click.UsageError(f"--device gpu, but {launch.status()}")
    if device == "auto":
        return "gpu" if _gpu_available() else "cpu"
    return device


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pagh-mm")
def main() -> None:
    """Compressed matrix multiplication: estimate A @ B and find its large entries."""


@main.command()
def info() -> None:
    """Versions, CuPy and GPU status."""
    import scipy

    from fwht_gpu.cuda import launch
    click.echo(f"pagh_mm {__version__}, numpy {np.__version__}, scipy {scipy.__version__}, "
               f"python {sys.version.split()[0]}")
    click.echo(f"GPU: {launch.status()}")


@main.command()
@click.option("-n", "--size", type=click.IntRange(64, None), default=None,
              help="Square size n (default 1024 on the CPU, 8192 on the GPU).")
@click.option("--planted", type=click.IntRange(1, None), default=None,
              help="Number of planted large entries (default n / 16, at most 300).")
@click.option("--reps", "-d", type=click.IntRange(1, None), default=5, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--device", type=click.Choice(["auto", "cpu", "gpu"]), default="auto", show_default=True)
def demo(size, planted, reps, seed, device) -> None:
    """Synthetic end-to-end run: find planted large entries of A @ B without computing it.

    Prints the recall of the planted entries, the time of compress + top-k (verified),
    and the time of the exact product + top-k for comparison.
    """
    from . import compress, synthetic
    from .backend import cpu, gpu
    dev = _device(device)
    be = gpu() if dev == "gpu" else cpu()
    n = size or (8192 if dev == "gpu" else 1024)
    k = planted or min(300, max(1, n // 16))
    data = synthetic.planted_product(n, k, seed=seed, xp=be.xp)
    b = synthetic.choose_buckets(n, k, data.magnitude, reps)
    click.echo(f"A, B: {n} x {n} float64 on the {dev.upper()}; A @ B = N(0, 1) background + {k} "
               f"planted entries of magnitude ~{data.magnitude:.0f}")
    click.echo(f"sketch: {b} buckets x {reps} repetitions (noise ||AB||_F / sqrt(b) per repetition)")

    def sync():
        if be.gpu:
            be.xp.cuda.Device().synchronize()

    compress(data.A[:64, :64], data.B[:64, :64], buckets=16, reps=1, seed=0)   # warm up kernels
    sync()
    t0 = time.perf_counter()
    sk = compress(data.A, data.B, buckets=b, reps=reps, seed=seed)
    top = sk.top_k(k, verify=True)
    sync()
    t_sketch = time.perf_counter() - t0
    rec = synthetic.recall(data.rows, data.cols, be.asnumpy(top.rows), be.asnumpy(top.cols))
    t0 = time.perf_counter()
    C = data.A @ data.B
    flat = be.xp.abs(C.ravel())
    sel = be.xp.argpartition(-flat, k - 1)[:k]
    sync()
    t_exact = time.perf_counter() - t0
    exact_rec = synthetic.recall(data.rows, data.cols, be.asnumpy(sel // n), be.asnumpy(sel % n))
    click.echo(f"compress + top-{k} (verified): {t_sketch:.3f} s, recall {rec:.3f}, "
               f"noise estimate {sk.noise():.1f}")
    click.echo(f"exact A @ B + top-{k}:          {t_exact:.3f} s, recall {exact_rec:.3f}")
    click.echo(f"speed-up over the exact product: {t_exact / t_sketch:.2f}x")


@main.command()
@click.option("--size", "sizes", multiple=True, type=int, default=None,
              help="Square sizes n (repeatable; default 4096 .. 32768 on the GPU, 512, 1024 on the CPU).")
@click.option("--dtype", "dtypes", multiple=True, type=click.Choice(["fp64", "fp32"]),
              default=("fp64", "fp32"), show_default=True)
@click.option("--planted", type=click.IntRange(1, None), default=300, show_default=True)
@click.option("--reps", "-d", type=click.IntRange(1, None), default=5, show_default=True)
@click.option("--device", type=click.Choice(["auto", "cpu", "gpu"]), default="auto", show_default=True)
@click.option("--json", "out_json", type=click.Path(dir_okay=False), default="pagh-mm-bench.json",
              show_default=True)
def bench(sizes, dtypes, planted, reps, device, out_json) -> None:
    """Compress + top-k on planted heavy hitters versus cuBLAS GEMM + top-k (table + JSON)."""
    from . import bench as _bench
    dev = _device(device)
    if not sizes:
        sizes = (4096, 8192, 16384, 32768) if dev == "gpu" else (512, 1024)
    _bench.main(out_json, sizes=sizes, dtypes=dtypes, planted=min(planted, min(sizes)), reps=reps,
                device=dev, echo=click.echo)
    click.echo(f"wrote {out_json}")


if __name__ == "__main__":
    main()
