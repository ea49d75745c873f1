"""Co-occurrence screening of real text: which identifiers does Python code use together?

Builds, at run time, the documents x terms matrix X of the Python sources on this machine
(pagh_mm.corpus: the standard library and pagh_mm's dependencies, cut into 50-line
documents; the most frequent identifiers as terms; X[d, t] = 1 when term t occurs in
document d), so the data is real and every machine has it.  C = X^T X counts, for each
pair of terms, the documents that use both.  The screen: the pairs with the largest
counts, found from a Gram sketch of X^T X (pagh_mm.compress_gram), verified exactly and
certified, printed with their terms.  Beside it, SciPy's exact X.T @ X and its top pairs,
each route timed and its peak memory measured in a child process of its own (the helper
`pagh-mm bench --device cpu` uses).  Says plainly which route won here and why.  Writes
cooccurrence_screening.png and cooccurrence_screening.json to --out-dir.

    python examples/cooccurrence_screening.py [--small] [--pairs 25] [--out-dir DIR] [--force]

Runs on the CPU (the exact route it is compared with is SciPy's).  --small reads a few
standard-library packages only (about 1 500 documents x 2 048 terms).
"""
import os
import tempfile

import numpy as np

import pagh_mm
from pagh_mm import corpus
from pagh_mm.cpubench import isolated, save_input   # the bench's child-process measurement
from _shared import Figure, Table, args, fail, pyplot, record, timed, yes_no

NAME = "cooccurrence_screening"
SMALL_PACKAGES = ("asyncio", "concurrent", "email", "http", "json", "logging", "unittest", "xml")


def options(ap):
    ap.add_argument("--pairs", type=int, default=25, help="how many top pairs to find (default 25)")
    ap.add_argument("--repeats", type=int, default=None,
                    help="timed runs per route, median reported (default 3; --small: 1)")


a = args(__doc__, NAME, options)
if a.pairs < 1 or (a.repeats is not None and a.repeats < 1):
    fail("--pairs and --repeats must be >= 1")
repeats = a.repeats or (1 if a.small else 3)
k = 2 * a.pairs                 # entries: each pair is C[i, j] and C[j, i]

if a.small:
    std = corpus.stdlib_root()
    roots = [os.path.join(std, s) for s in SMALL_PACKAGES if os.path.isdir(os.path.join(std, s))]
    c, t_build = timed(lambda: corpus.cooccurrence(max_terms=2048, roots=roots), False)
else:
    c, t_build = timed(lambda: corpus.cooccurrence(max_terms=16384), False)
X, terms = c.X, c.terms
n_docs, m = X.shape
lengths = np.diff(X.indptr).astype(np.int64)
multiplies = int((lengths * lengths).sum())
print(f"X: {n_docs} documents ({c.description['lines_per_doc']} lines each) x {m} identifiers, "
      f"{X.nnz} non-zeros, from {c.description['files']} files of Python "
      f"{c.description['python']} in {t_build:.1f} s")
print(f"task: the {a.pairs} pairs of distinct identifiers used together in the most documents "
      f"(the off-diagonal top-{k} of C = X^T X, {m} x {m})")

# --- ours, in this process: what was chosen, the certificate, the answer --------------------
pagh_mm.compress_gram(X[:256, :64].tocsr(), buckets=64, reps=1, seed=0).top_k(2)     # compile
sk, t_compress = timed(lambda: pagh_mm.compress_gram(X, k=k, seed=0), False)
top, t_query = timed(lambda: sk.top_k(k, verify=True, exclude_diagonal=True), False)
print(f"\nsketch: {sk.describe()}")
print(f"compressed in {t_compress:.2f} s; top-{k} verified and certified in {t_query:.2f} s: "
      f"certified {yes_no(top.certified)} (failure probability <= {top.failure_probability:g}), "
      f"{top.verified} candidates verified exactly, margin {top.margin:.1f}, noise per "
      f"repetition {top.noise:.1f} (counts)")

rows, cols = np.asarray(top.rows), np.asarray(top.cols)
upper = rows < cols
pairs = list(zip(rows[upper].tolist(), cols[upper].tolist(), np.asarray(top.exact)[upper].tolist(),
                 np.asarray(top.estimates)[upper].tolist()))
# an independent check of the exact counts: documents holding both terms, from X itself
XT = X.T.tocsr()
check = np.asarray(XT[[p[0] for p in pairs]].multiply(XT[[p[1] for p in pairs]]).sum(axis=1)).ravel()
if not np.array_equal(check, [p[2] for p in pairs]):
    fail("the verified counts differ from X's own (a bug: please report it)", code=1)
df = np.asarray(X.sum(axis=0)).ravel()
tab = Table(f"the top {a.pairs} pairs (certified: {yes_no(top.certified)})",
            [("rank", "{:d}", 4), ("term_a", "{}", 12), ("term_b", "{}", 12),
             ("docs_both", "{:.0f}", 9), ("estimate", "{:.1f}", 9), ("docs_a", "{:.0f}", 7),
             ("docs_b", "{:.0f}", 7)],
            note="docs_both: C[a, b], exact (verified); estimate: the sketch's median estimate "
                 "before verification; docs_a, docs_b: the diagonal C[a, a], C[b, b]")
for r, (i, j, v, e) in enumerate(pairs, 1):
    tab.add(r, terms[i], terms[j], v, e, df[i], df[j])

# --- both routes in child processes: time (median of repeats) and peak memory ----------------
print(f"\nmeasuring both routes in child processes ({repeats} timed run(s) each, after a "
      "warm-up on a slice) ...")
with tempfile.TemporaryDirectory() as tmp:
    path = save_input(tmp, "X", X)
    prm = {"k": k, "seed": 0}
    res = {impl: isolated("cooccurrence", impl, {"X": path}, prm, repeats, tmp)
           for impl in ("ours", "scipy")}
for impl, r in res.items():
    if "error" in r:
        fail(f"the {impl} route failed in its child process: {r['error']}", code=1)

truth = res["scipy"]
kth = min(truth["values"])
n_tie = sum(v == kth for v in truth["values"])
mine = np.asarray(res["ours"]["values"])
recall = (int(np.sum(mine > kth)) + min(int(np.sum(mine == kth)), n_tie)) / len(truth["values"])
routes = [("sketch", "compress_gram+top_k(verify)", res["ours"]),
          ("scipy", "X.T@X+top-k", truth)]
cmp = Table("the two routes (wall clock, median of runs; peak: resident set above the inputs)",
            [("route", "{}", 6), ("what", "{}", 27), ("first_s", "{:.3f}", 7),
             ("topk_s", "{:.3f}", 6), ("total_s", "{:.3f}", 7), ("peak_mib", "{:.1f}", 8),
             ("result_mib", "{:.1f}", 10), ("recall", "{:.3f}", 6), ("certified", "{}", 9)],
            note="first_s: the compression or the product; result_mib: the sketch or the product "
                 "C (SciPy CSR)")
for name, what, r in routes:
    cmp.add(name, what, r["sketch_s"], r["topk_s"], r["total_s"], r["peak_mib"], r["result_mib"],
            recall if name == "sketch" else 1.0,
            yes_no(r["certified"]) if "certified" in r else "-")

ours_t, exact_t = res["ours"]["total_s"], truth["total_s"]
peaks_known = truth["peak_mib"] is not None and res["ours"]["peak_mib"] is not None
mem = "peak memory not measured"
if peaks_known:
    mem_ratio = truth["peak_mib"] / max(res["ours"]["peak_mib"], 1e-9)
    mem = (f"the sketch's peak memory is {mem_ratio:.1f}x smaller" if mem_ratio >= 1 else
           f"the sketch's peak memory is {1 / mem_ratio:.1f}x larger")
print()
if ours_t < exact_t:
    print(f"the sketch wins here: {exact_t / ours_t:.2f}x faster than SciPy's exact product; {mem}.")
else:
    print(f"SciPy's exact product is faster here ({exact_t:.2f} s against {ours_t:.2f} s for the "
          f"sketch); {mem}: this corpus is sparse enough for the exact route.")
print(f"what decides it: the exact product makes {multiplies / 1e6:.1f} M multiplications (the sum "
      f"of squared document lengths) and stores every co-occurring pair ({truth['result_mib']:.0f} "
      f"MiB); the sketch makes about d/2 = {sk.reps / 2:g} bucket updates per multiplication (or "
      "one transform per document, when cheaper) into a fixed "
      f"{sk.reps} x {sk.buckets} table ({res['ours']['result_mib']:.1f} MiB), then verifies only "
      f"the candidates heavy buckets point to, not all {m * (m - 1) // 2 / 1e6:.1f} M pairs.  "
      "Longer documents favour the sketch (its cost per document is capped by one transform, "
      "the exact product's grows with the square of the length).  The sketch also certifies "
      "its answer and answers other queries (other k, thresholds, single pairs) without "
      "another product.")
print("(terms are identifiers anywhere in the sources, comments and docstrings included, so "
      "English words lead the list)")

# --- the figure -------------------------------------------------------------------------------
plt = pyplot()
fig = Figure()
f = plt.figure(figsize=(13, 5.2))
gs = f.add_gridspec(2, 2, width_ratios=[1.5, 1], hspace=0.55, wspace=0.25)
ax = f.add_subplot(gs[:, 0])
shown = pairs[:min(len(pairs), 25)]
labels = [f"{terms[i]} ~ {terms[j]}" for i, j, _, _ in shown][::-1]
ypos = np.arange(len(shown))
ax.barh(ypos, [p[2] for p in shown][::-1], color="C0", alpha=0.8, label="exact count (verified)")
ax.plot([p[3] for p in shown][::-1], ypos, "k|", ms=9, mew=2, label="sketch estimate (median)")
ax.set_yticks(ypos, labels, fontsize=7)
ax.set_ylim(-0.7, len(shown) - 0.3)
ax.set(xlabel="documents using both identifiers",
       title=f"top {len(shown)} of {a.pairs} certified pairs, {n_docs} documents x {m} identifiers")
ax.title.set_fontsize(9)
ax.legend(fontsize=8, loc="lower right")
ax.grid(True, axis="x", alpha=0.3)
ranks = list(range(1, len(shown) + 1))
fig.note("pairs", "exact count", ranks, [p[2] for p in shown], table=tab, y_col="docs_both",
         x_col="rank")
fig.note("pairs", "sketch estimate", ranks, [p[3] for p in shown], table=tab, y_col="estimate",
         x_col="rank")

names = [name for name, _, _ in routes]
tx = f.add_subplot(gs[0, 1])
first = [r["sketch_s"] for _, _, r in routes]
query = [r["topk_s"] for _, _, r in routes]
tx.barh(names, first, color="C1", label="compression / product")
tx.barh(names, query, left=first, color="C2", label="top-k (verified) / top-k")
for yi, (_, _, r) in enumerate(routes):
    tx.annotate(f"{r['total_s']:.2f} s", (r["total_s"], yi), xytext=(4, 0),
                textcoords="offset points", va="center", fontsize=8)
tx.set_xlim(0, 1.9 * max(r["total_s"] for _, _, r in routes))
tx.set(xlabel="seconds (median)", title="time")
tx.legend(fontsize=7, loc="center right")
fig.note("time", "first stage", names, first, table=cmp, y_col="first_s", x_col="route")
fig.note("time", "top-k", names, query, table=cmp, y_col="topk_s", x_col="route")
fig.note("time", "total", names, [r["total_s"] for _, _, r in routes], table=cmp, y_col="total_s",
         x_col="route")

mx = f.add_subplot(gs[1, 1])
peaks = [r["peak_mib"] for _, _, r in routes]
if peaks_known:
    mx.barh(names, peaks, color="C4")
    for yi, v in enumerate(peaks):
        mx.annotate(f"{v:.0f} MiB", (v, yi), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=8)
    mx.set_xlim(0, 1.25 * max(peaks))
    fig.note("memory", "peak", names, peaks, table=cmp, y_col="peak_mib", x_col="route")
else:
    mx.text(0.5, 0.5, "not measured on this system", ha="center", va="center",
            transform=mx.transAxes)
mx.set(xlabel="MiB (resident set above the inputs)", title="peak memory")
f.suptitle("Which identifiers does Python code use together? Certified co-occurrence screen vs "
           "SciPy's exact X^T X", fontsize=10)
a.out.save(f, record(NAME, a, False, [tab, cmp], fig, corpus=c.description,
                     sketch=sk.describe(), certified=bool(top.certified), recall=recall,
                     pairs=[[terms[i], terms[j], v] for i, j, v, _ in pairs]))
