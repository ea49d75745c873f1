"""Matrix files: .npy (memory-mapped), .npz (a dense array or a SciPy sparse matrix),
Matrix Market .mtx, and .csv / .tsv / .txt.  The format comes from the extension;
``fmt`` overrides it.  Writes go to a temporary file in the destination directory
that is renamed into place, so a failed write never leaves a partial file."""
from __future__ import annotations

import io as _io
import os
import tempfile
import zipfile

import numpy as np
import scipy.io
import scipy.sparse

FORMATS = ("npy", "npz", "mtx", "csv", "tsv", "txt")
_EXT = {".npy": "npy", ".npz": "npz", ".mtx": "mtx", ".csv": "csv", ".tsv": "tsv", ".txt": "txt"}
_DELIM = {"csv": ",", "tsv": "\t", "txt": None}


class FormatError(ValueError):
    """Unknown or unsupported file format (a usage error: exit code 2 in the CLIs)."""

    usage_error = True


class MatrixFileError(ValueError):
    """A matrix file that is missing, unreadable, corrupt or holds unusable data."""


def format_of(path, fmt: str | None = None) -> str:
    """The file format: ``fmt`` if given, else from the extension."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise FormatError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
        return fmt
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext not in _EXT:
        raise FormatError(f"{path}: cannot tell the format from the extension {ext or '(none)'!r}; "
                          f"name it with one of {', '.join('.' + f for f in FORMATS)}")
    return _EXT[ext]


def read_matrix(path, fmt: str | None = None, *, ndim: int | None = 2, mmap: bool = True):
    """Read a matrix: NumPy array (a read-only memory map for .npy) or SciPy sparse matrix."""
    path = os.fspath(path)
    kind = format_of(path, fmt)
    if not os.path.exists(path):
        raise MatrixFileError(f"{path}: no such file")
    try:
        if kind == "npy":
            M = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        elif kind == "npz":
            M = _read_npz(path)
        elif kind == "mtx":
            M = scipy.io.mmread(path)
            if scipy.sparse.issparse(M):
                M = M.tocsr()
        else:
            M = _read_text(path, _DELIM[kind])
    except MatrixFileError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise MatrixFileError(f"{path}: cannot read it as {kind} ({first})") from exc
    if ndim is not None and M.ndim != ndim:
        raise MatrixFileError(f"{path}: holds a {M.ndim}-d array, a {ndim}-d matrix is needed")
    if np.dtype(M.dtype).kind not in "biuf":
        raise MatrixFileError(f"{path}: holds {M.dtype} data, numbers are needed")
    return M


def _read_npz(path):
    with np.load(path, allow_pickle=False) as z:
        files = set(z.files)
        if {"format", "shape", "data"} <= files:          # scipy.sparse.save_npz
            return scipy.sparse.load_npz(path).tocsr()
        arrays = [k for k in z.files]
        if len(arrays) != 1:
            raise MatrixFileError(f"{path}: an .npz matrix file holds one array or one SciPy "
                                  f"sparse matrix; found {len(arrays)} arrays {sorted(arrays)[:5]}")
        return z[arrays[0]]


def _read_text(path, delimiter):
    with open(path, "r", encoding="utf-8", errors="strict") as f:
        text = f.read()
    rows = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not rows:
        raise MatrixFileError(f"{path}: empty file")
    try:
        M = np.loadtxt(_io.StringIO("\n".join(rows)), delimiter=delimiter, ndmin=2, dtype=np.float64)
    except ValueError as exc:
        raise MatrixFileError(f"{path}: non-numeric or ragged data ({str(exc).splitlines()[0]})") from exc
    return M


def _atomic(path, write) -> None:
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path)) or "."
    suffix = os.path.splitext(path)[1]
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_matrix(path, M, fmt: str | None = None, *, force: bool = False) -> None:
    """Write a dense or sparse matrix atomically; FileExistsError unless ``force``."""
    path = os.fspath(path)
    kind = format_of(path, fmt)
    if os.path.exists(path) and not force:
        raise FileExistsError(f"{path} exists; pass --force to overwrite it")
    if hasattr(M, "get") and not scipy.sparse.issparse(M):
        M = M.get()                                       # CuPy -> host
    if kind == "npy":
        _atomic(path, lambda f: np.save(f, np.asarray(M.toarray() if scipy.sparse.issparse(M) else M)))
    elif kind == "npz":
        if scipy.sparse.issparse(M):
            _atomic(path, lambda f: scipy.sparse.save_npz(f, M.tocsr()))
        else:
            _atomic(path, lambda f: np.savez(f, matrix=np.asarray(M)))
    elif kind == "mtx":
        _atomic(path, lambda f: scipy.io.mmwrite(f, M))
    else:
        dense = np.asarray(M.toarray() if scipy.sparse.issparse(M) else M)
        if dense.ndim == 1:
            dense = dense[None, :]
        delim = _DELIM[kind] or " "
        _atomic(path, lambda f: np.savetxt(f, np.asarray(dense, dtype=np.float64), delimiter=delim,
                                           fmt="%.17g"))
