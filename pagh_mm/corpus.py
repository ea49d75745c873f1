"""A real co-occurrence matrix from text every machine running pagh_mm has: Python sources.

:func:`cooccurrence` reads the ``.py`` files of the running interpreter's standard library
(``sysconfig.get_paths()["stdlib"]``, without any ``site-packages``/``dist-packages`` inside
it) and of the installed packages pagh_mm itself needs (:data:`PACKAGES`: numpy, scipy,
numba, llvmlite, click, mpmath, with their test suites), cuts each file into documents of
``lines_per_doc`` consecutive lines, and returns the binary documents x terms matrix X
(``X[d, t] = 1.0`` when identifier t occurs in document d) as SciPy CSR, float64, ready for
``pagh_mm.compress_gram(X)`` (term co-occurrence counts ``X.T @ X``)::

    from pagh_mm import corpus
    c = corpus.cooccurrence()          # ~40-70k documents x 16384 terms
    sk = pagh_mm.compress_gram(c.X, k=100)
    top = sk.top_k(100, verify=True, exclude_diagonal=True)
    pairs = [(c.terms[i], c.terms[j]) for i, j in zip(top.rows, top.cols)]

Terms are ASCII identifiers of at least two characters (``[A-Za-z_][A-Za-z0-9_]+``, in code,
strings and comments alike) that are not Python keywords, kept when they occur in at least
``min_df`` documents; the ``max_terms`` with the highest document frequency are kept (ties:
the smaller string first), numbered in that order.  Documents left without a kept term are
dropped.  Files are read in sorted path order as UTF-8 (undecodable bytes replaced), so the
same interpreter, packages and arguments give the same matrix; other versions give a
similar one of their own (its description records what was read).
"""
from __future__ import annotations

import dataclasses
import keyword
import os
import platform
import re
import sysconfig
import time

import numpy as np

#: Directories never entered: other third-party packages, caches.
EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})
#: The installed packages whose sources join the standard library's by default: pagh_mm's
#: own dependencies, so every machine that runs it has them.
PACKAGES = ("numpy", "scipy", "numba", "llvmlite", "click", "mpmath")
#: A term: an ASCII identifier of two or more characters.
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]+")
KEYWORDS = frozenset(keyword.kwlist)


@dataclasses.dataclass(frozen=True)
class Corpus:
    """X: documents x terms, binary float64 CSR; terms[t] names column t; description: how it
    was built (python, roots, files, docs, terms, nnz, build_s and the arguments)."""
    X: object
    terms: list
    description: dict


def stdlib_root() -> str:
    """The running interpreter's standard-library directory."""
    return sysconfig.get_paths()["stdlib"]


def source_files(roots) -> list[str]:
    """The ``.py`` files under ``roots`` (directories or single files), recursively, skipping
    :data:`EXCLUDED_DIRS` and hidden directories; sorted per root, roots in the order given."""
    out = []
    for root in roots:
        root = os.fspath(root)
        if os.path.isfile(root):
            out.append(root)
            continue
        found = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in EXCLUDED_DIRS and not d.startswith(".")]
            found.extend(os.path.join(dirpath, f) for f in filenames if f.endswith(".py"))
        out.extend(sorted(found))
    return out


def _documents(path: str, lines_per_doc: int):
    """The sets of terms of the chunks of ``lines_per_doc`` lines of one file."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return
    for start in range(0, len(lines), lines_per_doc):
        words = set(IDENTIFIER.findall("\n".join(lines[start:start + lines_per_doc])))
        words -= KEYWORDS
        if words:
            yield words


def default_roots() -> list[str]:
    """The standard library and the directories of the installed :data:`PACKAGES`."""
    import importlib.util
    roots = [stdlib_root()]
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            roots.extend(spec.submodule_search_locations)
    return roots


def cooccurrence(max_terms: int = 16384, min_df: int = 2, lines_per_doc: int = 50,
                 roots=None) -> Corpus:
    """The binary documents x terms matrix of the Python sources under ``roots`` (default:
    :func:`default_roots`).  See the module docstring for what a document and a term are."""
    import scipy.sparse as sps
    for name, v, lo in (("max_terms", max_terms, 1), ("min_df", min_df, 1),
                        ("lines_per_doc", lines_per_doc, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{name}={v!r} must be an integer >= {lo}")
    t0 = time.perf_counter()
    roots = default_roots() if roots is None else [os.fspath(r) for r in roots]
    files = source_files(roots)
    docs: list[set] = []
    df: dict[str, int] = {}
    for path in files:
        for words in _documents(path, lines_per_doc):
            docs.append(words)
            for w in words:
                df[w] = df.get(w, 0) + 1
    kept = sorted((w for w, c in df.items() if c >= min_df), key=lambda w: (-df[w], w))
    terms = kept[:max_terms]
    index = {w: i for i, w in enumerate(terms)}
    cols, lengths = [], []
    for words in docs:
        ids = sorted(index[w] for w in words if w in index)
        if ids:
            cols.extend(ids)
            lengths.append(len(ids))
    indptr = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=indptr[1:])
    indices = np.asarray(cols, dtype=np.int32)
    if indptr[-1] < np.iinfo(np.int32).max:
        indptr = indptr.astype(np.int32)
    X = sps.csr_matrix((np.ones(indices.size), indices, indptr), shape=(len(lengths), len(terms)))
    desc = {"python": platform.python_version(), "implementation": platform.python_implementation(),
            "roots": roots, "files": len(files), "docs": int(X.shape[0]), "terms": int(X.shape[1]),
            "nnz": int(X.nnz), "chunks": len(docs), "distinct_identifiers": len(df),
            "max_terms": int(max_terms), "min_df": int(min_df), "lines_per_doc": int(lines_per_doc),
            "build_s": time.perf_counter() - t0}
    return Corpus(X, terms, desc)
