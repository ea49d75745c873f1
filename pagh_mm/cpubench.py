"""``pagh-mm bench --device cpu``: our engine against the CPU peers, in one process tree.

Cases (each a block of table rows, one per implementation):

- ``dense``: planted heavy hitters (:func:`pagh_mm.synthetic.planted_product`, FP64, n x n,
  ``planted`` entries of about n * ``dense_magnitude``), the top-``planted`` entries by
  magnitude.  ours-fwht / ours-fft: ``compress(method=..., buckets=b, reps=d)`` then
  ``top_k(planted, verify=True)`` (certified, or the row says not); numpy: ``A @ B`` and a
  top-k of ``|C|``; compmatmul-fwht / -fft (Andersson and Karppa's C++/OpenMP code, when
  ``import compmatmul`` works): ``matmul_fwht``/``matmul_fft`` with the same b, d and hash
  family ("multiply add shift"), which fill a dense m x p estimate, then a top-k of its
  magnitudes.  Run in this process.
- ``sparse``: :func:`pagh_mm.synthetic.sparse_planted` (n x n CSR, ``sparse_per_vector``
  +-1 per column/row, ``planted`` entries of about ``sparse_magnitude``): ours (same b, d),
  SciPy ``A @ B`` + top-k, ``sparse_dot_topn.sp_matmul_topn`` (per-row top-n by value: two
  calls, on A and -A, with top_n = k, merged into the global top-k by magnitude; the global
  top-k is always among them), compmatmul-fwht on densified inputs when memory allows.
- ``scale`` (``scale=(n, ...)``): the sparse case at large n with automatic parameters: ours
  ``compress(A, B, k=k)`` + ``top_k(k, verify=True)`` (the first query may recompress with
  the buckets its certificate asks for: timed), SciPy and sparse_dot_topn as above.
- ``cooccurrence``: the binary documents x terms matrix of the standard library's sources
  (:func:`pagh_mm.corpus.cooccurrence`), the off-diagonal top-k of X.T @ X by value (the
  most co-occurring pairs of identifiers): ours ``compress_gram(X, k=k)`` then
  ``top_k(k, verify=True, exclude_diagonal=True)``; SciPy ``X.T @ X`` + off-diagonal top-k;
  sparse_dot_topn with top_n = k + 1 per row (room for the diagonal).  compmatmul is not run
  (it needs the documents x terms matrix dense).

Timing: wall clock, median of ``repeats`` runs after a warm-up (dense: a full-size run;
sparse and co-occurrence: a run on a small slice of the same inputs, which fills the compile
caches without doubling a minutes-long run), each run from the inputs to the answer
(``sketch_s``: the product or compression; ``topk_s``: the query; input preparation such as
compmatmul's transposed, 64-byte-aligned copies is outside).  Ratios: every row's
``ratios`` holds its total time over every other row's of the case (``sketch_ratios`` the
same for the first stage), ``best_peer`` / ``ratio_best_peer`` the fastest implementation
that is not ours (for a peer: the fastest other peer).

Every row records the 1-minute load average before its runs (``loadavg_1m``): on a machine
whose cores are shared, OpenMP code that spin-waits at barriers (compmatmul) slows down by an
order of magnitude, so :func:`run` sets ``OMP_WAIT_POLICY=PASSIVE`` unless it is set (it is
recorded in ``thread_env``); compare rows measured at a low load.

Memory (sparse and co-occurrence, ``isolate=True``): each implementation runs in its own
child process (``sys.executable``, inputs passed through ``.npz`` files); ``peak_mib`` is the
resident-set peak of a run above the resident set before it (the inputs and compiled code
are already resident): Linux's VmHWM, reset before each run through
``/proc/self/clear_refs``; where that reset is refused, the process peak (``ru_maxrss``)
above the resident set before the runs, an upper bound.  This sees NumPy, SciPy, numba
and C++ allocations alike (tracemalloc would not).  ``result_mib``: the bytes of what the
first stage returns (our sketch, SciPy's product).  Dense cases run in this process:
their memory is not measured.

:func:`run` returns a result record of :mod:`fwht_gpu.provenance` (kind ``pagh-cpu-bench``).
"""
from __future__ import annotations

import gc
import importlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

from fwht_gpu import memory, provenance

from . import synthetic

KIND = "pagh-cpu-bench"
METHOD = ("wall clock, median of repeats after a warm-up (dense: full size; sparse and "
          "co-occurrence: a small slice), inputs to answer; peak memory: VmHWM above the "
          "resident set before the run, one child process per implementation")
#: The hash family compmatmul is asked for (ours: pagh_mm's default multiply-add-shift).
CM_HASH = "multiply add shift"
#: What to do when a peer cannot be imported.
PEER_NOTES = {
    "compmatmul": "compmatmul not importable: build it as in ../shared/peers/compmatmul/BUILD.md "
                  "and put its build folder on PYTHONPATH",
    "sparse_dot_topn": "sparse_dot_topn not importable: pip install 'sparse_dot_topn>=1.0'",
}
THREAD_ENV = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
              "NUMBA_NUM_THREADS", "NUMBA_THREADING_LAYER")
#: 1-minute load average above which the run says the cores are shared.
BUSY_LOAD = 0.5
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- peers ---------------------------------------------------------------------------------------

def _import_peer(name: str):
    """(module, None) or (None, a note saying how to get it)."""
    try:
        mod = importlib.import_module(name)
        if name == "sparse_dot_topn" and not hasattr(mod, "sp_matmul_topn"):
            raise ImportError(f"sparse_dot_topn {getattr(mod, '__version__', '?')} has no "
                              "sp_matmul_topn (needs >= 1.0)")
        return mod, None
    except Exception as exc:  # noqa: BLE001 - a broken build is as good as none
        return None, f"{PEER_NOTES[name]} ({type(exc).__name__}: {str(exc).splitlines()[0][:100]})"


def _threads() -> int:
    try:
        import numba
        return int(numba.get_num_threads())
    except Exception:  # noqa: BLE001
        return os.cpu_count() or 1


def _aligned_empty(shape, alignment=64):
    """An uninitialised C-contiguous float64 array whose data pointer is ``alignment``-aligned."""
    nbytes = int(np.prod(shape)) * 8
    buf = np.empty(nbytes + alignment, np.uint8)
    off = (-buf.ctypes.data) % alignment
    return buf[off:off + nbytes].view(np.float64).reshape(shape)


def _aligned(x, alignment=64):
    """A C-contiguous, aligned float64 copy of ``x`` (``x`` itself when it already is one)."""
    x = np.asarray(x, dtype=np.float64)
    if x.flags.c_contiguous and x.ctypes.data % alignment == 0:
        return x
    out = _aligned_empty(x.shape, alignment)
    out[...] = x
    return out


# --- top-k selections ----------------------------------------------------------------------------

def _select(key, k):
    """Positions of the k largest ``key`` values, ties to the smaller position, in that order."""
    k = min(int(k), key.size)
    if k <= 0:
        return np.zeros(0, np.int64)
    kth = np.partition(key, key.size - k)[key.size - k]
    cand = np.flatnonzero(key >= kth)
    return cand[np.lexsort((cand, -key[cand]))[:k]]


def _dense_topk(C, k):
    """(rows, cols, values) of the k entries of largest magnitude of a dense C."""
    sel = _select(np.abs(C.ravel()), k)
    return sel // C.shape[1], sel % C.shape[1], C.ravel()[sel]


def _csr_topk(C, k, by="abs", offdiag=False):
    """(rows, cols, values) of the k largest stored entries of a CSR C (by magnitude or value,
    optionally leaving the diagonal out); ties to the smaller row-major index."""
    C = C.tocsr()
    C.sort_indices()
    key = np.abs(C.data) if by == "abs" else C.data.astype(np.float64, copy=True)
    if offdiag:
        rows = np.repeat(np.arange(C.shape[0]), np.diff(C.indptr))
        key[rows == C.indices] = -np.inf
    sel = _select(key, k)
    sel = sel[np.isfinite(key[sel])]
    r = np.searchsorted(C.indptr, sel, side="right") - 1
    return r, C.indices[sel].astype(np.int64), C.data[sel]


def _merge_topk(parts, k, by="abs", p=None):
    """Global top-k of several (rows, cols, values) candidate lists (distinct entries)."""
    rows = np.concatenate([x[0] for x in parts]).astype(np.int64)
    cols = np.concatenate([x[1] for x in parts]).astype(np.int64)
    vals = np.concatenate([x[2] for x in parts]).astype(np.float64)
    ids = rows * int(p) + cols
    ids, first = np.unique(ids, return_index=True)
    vals = vals[first]
    key = np.abs(vals) if by == "abs" else vals
    sel = _select(key, k)
    # _select breaks ties by position; positions follow ids (np.unique sorts them)
    return ids[sel] // p, ids[sel] % p, vals[sel]


# --- the implementations: make(inputs, prm) -> (first, second) -----------------------------------

def _answer(rows, cols, values, **extra):
    return {"rows": np.asarray(rows).tolist(), "cols": np.asarray(cols).tolist(),
            "values": np.asarray(values, dtype=np.float64).tolist(), **extra}


def _ours(inputs, prm, method="fwht", gram=False, auto=False):
    import pagh_mm
    info = {}

    def first():
        prof = {}
        if gram:
            sk = pagh_mm.compress_gram(inputs["X"], k=prm["k"], seed=prm["seed"], profile=prof)
        elif auto:
            sk = pagh_mm.compress(inputs["A"], inputs["B"], k=prm["k"], seed=prm["seed"],
                                  profile=prof)
        else:
            sk = pagh_mm.compress(inputs["A"], inputs["B"], buckets=prm["buckets"], reps=prm["reps"],
                                  method=method, seed=prm["seed"], profile=prof)
        info["stages_s"] = prof
        return sk

    def second(sk):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", pagh_mm.CertificateWarning)
            top = sk.top_k(prm["k"], verify=True, exclude_diagonal=gram)
        notes = [str(w.message) for w in caught if issubclass(w.category, pagh_mm.CertificateWarning)]
        return _answer(top.rows, top.cols, top.exact, certified=bool(top.certified),
                       verified=int(top.verified), buckets=sk.buckets, reps=sk.reps,
                       note=notes[0][:200] if notes else None, **info)
    return first, second


def _numpy(inputs, prm):
    A, B = inputs["A"], inputs["B"]
    return (lambda: A @ B), (lambda C: _answer(*_dense_topk(C, prm["k"])))


def _compmatmul(inputs, prm, method="fwht"):
    import compmatmul
    fn = getattr(compmatmul, f"matmul_{method}")
    A, B = inputs["A"], inputs["B"]
    if hasattr(A, "toarray"):                         # sparse inputs: densified (preparation)
        A, B = A.toarray(), B.toarray()
    AT, Bal = _aligned(np.ascontiguousarray(A.T)), _aligned(B)
    d, b, seed = prm["reps"], prm["buckets"], prm["seed"]

    def first():
        C = _aligned_empty((AT.shape[1], Bal.shape[1]))
        fn(C, AT, Bal, d, b, seed=seed, hash=CM_HASH)
        return C
    return first, (lambda C: _answer(*_dense_topk(C, prm["k"]), buckets=b, reps=d))


def _scipy(inputs, prm, gram=False):
    if gram:
        X = inputs["X"]
        return (lambda: X.T @ X), (lambda C: _answer(*_csr_topk(C, prm["k"], "value", True)))
    A, B = inputs["A"], inputs["B"]
    return (lambda: A @ B), (lambda C: _answer(*_csr_topk(C, prm["k"], "abs")))


def _sdt(inputs, prm, gram=False):
    from sparse_dot_topn import sp_matmul_topn
    threads = prm.get("threads") or 1
    kw = {"n_threads": threads} if threads > 1 else {}
    k = prm["k"]
    if gram:
        X = inputs["X"]
        XT = X.T
        return ((lambda: sp_matmul_topn(XT, X, top_n=k + 1, **kw)),
                (lambda C: _answer(*_csr_topk(C, k, "value", True))))
    A, B = inputs["A"], inputs["B"]
    negA = (-A).tocsr()
    p = B.shape[1]

    def first():                    # per-row top-n by value: both signs for the magnitude
        return sp_matmul_topn(A, B, top_n=k, **kw), sp_matmul_topn(negA, B, top_n=k, **kw)

    def second(pair):
        pos = _csr_topk(pair[0], k, "value")
        neg = _csr_topk(pair[1], k, "value")
        return _answer(*_merge_topk([pos, (neg[0], neg[1], -neg[2])], k, "abs", p))
    return first, second


IMPLS = {
    ("dense", "ours-fwht"): lambda i, p: _ours(i, p, "fwht"),
    ("dense", "ours-fft"): lambda i, p: _ours(i, p, "fft"),
    ("dense", "numpy"): _numpy,
    ("dense", "compmatmul-fwht"): lambda i, p: _compmatmul(i, p, "fwht"),
    ("dense", "compmatmul-fft"): lambda i, p: _compmatmul(i, p, "fft"),
    ("sparse", "ours-fwht"): lambda i, p: _ours(i, p, "fwht"),
    ("sparse", "scipy"): _scipy,
    ("sparse", "sparse_dot_topn"): _sdt,
    ("sparse", "compmatmul-fwht"): lambda i, p: _compmatmul(i, p, "fwht"),
    ("scale", "ours-auto"): lambda i, p: _ours(i, p, auto=True),
    ("scale", "scipy"): _scipy,
    ("scale", "sparse_dot_topn"): _sdt,
    ("cooccurrence", "ours"): lambda i, p: _ours(i, p, gram=True),
    ("cooccurrence", "scipy"): lambda i, p: _scipy(i, p, gram=True),
    ("cooccurrence", "sparse_dot_topn"): lambda i, p: _sdt(i, p, gram=True),
}


# --- measuring -----------------------------------------------------------------------------------

def status_kib(field: str) -> int | None:
    """A field of /proc/self/status in KiB (``VmRSS``, ``VmHWM``), None where there is none."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak() -> bool:
    """Reset VmHWM to the current resident set (Linux >= 4.0); False where refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return status_kib("VmHWM") is not None
    except OSError:
        return False


def _nbytes(obj) -> int | None:
    if isinstance(obj, tuple):
        parts = [_nbytes(o) for o in obj]
        return None if None in parts else sum(parts)
    if hasattr(obj, "sketch"):                       # CompressedProduct
        return int(obj.sketch.nbytes)
    if hasattr(obj, "indptr"):                       # SciPy compressed sparse
        return int(obj.data.nbytes + obj.indices.nbytes + obj.indptr.nbytes)
    return int(obj.nbytes) if hasattr(obj, "nbytes") else None


def _tiny(case: str, inputs: dict) -> dict:
    """A small slice of the inputs with the same types (compile caches, FFTW plans)."""
    if case == "cooccurrence":
        X = inputs["X"]
        return {"X": X[:min(X.shape[0], 512), :min(X.shape[1], 128)].tocsr()}
    A, B = inputs["A"], inputs["B"]
    m, q, p = min(A.shape[0], 256), min(A.shape[1], 256), min(B.shape[1], 256)
    A, B = A[:m, :q], B[:q, :p]
    if hasattr(A, "tocsr"):
        return {"A": A.tocsr(), "B": B.tocsr()}
    return {"A": np.ascontiguousarray(A), "B": np.ascontiguousarray(B)}


def measure(case: str, impl: str, inputs: dict, prm: dict, repeats: int, warmup: str = "full",
            track_memory: bool = False) -> dict:
    """Time implementation ``impl`` of ``case`` (see :data:`IMPLS`) on ``inputs``: ``warmup``
    ("full": one run on the inputs, "small": one on :func:`_tiny` of them), then ``repeats``
    runs; the medians, the last answer, and (``track_memory``) the resident-set peaks."""
    make = IMPLS[case, impl]
    if warmup == "small":
        tp = dict(prm, k=min(prm["k"], 16))
        f, s = make(_tiny(case, inputs), tp)
        s(f())
        f = s = None
    rss_in = status_kib("VmRSS")
    first, second = make(inputs, prm)
    prep = status_kib("VmRSS")
    if warmup == "full":
        second(first())
    t1, t2, tot, peaks = [], [], [], []
    ans = size = None
    load = _load()
    mem_method = None
    for _ in range(max(1, int(repeats))):
        ans = None
        gc.collect()
        if track_memory:
            base = status_kib("VmRSS")
            reset = reset_peak()
            mem_method = "VmHWM reset" if reset else "ru_maxrss (upper bound)"
        a = time.perf_counter()
        mid = first()
        b = time.perf_counter()
        ans = second(mid)
        c = time.perf_counter()
        if track_memory:
            peak = status_kib("VmHWM") if reset else \
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            if peak is not None and base is not None:
                peaks.append(max(0, peak - base) * 1024)
        size = _nbytes(mid)
        mid = None
        t1.append(b - a)
        t2.append(c - b)
        tot.append(c - a)
    out = dict(ans)
    out.update(sketch_s=statistics.median(t1), topk_s=statistics.median(t2),
               total_s=statistics.median(tot), runs_s=tot, loadavg_1m=load, result_mib=_mib(size),
               peak_mib=_mib(max(peaks)) if peaks else None, memory_method=mem_method,
               prep_mib=_mib((prep - rss_in) * 1024) if None not in (prep, rss_in) else None)
    return out


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def _mib(nbytes):
    return None if nbytes is None else nbytes / 2**20


def _child() -> None:
    """Entry point of a child process: ``spec.json`` in argv[1] -> its ``out`` file."""
    import scipy.sparse as sps
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    inputs = {name: sps.load_npz(path).tocsr() for name, path in spec["inputs"].items()}
    res = measure(spec["case"], spec["impl"], inputs, spec["prm"], spec["repeats"],
                  warmup="small", track_memory=True)
    with open(spec["out"], "w") as f:
        json.dump(res, f)


def isolated(case, impl, paths, prm, repeats, tmp) -> dict:
    """:func:`measure` in a child process (its own memory peak); errors as {"error": ...}."""
    spec_path = os.path.join(tmp, f"{case}-{impl}.json")
    out = os.path.join(tmp, f"{case}-{impl}.out.json")
    with open(spec_path, "w") as f:
        json.dump({"case": case, "impl": impl, "inputs": paths, "prm": prm, "repeats": repeats,
                   "out": out}, f)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([_ROOT] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    r = subprocess.run([sys.executable, "-c", "from pagh_mm.cpubench import _child; _child()",
                        spec_path], env=env, capture_output=True, text=True, check=False)
    if r.returncode != 0 or not os.path.exists(out):
        tail = [ln for ln in (r.stderr or "").strip().splitlines() if ln.strip()]
        return {"error": f"child exited {r.returncode}: {tail[-1][:200] if tail else 'no output'}"}
    with open(out) as f:
        return json.load(f)


# --- cases ---------------------------------------------------------------------------------------

def _row(case, size, impl, res, **extra) -> dict:
    row = {"case": case, "size": size, "impl": impl, **extra}
    if "error" in res:
        row.update(skipped=True, note=res["error"])
        return row
    keep = ("sketch_s", "topk_s", "total_s", "runs_s", "certified", "verified", "buckets", "reps",
            "peak_mib", "result_mib", "prep_mib", "memory_method", "stages_s", "loadavg_1m")
    row.update({k: res[k] for k in keep if res.get(k) is not None})
    row["skipped"] = False
    if res.get("note"):
        row["note"] = res["note"]
    return row


def _skip(case, size, impl, note, **extra) -> dict:
    return {"case": case, "size": size, "impl": impl, "skipped": True, "note": note, **extra}


def _ratios(rows: list) -> None:
    """ratios / sketch_ratios / best_peer / ratio_best_peer of every measured row of a case."""
    done = [r for r in rows if not r.get("skipped")]
    for r in done:
        others = [o for o in done if o is not r]
        r["ratios"] = {o["impl"]: r["total_s"] / o["total_s"] for o in others if o["total_s"] > 0}
        r["sketch_ratios"] = {o["impl"]: r["sketch_s"] / o["sketch_s"] for o in others
                              if o["sketch_s"] > 0}
        peers = [o for o in others if not o["impl"].startswith("ours")]
        if peers:
            best = min(peers, key=lambda o: o["total_s"])
            r["best_peer"] = best["impl"]
            r["ratio_best_peer"] = r["total_s"] / best["total_s"] if best["total_s"] > 0 else None


HEADER = (f"{'case':<12} {'size':>11} {'impl':<16} {'first s':>9} {'top-k s':>9} {'total s':>9} "
          f"{'recall':>6} {'cert':>4} {'peak MiB':>9} {'vs cm':>6} {'/best peer':>10}  best peer")


def _fmt(v, fmt: str, width: int) -> str:
    return format(v, fmt) if isinstance(v, (int, float)) else "-".rjust(width)


def _echo_rows(rows, echo) -> None:
    """Table rows; ``vs cm``: our first stage over compmatmul's with the same method."""
    for r in rows:
        head = f"{r['case']:<12} {r['size']!s:>11} {r['impl']:<16}"
        if r.get("skipped"):
            echo(f"{head} skipped: {r.get('note')}")
            continue
        cert = "-" if "certified" not in r else ("yes" if r["certified"] else "NO")
        method = "fft" if r["impl"].endswith("fft") else "fwht"
        vs_cm = r.get("sketch_ratios", {}).get(f"compmatmul-{method}") \
            if r["impl"].startswith("ours") else None
        echo(f"{head} {_fmt(r['sketch_s'], '9.4f', 9)} {_fmt(r['topk_s'], '9.4f', 9)} "
             f"{_fmt(r['total_s'], '9.4f', 9)} {_fmt(r.get('recall'), '6.3f', 6)} {cert:>4} "
             f"{_fmt(r.get('peak_mib'), '9.1f', 9)} {_fmt(vs_cm, '6.2f', 6)} "
             f"{_fmt(r.get('ratio_best_peer'), '10.3f', 10)}  {r.get('best_peer', '')}")
        if r.get("stages_s"):
            echo(" " * 13 + "stages: " + ", ".join(f"{k} {v:.4f} s" for k, v in r["stages_s"].items()))
        if r.get("note"):
            echo(" " * 13 + "note: " + r["note"])


def _dense_case(n, prm, planted, magnitude, repeats, peers, echo) -> list:
    data = synthetic.planted_product(n, planted, magnitude=magnitude, seed=n)
    inputs = {"A": data.A, "B": data.B}
    size, rows = f"n={n}", []
    impls = ["ours-fwht", "ours-fft", "numpy", "compmatmul-fwht", "compmatmul-fft"]
    for impl in impls:
        if impl.startswith("compmatmul") and peers["compmatmul"]:
            rows.append(_skip("dense", size, impl, peers["compmatmul"]))
            continue
        try:
            res = measure("dense", impl, inputs, prm, repeats, warmup="full")
        except Exception as exc:  # noqa: BLE001 - a failing peer is a row, not a failure
            res = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
        row = _row("dense", size, impl, res, shape=[n, n, n], planted=planted,
                   magnitude=data.magnitude)
        if "rows" in res:
            row["recall"] = synthetic.recall(data.rows, data.cols, res["rows"], res["cols"])
        rows.append(row)
        gc.collect()
    return rows


def save_input(tmp, name, M) -> str:
    """Save the matrix ``M`` as ``tmp/name.npz`` (SciPy CSR) for :func:`isolated`; its path."""
    import scipy.sparse as sps
    path = os.path.join(tmp, name + ".npz")
    sps.save_npz(path, M.tocsr(), compressed=False)
    return path


def _child_case(case, impls, inputs, prm, repeats, isolate, tmp, peers, skip) -> dict:
    """{impl: measure result or {"error"}} for the implementations of a sparse case."""
    paths = {k: save_input(tmp, f"{case}-{k}", v) for k, v in inputs.items()} if isolate else None
    out = {}
    for impl in impls:
        if impl in skip:
            out[impl] = {"skip": skip[impl]}
            continue
        peer = impl.split("-")[0]
        if peers.get(peer):
            out[impl] = {"skip": peers[peer]}
            continue
        if isolate:
            out[impl] = isolated(case, impl, paths, prm, repeats, tmp)
        else:
            try:
                out[impl] = measure(case, impl, inputs, prm, repeats, warmup="small")
                out[impl]["note"] = "; ".join(x for x in (out[impl].get("note"),
                                                          "in-process: memory not measured") if x)
            except Exception as exc:  # noqa: BLE001
                out[impl] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
        gc.collect()
    return out


def _sparse_case(n, per_vector, planted, magnitude, prm, repeats, isolate, tmp, peers,
                 echo) -> list:
    data = synthetic.sparse_planted(n, per_vector, planted, min(magnitude, n), seed=n)
    size = f"n={n}"
    need = 5 * n * n * 8
    have = memory.available("cpu")
    skip = {}
    if have is not None and need > 0.7 * have:
        skip["compmatmul-fwht"] = (f"densified inputs need {need / 2**30:.1f} GiB, "
                                   f"{have / 2**30:.1f} GiB available")
    impls = ["ours-fwht", "scipy", "sparse_dot_topn", "compmatmul-fwht"]
    res = _child_case("sparse", impls, {"A": data.A, "B": data.B}, prm, repeats, isolate, tmp,
                      peers, skip)
    return _planted_rows("sparse", size, impls, res, data, planted, n)


#: What each sparse implementation's row answers, where that needs saying.
ANSWERS = {
    "sparse_dot_topn": "per-row top-n by value (two calls: A and -A), merged to a global top-k",
    "compmatmul-fwht": "densified inputs (densifying not timed)",
    "ours-auto": ("compress(A, B, k=k) + top_k(k, verify=True): automatic buckets, grown by the "
                  "first query when the certificate asks (timed)"),
}


def _planted_rows(case, size, impls, res, data, planted, n) -> list:
    """Table rows of a sparse planted case's results (recall against the planted entries)."""
    rows = []
    for impl in impls:
        r = res[impl]
        if "skip" in r:
            rows.append(_skip(case, size, impl, r["skip"]))
            continue
        row = _row(case, size, impl, r, shape=[n, n, n], planted=planted,
                   magnitude=data.magnitude, nnz=[int(data.A.nnz), int(data.B.nnz)])
        if "rows" in r:
            row["recall"] = synthetic.recall(data.rows, data.cols, r["rows"], r["cols"])
        if impl in ANSWERS:
            row["answer"] = ANSWERS[impl]
        rows.append(row)
    return rows


def _exact_pairs(XT, rows, cols):
    """C[i, j] = X[:, i] . X[:, j] for the pairs (rows, cols), from XT = X.T in CSR."""
    if len(rows) == 0:
        return np.zeros(0)
    return np.asarray(XT[np.asarray(rows)].multiply(XT[np.asarray(cols)]).sum(axis=1)).ravel()


def _cooc_case(corp, prm, repeats, isolate, tmp, peers, echo) -> list:
    X = corp.X
    k = prm["k"]
    size = f"{X.shape[0]}x{X.shape[1]}"
    impls = ["ours", "scipy", "sparse_dot_topn"]
    res = _child_case("cooccurrence", impls, {"X": X}, prm, repeats, isolate, tmp, peers, {})
    truth = res.get("scipy", {})
    XT = X.T.tocsr()
    rows = []
    if "rows" in truth:
        t_ids = set(zip(truth["rows"], truth["cols"]))
        vk = min(truth["values"]) if truth["values"] else 0.0
        n_tie_truth = sum(v == vk for v in truth["values"])
    for impl in impls:
        r = res[impl]
        if "skip" in r:
            rows.append(_skip("cooccurrence", size, impl, r["skip"]))
            continue
        row = _row("cooccurrence", size, impl, r, shape=[X.shape[1], X.shape[0], X.shape[1]],
                   nnz=int(X.nnz), k=k)
        if "rows" in r and "rows" in truth:
            got = {(i, j): v for i, j, v in zip(r["rows"], r["cols"], r["values"]) if i != j}
            exact = _exact_pairs(XT, [p[0] for p in got], [p[1] for p in got])
            above = int(np.sum(exact > vk))
            ties = int(np.sum(exact == vk))
            row["recall"] = (above + min(ties, n_tie_truth)) / max(1, len(truth["values"]))
            row["same_set"] = set(got) == t_ids
            row["values_exact"] = bool(np.array_equal(exact, np.fromiter(got.values(), float,
                                                                         len(got))))
        if impl == "sparse_dot_topn":
            row["answer"] = f"per-row top-{k + 1} by value, then the global off-diagonal top-{k}"
        rows.append(row)
    return rows


def _peer_versions(peers_mods) -> dict:
    out = {}
    cm = peers_mods.get("compmatmul")
    out["compmatmul"] = getattr(cm, "__file__", None) if cm else None
    sdt = peers_mods.get("sparse_dot_topn")
    out["sparse_dot_topn"] = getattr(sdt, "__version__", "unknown") if sdt else None
    return out


def _scale_case(n, per_vector, planted, magnitude, prm, repeats, isolate, tmp, peers,
                echo) -> list:
    """A large sparse planted product with automatic parameters (the buckets a certified
    top-k needs, grown by the first query when they are too few: the time includes it)
    against SciPy's exact product and sparse_dot_topn."""
    data = synthetic.sparse_planted(n, per_vector, planted, min(magnitude, n), seed=n)
    size = f"n={n}, {per_vector}/vector"
    impls = ["ours-auto", "scipy", "sparse_dot_topn"]
    res = _child_case("scale", impls, {"A": data.A, "B": data.B}, prm, repeats, isolate, tmp,
                      peers, {})
    return _planted_rows("scale", size, impls, res, data, planted, n)


def run(sizes=(1024, 4096), planted=100, reps=5, buckets=16384, corpus_terms=16384, echo=print,
        repeats=3, *, scale=(), dense_magnitude=0.25, sparse_n=8192, sparse_per_vector=16,
        sparse_magnitude=256, k=100, corpus_min_df=2, corpus_lines=50, corpus_roots=None,
        corpus_repeats=None, cases=("dense", "sparse", "cooccurrence"), isolate=True, seed=1,
        command: str | None = None) -> dict:
    """The CPU benchmark (see the module docstring); returns its provenance record.

    ``sizes``: the dense n; ``planted``: heavy entries planted (and the k of the top-k) in the
    dense and sparse cases, dense magnitude ``dense_magnitude`` * n; ``buckets``/``reps``: b
    and d of every sketch but the co-occurrence one (sized by ``compress_gram(X, k=k)``);
    ``corpus_*``: :func:`pagh_mm.corpus.cooccurrence`'s max_terms, min_df, lines_per_doc and
    roots; ``corpus_repeats``: timed runs of that case (default: ``repeats``);
    ``cases``: which to run; ``isolate``: sparse and co-occurrence implementations in child
    processes (peak memory measured), else in this one; ``scale``: sizes n of large sparse
    planted products (``sparse_per_vector`` per vector) compressed with automatic
    parameters, after the other cases."""
    cases = tuple(cases)
    corpus_repeats = repeats if corpus_repeats is None else corpus_repeats
    unknown = set(cases) - {"dense", "sparse", "cooccurrence"}
    if unknown:
        raise ValueError(f"cases={cases!r}: choose from 'dense', 'sparse', 'cooccurrence'")
    # OpenMP threads that spin at barriers lose their cores to any other process on a small
    # machine (compmatmul's FWHT: 5.5-6.3 s against 0.35-0.43 s at n = 1024 on 2 cores):
    # passive waiting unless the caller chose otherwise.  libgomp reads it once, when it starts
    # (numba's OpenMP threading layer shares it with compmatmul), so before anything else.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    threads = _threads()
    mods, peers = {}, {}
    for name in ("compmatmul", "sparse_dot_topn"):
        mods[name], peers[name] = _import_peer(name)
    env = {v: os.environ.get(v) for v in THREAD_ENV}
    echo(f"CPU: {provenance.cpu_model()}, {os.cpu_count()} cores; numba threads {threads}; "
         + ", ".join(f"{k}={v}" for k, v in env.items() if v is not None))
    if mods["compmatmul"] and not env["OMP_NUM_THREADS"]:
        echo("note: OMP_NUM_THREADS is not set; compmatmul (OpenMP) and OpenBLAS may oversubscribe "
             "the cores: set OMP_NUM_THREADS and OPENBLAS_NUM_THREADS to the core count")
    for name, note in peers.items():
        if note:
            echo("note: " + note)
    load0 = _load()
    if load0 is not None and load0 > BUSY_LOAD:
        echo(f"note: load average {load0:.2f} before the run: other processes share the cores, "
             "times are not clean (OpenMP peers suffer most: spinning threads lose their cores)")
    prm = {"k": planted, "buckets": buckets, "reps": reps, "seed": seed, "threads": threads}
    echo(f"b = {buckets}, d = {reps}, top-{planted} (dense, sparse), top-{k} off-diagonal "
         f"(co-occurrence); median of {repeats} runs")
    echo("first s: the compression or product; top-k s: the query; vs cm: our first stage over "
         "compmatmul's (same method); /best peer: total over the fastest peer's total")
    echo(HEADER)
    rows, corpus_desc = [], None
    with tempfile.TemporaryDirectory(prefix="pagh-cpubench-") as tmp:
        if "dense" in cases:
            for n in sizes:
                if planted > n:
                    raise ValueError(f"planted={planted} must be <= every size (got n={n})")
                block = _dense_case(n, prm, planted, dense_magnitude * n, repeats, peers, echo)
                _ratios(block)
                _echo_rows(block, echo)
                rows += block
        if "sparse" in cases:
            block = _sparse_case(sparse_n, sparse_per_vector, min(planted, sparse_n),
                                 sparse_magnitude, dict(prm, k=min(planted, sparse_n)), repeats,
                                 isolate, tmp, peers, echo)
            _ratios(block)
            _echo_rows(block, echo)
            rows += block
        for n in scale:
            block = _scale_case(n, sparse_per_vector, min(planted, n), sparse_magnitude,
                                dict(prm, k=min(planted, n)), repeats, isolate, tmp, peers, echo)
            _ratios(block)
            _echo_rows(block, echo)
            rows += block
        if "cooccurrence" in cases:
            from . import corpus
            corp = corpus.cooccurrence(max_terms=corpus_terms, min_df=corpus_min_df,
                                       lines_per_doc=corpus_lines, roots=corpus_roots)
            corpus_desc = corp.description
            echo(f"corpus: {corpus_desc['files']} files, {corpus_desc['docs']} documents x "
                 f"{corpus_desc['terms']} terms, nnz {corpus_desc['nnz']}, built in "
                 f"{corpus_desc['build_s']:.1f} s")
            block = _cooc_case(corp, dict(prm, k=k), corpus_repeats, isolate, tmp, peers, echo)
            _ratios(block)
            _echo_rows(block, echo)
            rows += block
    settings = {"sizes": list(sizes), "planted": planted, "dense_magnitude": dense_magnitude,
                "buckets": buckets, "reps": reps, "seed": seed, "repeats": repeats, "k": k,
                "sparse": {"n": sparse_n, "per_vector": sparse_per_vector,
                           "magnitude": sparse_magnitude}, "scale": list(scale),
                "corpus": corpus_desc, "corpus_repeats": corpus_repeats, "cases": list(cases),
                "isolate": isolate, "compmatmul_hash": CM_HASH, "loadavg_1m": [load0, _load()],
                "numba_threads": threads,
                "thread_env": env, "peers": _peer_versions(mods), "device": "cpu",
                "method": METHOD}
    notes = "; ".join(n for n in peers.values() if n) or None
    return provenance.record(KIND, rows, settings, command, device="cpu", notes=notes)


def main(out_json=None, **kw) -> dict:
    """:func:`run` with keyword arguments ``kw``; writes the record to ``out_json`` when given."""
    res = run(**kw)
    if out_json:
        provenance.write(res, out_json)
    return res
