"""The ``fwht`` command.

Exit codes: 0 success, 1 unusable data (corrupt file, shapes, NaN/Inf, overflow, memory),
2 usage errors (bad option, missing file, unknown format, existing or unwritable output
without --force), 143 after SIGTERM (no partial output is left).  Every error is one
``Error: ...`` line on stderr (``--debug``: the traceback).
"""
from __future__ import annotations

import os
import sys
import time

import click
import numpy as np
import scipy.sparse

from . import __version__, cpu, devices, gpu, reference
from . import accuracy as _acc
from . import bench as _bench
from . import cpubench as _cpubench
from . import dtypes as _dt
from . import matrixio as io
from . import peers as _peers
from .clitools import Commands, check_outputs, debug_option, first_line, force_option, guarded
from .files import write_json
from .plan import make_plan
from .transform import fwht, ifwht

_SEED = click.IntRange(0)


def _write_json(path: str, obj) -> None:
    write_json(path, obj)                 # the one atomic writer, shared with pagh-mm


def _check_range(lo: int, hi: int, what: str) -> None:
    if lo > hi:
        raise click.UsageError(f"--min-{what} {lo} is above --max-{what} {hi}; swap them")


def _check_variant(algorithm: str, stabilizer: str | None) -> None:
    """Usage error for an algorithm/stabilizer pair the Plan refuses."""
    try:
        make_plan(2, np.float64, algorithm, stabilizer)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _device(device: str) -> str:
    """'cpu' or 'gpu' for --device (the one resolver of both packages); a usage error when
    the GPU was asked for and none is usable."""
    try:
        return devices.resolve(device)
    except RuntimeError as exc:
        raise click.UsageError(f"--device gpu, but {gpu.status()}") from exc


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fwht")
def main() -> None:
    """Fast Walsh-Hadamard transforms (FP64/FP32/FP16/BF16; Folklore, Alman-Rao; Kahan, Neumaier)."""


@main.command()
@debug_option
@guarded
def info(debug) -> None:
    """Versions, CuPy and GPU status."""
    click.echo(f"fwht_gpu {__version__}, numpy {np.__version__}, python {sys.version.split()[0]}")
    click.echo(f"GPU: {gpu.status()}")


@main.command()
@click.option("--log2n", "-n", default=16, show_default=True, type=click.IntRange(1, 30),
              help="Transform length 2**LOG2N.")
@click.option("--batch", default=4, show_default=True, type=click.IntRange(1, None))
@click.option("--device", type=click.Choice(["auto", "cpu", "gpu"]), default="auto",
              show_default=True)
@click.option("--seed", default=0, show_default=True, type=_SEED)
@debug_option
@guarded
def demo(log2n: int, batch: int, device: str, seed: int, debug: bool) -> None:
    """Transform random NORM data with every dtype and variant; print error and time.

    The error is measured against the double-double reference (mean relative error,
    the thesis's metric) and shown as a multiple of the dtype's unit roundoff u.  The time
    is of a call after a first one (which plans, and compiles the kernels it needs).
    """

    use_gpu = _device(device) == "gpu"
    n = 1 << log2n
    x64 = np.random.default_rng(seed).standard_normal((batch, n))
    click.echo(f"FWHT of {batch} x 2**{log2n} NORM values on the {'GPU' if use_gpu else 'CPU'}")
    click.echo(f"{'dtype':6} {'variant':18} {'mean rel err':>13} {'/ u':>8} {'time ms':>9}")
    variants = [("folklore", None), ("folklore", "kahan"), ("folklore", "neumaier"), ("alman", None)]
    for dt in _dt.SUPPORTED:
        x = x64.astype(dt)
        ref = reference.dd_fwht(x)
        for alg, st in variants:
            if use_gpu:
                xg = gpu.cupy().asarray(x)
                fwht(xg, algorithm=alg, stabilizer=st)      # (CUDA kernels compile on first use)
                t0 = time.perf_counter()
                y = fwht(xg, algorithm=alg, stabilizer=st)
                gpu.cupy().cuda.Device().synchronize()
                dt_ms = (time.perf_counter() - t0) * 1e3
                y = y.get()
            else:       # (a first call of the same shape: planning, numba's compile or load)
                fwht(x, algorithm=alg, stabilizer=st)
                t0 = time.perf_counter()
                y = fwht(x, algorithm=alg, stabilizer=st)
                dt_ms = (time.perf_counter() - t0) * 1e3
            err = reference.mean_relative_error(y, ref)
            name = alg if st is None else f"{alg}+{st}"
            click.echo(f"{_dt.short_name(dt):6} {name:18} {err:13.3e} {err / _dt.eps(dt):8.2f} "
                       f"{dt_ms:9.2f}")


def _workers(ctx, param, value) -> tuple:
    """--workers values checked as ``workers=`` of the transform (scipy.fft's convention)."""
    try:
        return tuple(cpu.check_workers(w) for w in value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _peer_sizes(ctx, param, value) -> tuple:
    """--peer-size values (N, 2^k or K*2^k) as lengths the transform takes."""
    try:
        return tuple(dict.fromkeys(_peers.parse_length(v) for v in value))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


#: The device of each ``fwht bench`` option that applies to one device only.
_BENCH_ONLY = {"workers": "cpu", "variant_sizes": "gpu", "no_variants": "gpu", "no_host": "gpu",
               "peers": "gpu", "peer_sizes": "gpu", "peer_mb": "gpu"}
_DEFAULT_PEER_SIZES = ", ".join(_peers.length_label(n) for n in _peers.SIZES)


def _only_on(dev: str) -> None:
    """Usage error for a ``bench`` option of the other device given on the command line."""
    ctx = click.get_current_context()
    for p in ctx.command.params:
        only = _BENCH_ONLY.get(p.name, dev)
        if only != dev and \
                ctx.get_parameter_source(p.name) is click.core.ParameterSource.COMMANDLINE:
            raise click.UsageError(f"{'/'.join(p.opts + p.secondary_opts)} applies to the "
                                   f"{only.upper()} benchmark only; "
                                   f"this run times the {dev.upper()} (pass --device {only})")


@main.command()
@click.option("--device", type=click.Choice(devices.CHOICES), default="auto", show_default=True,
              help="Where to time (auto: the GPU when one is usable, else the CPU).")
@click.option("--dtype", "dtypes", multiple=True, default=("fp32", "fp16", "bf16", "fp64"),
              show_default=True, type=click.Choice(["fp64", "fp32", "fp16", "bf16"]))
@click.option("--min-log2n", default=10, show_default=True, type=click.IntRange(1, 36))
@click.option("--max-log2n", default=None, type=click.IntRange(1, 36),
              help=f"Largest single transform (default 30 on the GPU, "
                   f"{max(_cpubench.SINGLE)} on the CPU).")
@click.option("--batched/--no-batched", default=True, show_default=True,
              help="Also time batches of rows: 256 MB of rows of 2**8 .. 2**15 on the GPU, "
                   f"{_cpubench.BATCH_BYTES >> 20} MB of rows of "
                   f"{', '.join(f'2**{L}' for L in _cpubench.BATCHED)} on the CPU.")
@click.option("--no-fft", is_flag=True,
              help="Skip the FFT comparison (cupy.fft.rfft on the GPU, scipy.fft.rfft on the CPU).")
@click.option("--workers", multiple=True, type=int, callback=_workers,
              help="CPU only: threads to time with, repeatable (default: 1 and all cores; "
                   "negative: counted back from the cores, -1 for all).")
@click.option("--variants", "variant_sizes", multiple=True, type=click.IntRange(1, 34),
              default=(20, 24, 27, 30), show_default=True,
              help="GPU only: log2 sizes at which every variant (Alman-Rao, stabilizers, compute "
                   "dtype) is timed against Folklore; repeatable.")
@click.option("--no-variants", is_flag=True, help="GPU only: skip the variant table.")
@click.option("--no-host", is_flag=True, help="GPU only: skip the host-array (device='cuda') timing.")
@click.option("--peers/--no-peers", default=True, show_default=True,
              help="GPU only: also time, on the same data in the same run, what a user would "
                   "take instead - fast-hadamard-transform and PyTorch baselines (butterfly, "
                   "two GEMMs, x@H) where importable - next to fwht_gpu on CuPy arrays and "
                   "PyTorch tensors, in FP32, FP16 and BF16 (of --dtype).")
@click.option("--peer-size", "peer_sizes", multiple=True, callback=_peer_sizes, metavar="N",
              help="GPU only: a row length of the peer table, repeatable: N, 2^k or K*2^k "
                   f"[default: {_DEFAULT_PEER_SIZES}].")
@click.option("--peer-mb", default=_peers.BATCH_BYTES >> 20, show_default=True,
              type=click.IntRange(1, 1 << 16), help="GPU only: MB of rows in each peer case.")
@click.option("--json", "out_json", type=click.Path(dir_okay=False), default="fwht-bench.json",
              show_default=True, help="Where to write the results.")
@force_option
@debug_option
@guarded
def bench(device, dtypes, min_log2n, max_log2n, batched, no_fft, workers, variant_sizes,
          no_variants, no_host, peers, peer_sizes, peer_mb, out_json, force, debug) -> None:
    """Time transforms on the GPU or the CPU against a memory copy and an FFT.

    GPU: a device-to-device copy and cupy.fft.rfft, the variants and host arrays, and the
    peers (fast-hadamard-transform, PyTorch) on batched rows.  CPU (fwht_gpu.cpubench):
    np.copyto and scipy.fft.rfft, with 1 thread and all cores."""
    dev = _device(device)
    _only_on(dev)
    if peer_sizes and not peers:
        raise click.UsageError("--peer-size times the peer table, which --no-peers turns off")
    hi = max_log2n or (30 if dev == "gpu" else max(_cpubench.SINGLE))
    _check_range(min_log2n, hi, "log2n")
    check_outputs([out_json], force=force)
    command = "fwht " + " ".join(sys.argv[1:])
    if dev == "cpu":
        res = _cpubench.main(None, dtypes=dtypes, single=range(min_log2n, hi + 1),
                             batched=_cpubench.BATCHED if batched else (), fft=not no_fft,
                             workers=workers or (1, None), echo=click.echo, command=command)
    else:
        res = _bench.main(None, dtypes=dtypes, single=range(min_log2n, hi + 1),
                          batched=range(8, 16) if batched else (), fft=not no_fft,
                          variants=() if no_variants else variant_sizes, host=not no_host,
                          peer_sizes=(peer_sizes or _peers.SIZES) if peers else (),
                          peer_bytes=peer_mb << 20, echo=click.echo, command=command)
    _write_json(out_json, res)
    click.echo(f"wrote {out_json}")


@main.command()
@click.option("--min-log2n", default=3, show_default=True, type=click.IntRange(1, 30))
@click.option("--max-log2n", default=None, type=click.IntRange(1, 30),
              help="Largest size (default 12 on the CPU, 25 on the GPU).")
@click.option("--dtype", "dtypes", multiple=True, type=click.Choice(["fp64", "fp32", "fp16", "bf16"]),
              default=("fp64", "fp32", "fp16", "bf16"), show_default=True)
@click.option("--variant", "variants", multiple=True,
              type=click.Choice(["folklore", "kahan", "neumaier", "alman", "kahan-pass",
                                 "neumaier-pass", "compute"]),
              default=("folklore", "kahan", "neumaier", "alman", "kahan-pass", "neumaier-pass",
                       "compute"), show_default=True)
@click.option("--device", type=click.Choice(["auto", "cpu", "gpu"]), default="auto", show_default=True)
@click.option("--seed", default=0, show_default=True, type=_SEED)
@click.option("--out-dir", default="fwht-accuracy", show_default=True, type=click.Path(file_okay=False),
              help="Where accuracy.json, accuracy.md and accuracy-<dtype>.png go (created if missing).")
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots (no matplotlib needed).")
@force_option
@debug_option
@guarded
def accuracy(min_log2n, max_log2n, dtypes, variants, device, seed, out_dir, no_plots, force,
             debug) -> None:
    """The thesis's numerical-stability study: error of every variant against a double-double
    reference; JSON, a Table 4.1-style markdown table and Figure 4.1-4.4-style plots."""
    dev = _device(device)
    hi = max_log2n or (25 if dev == "gpu" else 12)
    _check_range(min_log2n, hi, "log2n")
    dtypes = tuple(dict.fromkeys(dtypes))
    outputs = ["accuracy.json", "accuracy.md"] + ([] if no_plots else
                                                  [f"accuracy-{d}.png" for d in dtypes])
    check_outputs([os.path.join(out_dir, f) for f in outputs], force=force, make_dirs=True)
    if "folklore" not in variants:
        variants = ("folklore",) + tuple(variants)
    t0 = time.perf_counter()
    recs = _acc.study(range(min_log2n, hi + 1), dtypes, variants, device=dev, seed=seed)
    out = _acc.write(recs, out_dir, plots=not no_plots)
    click.echo(_acc.markdown_table(recs))
    click.echo(f"{len(recs)} measurements on the {dev.upper()} in {time.perf_counter() - t0:.1f} s; "
               f"wrote {', '.join([out['json'], out['markdown']] + out.get('plots', []))}")


@main.command()
@click.argument("in_path", metavar="IN", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Output file (.npy, .npz, .csv, .tsv, .txt, .mtx).")
@click.option("--axis", type=int, default=-1, show_default=True)
@click.option("--norm", type=click.Choice(["backward", "ortho", "forward"]), default="backward",
              show_default=True)
@click.option("--inverse", is_flag=True, help="Inverse transform (ifwht).")
@click.option("--order", type=click.Choice(["natural", "sequency", "dyadic"]), default="natural",
              show_default=True, help="Order of the coefficients (MATLAB's fwht orderings; "
              "the inverse reads them in this order).")
@click.option("--dtype", type=click.Choice(["fp64", "fp32", "fp16", "bf16"]), default=None,
              help="Convert to this dtype first (default: the file's float dtype, else fp64).")
@click.option("--algorithm", type=click.Choice(["folklore", "alman"]), default="folklore",
              show_default=True)
@click.option("--stabilizer", type=click.Choice(["none", "kahan", "neumaier"]), default="none",
              show_default=True)
@click.option("--device", type=click.Choice(["auto", "cpu", "gpu"]), default="cpu", show_default=True)
@click.option("--format", "fmt", type=click.Choice(["npy", "npz", "mtx", "csv", "tsv", "txt"]),
              default=None, help="Input format (default: from the extension).")
@force_option
@debug_option
@guarded
def transform(in_path, output, axis, norm, inverse, order, dtype, algorithm, stabilizer, device,
              fmt, force, debug) -> None:
    """Walsh-Hadamard transform of the array in file IN along --axis (length a power of two or
    K * 2**k, K in 12, 20, 28, 36, 44), written to -o."""
    io.format_of(output)
    check_outputs([output], force=force)
    stabilizer = None if stabilizer == "none" else stabilizer
    _check_variant(algorithm, stabilizer)
    dev = "cuda" if _device(device) == "gpu" else None
    x = io.read_matrix(in_path, fmt, ndim=None, mmap=False)
    if scipy.sparse.issparse(x):
        x = x.toarray()
    if dtype is not None:
        x = x.astype(_dt.resolve(dtype))
    elif x.dtype not in _dt.SUPPORTED:
        x = x.astype(np.float64)
    fn = ifwht if inverse else fwht
    try:
        y = fn(x, axis, norm=norm, algorithm=algorithm, stabilizer=stabilizer, device=dev,
               order=order)
    except ValueError as exc:       # length or axis: name the file, not the argument
        msg = first_line(exc)
        raise ValueError(f"{in_path}: {msg.removeprefix('x: ')}") from exc
    if y.dtype.itemsize == 2 and io.format_of(output) not in ("npy", "npz"):
        y = y.astype(np.float32)          # text formats hold the values exactly in float32
    io.write_matrix(output, y, force=force)


if __name__ == "__main__":
    main()
