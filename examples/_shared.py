"""Helpers shared by the examples: options, where the outputs go, the device, timing,
printed tables, readable plots, and the JSON record of what was printed and plotted.

Every example takes ``--small`` (CI sizes; also ``PAGH_MM_EXAMPLES_SMALL=1``),
``--out-dir DIR`` (default ``./pagh_mm_examples`` in the current directory, created if
missing; never the package's source tree), ``--cpu`` (stay on the CPU when a GPU is
present) and ``--force`` (replace existing outputs; without it an example stops before
computing anything when its PNG or JSON already exists).

Each example prints one or more tables and writes ``NAME.png`` and ``NAME.json``.  The
JSON holds the tables (header line, columns, raw values) and every plotted series with
the table column it was drawn from, so that a test can check the printed numbers
against the plotted ones (``tests/test_examples.py``).
"""
from __future__ import annotations

import argparse
import io
import json
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
#: The default output folder, relative to the current directory.
DEFAULT_OUT = "pagh_mm_examples"
#: Folders of the source tree an example never writes into by default.
SOURCE_DIRS = [d for d in (HERE, os.path.join(ROOT, "pagh_mm"), os.path.join(ROOT, "fwht_gpu"))
               if os.path.isdir(d)]

_T0 = time.perf_counter()


def fail(message: str, code: int = 2):
    """One line on stderr and exit (2: a usage problem, found before any computation)."""
    print(f"Error: {message}", file=sys.stderr)
    raise SystemExit(code)


def _inside(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder + os.sep)


class Outputs:
    """The files one example writes (``NAME.png``, ``NAME.json``) in the output folder;
    checked when made, before any computation: the folder exists or is created and is
    writable, and no output exists unless ``force``."""

    def __init__(self, name: str, out_dir: str | None, force: bool):
        default = out_dir is None
        folder = os.path.abspath(DEFAULT_OUT if default else out_dir)
        if default:
            for src in SOURCE_DIRS:
                if _inside(folder, src):
                    fail(f"the default output folder {folder} is inside the source tree "
                         f"({src}); run from another directory or pass --out-dir")
        if os.path.exists(folder) and not os.path.isdir(folder):
            fail(f"--out-dir {folder} exists and is not a folder")
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            fail(f"cannot create the output folder {folder} ({exc.strerror or exc})")
        if not os.access(folder, os.W_OK | os.X_OK):
            fail(f"the output folder {folder} is not writable; pass another --out-dir")
        self.name = name
        self.folder = folder
        self.png = os.path.join(folder, name + ".png")
        self.json = os.path.join(folder, name + ".json")
        if not force:
            for path in (self.png, self.json):
                if os.path.exists(path):
                    fail(f"{path} exists; pass --force to replace it, or another --out-dir")

    def save(self, fig, record: dict) -> None:
        """Write the figure (PNG) and the record (JSON), each all or nothing."""
        from fwht_gpu.files import atomic_write, write_json
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
        atomic_write(self.png, lambda f: f.write(buf.getvalue()))
        write_json(self.json, _plain(record))
        print(f"wrote {self.png}")
        print(f"wrote {self.json}")


def args(description: str, name: str, extra=None):
    """Parse the common options (and ``extra(parser)``'s); ``.out`` is the example's
    :class:`Outputs`, already checked."""
    ap = argparse.ArgumentParser(description=description,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true",
                    default=os.environ.get("PAGH_MM_EXAMPLES_SMALL") == "1",
                    help="small sizes, a few seconds (CI); also PAGH_MM_EXAMPLES_SMALL=1")
    ap.add_argument("--out-dir", default=None,
                    help=f"folder for the PNG and JSON (default: ./{DEFAULT_OUT}, created "
                         "if missing)")
    ap.add_argument("--cpu", action="store_true", help="stay on the CPU even if a GPU is present")
    ap.add_argument("--force", action="store_true", help="replace existing outputs")
    if extra is not None:
        extra(ap)
    a = ap.parse_args()
    a.out = Outputs(name, a.out_dir, a.force)
    return a


def backend(force_cpu: bool):
    """(xp, on_gpu): CuPy when a GPU is usable, else NumPy."""
    if not force_cpu:
        from fwht_gpu import gpu
        if gpu.available():
            return gpu.cupy(), True
    return np, False


def sync(gpu: bool) -> None:
    if gpu:
        import cupy
        cupy.cuda.Device().synchronize()


def timed(fn, gpu: bool):
    """(fn(), wall seconds), the GPU synchronized before the clock stops."""
    sync(gpu)
    t0 = time.perf_counter()
    out = fn()
    sync(gpu)
    return out, time.perf_counter() - t0


def host(a):
    """A NumPy copy of a NumPy or CuPy array."""
    return a.get() if hasattr(a, "get") else np.asarray(a)


def correlated_data(n_rows: int, n_cols: int, pairs: int, rho: float, seed: int = 0):
    """Standardized data with ``pairs`` planted column pairs of correlation ~rho."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_rows, n_cols))
    cols = rng.choice(n_cols, 2 * pairs, replace=False)
    a, b = cols[:pairs], cols[pairs:]
    X[:, b] = rho * X[:, a] + np.sqrt(1 - rho ** 2) * X[:, b]
    X = (X - X.mean(0)) / X.std(0)
    return X, [(int(min(i, j)), int(max(i, j))) for i, j in zip(a, b)]


def mib(nbytes) -> float | None:
    return None if nbytes is None else nbytes / 2 ** 20


# --- printed tables ------------------------------------------------------------------------

class Table:
    """A table printed row by row (whitespace-separated cells, no spaces inside a cell) and
    kept with its raw values for the JSON record.  ``columns``: (name, format, width);
    format is a ``str.format`` spec (``"{:.3e}"``) or a callable."""

    def __init__(self, title: str, columns, note: str | None = None):
        self.title = title
        self.columns = [(n, f, max(w, len(n))) for n, f, w in columns]
        self.rows: list[list] = []
        self.header = "  ".join(n.rjust(w) for n, _, w in self.columns)
        print()
        print(title)
        if note:
            print(note)
        print(self.header)

    def cell(self, col: int, value) -> str:
        _, fmt, w = self.columns[col]
        if value is None:
            text = "-"
        elif callable(fmt):
            text = fmt(value)
        else:
            text = fmt.format(value)
        if not text or any(c.isspace() for c in text):
            raise ValueError(f"table cell {text!r} is empty or has white space")
        return text.rjust(w)

    def add(self, *values) -> None:
        if len(values) != len(self.columns):
            raise ValueError(f"{len(values)} values for {len(self.columns)} columns")
        print("  ".join(self.cell(i, v) for i, v in enumerate(values)), flush=True)
        self.rows.append(list(values))

    def record(self) -> dict:
        return {"title": self.title, "header": self.header,
                "columns": [n for n, _, _ in self.columns], "rows": self.rows}


def yes_no(v) -> str:
    return "yes" if v else "no"


def zero_or(fmt: str):
    """A format that prints an exact zero as ``0`` (so a reader and a test see it is zero)."""
    return lambda v: "0" if v == 0 else fmt.format(v)


# --- plots ---------------------------------------------------------------------------------

def pyplot():
    """matplotlib.pyplot on the Agg backend (files only, no display needed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def number(v: float) -> str:
    """A tick label: 2^k for powers of two >= 256, else a plain number (k, M for thousands
    and millions)."""
    v = float(v)
    if v <= 0:
        return "0"
    k = math.log2(v)
    if v >= 256 and abs(k - round(k)) < 1e-9:
        return f"$2^{{{int(round(k))}}}$"
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if v >= div:
            q = v / div
            return f"{q:.0f}{suffix}" if q == round(q) else f"{q:.3g}{suffix}"
    return f"{v:g}"


def log_ticks(values, most: int = 7):
    """Tick positions for a log axis over ``values`` (zeros ignored): the decades, every
    second or third one when there are many, or 1-2-5 steps when the values span less than
    two decades; at most ``most`` ticks, always covering the values."""
    v = np.asarray([float(x) for x in values if float(x) > 0])
    if v.size == 0:
        return [1.0]
    lo, hi = math.floor(math.log10(v.min())), math.ceil(math.log10(v.max()))
    hi = max(hi, lo + 1)
    for steps, fewest, limit in (((1, 2, 5), 2, 6), ((1,), 3, most), ((1, 3), 2, most)):
        cand = [m * 10.0 ** e for e in range(lo, hi + 1) for m in steps]
        first = max(t for t in cand if t <= v.min() * (1 + 1e-12))
        last = min(t for t in cand if t >= v.max() * (1 - 1e-12))
        ticks = [t for t in cand if first <= t <= last]
        if fewest <= len(ticks) <= limit:
            return ticks
    ticks = [10.0 ** e for e in range(lo, hi + 1)]
    stride = math.ceil((len(ticks) - 1) / (most - 1))
    out = [ticks[0]]
    while out[-1] < v.max() * (1 - 1e-12):
        out.append(out[-1] * 10.0 ** stride)
    return out


def tick_label(v: float) -> str:
    """A log-axis label: plain for 1e-3 <= v < 1e5, else m x 10^k in mathtext."""
    if 1e-3 <= v < 1e5:
        return f"{v:g}"
    e = math.floor(math.log10(v) + 1e-9)
    m = v / 10.0 ** e
    return f"$10^{{{e}}}$" if abs(m - 1) < 1e-9 else f"${m:g}\\times10^{{{e}}}$"


def log_axis(ax, which: str, ticks=None, labels=None, data=None) -> None:
    """A log axis whose labels never overlap, at any figure size: exactly the major ticks
    ``ticks`` (labelled by ``labels`` or :func:`number`), or :func:`log_ticks` of ``data``
    (labelled by :func:`tick_label`), the axis limits a little beyond them; minor ticks
    unlabelled (matplotlib would otherwise label minor ticks of short log axes, which is
    how "2x10^3x10^4x10^" strings come about)."""
    from matplotlib import ticker
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    if ticks is None:
        ticks = log_ticks(data)
        labels = [tick_label(t) for t in ticks]
        span = (min(ticks) / 1.15, max(ticks) * 1.15)
    else:
        span = (min(ticks) / 1.3, max(ticks) * 1.3)
    axis.set_major_locator(ticker.FixedLocator(list(ticks)))
    if labels is not None:
        axis.set_major_formatter(ticker.FixedFormatter(list(labels)))
    else:
        axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: number(v)))
    axis.set_minor_locator(ticker.NullLocator())
    axis.set_minor_formatter(ticker.NullFormatter())
    (ax.set_xlim if which == "x" else ax.set_ylim)(*span)


class Figure:
    """Records every plotted series with the table column it comes from: ``table`` (its
    title), ``y`` (the column), ``x`` (the column the x values are in, or None), ``match``
    (other columns and the printed value they must have).  ``zeros``: values that are
    exactly zero on a log axis, drawn as a marker at the bottom of the axis with a "0"."""

    def __init__(self):
        self.series: list[dict] = []

    def note(self, panel: str, label: str, x, y, *, table: Table, y_col: str,
             x_col: str | None = None, match: dict | None = None) -> None:
        self.series.append({"panel": panel, "label": label, "table": table.title,
                            "x_column": x_col, "y_column": y_col, "match": match or {},
                            "x": _plain(list(x)), "y": _plain([float(v) for v in y])})

    def plot(self, ax, panel: str, x, y, fmt: str, *, label: str, table: Table, y_col: str,
             x_col: str | None, match: dict | None = None, zeros_at=None, **kw):
        """``ax.plot`` of the points with y != 0; exact zeros (log axis) as zero markers."""
        x, y = list(x), [float(v) for v in y]
        keep = [i for i, v in enumerate(y) if v != 0] if zeros_at is not None else range(len(y))
        line = ax.plot([x[i] for i in keep], [y[i] for i in keep], fmt, label=label, **kw)
        if zeros_at is not None:
            zx = [x[i] for i, v in enumerate(y) if v == 0]
            if zx:
                zero_markers(ax, zx, color=line[0].get_color(), marker=kw.get("marker")
                             or _marker(fmt))
        self.note(panel, label, x, y, table=table, y_col=y_col, x_col=x_col, match=match)
        return line


def _marker(fmt: str) -> str:
    for m in "os^vD*xP+sd<>":
        if m in fmt:
            return m
    return "o"


def zero_markers(ax, xs, color="k", marker="o") -> None:
    """Exact zeros on a log y axis: a hollow marker on the bottom edge with a "0" above it
    (never a bar or point at a made-up tiny value)."""
    from matplotlib import transforms
    tr = transforms.blended_transform_factory(ax.transData, ax.transAxes)
    for x in xs:
        ax.plot([x], [0.0], marker=marker, mfc="white", mec=color, ms=7, transform=tr,
                clip_on=False, zorder=5, linestyle="none")
        ax.annotate("0", (x, 0.0), xycoords=tr, xytext=(0, 6), textcoords="offset points",
                    ha="center", va="bottom", fontsize=8, color=color)


# --- the record ----------------------------------------------------------------------------

def record(name: str, a, gpu: bool, tables, fig: Figure, **extra) -> dict:
    """The JSON record of one run: what was printed, what was plotted, where and how."""
    from fwht_gpu import provenance
    settings = {k: v for k, v in vars(a).items() if k != "out"}
    return {"example": name, "command": " ".join(sys.argv), "created": provenance.utc_now(),
            "device": provenance.device_record("gpu" if gpu else "cpu"),
            "versions": provenance.versions(), "settings": settings,
            "tables": [t.record() for t in tables], "series": fig.series,
            "seconds": time.perf_counter() - _T0, **extra}


def _plain(obj):
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _plain(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def dumps(obj) -> str:
    return json.dumps(_plain(obj))


# --- memory --------------------------------------------------------------------------------

def peak_memory(fn, gpu: bool):
    """(fn(), wall seconds, peak bytes above what was in use before, how it was measured).
    CPU: the resident set's high-water mark (Linux VmHWM, reset before the call through
    /proc/self/clear_refs, the way ``pagh-mm bench --device cpu`` measures it; None where
    the reset is refused).  GPU: the size of a fresh CuPy memory pool that serves every
    allocation of the call (a pool keeps and reuses what is freed, so its size is the most
    the call held at once, rounded up to the pool's blocks)."""
    if gpu:
        import cupy
        sync(True)
        previous = cupy.cuda.get_allocator()
        pool = cupy.cuda.MemoryPool()
        cupy.cuda.set_allocator(pool.malloc)
        try:
            out, t = timed(fn, True)
        finally:
            cupy.cuda.set_allocator(previous)
        return out, t, pool.total_bytes(), "a fresh CuPy memory pool's size"
    from pagh_mm.cpubench import reset_peak, status_kib
    import gc
    gc.collect()
    base = status_kib("VmRSS")
    ok = base is not None and reset_peak()
    out, t = timed(fn, False)
    if not ok:
        return out, t, None, "not measured (no /proc/self/clear_refs)"
    peak = status_kib("VmHWM")
    return out, t, max(0, peak - base) * 1024, "VmHWM above the resident set before"
