"""Pagh's FFT version against the FWHT version as the inner dimension grows.

For products A @ B with m = p fixed and the inner dimension n growing, compresses
with method="fwht" (XOR convolution) and method="fft" (cyclic convolution, numpy/cupy
FFT), same buckets and repetitions; prints the relative Frobenius error of the dense
estimate and the compression time; writes fwht_vs_fft.png.

    python examples/fwht_vs_fft.py [--small] [--cpu]
"""
import numpy as np

import pagh_mm
from _shared import args, backend, savefig, timed

a = args(__doc__.splitlines()[0])
xp, gpu = backend(a.cpu)
m, b = (64, 1 << 10) if a.small else (128, 1 << 13)
inner = (50, 100, 200) if a.small else (125, 250, 500, 1000, 2000)
rng = np.random.default_rng(0)
print(f"A: {m} x n, B: n x {m} (Gaussian, plus a planted rank-one spike); {b} buckets x 5 repetitions")
print(f"{'n':>6} {'method':6} {'rel. Frobenius err':>18} {'time s':>8}")
res = {"fwht": [], "fft": []}
for n in inner:
    A = rng.standard_normal((m, n)) / np.sqrt(n)
    B = rng.standard_normal((n, m)) / np.sqrt(n)
    u = rng.standard_normal(n) / np.sqrt(n)
    A[3] += 4 * u
    B[:, 7] += 4 * u
    C = A @ B
    for method in ("fwht", "fft"):
        Ad, Bd = (xp.asarray(A), xp.asarray(B)) if gpu else (A, B)
        pagh_mm.compress(Ad[:, :8], Bd[:8], buckets=b, reps=5, seed=0, method=method)   # warm-up
        sk, t = timed(lambda: pagh_mm.compress(Ad, Bd, buckets=b, reps=5, seed=0, method=method), gpu)
        D = sk.to_dense()
        D = D.get() if gpu else D
        err = np.linalg.norm(D - C) / np.linalg.norm(C)
        res[method].append((n, err, t))
        print(f"{n:>6} {method:6} {err:18.3e} {t:8.3f}")

import matplotlib  # noqa: E402
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, (e, t) = plt.subplots(1, 2, figsize=(9, 3.5))
for method, pts in res.items():
    n, err, tt = zip(*pts)
    e.plot(n, err, "o-", label=method)
    t.plot(n, tt, "o-", label=method)
e.set(xscale="log", xlabel="inner dimension n", ylabel="relative Frobenius error", title="error")
t.set(xscale="log", yscale="log", xlabel="inner dimension n", ylabel="seconds", title="time")
e.legend()
print("wrote", savefig(fig, a.out_dir, "fwht_vs_fft.png"))
