"""Sketch error by transform dtype, algorithm and stabilizer.

One realistic product - the sample covariance C = X^T X / N of data with planted
correlated column pairs - compressed with FP64, FP32, FP16 and BF16 transforms and with
each algorithm and stabilizer.  Prints the relative Frobenius error of the dense
estimate, the mean error on the planted entries, the recall of the planted pairs among
the top entries, and the time; writes sketch_error_by_dtype.png.

    python examples/sketch_error_by_dtype.py [--small] [--cpu]
"""
import numpy as np

import pagh_mm
from _shared import args, backend, correlated_data, savefig, timed

a = args(__doc__.splitlines()[0])
xp, gpu = backend(a.cpu)
N, p, pairs, b = (300, 64, 4, 1 << 9) if a.small else (500, 128, 8, 1 << 11)
X, planted = correlated_data(N, p, pairs, rho=0.9)
C = X.T @ X / N
A, B = X.T / np.sqrt(N), X / np.sqrt(N)
want = set(planted)
variants = [("folklore", None), ("folklore", "kahan"), ("folklore", "neumaier"), ("alman", None)]
rows = []
print(f"C = X^T X / N, X: {N} x {p}, {pairs} planted pairs (rho 0.9); {b} buckets x 5 repetitions")
print("rel. err: ||estimate - C||_F / ||C||_F (collisions dominate it at this sketch size);")
print("vs fp64: ||estimate - FP64 Folklore estimate||_F / ||C||_F (the transform's rounding alone)")
print(f"{'dtype':9} {'variant':18} {'rel. err':>9} {'vs fp64':>9} {'planted err':>11} {'recall':>6} {'time s':>7}")
ref = None
for dtype in ("float64", "float32", "float16", "bfloat16"):
    for alg, stab in variants:
        on_gpu = gpu
        Ad, Bd = (xp.asarray(A), xp.asarray(B)) if on_gpu else (A, B)
        sk, t = timed(lambda: pagh_mm.compress(Ad, Bd, buckets=b, reps=5, seed=1, dtype=dtype,
                                               algorithm=alg, stabilizer=stab), on_gpu)
        D = sk.to_dense()
        D = D.get() if on_gpu else D
        fro = np.linalg.norm(D - C) / np.linalg.norm(C)
        if ref is None:
            ref = D
        vs64 = np.linalg.norm(D - ref) / np.linalg.norm(C)
        pe = np.mean([abs(D[i, j] - C[i, j]) for i, j in planted])
        top = sk.top_k(p + 2 * pairs, by="value")
        r, c = (top.rows.get(), top.cols.get()) if on_gpu else (top.rows, top.cols)
        found = {(int(min(i, j)), int(max(i, j))) for i, j in zip(r, c) if i != j}
        rec = len(found & want) / len(want)
        name = alg if stab is None else f"{alg}+{stab}"
        rows.append((dtype, name, fro, vs64, pe, rec, t))
        print(f"{dtype:9} {name:18} {fro:9.3e} {vs64:9.2e} {pe:11.3e} {rec:6.2f} {t:7.2f}")

import matplotlib  # noqa: E402
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(8, 4))
names = [v[0] if v[1] is None else f"{v[0]}+{v[1]}" for v in variants]
width = 0.2
for k, dtype in enumerate(("float64", "float32", "float16", "bfloat16")):
    vals = [max(r[3], 1e-18) for r in rows if r[0] == dtype]
    ax.bar(np.arange(len(names)) + (k - 1.5) * width, vals, width, label=dtype)
ax.set_xticks(np.arange(len(names)), names)
ax.set_yscale("log")
ax.set_ylabel("||estimate - FP64 estimate|| / ||C||")
ax.set_title("Transform rounding in the sketch, by dtype and variant (covariance)")
ax.legend()
print("wrote", savefig(fig, a.out_dir, "sketch_error_by_dtype.png"))
