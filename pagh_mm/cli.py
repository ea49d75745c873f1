"""The ``pagh-mm`` command: compressed matrix multiplication on matrix files.

Exit codes: 0 success, 1 unusable data (corrupt file, shapes, NaN/Inf, overflow, indices
out of range, memory), 2 usage errors (bad option, missing file, unknown format, existing
or unwritable output without --force), 3 a verified answer that could not be certified (the
entries are still printed or written, and stderr says which parameter to raise), 143 after
SIGTERM (no partial output is left).
Every error is one ``Error: ...`` line on stderr (``--debug``: the traceback).
"""
from __future__ import annotations

import json
import os
import re
import sys

import click
import numpy as np
import scipy
import scipy.sparse

import pagh_mm  # compress and default_buckets looked up at call time (tests patch them)
from fwht_gpu import devices, gpu
from fwht_gpu import matrixio as io
from fwht_gpu.files import atomic_write
from fwht_gpu.clitools import (
    Commands,
    Progress,
    progress_option,
    check_outputs,
    debug_option,
    force_option,
    guarded,
)

from . import __version__, backend, hashing
from . import bench as _bench
from .compressed import CompressedProduct
from .sketchfile import MAX_LOG2B, settings_problem


def _device(device: str) -> str:
    """'cpu' or 'gpu' for --device (fwht_gpu's resolver); a usage error naming the reason
    when the GPU was asked for and none is usable."""
    try:
        return devices.resolve(device)
    except RuntimeError:
        raise click.UsageError(f"--device gpu, but {gpu.status()}") from None


def _devices(ctx, param, value):
    """--devices: 'cpu' or comma-separated GPU ordinals."""
    if value is None:
        return None
    text = value.strip().lower()
    if text == "cpu":
        return ["cpu"]
    try:
        ids = [int(v) for v in text.split(",")]
    except ValueError:
        raise click.BadParameter(f"{value!r}: give GPU ordinals separated by commas (0,1) or "
                                 "cpu") from None
    if any(i < 0 for i in ids):
        raise click.BadParameter(f"{value!r}: GPU ordinals are non-negative integers")
    return ids


def _gram_sizes(ctx, param, value):
    """--gram NxM (repeatable): [(N, M), ...]."""
    out = []
    for text in value:
        try:
            n, m = (int(v) for v in text.lower().split("x"))
        except ValueError:
            raise click.BadParameter(f"{text!r}: give samples x features, e.g. 1048576x4096") from None
        if n < 2 or m < 4:
            raise click.BadParameter(f"{text!r}: at least 2 samples and 4 features")
        out.append((n, m))
    return tuple(out)


def _pow2(ctx, param, value):
    if value is not None and (value < 2 or value & (value - 1)):
        raise click.BadParameter(f"{value} is not a power of two >= 2 (e.g. {1 << max(1, value.bit_length())})")
    if value is not None and value > 1 << MAX_LOG2B:
        raise click.BadParameter(f"{value} is above the largest sketch, 2**{MAX_LOG2B} buckets")
    return value


_SEED = click.IntRange(0)
_SEED_HELP = "Seed of the hash functions: any non-negative integer."
_HASH_HELP = ("Hash family: multiply-add-shift (default) maps index i to ((a i + c) mod 2^64) >> "
              "(64 - log2 b), one multiply-add per index, and tabulation XORs four random tables "
              "indexed by the bytes of i, four lookups per index; both are strongly universal, so "
              "both meet the variance bound ||AB||_F^2 / b per repetition (multiply-shift was "
              "removed because it is only 2-universal).")


_DTYPES = {"fp64": "float64", "fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def sketch_options(fn):
    """Options shared by the commands that build a sketch."""
    opts = [
        click.option("--buckets", "-b", type=int, callback=_pow2, default=None,
                     help="Buckets per repetition, a power of two (default: automatic, sized for "
                          "a certified answer to the query asked: top's -k or --threshold, "
                          "compress's own; 8 (m + p) without a query; see pagh_mm.auto)."),
        click.option("--reps", "-d", type=click.IntRange(1, None), default=None,
                     help="Independent repetitions (odd: the median is one of them; default: "
                          "automatic with the buckets, 5 to 13)."),
        click.option("--seed", type=_SEED, default=0, show_default=True, help=_SEED_HELP),
        click.option("--dtype", type=click.Choice(list(_DTYPES)), default="fp64", show_default=True,
                     help="Precision of the transforms (the Python API's dtype=None may "
                          "choose fp32 transforms for fp64 data where the certificate allows; "
                          "the command line keeps what this says)."),
        click.option("--method", type=click.Choice(["fwht", "fft"]), default="fwht", show_default=True),
        click.option("--algorithm", type=click.Choice(["folklore", "alman"]), default="folklore",
                     show_default=True),
        click.option("--stabilizer", type=click.Choice(["none", "kahan", "neumaier"]), default="none",
                     show_default=True),
        click.option("--hash", "hash_", type=click.Choice(list(hashing.FAMILIES)),
                     default=None, help=_HASH_HELP + " Default: multiply-add-shift; polynomial "
                     "(4-independent) for a Gram product."),
        click.option("--device", type=click.Choice(["auto", "cpu", "gpu"]), default="auto",
                     show_default=True),
        click.option("--devices", callback=_devices, default=None, metavar="LIST",
                     help="GPUs to compress on, e.g. 0 or 0,1 (or cpu): the files stay on the "
                          "host (.npy files memory-mapped, so they may be larger than memory) "
                          "and are streamed a chunk of inner indices at a time, with the same "
                          "bits as one device; progress shows the bytes read. Overrides --device."),
        click.option("--decode", type=click.Choice(["auto", "yes", "no"]), default="auto",
                     show_default=True,
                     help="Also make the bit sketches that let verified queries decode the rows "
                          "of the large entries instead of scanning (pagh_mm.decode; not for "
                          "Gram products); auto: sparse factors, at least 2**38 entries on the GPU, "
                          "2**34 on the CPU."),
        click.option("--transpose-a", is_flag=True,
                     help="Use the transpose of A (A^T B).  With the same file as A and B (A = B "
                          "= X): the Gram product X^T X (covariances, co-occurrences), sketched "
                          "with one hash on both sides, one transform per row of X and the "
                          "diagonal exact (pagh_mm.compress_gram)."),
        click.option("--format", "fmt", type=click.Choice(["npy", "npz", "mtx", "csv", "tsv", "txt"]),
                     default=None, help="Input format (default: from each file's extension)."),
        click.option("--quiet", "-q", is_flag=True, help="No progress output (--progress never)."),
        progress_option,
        debug_option,
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


def _same_file(a_path, b_path) -> bool:
    try:
        return os.path.samefile(a_path, b_path)
    except OSError:
        return False


def _load_pair(a_path, b_path, fmt, transpose_a, device):
    """(A, B) from the files; with ``transpose_a`` and one file, (X.T, X): a Gram product,
    which compress detects."""
    if transpose_a and _same_file(a_path, b_path):
        X = io.read_matrix(b_path, fmt)
        if device == "gpu":
            from .backend import gpu
            be = gpu()
            import scipy.sparse as sps
            X = be.sp.csr_matrix(X) if sps.issparse(X) else be.xp.asarray(X)
        return X.T, X
    A = io.read_matrix(a_path, fmt)
    B = io.read_matrix(b_path, fmt)
    if transpose_a:
        A = A.T
    if A.shape[1] != B.shape[0]:
        what = "A^T" if transpose_a else "A"
        raise ValueError(f"{what} is {A.shape[0]} x {A.shape[1]} and B is {B.shape[0]} x {B.shape[1]}: "
                         f"the inner dimensions differ ({A.shape[1]} != {B.shape[0]})")
    if device == "gpu":
        from .backend import gpu
        be = gpu()
        import scipy.sparse as sps
        conv = lambda M: be.sp.csr_matrix(M) if sps.issparse(M) else be.xp.asarray(M)  # noqa: E731
        A, B = conv(A), conv(B)
    return A, B


def _check_settings(o) -> None:
    """Usage error for a combination of sketch options that cannot work together."""
    bad = settings_problem(o["method"], o["dtype"], o["algorithm"],
                           None if o["stabilizer"] == "none" else o["stabilizer"])
    if bad:
        raise click.UsageError(bad)
    if o["decode"] == "yes" and o["transpose_a"]:
        raise click.UsageError("--decode yes: decoding is not available for Gram products "
                               "(--transpose-a); use --decode no")


def _compress_from_files(a_path, b_path, o, k=None, threshold=None, failure_probability=None):
    """The sketch of the files' product; ``k``/``threshold``: the query it is sized for."""
    _check_settings(o)
    extra = {} if failure_probability is None else {"failure_probability": failure_probability}
    if o["devices"] is not None:            # streamed from the host: the files stay there
        if o["devices"] != ["cpu"]:
            try:
                from . import stream
                stream.check_devices(o["devices"])
            except (RuntimeError, ImportError) as exc:
                raise click.UsageError(f"--devices {','.join(map(str, o['devices']))}, but "
                                       f"{gpu.status()}") from exc
            except ValueError as exc:
                raise click.BadParameter(str(exc), param_hint="--devices") from None
        A, B = _load_pair(a_path, b_path, o["fmt"], o["transpose_a"], "cpu")
        extra["devices"] = o["devices"]
    else:
        A, B = _load_pair(a_path, b_path, o["fmt"], o["transpose_a"], _device(o["device"]))
    sk = pagh_mm.compress(A, B, buckets=o["buckets"] or "auto", reps=o["reps"] or "auto",
                          seed=o["seed"], k=k, threshold=threshold, method=o["method"],
                          dtype=_DTYPES[o["dtype"]], algorithm=o["algorithm"],
                          stabilizer=None if o["stabilizer"] == "none" else o["stabilizer"],
                          hash=o["hash_"], progress=Progress(o["quiet"], mode=o["progress"]),
                          decode={"auto": "auto", "yes": True, "no": False}[o["decode"]],
                          **extra)
    if not o["quiet"]:
        click.echo(f"sketch: {sk.describe()}", err=True)
    return sk


_existing = click.Path(exists=True, dir_okay=False)


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pagh-mm")
def main() -> None:
    """Compressed matrix multiplication: estimate A @ B and find its large entries."""


@main.command()
@debug_option
@guarded
def info(debug) -> None:
    """Versions, CuPy and GPU status."""
    click.echo(f"pagh_mm {__version__}, numpy {np.__version__}, scipy {scipy.__version__}, "
               f"python {sys.version.split()[0]}")
    click.echo(f"GPU: {gpu.status()}")


@main.command()
@click.option("--workload", type=click.Choice(["auto", "cooccurrence", "planted"]), default="auto",
              show_default=True,
              help="cooccurrence: the 100 most frequent identifier pairs of the Python sources on "
                   "this machine (a Gram screen) against SciPy's exact X^T X; planted: heavy "
                   "entries planted in a dense product against the exact GEMM.  auto: "
                   "cooccurrence on the CPU, planted on the GPU or with -n/--planted.")
@click.option("-n", "--size", type=click.IntRange(64, None), default=None,
              help="planted: square size n (default 1024 on the CPU, 8192 on the GPU).")
@click.option("--planted", type=click.IntRange(1, None), default=None,
              help="planted: number of planted large entries (default n / 16, at most 300).")
@click.option("--terms", type=click.IntRange(16, None), default=16384, show_default=True,
              help="cooccurrence: the most frequent identifiers kept (the product is terms x terms).")
@click.option("--reps", "-d", type=click.IntRange(1, None), default=5, show_default=True,
              help="planted: repetitions d of the sketch (cooccurrence chooses its own with the "
                   "certificate).")
@click.option("--seed", type=_SEED, default=0, show_default=True, help=_SEED_HELP)
@click.option("--device", type=click.Choice(["auto", "cpu", "gpu"]), default="auto", show_default=True)
@click.option("--quiet", "-q", is_flag=True, help="No progress lines (--progress never).")
@progress_option
@debug_option
@guarded
def demo(workload, size, planted, terms, reps, seed, device, quiet, progress, debug) -> None:
    """End-to-end run against the exact product, on a workload where compression should win.

    Prints what it reads and chooses as it goes, the noise level, the recall of the exact
    answer, both times and memory, and which route won and why.
    """
    from . import demo as _demo
    dev = _device(device)
    if workload == "auto":           # -n / --planted ask for the planted workload
        planted_asked = size is not None or planted is not None
        workload = "planted" if dev == "gpu" or planted_asked else "cooccurrence"
    prog = Progress(quiet, mode=progress)
    if workload == "cooccurrence":
        if dev == "gpu":
            raise click.UsageError("--workload cooccurrence runs on the CPU (SciPy's exact product "
                                   "is its peer); use --device cpu")
        _demo.cooccurrence(click.echo, max_terms=terms, seed=seed, progress=prog)
        return
    be = backend.gpu() if dev == "gpu" else backend.cpu()
    n = size or (8192 if dev == "gpu" else 1024)
    k = planted or min(300, max(1, n // 16))
    if k > n:
        raise click.UsageError(f"--planted {k} is more than n = {n}: at most one planted entry per "
                               "row; lower --planted or raise -n")
    _demo.planted(click.echo, be, n, k, reps, seed, progress=prog)


@main.command()
@click.option("--size", "sizes", multiple=True, type=click.IntRange(64, None), default=None,
              help="Square sizes n (repeatable; default 4096 .. 32768 on the GPU, 1024 and 4096 on the CPU).")
@click.option("--dtype", "dtypes", multiple=True, type=click.Choice(["fp64", "fp32"]),
              default=("fp64", "fp32"), show_default=True)
@click.option("--planted", type=click.IntRange(1, None), default=300, show_default=True)
@click.option("--reps", "-d", type=click.IntRange(1, None), default=None,
              help="Repetitions (default: automatic, with the buckets).")
@click.option("--buckets", "-b", type=int, callback=_pow2, default=None,
              help="GPU: buckets of every sketch (a power of two; default: automatic, sized "
                   "for a certified top-k).")
@click.option("--staged", is_flag=True,
              help="GPU: also time the staged compression (scatter, transforms and products "
                   "as separate kernels) that the fused kernel replaces.")
@click.option("--decode", "decode_rows", is_flag=True,
              help="GPU: dense rows also time a sketch with bit sketches and the decoding "
                   "certified top-k (the sparse rows always do).")
@click.option("--sparse", "sparse", multiple=True, type=click.IntRange(1024, None),
              help="Also sparse planted products of this size n (repeatable, e.g. 65536 ... "
                   "1048576), automatic parameters, against cuSPARSE SpGEMM + top-k on the GPU, "
                   "SciPy and sparse_dot_topn on the CPU; without --size, only these.")
@click.option("--per-vector", "per_vector", multiple=True, type=click.IntRange(1, None),
              default=(16,), show_default=True,
              help="Sparse rows: +-1 values per column of A and row of B (repeatable on the "
                   "GPU).")
@click.option("--gram", "gram", multiple=True, callback=_gram_sizes, metavar="NxM",
              help="GPU: also covariance screens of N samples x M features (repeatable, e.g. "
                   "1048576x4096): compress_gram + certified top-k against the GEMMs X^T X + "
                   "top-k and the FP16 screen, in each --dtype; without --size, only these.")
@click.option("--device", type=click.Choice(["auto", "cpu", "gpu"]), default="auto", show_default=True)
@click.option("--json", "out_json", type=click.Path(dir_okay=False), default="pagh-mm-bench.json",
              show_default=True, help="Where to write the results.")
@force_option
@debug_option
@guarded
def bench(sizes, dtypes, planted, reps, buckets, staged, decode_rows, sparse, per_vector, gram,
          device, out_json, force, debug) -> None:
    """Compress + top-k versus the exact routes (table + JSON).  GPU: planted heavy hitters
    against cuBLAS GEMM + top-k.  CPU: dense planted products against NumPy and compmatmul
    (when importable), a sparse planted product against SciPy and sparse_dot_topn (when
    installed), and the co-occurrences of this machine's Python sources against SciPy's
    X^T X (pagh_mm.cpubench)."""
    check_outputs([out_json], force=force)
    dev = _device(device)
    if dev == "cpu":
        if buckets is not None or staged or decode_rows:
            raise click.UsageError("--buckets, --staged and --decode apply to the GPU benchmark "
                                   "only (the "
                                   "CPU benchmark uses b = 16384, compmatmul's size)"
                                   + ("" if device == "cpu" else "; no GPU was found"))
        if len(per_vector) > 1:
            raise click.UsageError("the CPU benchmark takes one --per-vector value")
        if gram:
            raise click.UsageError("--gram applies to the GPU benchmark only (the CPU's "
                                   "covariance screen: examples/covariance_screening.py)")
        from . import cpubench
        kw = {}
        if sparse:                  # the large sparse rows; the other cases only with --size
            kw = dict(scale=tuple(sparse), sparse_per_vector=per_vector[0],
                      cases=("dense",) if sizes else ())
        res = cpubench.run(sizes=sizes or (1024, 4096),
                           planted=min(planted, min(sizes or sparse or (1024,))),
                           reps=reps or 5, echo=click.echo,
                           command="pagh-mm " + " ".join(sys.argv[1:]), **kw)
        io.write_json(out_json, res)
        click.echo(f"wrote {out_json}")
        return
    if not sizes and not sparse and not gram:
        sizes = (4096, 8192, 16384, 32768) if dev == "gpu" else (512, 1024)
    res = _bench.run(sizes=sizes, dtypes=dtypes,
                     planted=min(planted, min(sizes or sparse or (planted,))),
                     reps=reps, device=dev, echo=click.echo, buckets=buckets, staged=staged,
                     decode=decode_rows, sparse=sparse, per_vector=per_vector, gram=gram,
                     command="pagh-mm " + " ".join(sys.argv[1:]))
    io.write_json(out_json, res)
    click.echo(f"wrote {out_json}")


def files_to_output(what: str):
    """Arguments A B and options -o/--output (described by ``what``) and --force."""
    def deco(fn):
        for o in reversed([click.argument("a_path", metavar="A", type=_existing),
                           click.argument("b_path", metavar="B", type=_existing),
                           click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
                                        help=what),
                           force_option]):
            fn = o(fn)
        return fn
    return deco


@main.command()
@files_to_output("Where to write the dense estimate of A @ B (.npy, .npz, .mtx, .csv, .tsv, .txt).")
@sketch_options
@guarded
def multiply(a_path, b_path, output, force, **o) -> None:
    """Dense estimate of A @ B (files A and B), written to -o."""
    io.format_of(output)
    check_outputs([output], force=force)
    _check_settings(o)
    sk = _compress_from_files(a_path, b_path, o)
    D = sk.to_dense(progress=Progress(o["quiet"], mode=o["progress"]))
    io.write_matrix(output, D, force=force)
    if not o["quiet"]:
        click.echo(f"wrote {output}: {D.shape[0]} x {D.shape[1]} estimate "
                   f"({sk.buckets} buckets x {sk.reps} repetitions, noise ~{sk.noise():.3g})", err=True)


@main.command("compress")
@files_to_output("Sketch file to write (.npz).")
@click.option("-k", "k", type=click.IntRange(1, None), default=None,
              help="Size the automatic buckets for a certified top-k query of the sketch.")
@click.option("--threshold", type=float, default=None,
              help="Size the automatic buckets for a certified query of the entries above this "
                   "value (instead of -k).")
@sketch_options
@guarded
def compress_cmd(a_path, b_path, output, force, k, threshold, **o) -> None:
    """Compress A @ B into a sketch file (query it with `top --sketch` and `query`).  Without
    -b, the buckets are sized for the query -k or --threshold names (8 (m + p) without one)."""
    if not output.endswith(".npz"):
        raise click.UsageError(f"{output}: a sketch is written as .npz; name the output *.npz")
    if k is not None and threshold is not None:
        raise click.UsageError("-k and --threshold size the sketch for one query: give one")
    check_outputs([output], force=force)
    _check_settings(o)
    sk = _compress_from_files(a_path, b_path, o, k=k, threshold=threshold)
    sk.save(output)
    if not o["quiet"]:
        click.echo(f"wrote {output}: {sk.shape[0]} x {sk.shape[1]} product, {sk.buckets} buckets x "
                   f"{sk.reps} repetitions", err=True)


def _print_entries(entries, verify, fmt, backend):
    rows = backend.asnumpy(entries.rows)
    cols = backend.asnumpy(entries.cols)
    est = backend.asnumpy(entries.estimates)
    exact = backend.asnumpy(entries.exact) if verify else None
    if fmt == "json":
        out = [{"i": int(i), "j": int(j), "estimate": float(e), **({"exact": float(x)} if verify else {})}
               for i, j, e, x in zip(rows, cols, est, exact if verify else est)]
        click.echo(json.dumps(out, indent=1))
        return
    head = ["i", "j", "estimate"] + (["exact"] if verify else [])
    body = [[str(int(i)), str(int(j)), f"{e:.10g}"] + ([f"{x:.10g}"] if verify else [])
            for i, j, e, x in zip(rows, cols, est, exact if verify else est)]
    if fmt == "csv":
        click.echo(",".join(head))
        for r in body:
            click.echo(",".join(r))
        return
    widths = [max(len(h), *(len(r[c]) for r in body)) if body else len(h) for c, h in enumerate(head)]
    click.echo("  ".join(h.rjust(w) for h, w in zip(head, widths)))
    for r in body:
        click.echo("  ".join(v.rjust(w) for v, w in zip(r, widths)))


@main.command()
@click.argument("files", nargs=-1, type=_existing, metavar="[A B]")
@click.option("--sketch", "sketch_path", type=_existing, default=None,
              help="Read a sketch made by `compress` instead of A and B (A and B may still be "
                   "given for --verify).")
@click.option("-k", "k", type=click.IntRange(1, None), default=None,
              help="The k largest entries (default 10 unless --threshold or --per-row is given).")
@click.option("--threshold", type=float, default=None,
              help="Every entry whose magnitude (--by value: value) is >= this; with --per-row, "
                   "only entries >= this.")
@click.option("--per-row", "per_row", type=click.IntRange(1, None), default=None,
              help="The N largest entries of every row (sparse_dot_topn's top_n).")
@click.option("--verify", is_flag=True,
              help="Exact values from A and B, and a certified answer (or a warning that says "
                   "what to raise).")
@click.option("--failure-probability", "delta", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=1e-3, show_default=True, help="Of a certified answer being wrong.")
@click.option("--candidates", type=click.IntRange(1, None), default=None,
              help="Most entries --verify may verify exactly (default: 16 k).")
@click.option("--by", type=click.Choice(["abs", "value"]), default="abs", show_default=True,
              help="Rank by magnitude or by signed value.")
@click.option("--search", type=click.Choice(["auto", "scan", "decode"]), default="auto",
              show_default=True,
              help="How --verify finds its candidates: scan the estimates, decode them from the "
                   "bit sketches (a sketch made with --decode yes), or auto (decode when the "
                   "sketch has bit sketches and it costs less).")
@click.option("--exclude-diagonal", is_flag=True,
              help="Leave the entries (i, i) out (variances, self-similarities).")
@click.option("--output-format", "out_fmt", type=click.Choice(["table", "csv", "json"]),
              default="table", show_default=True)
@click.option("-o", "--output", default=None, type=click.Path(dir_okay=False),
              help="Write the entries to a file instead: .npz or .mtx (an m x p sparse matrix), "
                   ".csv (i,j,value rows).")
@force_option
@sketch_options
@guarded
def top(files, sketch_path, k, threshold, per_row, verify, delta, candidates, by, search,
        exclude_diagonal, out_fmt, output, force, **o) -> None:
    """The largest entries of A @ B: the top k, those above --threshold, or the top N of every
    row (--per-row); i, j, estimate (and exact value with --verify)."""
    if len(files) not in (0, 2):
        raise click.UsageError("give two matrix files A B, or --sketch FILE (plus A B for --verify)")
    if sketch_path is None and not files:
        raise click.UsageError("give two matrix files A B, or --sketch FILE")
    if sketch_path is not None and verify and not files:
        raise click.UsageError("--verify with --sketch needs the matrix files A B as well")
    if k is not None and (threshold is not None or per_row is not None):
        raise click.UsageError("-k asks for the top k overall; use --threshold or --per-row N "
                               "(with an optional --threshold) instead, not together")
    if search == "decode" and (not verify or (per_row is not None and threshold is None)):
        raise click.UsageError("--search decode verifies decoded candidates: use it with --verify "
                               "(and --per-row with a --threshold)")
    if candidates is not None and candidates < (k or 1):
        raise click.BadParameter(f"--candidates {candidates} is below -k {k}")
    if output is not None:
        if not output.endswith((".npz", ".mtx", ".csv")):
            raise click.UsageError(f"{output}: write entries to .npz, .mtx or .csv")
        check_outputs([output], force=force)
    if k is None and threshold is None and per_row is None:
        k = 10
    if sketch_path is None:
        _check_settings(o)
    if sketch_path is not None:
        sk = CompressedProduct.load(sketch_path, device=_device(o["device"]))
        if files:
            # a Gram sketch of X^T X records it: the file X given twice is read as (X^T, X)
            transpose = o["transpose_a"] or (sk.gram and _same_file(files[0], files[1]))
            A, B = _load_pair(files[0], files[1], o["fmt"], transpose,
                              "gpu" if sk.backend.gpu else "cpu")
            sk.attach(A, B)
    else:
        sk = _compress_from_files(files[0], files[1], o, k=k if per_row is None else None,
                                  threshold=threshold, failure_probability=delta)
    kw = dict(verify=verify, by=by, exclude_diagonal=exclude_diagonal,
              progress=Progress(o["quiet"], mode=o["progress"]))
    if verify:
        kw.update(failure_probability=delta, candidates=candidates)
    import warnings
    buckets = sk.buckets
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", pagh_mm.CertificateWarning)
        if per_row is not None:
            entries = sk.top_k_per_row(per_row, threshold=threshold, format="entries",
                                       method=search, **kw)
        elif k is not None:
            entries = sk.top_k(k, method=search, **kw)
        else:
            entries = sk.above(threshold, method=search, **kw)
    for w in caught:
        if issubclass(w.category, pagh_mm.CertificateWarning):
            click.echo(f"Warning: {w.message}", err=True)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    if sk.buckets != buckets and not o["quiet"]:       # an automatic sketch grew to certify
        click.echo(f"the sketch was compressed again with {sk.buckets} buckets (from {buckets}) "
                   f"to certify this answer", err=True)
    if verify and not o["quiet"]:
        click.echo(f"certified: {'yes' if entries.certified else 'NO'} (failure probability "
                   f"{entries.failure_probability:g} under the model of pagh_mm.certificate; margin "
                   f"{entries.margin:.4g}, noise {entries.noise:.4g} per repetition, "
                   f"{entries.verified} entries verified)", err=True)
    if output is not None:
        _write_entries(output, entries, sk, verify, force)
        if not o["quiet"]:
            click.echo(f"wrote {output}: {len(entries.rows)} entries", err=True)
        return
    _print_entries(entries, verify, out_fmt, sk.backend)
    if verify and not entries.certified:
        sys.exit(3)


def _write_entries(path, entries, sk, verify, force) -> None:
    """Entries to .npz/.mtx (an m x p sparse matrix of the exact values, or the estimates)
    or .csv (i,j,estimate[,exact] rows), atomically."""
    be = sk.backend
    rows, cols = be.asnumpy(entries.rows), be.asnumpy(entries.cols)
    vals = be.asnumpy(entries.exact if verify else entries.estimates)
    if path.endswith(".csv"):
        est = be.asnumpy(entries.estimates)
        lines = ["i,j,estimate" + (",exact" if verify else "")]
        lines += [f"{i},{j},{e:.17g}" + (f",{x:.17g}" if verify else "")
                  for i, j, e, x in zip(rows.tolist(), cols.tolist(), est.tolist(), vals.tolist())]
        atomic_write(path, lambda f: f.write(("\n".join(lines) + "\n").encode()))
        return
    M = scipy.sparse.csr_matrix((vals, (rows, cols)), shape=sk.shape)
    io.write_matrix(path, M, force=True)


def _indices(text: str, name: str) -> np.ndarray:
    """A comma-separated list of non-negative integers (object array: any size)."""
    parts = text.split(",")
    if not all(re.fullmatch(r"\s*[0-9]+\s*", p) for p in parts):
        raise click.BadParameter(f"{name}={text!r}: give a non-negative integer or a comma-separated "
                                 "list of them (e.g. 0,5,17)")
    return np.array([int(p) for p in parts], dtype=object)


@main.command()
@click.argument("sketch_path", metavar="SKETCH", type=_existing)
@click.argument("i", type=str)
@click.argument("j", type=str)
@click.option("--reps", "show_reps", is_flag=True, help="Also print each repetition's estimate.")
@debug_option
@guarded
def query(sketch_path, i, j, show_reps, debug) -> None:
    """Estimate C[I, J] from a sketch file; I and J may be comma-separated lists of
    non-negative indices (one of them may be a single index, used with every other)."""
    ii, jj = _indices(i, "I"), _indices(j, "J")
    if ii.size != jj.size and ii.size != 1 and jj.size != 1:
        raise click.BadParameter(f"I has {ii.size} indices and J has {jj.size}: give lists of the "
                                 "same length, or a single index on one side")
    sk = CompressedProduct.load(sketch_path)
    for v, n, what in ((ii, sk.shape[0], "row"), (jj, sk.shape[1], "column")):
        if v.max() >= n:
            raise IndexError(f"{sketch_path}: {what} index {int(v.max())} is out of range: the "
                             f"product has {n} {what}s (indices 0 .. {n - 1})")
    ii, jj = ii.astype(np.int64), jj.astype(np.int64)
    est = sk.estimate(ii, jj)
    per = sk.estimate_reps(ii, jj) if show_reps else None
    ii, jj = np.broadcast_arrays(ii, jj)
    for n, (a, b, e) in enumerate(zip(ii, jj, est)):
        line = f"{a}\t{b}\t{e:.10g}"
        if per is not None:
            line += "\t" + " ".join(f"{v:.6g}" for v in per[:, n])
        click.echo(line)


if __name__ == "__main__":
    main()
