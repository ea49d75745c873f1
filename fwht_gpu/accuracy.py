"""Numerical-stability study (thesis sections 3.5 and 4.1: Table 4.1, Figures 4.1-4.4).

For every dtype, size 2**L, input distribution and experiment, each variant's result is
compared with a double-double reference computed from the same (rounded) input, with
the thesis's metrics.  The CPU run executes the GPU's Plans with the NumPy engine, so
it reproduces the GPU's numbers bit for bit; the GPU run computes transforms and
references on the device.

Distributions (Table 3.4): PMONE, NORM, RELU_NORM, PAGH_NORM, PAGH_PMONE (PAGH
scattering: n/8 values added at random indices of a zero vector with random signs).
Experiments (Table 3.5): One-Way (H x), Two-Way (H H x / n), Smoothed (H phi_1(H x) / n),
XOR Conv (H (H a * H b) / n).
"""
from __future__ import annotations

import json
import os
import statistics

import numpy as np

from . import dtypes as _dt
from . import gpu
from . import reference as R
from . import variants as _variants
from .cuda import engine
from .files import atomic_write
from .plan import make_plan
from .overflow import errstate
from .transform import TransformOverflowError, fwht, ifwht, norm_factor, run_plan

DISTRIBUTIONS = ("PMONE", "NORM", "RELU_NORM", "PAGH_NORM", "PAGH_PMONE")
EXPERIMENTS = ("One-Way", "Two-Way", "Smoothed", "XOR Conv")
#: The variants of the study (names of :data:`fwht_gpu.variants.VARIANTS`), in table order.
VARIANTS = ("folklore", "kahan", "neumaier", "alman", "kahan-pass", "neumaier-pass", "compute")
THESIS_VARIANTS = ("kahan", "neumaier", "alman")
T_SMOOTH = 1.0


def draw(dist: str, n: int, rng) -> np.ndarray:
    """One input vector of the distribution (float64)."""
    base = dist.replace("PAGH_", "")
    def values(k):
        if base == "PMONE":
            return rng.choice([-1.0, 1.0], k)
        v = rng.standard_normal(k)
        return np.maximum(v, 0.0) if base == "RELU_NORM" else v
    if not dist.startswith("PAGH_"):
        return values(n)
    k = max(1, n // 8)
    x = np.zeros(n)
    np.add.at(x, rng.integers(0, n, k), values(k) * rng.choice([-1.0, 1.0], k))
    return x


class _Runner:
    """Transforms of one variant and dtype, on the CPU (GPU plans through the NumPy engine)
    or on the GPU."""

    def __init__(self, variant, dtype, n, xp):
        v = _variants.variant(variant)
        alg, stab = v.algorithm, v.stabilizer
        self.kw = v.kwargs(dtype)
        self.xp, self.n, self.dtype = xp, n, np.dtype(dtype)
        self.plan = make_plan(n, dtype, alg, stab, "cuda", self.kw["compute_dtype"])

    def __call__(self, x, inverse=False):
        if self.xp is np:
            return run_plan(self.plan, x, -1, norm_factor(self.n, "backward", inverse))
        return (ifwht if inverse else fwht)(x, **self.kw)

    def elementwise(self, fn, *arrays):
        """fn on the arrays in FP32/FP64, rounded once to the dtype (correctly rounded)."""
        wd = _dt.work_dtype(self.dtype)
        out = fn(*(a.astype(wd) for a in arrays))
        return out.astype(self.dtype)


def _phi(y, xp):
    return xp.where(y > T_SMOOTH, y - T_SMOOTH, xp.where(y < -T_SMOOTH, y + T_SMOOTH, 0 * y))


def _phi_dd(y: R.DD, xp) -> R.DD:
    big, small = y.hi > T_SMOOTH, y.hi < -T_SMOOTH
    minus = R.dd_add(y, R.DD(xp.full_like(y.hi, -T_SMOOTH), xp.zeros_like(y.hi)))
    plus = R.dd_add(y, R.DD(xp.full_like(y.hi, T_SMOOTH), xp.zeros_like(y.hi)))
    hi = xp.where(big, minus.hi, xp.where(small, plus.hi, 0.0))
    lo = xp.where(big, minus.lo, xp.where(small, plus.lo, 0.0))
    return R.DD(hi, lo)


def reference(exp: str, a, b, log2n: int, xp) -> R.DD:
    """Double-double reference of an experiment on float64 inputs a (and b)."""
    if exp == "One-Way":
        return R.dd_fwht(a)
    if exp == "Two-Way":
        return R.DD(a, xp.zeros_like(a))
    if exp == "Smoothed":
        return R.dd_scale_pow2(R.dd_fwht(_phi_dd(R.dd_fwht(a), xp)), -log2n)
    return R.dd_scale_pow2(R.dd_fwht(R.dd_mul(R.dd_fwht(a), R.dd_fwht(b))), -log2n)


def experiment(exp: str, a, b, run: _Runner, xp):
    """The experiment in the run's dtype and variant."""
    if exp == "One-Way":
        return run(a)
    if exp == "Two-Way":
        return run(run(a), inverse=True)
    if exp == "Smoothed":
        return run(run.elementwise(lambda y: _phi(y, xp), run(a)), inverse=True)
    return run(run.elementwise(lambda u, v: u * v, run(a), run(b)), inverse=True)


def study(log2ns=range(3, 13), dtypes=("fp64", "fp32", "fp16", "bf16"), variants=tuple(VARIANTS),
          distributions=DISTRIBUTIONS, experiments=EXPERIMENTS, device: str = "cpu", seed: int = 0,
          progress=None) -> list[dict]:
    """Run the study; a list of records {dtype, log2n, distribution, experiment, variant,
    mean_rel, max_rel, mean_abs} (None metrics where the dtype's range was exceeded)."""
    xp = np
    if device == "gpu":
        xp = gpu.cupy()
        _precompile(log2ns, dtypes, variants)
    records = []
    for L in log2ns:
        n = 1 << L
        for di, dist in enumerate(distributions):
            rng = np.random.default_rng([seed, L, di])
            a64, b64 = draw(dist, n, rng), draw(dist, n, rng)
            for name in dtypes:
                dt = _dt.resolve(name)
                a, b = xp.asarray(a64.astype(dt)), xp.asarray(b64.astype(dt))
                af, bf = a.astype(xp.float64), b.astype(xp.float64)
                for exp in experiments:
                    ref = reference(exp, af, bf, L, xp)
                    for var in variants:
                        if not _variants.variant(var).applies_to(dt):
                            continue
                        rec = {"dtype": name, "log2n": L, "distribution": dist, "experiment": exp,
                               "variant": var}
                        try:
                            with np.errstate(over="ignore", invalid="ignore"), \
                                    errstate(overflow="raise"):    # the caller's state aside
                                y = experiment(exp, a, b, _Runner(var, dt, n, xp), xp)
                            ok = bool(xp.isfinite(y.astype(xp.float32 if dt.itemsize == 2 else dt)).all())
                        except TransformOverflowError:
                            ok = False
                        rec.update(R.error_metrics(y, ref) if ok else
                                   {"mean_rel": None, "max_rel": None, "mean_abs": None})
                        records.append(rec)
            if progress:
                progress(L, dist)
    return records


def _precompile(log2ns, dtypes, variant_names) -> None:
    """Compile every kernel the GPU study needs, in parallel processes."""
    work = []
    for name in dtypes:
        dt = _dt.resolve(name)
        for var in variant_names:
            v = _variants.variant(var)
            if v.applies_to(dt):
                work += [(make_plan(1 << L, dt, v.algorithm, v.stabilizer, "cuda", v.compute_dtype(dt)),
                          1 << L) for L in log2ns]
    engine.precompile(work)


def reduction_table(records, variants=None) -> dict:
    """{dtype: {log2n: {variant: median over experiments x distributions of 1 - err/err_folklore}}}."""
    base = {(r["dtype"], r["log2n"], r["distribution"], r["experiment"]): r["mean_rel"]
            for r in records if r["variant"] == "folklore"}
    acc: dict = {}
    for r in records:
        if r["variant"] == "folklore" or (variants and r["variant"] not in variants):
            continue
        f = base.get((r["dtype"], r["log2n"], r["distribution"], r["experiment"]))
        if f is None or r["mean_rel"] is None or f == 0:
            continue
        acc.setdefault(r["dtype"], {}).setdefault(r["log2n"], {}).setdefault(r["variant"], []).append(
            1.0 - r["mean_rel"] / f)
    return {d: {L: {v: statistics.median(x) for v, x in vs.items()} for L, vs in sizes.items()}
            for d, sizes in acc.items()}


def markdown_table(records, variants=None) -> str:
    """Table 4.1's form: median error reduction versus Folklore per dtype and size."""
    tab = reduction_table(records, variants)
    dts = [d for d in ("fp64", "fp32", "fp16", "bf16") if d in tab]
    vs = variants or sorted({v for d in tab.values() for s in d.values() for v in s},
                            key=lambda v: VARIANTS.index(v))
    head = "| log2(n) | " + " | ".join(f"{d} {v}" for d in dts for v in vs) + " |"
    lines = [head, "|" + "---|" * (1 + len(dts) * len(vs))]
    sizes = sorted({L for d in tab.values() for L in d})
    for L in sizes:
        cells = []
        for d in dts:
            for v in vs:
                x = tab[d].get(L, {}).get(v)
                cells.append("" if x is None else f"{100 * x:.1f}%")
        lines.append(f"| {L} | " + " | ".join(cells) + " |")
    overall = []
    for d in dts:
        for v in vs:
            xs = [tab[d][L][v] for L in tab[d] if v in tab[d][L] and L >= 10]
            overall.append(f"{100 * statistics.median(xs):.1f}%" if xs else "")
    lines.append("| median, 2^10+ | " + " | ".join(overall) + " |")
    return "\n".join(lines) + "\n"


def plot(records, out_dir: str, prefix: str = "accuracy") -> list[str]:
    """Figures 4.1-4.4: one PNG per dtype, distributions x experiments, error versus size."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    paths = []
    for d in ("fp64", "fp32", "fp16", "bf16"):
        rs = [r for r in records if r["dtype"] == d]
        if not rs:
            continue
        dists = [x for x in DISTRIBUTIONS if any(r["distribution"] == x for r in rs)]
        exps = [x for x in EXPERIMENTS if any(r["experiment"] == x for r in rs)]
        fig, axes = plt.subplots(len(dists), len(exps), figsize=(3.2 * len(exps), 2.4 * len(dists)),
                                 squeeze=False, sharex=True)
        for i, dist in enumerate(dists):
            for j, exp in enumerate(exps):
                ax = axes[i][j]
                for var in VARIANTS:
                    pts = sorted((r["log2n"], r["mean_rel"]) for r in rs if r["distribution"] == dist
                                 and r["experiment"] == exp and r["variant"] == var and r["mean_rel"])
                    if pts:
                        ax.plot(*zip(*pts), marker=".", label=var)
                ax.axhline(_dt.eps(_dt.resolve(d)), color="k", lw=0.6, ls="--")
                ax.set_yscale("log")
                if i == 0:
                    ax.set_title(exp, fontsize=9)
                if j == 0:
                    ax.set_ylabel(dist, fontsize=8)
                if i == len(dists) - 1:
                    ax.set_xlabel("log2(n)", fontsize=8)
        handles = {}
        for ax in axes.ravel():
            for h, lab in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(lab, h)
        fig.legend(list(handles.values()), list(handles.keys()), loc="upper center", fontsize=7,
                   bbox_to_anchor=(0.5, 0.97),
                   ncol=len(handles))
        fig.suptitle(f"Mean relative error, {d} (dashed: unit roundoff; missing points: exact "
                     "or out of range)", y=1.0)
        path = os.path.join(out_dir, f"{prefix}-{d}.png")
        atomic_write(path, lambda f, fig=fig: fig.savefig(f, format="png", dpi=90, bbox_inches="tight"))
        plt.close(fig)
        paths.append(path)
    return paths


def write(records, out_dir: str, prefix: str = "accuracy", plots: bool = True) -> dict:
    """JSON records, the markdown table, and (with matplotlib) the plots."""
    os.makedirs(out_dir, exist_ok=True)
    out = {"json": os.path.join(out_dir, f"{prefix}.json"), "markdown": os.path.join(out_dir, f"{prefix}.md")}
    text = json.dumps({"records": records, "reduction": reduction_table(records)}, indent=0)
    atomic_write(out["json"], lambda f: f.write(text.encode("utf-8")))
    table = ("Median reduction of the mean relative error versus Folklore over all experiments "
             "and distributions (thesis Table 4.1; positive = more accurate).\n\n"
             + markdown_table(records))
    atomic_write(out["markdown"], lambda f: f.write(table.encode("utf-8")))
    if plots:
        out["plots"] = plot(records, out_dir, prefix)
    return out
