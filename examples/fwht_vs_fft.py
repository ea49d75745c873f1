"""Pagh's FFT version against the FWHT version as the inner dimension grows.

For products A @ B (m x n times n x m, Gaussian plus a planted rank-one spike) with the
inner dimension n growing, compresses with method="fwht" (XOR convolution, this
project's default) and method="fft" (cyclic convolution through NumPy's or CuPy's FFT),
with the same buckets, repetitions and seed; prints the relative Frobenius error of the
dense estimate and the compression time, and plots both against n.  Writes
fwht_vs_fft.png and fwht_vs_fft.json to --out-dir.

    python examples/fwht_vs_fft.py [--small] [--cpu] [--out-dir DIR] [--force]

The two convolutions have the same variance bound (||AB||_F^2 / b per repetition), so the
errors should agree to within the scatter of one random sketch; the FWHT needs no complex
arithmetic, so it should be faster.
"""
import numpy as np

import pagh_mm
from _shared import Figure, Table, args, backend, host, log_axis, pyplot, record, timed

NAME = "fwht_vs_fft"
a = args(__doc__, NAME)
xp, gpu = backend(a.cpu)
m, b, d = (64, 1 << 10, 5) if a.small else (128, 1 << 13, 5)
inner = (50, 100, 200) if a.small else (125, 250, 500, 1000, 2000)
rng = np.random.default_rng(0)
print(f"A: {m} x n, B: n x {m} (Gaussian / sqrt(n), plus a planted rank-one spike); "
      f"{b} buckets x {d} repetitions, seed 0, on the {'GPU' if gpu else 'CPU'}")
tab = Table("error and time by inner dimension n and convolution",
            [("n", "{:d}", 6), ("method", "{}", 6), ("rel_frobenius_err", "{:.4e}", 10),
             ("time_s", "{:.4f}", 8)],
            note="rel_frobenius_err: ||estimate - AB||_F / ||AB||_F of the dense median "
                 "estimate (it falls with n as the spike's share of ||AB||_F grows)")
res = {"fwht": [], "fft": []}
for n in inner:
    A = rng.standard_normal((m, n)) / np.sqrt(n)
    B = rng.standard_normal((n, m)) / np.sqrt(n)
    u = rng.standard_normal(n) / np.sqrt(n)
    A[3] += 4 * u
    B[:, 7] += 4 * u
    C = A @ B
    fro = np.linalg.norm(C)
    Ad, Bd = xp.asarray(A), xp.asarray(B)
    for method in ("fwht", "fft"):
        pagh_mm.compress(Ad[:, :8], Bd[:8], buckets=b, reps=d, seed=0, method=method)   # warm-up
        sk, t = timed(lambda: pagh_mm.compress(Ad, Bd, buckets=b, reps=d, seed=0, method=method),
                      gpu)
        D = host(sk.to_dense())
        err = float(np.linalg.norm(D - C) / fro)
        res[method].append((n, err, t))
        tab.add(n, method, err, t)

ratio = [f[2] / g[2] for f, g in zip(res["fft"], res["fwht"])]
rel = [abs(f[1] - g[1]) / g[1] for f, g in zip(res["fft"], res["fwht"])]
print(f"\nFWHT compression is {min(ratio):.1f}-{max(ratio):.1f}x faster than FFT at these sizes; "
      f"their errors differ by at most {100 * max(rel):.0f}% (two different random sketches "
      "with the same variance bound)")

plt = pyplot()
fig = Figure()
f, (e, t) = plt.subplots(1, 2, figsize=(9, 3.6))
for method, style in (("fwht", "o-"), ("fft", "s--")):
    n_, err, tt = zip(*res[method])
    fig.plot(e, "error", n_, err, style, label=f"method={method!r}", table=tab,
             y_col="rel_frobenius_err", x_col="n", match={"method": method})
    fig.plot(t, "time", n_, tt, style, label=f"method={method!r}", table=tab, y_col="time_s",
             x_col="n", match={"method": method})
errs = [r[1] for rs in res.values() for r in rs]
times = [r[2] for rs in res.values() for r in rs]
log_axis(e, "x", ticks=inner)
log_axis(e, "y", data=errs)
log_axis(t, "x", ticks=inner)
log_axis(t, "y", data=times)
e.set(xlabel="inner dimension n", ylabel="||estimate - AB||_F / ||AB||_F",
      title=f"error ({b} buckets x {d})")
t.set(xlabel="inner dimension n", ylabel="compression time (s)",
      title=f"time ({'GPU' if gpu else 'CPU'})")
e.legend()
e.grid(True, which="major", alpha=0.3)
t.grid(True, which="major", alpha=0.3)
f.suptitle(f"FWHT vs FFT convolution in Pagh's sketch, A: {m} x n, B: n x {m}", fontsize=10)
a.out.save(f, record(NAME, a, gpu, [tab], fig, summary={"speedup_min": min(ratio),
                                                        "speedup_max": max(ratio)}))
