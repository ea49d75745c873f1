"""Matrix files: .npy (memory-mapped), .npz (a dense array or a SciPy sparse matrix),
Matrix Market .mtx, and .csv / .tsv / .txt.  The format comes from the extension;
``fmt`` overrides it.

Every file is written by :func:`atomic_write`: into a hidden temporary file in the
destination directory, flushed to disk and renamed into place, so a failed or
interrupted write (an exception, Ctrl-C, SIGTERM) never leaves a partial file.
Reading an .npz checks each array's header against the bytes stored for it before
anything is allocated (:func:`read_npz_arrays`), and never unpickles."""
from __future__ import annotations

import io as _io
import math
import os
import struct
import tokenize
import zipfile
import zlib

import numpy as np
import numpy.lib.format as _npformat
import scipy.io
import scipy.sparse

from . import memory
from .clitools import first_line
from .files import atomic_write, write_json  # noqa: F401 (the shared writer)

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
    if os.path.isdir(path):
        raise MatrixFileError(f"{path}: is a directory, not a matrix file")
    try:
        if kind == "npy":
            with open(path, "rb") as f:
                _array_header(f, os.path.getsize(path))     # a size the file really holds
            M = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        elif kind == "npz":
            M = _read_npz(path)
        elif kind == "mtx":
            rows, cols, entries, layout = scipy.io.mminfo(path)[:4]
            memory.check(8 * rows * cols if layout == "array" else 24 * entries,
                         f"{path} ({rows} x {cols}, {entries} entries)", "use a smaller matrix")
            M = scipy.io.mmread(path)
            if scipy.sparse.issparse(M):
                M = scipy.sparse.coo_matrix(M)      # O(non-zeros): never an index per empty row
        else:
            M = _read_text(path, _DELIM[kind])
    except MatrixFileError:
        raise
    except _READ_ERRORS as exc:
        raise MatrixFileError(f"{path}: cannot read it as {kind} ({first_line(exc)})") from exc
    if ndim is not None and M.ndim != ndim:
        raise MatrixFileError(f"{path}: holds a {M.ndim}-d array, a {ndim}-d matrix is needed")
    if np.dtype(M.dtype).kind not in "biuf":
        raise MatrixFileError(f"{path}: holds {M.dtype} data, numbers are needed")
    return M


def _read_npz(path):
    headers = read_npz_arrays(path, load=False)
    if {"format", "shape", "data"} <= set(headers):       # scipy.sparse.save_npz
        return scipy.sparse.load_npz(path)          # its stored format: no O(rows) index
    if len(headers) != 1:
        raise MatrixFileError(f"{path}: an .npz matrix file holds one array or one SciPy "
                              f"sparse matrix; found {len(headers)} arrays {sorted(headers)[:5]}")
    return next(iter(read_npz_arrays(path).values()))


#: What reading a damaged file can raise (besides the OSErrors of a missing file).
_READ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError, zlib.error,
                struct.error, NotImplementedError, RuntimeError, UnicodeError, SyntaxError,
                tokenize.TokenError)


def _array_header(fp, size: int) -> tuple[tuple, np.dtype]:
    """Read an .npy header from ``fp`` (``size`` bytes in all); ValueError when it is not
    one, holds Python objects, or claims more bytes than the file holds."""
    start = fp.tell()
    version = _npformat.read_magic(fp)
    read = _npformat.read_array_header_1_0 if version == (1, 0) else _npformat.read_array_header_2_0
    shape, _, dtype = read(fp)
    if dtype.hasobject:
        raise ValueError("it holds Python objects (pickled data), which are never loaded")
    need = math.prod(shape) * dtype.itemsize
    have = size - (fp.tell() - start)
    if need > have:
        raise ValueError(f"its header claims shape {shape} of {dtype} ({need} bytes) but only "
                         f"{have} bytes follow: the file is truncated or corrupted")
    return shape, dtype


def read_npz_arrays(path, *, load: bool = True) -> dict:
    """Every array of an .npz file, by name (``load=False``: (shape, dtype) of each).

    Each array's header is checked against the bytes stored for it before anything is
    allocated; pickled objects are refused.  A missing file raises FileNotFoundError
    (or another OSError); anything else wrong raises ValueError with one line naming the
    problem (not a zip archive, truncated, bad CRC, a member that is not an array...).
    """
    path = os.fspath(path)
    try:
        headers = {}
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if not info.filename.endswith(".npy"):
                    raise ValueError(f"member {info.filename!r} is not an array (.npy)")
                name = info.filename[:-4]
                if name in headers:
                    raise ValueError(f"array {name!r} is stored twice")
                with zf.open(info) as fp:
                    try:
                        headers[name] = _array_header(fp, info.file_size)
                    except ValueError as exc:
                        raise ValueError(f"array {name!r}: {first_line(exc)}") from exc
            if not load:
                return headers
            out = {}
            for name in headers:
                with zf.open(name + ".npy") as fp:
                    out[name] = _npformat.read_array(fp, allow_pickle=False)
            return out
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except zipfile.BadZipFile as exc:
        msg = first_line(exc)
        raise ValueError("not a zip archive" if "not a zip file" in msg else msg) from exc
    except _READ_ERRORS as exc:
        raise ValueError(first_line(exc)) from exc


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


def write_matrix(path, M, fmt: str | None = None, *, force: bool = False) -> None:
    """Write a dense or sparse matrix atomically; FileExistsError unless ``force``."""
    path = os.fspath(path)
    kind = format_of(path, fmt)
    if os.path.exists(path) and not force:
        raise FileExistsError(f"{path} exists; pass --force to overwrite it")
    if hasattr(M, "get") and not scipy.sparse.issparse(M):
        M = M.get()                                       # CuPy -> host
    if kind == "npy":
        atomic_write(path, lambda f: np.save(f, np.asarray(M.toarray() if scipy.sparse.issparse(M) else M)))
    elif kind == "npz":
        if scipy.sparse.issparse(M):
            atomic_write(path, lambda f: scipy.sparse.save_npz(f, M.tocsr()))
        else:
            atomic_write(path, lambda f: np.savez(f, matrix=np.asarray(M)))
    elif kind == "mtx":
        atomic_write(path, lambda f: scipy.io.mmwrite(f, M))
    else:
        dense = np.asarray(M.toarray() if scipy.sparse.issparse(M) else M)
        if dense.ndim == 1:
            dense = dense[None, :]
        delim = _DELIM[kind] or " "
        atomic_write(path, lambda f: np.savetxt(f, np.asarray(dense, dtype=np.float64), delimiter=delim,
                                           fmt="%.17g"))
