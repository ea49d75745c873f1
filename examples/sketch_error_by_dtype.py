"""Sketch error by transform dtype and bucket count: rounding next to sketching.

One realistic product - the sample correlation matrix C = X^T X / N of standardized data
with planted correlated column pairs - compressed with FP64, FP32, FP16 and BF16
transforms at several bucket counts b (same seed, so the same hash functions: the
estimates differ only by the transform's rounding).  Two error sources, side by side:

* sketching: the FP64 sketch's estimate against the exact C (other entries sharing a
  bucket; one repetition's standard deviation is at most ||C||_F / sqrt(b), the noise
  bound; the median of the repetitions is far better for products like this one, whose
  mass sits in a few entries, and exact once b is several times m p);
* rounding: each dtype's estimate against the FP64 sketch's (the transform's arithmetic
  alone; zero for FP64, its own reference).

Prints the RMS error per entry of each, says which dominates, and plots both against b;
a second table and panel compare algorithms and stabilizers at one b.  Writes
sketch_error_by_dtype.png and sketch_error_by_dtype.json to --out-dir.

    python examples/sketch_error_by_dtype.py [--small] [--cpu] [--out-dir DIR] [--force]
"""
import numpy as np

import pagh_mm
from _shared import (Figure, Table, args, backend, correlated_data, host, log_axis, pyplot,
                     record, timed, zero_markers, zero_or)

NAME = "sketch_error_by_dtype"
a = args(__doc__, NAME)
xp, gpu = backend(a.cpu)
if a.small:
    N, p, pairs, log2b, variant_b = 200, 32, 3, (8, 10, 12, 14), 1 << 8
else:
    N, p, pairs, log2b, variant_b = 400, 64, 6, (8, 10, 12, 14, 16), 1 << 10
d, seed = 5, 1
DTYPES = ("float64", "float32", "float16", "bfloat16")
SHORT = {"float64": "fp64", "float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
VARIANTS = [("folklore", None), ("folklore", "kahan"), ("folklore", "neumaier"), ("alman", None)]

X, planted = correlated_data(N, p, pairs, rho=0.9)
C = X.T @ X / N
A, B = xp.asarray(X.T / np.sqrt(N)), xp.asarray(X / np.sqrt(N))    # two arrays: the general path
fro = float(np.linalg.norm(C))
print(f"C = X^T X / N: X is {N} x {p} (standardized, {pairs} planted pairs of correlation 0.9), "
      f"so C is {p} x {p}, m p = {p * p} entries, ||C||_F = {fro:.3f}; {d} repetitions, seed "
      f"{seed}, on the {'GPU' if gpu else 'CPU'}")


def rms(E) -> float:
    return float(np.sqrt(np.mean(np.square(E))))


def sketch(b, dtype, algorithm="folklore", stabilizer=None):
    sk, t = timed(lambda: pagh_mm.compress(A, B, buckets=b, reps=d, seed=seed, dtype=dtype,
                                           algorithm=algorithm, stabilizer=stabilizer), gpu)
    return sk, host(sk.to_dense()), t


for dtype in DTYPES:                    # warm-up, untimed: every kernel the timed runs use
    for alg, stab in VARIANTS:
        pagh_mm.compress(A[:4, :8], B[:8, :4], buckets=16, reps=1, seed=0, dtype=dtype,
                         algorithm=alg, stabilizer=stab)
tab = Table("error per entry by bucket count and transform dtype",
            [("buckets", "{:d}", 7), ("dtype", lambda v: SHORT[v], 5),
             ("total_rms", "{:.3e}", 9), ("sketching_rms", "{:.3e}", 9),
             ("rounding_rms", zero_or("{:.3e}"), 9), ("noise_bound", "{:.3e}", 9),
             ("noise_est", "{:.3e}", 9), ("dominant", "{}", 10), ("time_s", "{:.3f}", 6)],
            note="RMS over all entries of: total_rms = estimate - C; sketching_rms = FP64 estimate "
                 "- C; rounding_rms = estimate - FP64 estimate.\nnoise_bound = ||C||_F / sqrt(b), "
                 "one repetition's standard deviation bound; noise_est = sk.noise(), the "
                 "sketch's own estimate of it.")
rows = []
for lb in log2b:
    b = 1 << lb
    ref = None
    for dtype in DTYPES:
        sk, D, t = sketch(b, dtype)
        if ref is None:
            ref = D
        total, sketching, rounding = rms(D - C), rms(ref - C), rms(D - ref)
        dominant = "rounding" if rounding > sketching else "sketching"
        rows.append(dict(b=b, dtype=dtype, total=total, sketching=sketching, rounding=rounding,
                         bound=fro / np.sqrt(b), noise=sk.noise(), dominant=dominant))
        tab.add(b, dtype, total, sketching, rounding, fro / np.sqrt(b), sk.noise(), dominant, t)

print()
for dtype in DTYPES[1:]:
    mine = [r for r in rows if r["dtype"] == dtype]
    won = [r["b"] for r in mine if r["dominant"] == "rounding"]
    ratio = ", ".join(f"{r['rounding'] / r['sketching']:.2g}" for r in mine)
    print(f"{SHORT[dtype]}: rounding / sketching = {ratio} at b = "
          f"{', '.join(str(r['b']) for r in mine)}; "
          + (f"rounding dominates from b = {min(won)} on" if won else
             "sketching dominates at every b"))
fp64_rows = [r for r in rows if r["dtype"] == "float64"]
exact = [r["b"] for r in fp64_rows if r["sketching"] < 1e-12 * fro]
print(f"(once b is several times m p = {p * p}, few entries share a bucket in 3 of the {d} "
      "repetitions: the FP64 median becomes exact"
      + (f" up to FP64 rounding (here from b = {min(exact)} = {min(exact) // (p * p)} m p)"
         if exact else "") + " and only the transforms' rounding is left)")

vt = Table(f"rounding error by algorithm and stabilizer at b = {variant_b}",
           [("dtype", lambda v: SHORT[v], 5), ("variant", "{}", 17),
            ("rounding_rms", zero_or("{:.3e}"), 9), ("total_rms", "{:.3e}", 9),
            ("time_s", "{:.3f}", 6)],
           note="rounding_rms: estimate - the FP64 Folklore estimate (the reference, so 0 for "
                "itself); total_rms: estimate - C")
vrows = []
ref = None
for dtype in DTYPES:
    for alg, stab in VARIANTS:
        sk, D, t = sketch(variant_b, dtype, alg, stab)
        if ref is None:
            ref = D
        name = alg if stab is None else f"{alg}+{stab}"
        vrows.append((dtype, name, rms(D - ref), rms(D - C)))
        vt.add(dtype, name, rms(D - ref), rms(D - C), t)

plt = pyplot()
fig = Figure()
f, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.6), gridspec_kw={"width_ratios": [1.1, 1]})
bs = [1 << lb for lb in log2b]
fp64 = fp64_rows
fig.plot(ax, "by buckets", bs, [r["bound"] for r in fp64], "k:", label="noise bound ||C||_F/sqrt(b) (one repetition)",
         table=tab, y_col="noise_bound", x_col="buckets", match={"dtype": "fp64"})
fig.plot(ax, "by buckets", bs, [r["sketching"] for r in fp64], "-", color="0.45", lw=3,
         marker="o", label="sketching: FP64 estimate - C", table=tab, y_col="sketching_rms",
         x_col="buckets", match={"dtype": "fp64"})
colors = {"float64": "C0", "float32": "C1", "float16": "C2", "bfloat16": "C3"}
for dtype in DTYPES:
    mine = [r for r in rows if r["dtype"] == dtype]
    fig.plot(ax, "by buckets", bs, [r["rounding"] for r in mine], "--", marker="s", ms=5,
             color=colors[dtype], label=f"rounding: {SHORT[dtype]} - FP64 estimate"
             + (" (0: the reference)" if dtype == "float64" else ""),
             table=tab, y_col="rounding_rms", x_col="buckets", match={"dtype": SHORT[dtype]},
             zeros_at="bottom")
nonzero = [v for r in rows for v in (r["bound"], r["sketching"], r["rounding"]) if v > 0]
log_axis(ax, "x", ticks=bs)
log_axis(ax, "y", data=nonzero)
ax.axvline(p * p, color="0.6", lw=0.8)
ax.annotate("b = m p", (p * p, 1), xycoords=("data", "axes fraction"), xytext=(3, -12),
            textcoords="offset points", fontsize=8, color="0.4")
ax.set(xlabel="buckets b", ylabel="RMS error per entry (correlation units)",
       title="sketching vs the transform's rounding (FP64 rounding: 0, marked on the axis)")
ax.title.set_fontsize(9)
ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncols=2)
ax.grid(True, which="major", alpha=0.3)

names = [v[0] if v[1] is None else f"{v[0]}+{v[1]}" for v in VARIANTS]
width = 0.2
vals_all = [r[2] for r in vrows if r[2] > 0]
log_axis(bx, "y", data=vals_all)
bottom = bx.get_ylim()[0]
for k, dtype in enumerate(DTYPES):
    vals = [r[2] for r in vrows if r[0] == dtype]
    xs = np.arange(len(names)) + (k - 1.5) * width
    nz = [i for i, v in enumerate(vals) if v > 0]
    bx.bar(xs[nz], [vals[i] - bottom for i in nz], width, bottom=bottom, label=SHORT[dtype],
           color=colors[dtype])
    zero_markers(bx, [xs[i] for i, v in enumerate(vals) if v == 0], color=colors[dtype],
                 marker="o")
    fig.note("by variant", SHORT[dtype], names, vals, table=vt, y_col="rounding_rms",
             x_col="variant", match={"dtype": SHORT[dtype]})
bx.set_xticks(np.arange(len(names)), names, fontsize=8)
bx.set(ylabel="RMS of estimate - FP64 Folklore estimate",
       title=f"rounding by algorithm and stabilizer, b = {variant_b} (0: the reference itself)")
bx.title.set_fontsize(9)
bx.legend(fontsize=8, ncols=4, loc="upper center", bbox_to_anchor=(0.5, -0.08))
bx.grid(True, axis="y", which="major", alpha=0.3)
f.suptitle(f"Where the error of a compressed {p} x {p} correlation matrix comes from", fontsize=10)
a.out.save(f, record(NAME, a, gpu, [tab, vt], fig, norm_fro=fro))
