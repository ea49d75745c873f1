"""Covariance screening at scale: the most correlated feature pairs of a tall data matrix,
from a certified Gram sketch, against the exact covariance product, as the data grows.

Data: N samples x p features with zero mean and unit variance (as after standardizing),
with planted pairs of correlation rho = 0.9; C = X^T X / N is the correlation matrix.  For
three sample counts N (the largest sized to this machine's memory and cores), the
screen runs both ways:

* sketch: pagh_mm.compress_gram(X, k=2 * pairs) (buckets and repetitions chosen
  automatically for a certified top-k), then top_k(verify=True, exclude_diagonal=True);
* exact: X.T @ X (BLAS; cuBLAS on a GPU), then the top pairs of its upper triangle.

Prints the parameters chosen and why, time, peak memory, the certificate and the recall
for each N, the pairs found, and which route wins here and what decides it; plots time
and memory against N.  Writes covariance_screening.png and covariance_screening.json to
--out-dir.

    python examples/covariance_screening.py [--small] [--cpu] [--features P] [--samples N]
                                            [--out-dir DIR] [--force]

Defaults: p = 2048 and N up to 25 000 per CPU core on the CPU (50 000 on 2 cores), p = 4096
and N up to 400 000 on a GPU; N is lowered so that X takes at most a sixth of the memory
available (CPU: host memory; GPU: free device memory).  --small: p = 256, N up to 8 000.
"""
import math
import os

import numpy as np

import pagh_mm
from fwht_gpu import memory
from _shared import (Figure, Table, args, backend, fail, host, log_axis, mib, peak_memory,
                     pyplot, record, sync, yes_no)

NAME = "covariance_screening"


def options(ap):
    ap.add_argument("--features", type=int, default=None, help="p, the number of features")
    ap.add_argument("--samples", type=int, default=None, help="the largest N")
    ap.add_argument("--pairs", type=int, default=None, help="planted pairs (default 10; --small 5)")


a = args(__doc__, NAME, options)
xp, gpu = backend(a.cpu)
device = "GPU" if gpu else "CPU"
cores = os.cpu_count() or 1
if a.small:
    p, n_max, pairs = 256, 8000, 5
elif gpu:
    p, n_max, pairs = 4096, 400_000, 10
else:
    p, n_max, pairs = 2048, 25_000 * min(cores, 16), 10
p = a.features or p
pairs = a.pairs or pairs
n_max = a.samples or n_max
have = memory.available("gpu" if gpu else "cpu")
if have is not None and a.samples is None:
    n_max = max(1000, min(n_max, int(have / 6 / (8 * p))))
if p < 2 * pairs or n_max < 8:
    fail(f"need p >= 2 pairs and N >= 8 (p={p}, pairs={pairs}, N={n_max})")
sizes = [n_max // 4, n_max // 2, n_max]
rho, k, seed = 0.9, 2 * pairs, 0

# --- the data: generated once at the largest N; each N uses its first rows (a view) ---------
rng = xp.random.default_rng(seed) if not gpu else xp.random.RandomState(seed)
Z = rng.standard_normal((n_max, p))
pick = np.random.default_rng(seed + 1).choice(p, 2 * pairs, replace=False)
ca, cb = pick[:pairs], pick[pairs:]
ia, ib = xp.asarray(ca), xp.asarray(cb)
Z[:, ib] = rho * Z[:, ia] + math.sqrt(1 - rho ** 2) * Z[:, ib]
planted = {(int(min(i, j)), int(max(i, j))) for i, j in zip(ca, cb)}
sync(gpu)
print(f"X: up to {n_max} samples x {p} features (float64, {mib(Z.nbytes):.0f} MiB at the "
      f"largest N) on the {device}, {pairs} planted pairs of correlation {rho}; task: the "
      f"{pairs} most correlated pairs (top-{k} of C = X^T X / N by magnitude, diagonal left out)")
if have is not None:
    print(f"memory available: {have / 2**30:.1f} GiB; {cores} CPU cores")


def exact_top(X):
    """The top pairs of the upper triangle of X^T X by magnitude (and the product's size)."""
    C = X.T @ X
    iu = xp.triu_indices(X.shape[1], 1)
    vals = C[iu]
    sel = xp.argpartition(-xp.abs(vals), pairs - 1)[:pairs]
    sel = sel[xp.argsort(-xp.abs(vals[sel]))]
    return host(iu[0][sel]), host(iu[1][sel]), host(vals[sel]), C.nbytes


# warm-up, untimed: the whole pipeline on a slice holding the planted pairs (numba's and
# CuPy's compile caches, BLAS threads), so that no timed run pays for compilation
cols = list(pick) + [c for c in range(p) if c not in set(pick.tolist())][:max(0, 256 - 2 * pairs)]
warm = Z[:min(2000, sizes[0])][:, xp.asarray(cols)]
pagh_mm.compress_gram(warm, k=k, seed=seed).top_k(k, verify=True, exclude_diagonal=True)
exact_top(warm)

runs = Table(f"both routes by sample count N ({device}, p = {p})",
             [("N", "{:d}", 7), ("buckets", "{:d}", 7), ("grown_to", "{:d}", 7),
              ("reps", "{:d}", 4),
              ("compress_s", "{:.3f}", 8), ("transforms_s", "{:.3f}", 8),
              ("query_s", "{:.3f}", 7), ("sketch_s", "{:.3f}", 8), ("exact_s", "{:.3f}", 7),
              ("exact/sketch", "{:.2f}", 6), ("sketch_mib", "{:.1f}", 8),
              ("exact_mib", "{:.1f}", 8), ("certified", yes_no, 4), ("recall", "{:.2f}", 4),
              ("agree", "{:.2f}", 4)],
             note="buckets: chosen by compress_gram(k=...); grown_to: the buckets after the "
                  "verified query (it recompresses once, inside query_s, when the product's "
                  "k-th value is smaller than assumed);\ntransforms_s: the first compression's "
                  "Count-Sketch + FWHT stage (the rest of compress_s is the exact diagonal and the "
                  "norm estimate); sketch_s = compress_s + query_s; exact_s: X^T X + its top "
                  "pairs;\n*_mib: peak memory above the data (exact: the product and the top-k's temporaries; 0: "
                  "the resident set did not grow, freed memory was reused); recall: planted pairs found; agree: "
                  "share of the exact top pairs the sketch found")
results = []
for N in sizes:
    X = Z[:N]
    prof = {}
    sk, t_c, m_c, how = peak_memory(lambda: pagh_mm.compress_gram(X, k=k, seed=seed, profile=prof),
                                    gpu)
    b0 = sk.buckets
    top, t_q, m_q, _ = peak_memory(lambda: sk.top_k(k, verify=True, exclude_diagonal=True), gpu)
    (er, ec, ev, c_bytes), t_e, m_e, _ = peak_memory(lambda: exact_top(X), gpu)
    r_, c_ = host(top.rows), host(top.cols)
    found = {(int(i), int(j)) for i, j in zip(r_, c_) if i < j}
    exact_pairs = {(int(i), int(j)) for i, j in zip(er, ec)}
    row = dict(N=N, b=b0, b_final=sk.buckets, d=sk.reps, compress=t_c, transforms=prof.get("fused"),
               query=t_q, sketch=t_c + t_q, exact=t_e, ratio=t_e / (t_c + t_q),
               sketch_mib=mib(None if m_c is None else max(m_c, m_q)), exact_mib=mib(m_e),
               certified=bool(top.certified), recall=len(found & planted) / pairs,
               agree=len(found & exact_pairs) / pairs, describe=sk.describe(),
               sketch_bytes=int(sk.sketch.nbytes + sk.diagonal.nbytes), product_bytes=c_bytes,
               top=top, sk=sk, ev=ev)
    results.append(row)
    runs.add(N, b0, sk.buckets, row["d"], t_c, row["transforms"], t_q, row["sketch"], t_e, row["ratio"],
             row["sketch_mib"], row["exact_mib"], row["certified"], row["recall"], row["agree"])

last = results[-1]
print(f"\nat N = {last['N']}: {last['describe']}")
print(f"certificate: {yes_no(last['certified'])} (failure probability <= "
      f"{last['top'].failure_probability:g}), margin {last['top'].margin / last['N']:.4f}, "
      f"noise per repetition {last['top'].noise / last['N']:.4f} (correlation units), "
      f"{last['top'].verified} candidates verified exactly")
print(f"memory: peak measured as {how}; the sketch itself {mib(last['sketch_bytes']):.2f} MiB, "
      f"the exact product {mib(last['product_bytes']):.0f} MiB, the data "
      f"{mib(8 * last['N'] * p):.0f} MiB")

top = last["top"]
est, exa = host(top.estimates), host(top.exact)
pt = Table(f"the pairs found at N = {last['N']} (certified: {yes_no(last['certified'])})",
           [("i", "{:d}", 5), ("j", "{:d}", 5), ("correlation", "{:.4f}", 11),
            ("estimate", "{:.4f}", 8), ("planted", yes_no, 7)],
           note="correlation: exact (verified) C[i, j] / N; estimate: the sketch's median, / N")
for i, j, e, v in sorted(((int(i), int(j), float(e), float(v)) for i, j, e, v in
                          zip(host(top.rows), host(top.cols), est, exa) if i < j),
                         key=lambda t: -abs(t[3])):
    pt.add(i, j, v / last["N"], e / last["N"], (i, j) in planted)

# --- the verdict ----------------------------------------------------------------------------
N, b, d = last["N"], last["b_final"], last["d"]
fused = last["transforms"] or 0.0
won = [r["N"] for r in results if r["sketch"] < r["exact"]]
ratios = ", ".join(f"{r['ratio']:.2f}x" for r in results)
print()
if len(won) == len(results):
    print(f"the sketch wins at every N here (exact time / sketch time: {ratios}).")
elif not won:
    print(f"the exact product is faster at every N here (exact time / sketch time: {ratios}).")
else:
    print(f"the sketch wins at N = {', '.join(map(str, won))} (exact time / sketch time: {ratios}).")
for r in results:
    if r["b_final"] != r["b"]:
        print(f"at N = {r['N']} the first sketch ({r['b']} buckets) could not certify the top-{k}: "
              "its noise, set by the floor ||C - diag||_F ~ p / sqrt(N) = "
              f"{p / math.sqrt(r['N']):.1f} of the sample correlations, was too close to the k-th "
              f"value, so the query compressed again with {r['b_final']} buckets (in query_s).")
print(f"what decides it, per sample (row of X) at N = {N}: the exact product makes p^2/2 = "
      f"{p * p / 2 / 1e6:.1f} M multiply-adds ({last['exact'] / N * 1e6:.1f} us, "
      f"{N * p * p / 2 / max(last['exact'], 1e-9) / 1e9:.0f} G/s); the sketch's transforms make "
      f"d b log2 b = {d * last['b'] * math.log2(last['b']) / 1e6:.2f} M butterflies "
      f"({fused / N * 1e6:.1f} us, {N * d * last['b'] * math.log2(last['b']) / max(fused, 1e-9) / 1e9:.1f}"
      f" G/s), the rest of the compression (the exact diagonal and the norm estimate, each "
      f"O(p) per sample) {(last['compress'] - fused) / N * 1e6:.1f} us and the query "
      f"{last['query'] / N * 1e6:.1f} us: {last['sketch'] / N * 1e6:.1f} us in all.")
print(f"the transforms alone are {'faster' if fused < last['exact'] else 'slower'} than the "
      f"exact product here ({fused:.2f} s against {last['exact']:.2f} s); "
      f"{100 * (last['compress'] - fused) / max(last['sketch'], 1e-9):.0f}% of the sketch's time "
      "is the rest of the compression.")
grew = [r["N"] for r in results if r["b_final"] != r["b"]]
print(f"the certificate needs a few hundred times k buckets when the top-k stand out (b = "
      f"{last['b']} for k = {k} here), and more when the noise floor p / sqrt(N) is not small "
      f"against the top-k values (sqrt(k) rho = {math.sqrt(k) * rho:.1f})"
      + (f": here at N = {', '.join(map(str, grew))}" if grew else "")
      + ".  So the sketch pays for tall data with many features: p^2/2 well above d b log2 b "
      "times the speed ratio of BLAS to the transforms, with N large enough for the first sketch "
      "to certify.  Its result is always the smaller one: "
      f"{mib(last['sketch_bytes']):.2f} MiB against {mib(last['product_bytes']):.0f} MiB for "
      "the p x p product.")

# --- the figure -----------------------------------------------------------------------------
plt = pyplot()
fig = Figure()
f, (tx, mx) = plt.subplots(1, 2, figsize=(11, 4.2))
ns = [r["N"] for r in results]
fig.plot(tx, "time", ns, [r["sketch"] for r in results], "o-", color="C0",
         label="sketch: compress + certified top-k", table=runs, y_col="sketch_s", x_col="N")
if all(r["transforms"] for r in results):
    fig.plot(tx, "time", ns, [r["transforms"] for r in results], "o:", color="C0",
             label="  of which Count-Sketch + FWHT", table=runs, y_col="transforms_s", x_col="N")
fig.plot(tx, "time", ns, [r["exact"] for r in results], "s-", color="C3",
         label="exact: X^T X + top pairs", table=runs, y_col="exact_s", x_col="N")
times = [v for r in results for v in (r["sketch"], r["exact"], r["transforms"] or r["sketch"])]
log_axis(tx, "x", ticks=ns)
log_axis(tx, "y", data=times)
tx.set(xlabel="samples N", ylabel="seconds", title=f"time ({device}, p = {p}, top {pairs} pairs)")
tx.legend(fontsize=8)
tx.grid(True, which="major", alpha=0.3)
mems = []
if all(r["sketch_mib"] is not None for r in results):
    fig.plot(mx, "memory", ns, [r["sketch_mib"] for r in results], "o-", color="C0",
             label="sketch (peak above the data)", table=runs, y_col="sketch_mib", x_col="N",
             zeros_at="bottom")
    fig.plot(mx, "memory", ns, [r["exact_mib"] for r in results], "s-", color="C3",
             label="exact (peak above the data)", table=runs, y_col="exact_mib", x_col="N",
             zeros_at="bottom")
    mems += [r["sketch_mib"] for r in results] + [r["exact_mib"] for r in results]
data_mib = [mib(8 * n * p) for n in ns]
mx.plot(ns, data_mib, "k:", label="the data X itself")
mems += data_mib
log_axis(mx, "x", ticks=ns)
log_axis(mx, "y", data=[v for v in mems if v > 0])
mx.set(xlabel="samples N", ylabel="MiB", title=f"peak memory ({how.split(' (')[0]})")
mx.title.set_fontsize(9)
mx.legend(fontsize=8)
mx.grid(True, which="major", alpha=0.3)
f.suptitle(f"Covariance screen of {p} features: certified sketch vs exact product", fontsize=10)
a.out.save(f, record(NAME, a, gpu, [runs, pt], fig,
                     runs=[{k2: v for k2, v in r.items() if k2 not in ("top", "sk", "ev")}
                           for r in results],
                     planted=sorted(planted), memory_method=how))
