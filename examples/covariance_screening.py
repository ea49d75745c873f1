"""Covariance screening: the most correlated column pairs of a tall data matrix, found
without forming the covariance matrix, verified exactly, compared with the exact
computation's answer and time.  Writes covariance_screening.png.

    python examples/covariance_screening.py [--small] [--cpu]

Defaults: 6 000 x 512 on the CPU, 20 000 x 4 096 on a GPU.
"""
import numpy as np

import pagh_mm
from _shared import args, backend, correlated_data, savefig, timed

a = args(__doc__.splitlines()[0])
xp, gpu = backend(a.cpu)
if a.small:
    N, p, pairs, b = 500, 96, 5, 1 << 10
elif gpu:
    N, p, pairs, b = 20000, 4096, 40, 1 << 18
else:
    N, p, pairs, b = 6000, 512, 20, 1 << 13
X, planted = correlated_data(N, p, pairs, rho=0.85, seed=1)
Xd = xp.asarray(X / np.sqrt(N))            # C = Xd^T Xd is the correlation matrix
k = 2 * pairs                              # both triangles of each pair, diagonal left out
print(f"X: {N} x {p} on the {'GPU' if gpu else 'CPU'}, {pairs} planted pairs (rho 0.85); "
      f"Gram sketch {b} buckets x 5 repetitions")
pagh_mm.compress_gram(Xd[:8, :8], buckets=16, reps=1, seed=0)                    # warm-up
top, t_sketch = timed(lambda: pagh_mm.compress_gram(Xd, buckets=b, reps=5, seed=0)
                      .top_k(k, verify=True, by="value", exclude_diagonal=True), gpu)


def pairs_of(r, c, v):
    out = {}
    for i, j, x in zip(r, c, v):
        if i < j:
            out[(int(i), int(j))] = float(x)
    return out


host = (lambda z: z.get()) if gpu else np.asarray
found = pairs_of(host(top.rows), host(top.cols), host(top.exact))
C, t_exact = timed(lambda: Xd.T @ Xd, gpu)
C = host(C)
iu = np.triu_indices(p, 1)
order = np.argsort(-C[iu])[:pairs]
exact_top = {(int(iu[0][q]), int(iu[1][q])): float(C[iu][q]) for q in order}
rec = len(set(found) & set(planted)) / len(planted)
agree = len(set(sorted(found, key=found.get, reverse=True)[:pairs]) & set(exact_top)) / pairs
print(f"{'i':>5} {'j':>5} {'exact corr':>11} {'planted':>8}")
for (i, j), v in sorted(found.items(), key=lambda kv: -kv[1])[:min(10, pairs)]:
    print(f"{i:>5} {j:>5} {v:11.4f} {'yes' if (i, j) in set(planted) else 'no':>8}")
print(f"sketch + verified top-{k} (certified: {top.certified}): {t_sketch:.3f} s; "
      f"exact X^T X: {t_exact:.3f} s")
print(f"recall of planted pairs: {rec:.2f}; agreement with the exact top-{pairs}: {agree:.2f}")

import matplotlib  # noqa: E402
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(5, 4))
ax.hist(C[iu], bins=100, log=True, color="0.7", label="all pairs (exact)")
ax.vlines(list(found.values()), 0.5, 50, color="C3", label="pairs found by the sketch")
ax.set(xlabel="correlation", ylabel="pairs", title="Covariance screening")
ax.legend()
print("wrote", savefig(fig, a.out_dir, "covariance_screening.png"))
