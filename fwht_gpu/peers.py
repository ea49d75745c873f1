"""``fwht bench`` rows for the transforms a user would choose instead of ours, timed in the
same run on the same data: fast-hadamard-transform (when importable) and the PyTorch code a
user writes without a library, next to ``fwht_gpu`` itself on CuPy arrays and on PyTorch
tensors (the DLPack path of :mod:`fwht_gpu.frameworks`, so its overhead shows).

Implementations (:func:`gpu_impls`), each on batched rows (batch x n) of FP32, FP16, BF16:

=========================  ===================================================================
``fwht_gpu engine``        the plan's kernels alone (``engine.run``, no overflow check), as the
                           batched table; K * 2**k: ``engine.run_k`` (one ``fwht_k_rows`` pass,
                           or the power-of-two passes and the K-point stage)
``fwht_gpu.fwht(cupy)``    the user call on a CuPy array (planning cache, output allocation,
                           the overflow check's flag read)
``fwht_gpu.fwht(torch)``   the same call on a CUDA tensor (DLPack views both ways)
``... unchecked``          those calls inside ``fwht_gpu.errstate(overflow="ignore")``: no
                           overflow check (on the GPU: no flag read, no synchronisation)
``fast_hadamard_transform``  ``hadamard_transform(x, 1.0)``; ``hadamard_transform_{12,20,28,40}N``
                           for K * 2**k (the K of the largest power-of-two part it accepts;
                           its order-K matrices differ from ours: checked against
                           kron(H'_K, H_M) with H'_K read from its response to unit vectors)
``torch butterfly``        log2(M) steps of view / add / sub / stack (then ``H_K @ blocks``)
``torch kron``             two GEMMs: ``H_1 @ X @ H_2`` with X the row as an (m1, m2) matrix,
                           H_1 = kron(H_K, H_2**a), H_2 = H_2**b, m1 ~ m2 ~ sqrt(n)
``torch x@H``              ``F.linear(x, H)``, H the dense n x n matrix (n <= ``DENSE_MAX``),
                           what QuaRot-style code does for small sizes
=========================  ===================================================================

Every case is timed with the same method (:func:`event_timer`): CUDA events on one stream
shared by CuPy and PyTorch around k back-to-back calls (k calls last >= ~2 ms; no CUDA graphs:
PyTorch calls and host-syncing calls cannot be captured), median of the repetitions, inputs
rotated over enough buffers that the L2 cache does not flatter; the enqueueing CPU time per
call is kept too (``host_us``). The floor is a device copy of the same bytes (the faster of
cudaMemcpy and a copy kernel) timed the same way. Each row gives the time, GB/s (one read and
one write of the data), the ratio to the copy, the ratio to the fastest implementation that
is not ours (``ratio_best_peer``), and the agreement with our transform computed in FP32 from
the same input (max |difference| / max |reference| over up to ``CHECK_ROWS`` rows; ``agree``
when within ``2 ceil(log2 n) u`` of the dtype). A missing peer gives rows with
``status="absent"``; a length it does not take, ``"n/a"``; a failing call, ``"error"``; the run
never stops for a peer.

The harness (:func:`measure_case`) takes its array module, timer and implementations as
arguments, so it also runs on NumPy arrays and CPU tensors (the CPU tests, with fake timers).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
import time
from typing import Callable

import numpy as np

from . import dtypes as _dt
from . import hadamard
from .overflow import errstate

#: The dtypes of the peer rows (fast-hadamard-transform has no FP64).
DTYPES = ("fp32", "fp16", "bf16")
#: Default lengths: batched rows 2**8 .. 2**15, and K * 2**k that fast-hadamard-transform takes
#: (12N/20N/28N: 2**7 and its largest 2**10; 40N: 40 * 2**10, the only K * 2**k of 40 it does
#: not also take as 20N).
SIZES = tuple(1 << L for L in range(8, 16)) + (12 << 7, 12 << 10, 20 << 7, 20 << 10, 28 << 7,
                                                28 << 10, 40 << 10)
#: Bytes of rows per case (rotated over ``ROTATE_BYTES``).
BATCH_BYTES = 64 << 20
ROTATE_BYTES = 256 << 20
#: Largest n of the dense ``x @ H`` baseline (H: n * n values).
DENSE_MAX = 1 << 13
#: Rows of the agreement check.
CHECK_ROWS = 512
#: fast-hadamard-transform's limits: powers of two 8 .. 2**15; K * M with M = 4 .. 1024.
FHT_MAX = 1 << 15
FHT_K = (12, 20, 28, 40)
FHT_M = (4, 1024)
METHOD = ("CUDA events around k back-to-back calls on one stream shared by CuPy and PyTorch "
          "(no graphs), median of repetitions, rotating inputs; copy = device-to-device copy of "
          "the same bytes (the faster of cudaMemcpy and a copy kernel), timed the same way; "
          "GB/s = one read + one write of the data")
TORCH_BASELINES = ("torch butterfly", "torch kron", "torch x@H")


# --- cases -------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Case:
    """``batch`` rows of length ``n`` = K * M (our split: :func:`fwht_gpu.hadamard.split`)."""
    dtype: str
    batch: int
    n: int

    @property
    def K(self) -> int:
        return hadamard.split(self.n)[0]

    @property
    def M(self) -> int:
        return hadamard.split(self.n)[1]

    @property
    def itemsize(self) -> int:
        return _dt.resolve(self.dtype).itemsize

    @property
    def bytes(self) -> int:
        return self.batch * self.n * self.itemsize

    @property
    def length(self) -> str:
        """'2^10' or '28*2^10'."""
        return length_label(self.n)

    @property
    def tol(self) -> float:
        """Agreement tolerance of max |difference| / max |reference|."""
        return 2 * math.ceil(math.log2(self.n)) * _dt.eps(_dt.resolve(self.dtype))


def length_label(n: int) -> str:
    """'2^10', '28*2^10'; 20 * 2**k beyond 20 * 2**10 as '40*2^(k-1)' (as models and
    fast-hadamard-transform's 40N name them)."""
    K, M = hadamard.split(n)
    k = M.bit_length() - 1
    if K == 20 and k > 10:
        K, k = 40, k - 1
    return f"2^{k}" if K == 1 else f"{K}*2^{k}"


def cases(dtypes=DTYPES, sizes=SIZES, batch_bytes: int = BATCH_BYTES) -> list[Case]:
    """The cases, dtype-major, rows of ``batch_bytes`` (at least one row each)."""
    out = []
    for name in dtypes:
        dt = _dt.resolve(name)
        for n in sizes:
            hadamard.split(n, "size")
            out.append(Case(_dt.short_name(dt), max(1, batch_bytes // (n * dt.itemsize)), int(n)))
    return out


def parse_length(text) -> int:
    """A length from ``'1024'``, ``'2^10'``, ``'28*2^10'`` or ``'28*1024'``; ValueError for
    anything else or a length the transform does not take (naming the nearest)."""
    s = str(text).replace(" ", "").replace("**", "^").lower().replace("x", "*")
    parts = s.split("*")
    if not 1 <= len(parts) <= 2 or not all(parts):
        raise ValueError(f"{text!r}: expected N, 2^k or K*2^k")
    n = 1
    for p in parts:
        base, _, exp = p.partition("^")
        if not base.isdigit() or (exp and not exp.isdigit()) or (_ and not exp):
            raise ValueError(f"{text!r}: expected N, 2^k or K*2^k")
        if exp and int(exp) > 40:
            raise ValueError(f"{text!r}: exponent {exp} is too large")
        n *= int(base) ** int(exp) if exp else int(base)
    hadamard.split(n, "size")
    return n


# --- PyTorch baselines (any device) ------------------------------------------------------------

def _hk(torch, K: int, like):
    """Our H_K as a tensor of ``like``'s dtype and device."""
    return torch.tensor(np.array(hadamard.matrix(K)), dtype=like.dtype, device=like.device)


def torch_butterfly(x, K: int = 1, HK=None):
    """kron(H_K, H_M) @ row of every row of ``x`` (last dim n = K * M) in pure PyTorch: log2(M)
    radix-2 steps (view, add, sub, stack), then ``H_K @ blocks`` for K > 1 (``HK``: H_K as a
    tensor of x's dtype and device, default ours)."""
    import torch
    n = x.shape[-1]
    M = n // K
    y = x.reshape(-1, M)
    rows = y.shape[0]
    h = 1
    while h < M:
        y = y.view(rows, M // (2 * h), 2, h)
        a, b = y[:, :, 0], y[:, :, 1]
        y = torch.stack((a + b, a - b), dim=2)
        h *= 2
    if K > 1:
        y = torch.matmul(_hk(torch, K, x) if HK is None else HK, y.reshape(-1, K, M))
    return y.reshape(x.shape)


def kron_factors(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(H1, H2) with kron(H1, H2) our n-point matrix (kron(H_K, H_M)), H2 = H_2**b Sylvester,
    H1 = kron(H_K, H_2**a), sides about sqrt(n)."""
    from scipy.linalg import hadamard as sylvester
    K, M = hadamard.split(n)
    k = M.bit_length() - 1
    b = min(k, math.ceil(math.log2(n) / 2))
    H1 = np.kron(hadamard.matrix(K), sylvester(1 << (k - b))) if K > 1 else sylvester(1 << (k - b))
    return H1.astype(np.int8), sylvester(1 << b).astype(np.int8)


def dense_matrix(n: int) -> np.ndarray:
    """Our n-point matrix kron(H_K, H_M) (int8): the transform is ``H @ column``."""
    H1, H2 = kron_factors(n)
    return np.kron(H1, H2)


def torch_kron(x, H1, H2):
    """``vec(H1 @ X @ H2^T)`` for every row (X the row as a (len(H1), len(H2)) matrix): two
    GEMMs; H1, H2 tensors of x's dtype and device."""
    import torch
    y = torch.matmul(H1, x.reshape(-1, H1.shape[0], H2.shape[0]))
    return torch.matmul(y, H2.T).reshape(x.shape)


def torch_dense(x, H):
    """``F.linear(x, H)`` = ``x @ H^T``: the transform of every row by the dense matrix."""
    import torch.nn.functional as F
    return F.linear(x, H)


# --- fast-hadamard-transform -------------------------------------------------------------------

def load_fht():
    """(module, None) when fast_hadamard_transform imports (with its CUDA extension), else
    (None, the reason)."""
    try:
        import fast_hadamard_transform as fht
        from fast_hadamard_transform import fast_hadamard_transform_interface as iface
    except Exception as exc:  # noqa: BLE001 - missing, or an extension that does not load
        msg = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:100]
        return None, f"not importable ({type(exc).__name__}: {msg})"
    return iface if hasattr(iface, "hadamard_transform") else fht, None


def fht_function(mod, n: int):
    """(function, K) of fast-hadamard-transform for rows of ``n``, or (None, reason): the
    power-of-two transform, or the ``K``N function of the largest power-of-two part it takes."""
    K, M = hadamard.split(n)
    if K == 1:
        if n > FHT_MAX:
            return None, f"powers of two up to 2^{FHT_MAX.bit_length() - 1}"
        return mod.hadamard_transform, 1
    for k in sorted(FHT_K):
        if n % k == 0:
            m = n // k
            if m & (m - 1) == 0 and FHT_M[0] <= m <= FHT_M[1] and hasattr(
                    mod, f"hadamard_transform_{k}N"):
                return getattr(mod, f"hadamard_transform_{k}N"), k
    return None, f"no {length_label(n)} ({'/'.join(f'{k}N' for k in FHT_K)}, 4 <= 2^k <= 1024)"


def probe_matrix(fn, K: int, n: int, make_unit) -> np.ndarray | None:
    """The K x K matrix H' with ``fn`` = kron(H', H_M) (M = n / K), read from its response to
    the unit vectors e_{a M}, a < K (``make_unit(K, n, fn)``: ``fn`` of those K rows in FP32, as
    a host array); None when the response does not have that form."""
    M = n // K
    y = np.asarray(make_unit(K, n, fn), dtype=np.float64).reshape(K, K, M)   # (a, i, b)
    Hp = y[:, :, 0].T                                                           # H'[i, a]
    if not np.array_equal(y, np.broadcast_to(Hp.T[:, :, None], y.shape)) or \
            not np.array_equal(np.abs(Hp), np.ones_like(Hp)):
        return None
    return Hp


# --- implementations ---------------------------------------------------------------------------

@dataclasses.dataclass
class Impl:
    """One implementation: ``make(case)`` returns ``call(x) -> y`` (x in ``framework``:
    'xp' - the run's array module - or 'torch') or a string saying why the case is n/a.
    ``matrix(case)``: the K x K matrix its K-point stage applies when not ours (None: ours).
    ``absent``: why it cannot run at all (rows say so)."""
    name: str
    framework: str
    make: Callable
    ours: bool = False
    matrix: Callable | None = None
    absent: str | None = None
    torch_baseline: bool = False


def torch_impls(torch, device: str, dense_max: int = DENSE_MAX, absent: str | None = None) -> list:
    """The pure-PyTorch baselines on ``device``."""
    def butterfly(case):
        K = case.K
        HK = torch.tensor(np.array(hadamard.matrix(K)), device=device).to(
            _torch_dtype(torch, case.dtype)) if K > 1 else None
        return lambda x: torch_butterfly(x, K, HK)

    def kron(case):
        H1, H2 = kron_factors(case.n)
        dt = _torch_dtype(torch, case.dtype)
        h1 = torch.as_tensor(H1, device=device).to(dt)
        h2 = torch.as_tensor(H2, device=device).to(dt)
        return lambda x: torch_kron(x, h1, h2)

    def dense(case):
        if case.n > dense_max:
            return f"n > {dense_max} (H of {case.n}^2 values)"
        H = torch.as_tensor(dense_matrix(case.n), device=device).to(_torch_dtype(torch, case.dtype))
        return lambda x: torch_dense(x, H)

    return [Impl(name, "torch", make, absent=absent, torch_baseline=True)
            for name, make in zip(TORCH_BASELINES, (butterfly, kron, dense))]


def _torch_dtype(torch, name: str):
    return {"fp64": torch.float64, "fp32": torch.float32, "fp16": torch.float16,
            "bf16": torch.bfloat16}[name]


def fht_impl(mod, reason: str | None, to_torch, from_torch, xp) -> Impl:
    """fast-hadamard-transform (``mod`` from :func:`load_fht`; ``reason`` when absent)."""
    name = "fast_hadamard_transform"
    if mod is None:
        return Impl(name, "torch", lambda case: reason, absent=reason)
    probed: dict = {}

    def make(case):
        fn, k = fht_function(mod, case.n)
        return k if fn is None else (lambda x, fn=fn: fn(x, 1.0))

    def unit(K, n, fn):
        e = xp.zeros((K, n), dtype=np.float32)
        e[xp.arange(K), xp.arange(K) * (n // K)] = 1
        y = from_torch(fn(to_torch(e), 1.0))
        return _host(xp, y)

    def matrix(case):
        fn, k = fht_function(mod, case.n)
        if fn is None or k == 1:
            return None
        key = (k, case.n)
        if key not in probed:
            probed[key] = probe_matrix(fn, k, case.n, unit)
        H = probed[key]
        return ("unknown", k) if H is None else (H, k)

    return Impl(name, "torch", make, matrix=matrix)


def _host(xp, a) -> np.ndarray:
    return a.get() if hasattr(a, "get") and xp is not np else np.asarray(a)


def ours_impls(fwht, xp_name: str, torch_ok: bool, tuning=None, torch_absent: str | None = None):
    """fwht_gpu.fwht on the run's arrays and (``torch_ok``) on tensors, as it is and inside
    ``errstate(overflow="ignore")`` (no overflow check; on the GPU no synchronisation per
    call)."""
    def checked(case):
        return lambda x: fwht(x, tuning=tuning)

    def unchecked(case):
        def call(x):
            with errstate(overflow="ignore"):
                return fwht(x, tuning=tuning)
        return call
    absent = None if torch_ok else torch_absent
    return [Impl(f"fwht_gpu.fwht({xp_name})", "xp", checked, ours=True),
            Impl("fwht_gpu.fwht(torch)", "torch", checked, ours=True, absent=absent),
            Impl(f"fwht_gpu.fwht({xp_name}) unchecked", "xp", unchecked, ours=True),
            Impl("fwht_gpu.fwht(torch) unchecked", "torch", unchecked, ours=True, absent=absent)]


# --- the harness -------------------------------------------------------------------------------

@dataclasses.dataclass
class Backend:
    """What :func:`measure_case` needs: ``xp`` (NumPy or CuPy), ``timer(fn, label) -> (median
    ms, calls, host µs per call)`` with ``fn(i)`` one call on input ``i``, ``to_torch`` /
    ``from_torch`` (zero-copy views; None without PyTorch), ``copy_fns(src_list, dst) ->
    {label: fn(i)}`` (the floor: the fastest of them), ``free()`` after each case."""
    xp: object
    timer: Callable
    to_torch: Callable | None = None
    from_torch: Callable | None = None
    copy_fns: Callable | None = None
    free: Callable = lambda: None
    seed: int = 1


def dlpack_views(xp, torch):
    """(to_torch, from_torch): zero-copy views both ways (bfloat16 through int16)."""
    bf16 = _dt.bfloat16

    def to_torch(a):
        if a.dtype == bf16:
            return torch.from_dlpack(a.view(np.int16)).view(torch.bfloat16)
        return torch.from_dlpack(a)

    def from_torch(t):
        if t.dtype == torch.bfloat16:
            return xp.from_dlpack(t.contiguous().view(torch.int16)).view(bf16)
        return xp.from_dlpack(t.contiguous())
    return to_torch, from_torch


def _inputs(xp, case: Case, count: int, seed: int):
    rng = xp.random.default_rng(seed)
    dt = _dt.resolve(case.dtype)
    return [rng.standard_normal((case.batch, case.n), dtype=np.float32).astype(dt)
            for _ in range(count)]


def reference(xp, fwht, x, H=None, K: int = 1):
    """Our transform in FP32 of the rows ``x`` (FP32 copy), with the K x K matrix ``H`` in
    place of ours when given (kron(H, H_M) @ row: our power-of-two transform of each of the K
    blocks, then H across them)."""
    x32 = x.astype(np.float32)
    if H is None:
        return fwht(x32)
    M = x.shape[-1] // K
    y = fwht(x32.reshape(-1, K, M))
    return xp.matmul(xp.asarray(H.astype(np.float32)), y).reshape(x.shape)


def rel_diff(xp, y, ref) -> float:
    """max |y - ref| / max |ref| (in FP32; inf for a non-finite y)."""
    y = y.astype(np.float32)
    top = float(xp.max(xp.abs(ref)))
    d = float(xp.max(xp.abs(y - ref)))
    return d / top if top > 0 else d


def _reason(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {(lines[0] if lines else '')[:100]}"


def measure_case(case: Case, impls, backend: Backend, fwht, check_rows: int = CHECK_ROWS) -> list:
    """One row per implementation of ``case`` (see the module's doc), copy and ratios filled;
    a case that cannot be set up (memory) gives ``"error"`` rows. ``backend.free()`` after."""
    try:
        rows = _measure(case, impls, backend, fwht, check_rows)
    except Exception as exc:  # noqa: BLE001 - inputs or the copy: the case's rows say why
        rows = [{"kind": "peer", "dtype": case.dtype, "batch": case.batch, "n": case.n,
                 "K": case.K, "M": case.M, "length": case.length, "bytes": case.bytes,
                 "impl": i.name, "ours": i.ours, "torch_baseline": i.torch_baseline,
                 "status": "error", "reason": _reason(exc)} for i in impls]
    backend.free()
    return finish_rows(rows)


def _measure(case: Case, impls, backend: Backend, fwht, check_rows: int) -> list:
    xp = backend.xp
    count = max(1, min(16, math.ceil(ROTATE_BYTES / max(1, case.bytes))))
    xs = _inputs(xp, case, count, backend.seed)
    need_torch = backend.to_torch is not None and any(
        i.framework == "torch" and not i.absent for i in impls)
    ts = [backend.to_torch(x) for x in xs] if need_torch else None
    sub = xs[0][:min(case.batch, check_rows)]
    tsub = backend.to_torch(sub) if need_torch else None
    dst = xp.empty_like(xs[0])
    fns = backend.copy_fns(xs, dst) if backend.copy_fns else \
        {"copy": lambda i: xp.copyto(dst, xs[i % count])}
    copies = {label: backend.timer(fn, label)[0] for label, fn in fns.items()}
    t_copy = min(copies.values())
    refs: dict = {}
    base = {"kind": "peer", "dtype": case.dtype, "batch": case.batch, "n": case.n,
            "K": case.K, "M": case.M, "length": case.length, "bytes": case.bytes,
            **{f"{k}_ms": v for k, v in copies.items()}, "copy_ms": t_copy, "tol": case.tol}
    if case.K == 1:
        base["log2n"] = case.n.bit_length() - 1
    rows = []
    for impl in impls:
        row = dict(base, impl=impl.name, ours=impl.ours, torch_baseline=impl.torch_baseline)
        rows.append(row)
        if impl.absent:
            row.update(status="absent", reason=impl.absent)
            continue
        call = impl.make(case)
        if isinstance(call, str):
            row.update(status="n/a", reason=call)
            continue
        inputs, one = (ts, tsub) if impl.framework == "torch" else (xs, sub)
        try:
            t, calls, host_us = backend.timer(lambda i, c=call: c(inputs[i % count]), impl.name)
        except Exception as exc:  # noqa: BLE001 - a peer's failure is a row, not the end
            row.update(status="error", reason=_reason(exc))
            continue
        row.update(status="ok", reason=None, time_ms=t, calls=calls, host_us=host_us,
                   gbps=2 * case.bytes / t / 1e6, ratio_copy=t / t_copy, matrix="ours",
                   rel_diff=None, agree=None)
        try:
            _check(case, impl, call(one), sub, backend, fwht, refs, row)
        except Exception as exc:  # noqa: BLE001
            row["reason"] = f"not checked ({_reason(exc)})"
    return rows


def _check(case, impl, y, sub, backend, fwht, refs: dict, row: dict) -> None:
    """Fill ``rel_diff`` / ``agree`` of ``row``: ``y`` (the implementation's result for the rows
    ``sub``) against our transform in FP32 of ``sub`` (with the implementation's own K x K
    matrix when it is not ours)."""
    xp = backend.xp
    if impl.framework == "torch":
        y = backend.from_torch(y)
    H, k = None, 1
    if impl.matrix is not None and (m := impl.matrix(case)) is not None:
        H, k = m
        if isinstance(H, str):
            row.update(matrix=f"its H_{k}",
                       reason=f"its {k}-point stage is not kron(H'_{k}, H_M): not checked")
            return
        row["matrix"] = f"its H_{k} (probed)"
    key = (k, None if H is None else H.tobytes())
    if key not in refs:
        refs[key] = reference(xp, fwht, sub, H, k)
    d = rel_diff(xp, y, refs[key])
    if not math.isfinite(d):
        row.update(agree=False, reason="non-finite result")
        return
    row.update(rel_diff=d, agree=bool(d <= case.tol))


def finish_rows(rows: list) -> list:
    """Ratios within one case: ``ratio_best_peer`` = time / the fastest timed implementation
    that is not ours (``best_peer`` names it); ``torch_best`` marks the fastest PyTorch
    baseline (the strongest a user writes without a library)."""
    ok = [r for r in rows if r.get("status") == "ok"]
    peers = [r for r in ok if not r["ours"]]
    best = min(peers, key=lambda r: r["time_ms"]) if peers else None
    tb = [r for r in ok if r.get("torch_baseline")]
    tbest = min(tb, key=lambda r: r["time_ms"]) if tb else None
    for r in rows:
        r["best_peer"] = best["impl"] if best else None
        if r.get("status") == "ok":
            r["ratio_best_peer"] = r["time_ms"] / best["time_ms"] if best else None
        if r.get("torch_baseline"):
            r["torch_best"] = r is tbest
    return rows


HEADER = (f"{'peers':5} {'dtype':5} {'rows x length':>16} {'implementation':26} {'time ms':>9} "
          f"{'GB/s':>6} {'x copy':>6} {'x best':>6} {'host us':>7} {'max|d|/max':>10} agree")


def format_row(r: dict) -> str:
    shape = f"{r['batch']}x{r['length']}"
    name = r["impl"] + (" *" if r.get("torch_best") else "")
    head = f"{'peer':5} {r['dtype']:5} {shape:>16} {name:26}"
    if r["status"] != "ok":
        return f"{head} {r['status']}: {r['reason']}"
    rb = "" if r.get("ratio_best_peer") is None else f"{r['ratio_best_peer']:6.2f}"
    d = "" if r.get("rel_diff") is None else f"{r['rel_diff']:10.1e}"
    agree = {True: "yes", False: "NO", None: "-"}[r.get("agree")]
    if r.get("matrix", "ours") != "ours":
        agree += f" ({r['matrix']})"
    return (f"{head} {r['time_ms']:9.4f} {r['gbps']:6.0f} {r['ratio_copy']:6.2f} {rb:>6} "
            f"{r['host_us']:7.1f} {d:>10} {agree}")


def run_cases(case_list, impls, backend: Backend, fwht, echo=print) -> list:
    """:func:`measure_case` of every case, each row echoed."""
    echo(HEADER)
    rows = []
    for case in case_list:
        for r in measure_case(case, impls, backend, fwht):
            rows.append(r)
            echo(format_row(r))
    echo("peer: * the fastest pure-PyTorch baseline of the case; x best: time / the fastest "
         "implementation that is not fwht_gpu; host us: CPU time per call; max|d|/max: against "
         "our transform in FP32 of the same rows")
    return rows


# --- on the GPU --------------------------------------------------------------------------------

def event_timer(cp, target_ms: float = 2.0, budget_s: float = 0.12, min_reps: int = 5,
                max_reps: int = 30, max_k: int = 20, slow_ms: float = 50.0):
    """``timer(fn, label) -> (median ms, calls, host µs)``: CUDA events on the current stream
    around k back-to-back calls ``fn(i)`` (k so that they last >= ``target_ms``), median over
    repetitions (within ``budget_s``, at least ``min_reps``; 3 for calls over ``slow_ms``);
    host µs: the CPU time of one call (enqueueing, and any wait inside the call)."""
    def timer(fn, label=None):
        stream = cp.cuda.get_current_stream()
        fn(0)                                           # compile / plan / allocate
        stream.synchronize()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        fn(1)
        end.record(stream)
        end.synchronize()
        one = max(cp.cuda.get_elapsed_time(start, end), 1e-3)
        if one > slow_ms:
            k, reps = 1, 3
        else:
            fn(2)
            k = int(min(max_k, max(1, math.ceil(target_ms / one))))
            reps = int(min(max_reps, max(min_reps, budget_s * 1e3 / (one * k))))
        times, host = [], []
        i = 3
        for _ in range(reps):
            start.record(stream)
            t0 = time.perf_counter()
            for _ in range(k):
                fn(i)
                i += 1
            t1 = time.perf_counter()
            end.record(stream)
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) / k)
            host.append((t1 - t0) / k * 1e6)
        return statistics.median(times), reps * k, statistics.median(host)
    return timer


def _torch_cuda():
    """(torch, None) when PyTorch with CUDA imports, else (None, the reason)."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        return None, f"PyTorch not importable ({_reason(exc)})"
    if not torch.cuda.is_available():
        return None, f"PyTorch {torch.__version__} without CUDA"
    return torch, None


@contextlib.contextmanager
def shared_stream(cp, torch):
    """One stream current for CuPy and (when given) PyTorch."""
    if torch is None:
        with cp.cuda.Stream(non_blocking=True):
            yield
        return
    ts = torch.cuda.Stream(device=cp.cuda.Device().id)
    with torch.cuda.stream(ts), cp.cuda.ExternalStream(ts.cuda_stream, cp.cuda.Device().id):
        yield


def gpu_impls(cp, torch, torch_reason, fht_mod, fht_reason, tuning=None, plan_for=None,
              dense_max: int = DENSE_MAX) -> list:
    """Every implementation on the GPU (``plan_for(n, dtype, batch)``: our engine's plan)."""
    from .cuda import engine
    from .transform import _cached, fwht
    impls = []
    if plan_for is not None:
        def engine_make(case):
            dt = _dt.resolve(case.dtype)
            plans: dict = {}            # per case: (plan, destination) by input shape

            def call(x):
                key = x.shape
                if key not in plans:
                    plan = (plan_for(case.n, dt, x.shape[0]) if case.K == 1 else   # fwht's own
                            _cached(case.n, dt, "folklore", None, None, "cuda", tuning)._k_plan())
                    plans[key] = (plan, cp.empty_like(x))
                plan, dst = plans[key]
                if case.K == 1:
                    engine.run(plan, x, dst, check=False)
                else:                   # the K * 2**k kernels (fwht_k_rows, or passes + K stage)
                    engine.run_k(plan, case.K, x, dst, 1.0, False, check=False)
                return dst
            return call
        impls.append(Impl("fwht_gpu engine", "xp", engine_make, ours=True))
    impls += ours_impls(fwht, "cupy", torch is not None, tuning, torch_reason)
    to_torch, from_torch = dlpack_views(cp, torch) if torch is not None else (None, None)
    if torch is None:
        impls.append(Impl("fast_hadamard_transform", "torch", lambda c: torch_reason,
                          absent=fht_reason or torch_reason))
    else:
        impls.append(fht_impl(fht_mod, fht_reason, to_torch, from_torch, cp))
    if torch is not None:
        impls += torch_impls(torch, "cuda", dense_max)
    else:
        impls += [Impl(n, "torch", lambda c: torch_reason, absent=torch_reason,
                       torch_baseline=True) for n in TORCH_BASELINES]
    return impls


def bench(cp, dtypes=DTYPES, sizes=SIZES, batch_bytes: int = BATCH_BYTES, echo=print,
          tuning=None, plan_for=None) -> tuple[list, dict, dict]:
    """The peer rows on the current GPU: (rows, versions, settings) - versions of PyTorch and
    fast_hadamard_transform (None when absent), the settings of the peer table."""
    from .transform import fwht
    dtypes = [d for d in (_dt.short_name(_dt.resolve(d)) for d in dtypes) if d in DTYPES]
    torch, torch_reason = _torch_cuda()
    fht_mod, fht_reason = load_fht() if torch is not None else (None, torch_reason)
    versions = {"torch": getattr(torch, "__version__", None) if torch else _torch_version(),
                "fast_hadamard_transform": _fht_version() if fht_mod is not None else None}
    settings = {"peer_dtypes": list(dtypes), "peer_sizes": [int(n) for n in sizes],
                "peer_batch_bytes": int(batch_bytes), "peer_rotate_bytes": ROTATE_BYTES,
                "peer_dense_max": DENSE_MAX, "peer_check_rows": CHECK_ROWS,
                "peer_method": METHOD,
                "peer_absent": {k: v for k, v in (("torch", torch_reason),
                                                   ("fast_hadamard_transform", fht_reason)) if v}}
    if torch is not None:
        settings["torch_matmul_allow_tf32"] = getattr(torch.backends.cuda.matmul, "allow_tf32",
                                                      None)
    echo(f"peers: PyTorch {versions['torch'] or '-'} ({torch_reason or 'CUDA'}), "
         f"fast_hadamard_transform {versions['fast_hadamard_transform'] or '-'}"
         f"{' (' + fht_reason + ')' if fht_reason else ''}")
    if not dtypes:
        echo("peers: none of FP32, FP16, BF16 selected; no peer rows")
        return [], versions, settings
    impls = gpu_impls(cp, torch, torch_reason, fht_mod, fht_reason, tuning, plan_for)
    to_torch, from_torch = dlpack_views(cp, torch) if torch is not None else (None, None)

    def copy_fns(xs, dst):
        count = len(xs)
        return {"memcpy": lambda i: dst.data.copy_from_device_async(xs[i % count].data, dst.nbytes),
                "copy_kernel": lambda i: cp.copyto(dst, xs[i % count])}

    def free():
        cp.get_default_memory_pool().free_all_blocks()
        if torch is not None:
            torch.cuda.empty_cache()

    backend = Backend(cp, event_timer(cp), to_torch, from_torch, copy_fns, free)
    with shared_stream(cp, torch):
        rows = run_cases(cases(dtypes, sizes, batch_bytes), impls, backend,
                         lambda x: fwht(x, tuning=tuning), echo)
        cp.cuda.get_current_stream().synchronize()
    free()
    return rows, versions, settings


def _torch_version():
    from importlib import metadata
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def _fht_version():
    from importlib import metadata
    try:
        import fast_hadamard_transform as fht
        return getattr(fht, "__version__", None) or metadata.version("fast_hadamard_transform")
    except Exception:  # noqa: BLE001
        return None
