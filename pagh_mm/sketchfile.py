"""Sketch files: the ``.npz`` layout of a :class:`~pagh_mm.CompressedProduct`, checked on
every read.

A sketch file is an ``.npz`` archive (uncompressed, no pickles) holding exactly the arrays
of :data:`SCHEMA`.  Version 2 (written now) adds ``checksum``: the SHA-256 hex digest of
every other array in a canonical serialization (:func:`checksum`), and stores the hash
seed as decimal text (seeds may be any non-negative integer).  Version 3 (written now)
adds ``gram`` (1 for a Gram sketch, :func:`pagh_mm.compress_gram`, which then holds its
exact ``diagonal``) and the ``hash_coefficients`` of the polynomial family.  Version 4
(written now) adds ``decode_reps`` and, when it is at least 1, ``decode_sketch``: the bit
sketches of :mod:`pagh_mm.decode` (``decode_reps`` x bit_length(m - 1) rows of b).  Version 5
(written now) adds ``chosen``: how ``buckets="auto"`` chose the sketch's size (the reason
:meth:`pagh_mm.CompressedProduct.describe` shows; '' when the caller gave it).  Files of
versions 1 (no checksum, the seed as int64), 2, 3 and 4 still load.

:func:`read` checks everything it can before anything is used: that the file is a
readable archive whose array headers match their bytes, the format name and version,
that no array is missing or unknown, the checksum, each array's dtype, shape and values,
the rules that tie them together (one repetition count d throughout, b = 2**log2b, the
FFT only in fp64/fp32, stabilizers only with Folklore, tables iff tabulation) and that
the hash parameters are the ones the seed gives.  Any problem is one ``ValueError``
(:class:`SketchFileError`) whose one-line message starts with the file's path.
"""
from __future__ import annotations

import hashlib
import os
import re
import warnings
from typing import Mapping, NamedTuple

import numpy as np

from fwht_gpu.matrixio import atomic_write, read_npz_arrays
from fwht_gpu.variants import ALGORITHMS, STABILIZERS

from . import hashing
from .convolution import METHODS

FORMAT = "pagh_mm.CompressedProduct"
FORMAT_VERSION = 5
#: Longest ``chosen`` text a file may hold (the automatic rule's reasons are a few hundred).
MAX_CHOSEN = 4096
#: The transform dtypes a sketch records, by their short names.
DTYPES = ("fp64", "fp32", "fp16", "bf16")
#: Largest log2(buckets) a file may hold (2**40 buckets: 8 TiB per repetition).
MAX_LOG2B = 40
#: Dtypes the FFT method supports.
FFT_DTYPES = ("fp64", "fp32")


class SketchFileError(ValueError):
    """A sketch file that cannot be used: unreadable, not a sketch, edited or corrupted."""


class LegacyHashWarning(UserWarning):
    """A sketch file made with a hash family that is no longer offered (multiply-shift)."""


# Shown at every load (not once per call site), unless the user filters it.
warnings.filterwarnings("always", category=LegacyHashWarning, append=True)


class Field(NamedTuple):
    """One array of the format: its dtype ("text", "int", "float64", "uint64", or "seed":
    decimal text in version 2, an integer in version 1), its shape (integers, or "d" for
    the number of repetitions and "b" for 2**log2b), its allowed values (a tuple of texts,
    a (lo, hi) integer range, or None) and when it is present."""

    dtype: str
    shape: tuple
    values: tuple | None
    present: str            # "always", "v2"/"v3"/"v4"/"v5" (version >= 2/3/4/5),
                            # "tabulation"/"polynomial" (iff hash_family is), "gram" (iff gram
                            # is 1), "decode" (iff decode_reps >= 1)
    doc: str


#: The format, one array per entry, in the order they are checked.
SCHEMA: dict[str, Field] = {
    "format": Field("text", (), (FORMAT,), "always", "the format's name"),
    "format_version": Field("int", (), (1, FORMAT_VERSION), "always", "1 .. 5"),
    "checksum": Field("text", (), None, "v2", "SHA-256 hex digest of the other arrays"),
    "log2b": Field("int", (), (1, MAX_LOG2B), "always", "log2 of the buckets b"),
    "sketch": Field("float64", ("d", "b"), None, "always", "the d sketches c_t, all finite"),
    "shape": Field("int", (2,), (0, hashing.MAX_KEY - 1), "always", "(m, p) of the product"),
    "method": Field("text", (), METHODS, "always", "fwht (XOR) or fft (cyclic convolution)"),
    "dtype": Field("text", (), DTYPES, "always", "precision of the transforms (fft: fp64, fp32)"),
    "algorithm": Field("text", (), ALGORITHMS, "always", "FWHT algorithm"),
    "stabilizer": Field("text", (), ("",) + tuple(s for s in STABILIZERS if s), "always",
                        "'' or a stabilizer (only with algorithm folklore)"),
    "hash_family": Field("text", (), hashing.ALL_FAMILIES, "always", "hash family"),
    "hash_seed": Field("seed", (), None, "always", "the seed, a non-negative integer"),
    "hash_a": Field("uint64", ("d", 4), None, "always", "multipliers of h1, h2, s1, s2 (odd)"),
    "hash_c": Field("uint64", ("d", 4), None, "always", "increments of h1, h2, s1, s2"),
    "hash_tables": Field("uint64", ("d", 4, 4, 256), None, "tabulation",
                         "tabulation tables (role, byte, value)"),
    "hash_coefficients": Field("uint64", ("d", 4, 4), None, "polynomial",
                               "polynomial coefficients (role, power), below 2**61 - 1"),
    "gram": Field("int", (), (0, 1), "v3", "1: a Gram sketch of X.T @ X (one hash on both sides)"),
    "diagonal": Field("float64", ("m",), None, "gram", "the exact diagonal of a Gram product"),
    "decode_reps": Field("int", (), (0, 1 << 16), "v4",
                         "repetitions with bit sketches (the first ones; 0: none)"),
    "decode_sketch": Field("float64", ("e", "b"), None, "decode",
                           "bit sketches: row t * L + l is repetition t's sketch with the rows "
                           "whose bit l is 0 left out (L = bit_length(m - 1))"),
    "chosen": Field("text", (), None, "v5",
                    "how buckets='auto' chose the size ('' when given), one line of at most "
                    f"{MAX_CHOSEN} characters"),
}
#: When a conditional array is present, and what to say when it is missing.
_WHEN = {"tabulation": "hash_family 'tabulation' needs it",
         "polynomial": "hash_family 'polynomial' needs it", "gram": "gram = 1 needs it",
         "decode": "decode_reps >= 1 needs it"}

_SEED = re.compile(r"[0-9]{1,4300}")        # 4300: Python's limit for int(str)


def checksum(arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 hex digest of every array but ``checksum``: for each name in sorted order,
    the bytes of ``name``, NUL, ``dtype.str``, NUL, the shape as comma-separated decimal
    integers, NUL, then the array's raw bytes in C order."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        if name == "checksum":
            continue
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}\0{a.dtype.str}\0{','.join(map(str, a.shape))}\0".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def settings_problem(method: str, dtype: str, algorithm: str, stabilizer: str | None) -> str | None:
    """What is wrong with this combination of settings (one sentence), or None."""
    if method == "fft" and dtype not in FFT_DTYPES:
        return (f"method 'fft' with dtype '{dtype}': the FFT method supports "
                f"{' and '.join(FFT_DTYPES)} only")
    if stabilizer and algorithm != "folklore":
        return (f"stabilizer '{stabilizer}' with algorithm '{algorithm}': stabilizers apply to "
                "algorithm 'folklore' only")
    return None


def _text(a) -> str:
    return str(a[()])


def _describe_dtype(a) -> str:
    return "text" if a.dtype.kind == "U" else str(a.dtype) if a.dtype.isnative else a.dtype.str


def _check_dtype(name: str, field: Field, a: np.ndarray, version: int) -> str | None:
    kind = field.dtype
    if kind == "seed":
        kind = "text" if version >= 2 else "int"
    ok = {"text": a.dtype.kind == "U", "int": a.dtype.kind in "iu",
          "float64": a.dtype == np.float64, "uint64": a.dtype == np.uint64}[kind]
    if not ok:
        want = {"text": "a text string", "int": "an integer"}.get(kind, kind)
        return f"array '{name}' has dtype {_describe_dtype(a)}, expected {want}"
    return None


def _check_values(name: str, field: Field, a: np.ndarray, version: int) -> str | None:
    if field.dtype == "seed":
        seed = _text(a) if version >= 2 else int(a[()])
        if isinstance(seed, int) and seed < 0 or isinstance(seed, str) and not _SEED.fullmatch(seed):
            return f"array 'hash_seed' is {seed!r}; expected a non-negative integer in decimal digits"
        return None
    if field.values is None:
        return None
    if field.dtype == "text":
        v = _text(a)
        if v not in field.values:
            return (f"array '{name}' is {v!r}; expected "
                    f"{'one of ' if len(field.values) > 1 else ''}{', '.join(map(repr, field.values))}")
        return None
    lo, hi = field.values
    vals = [int(v) for v in np.ravel(a)]
    if any(v < lo or v > hi for v in vals):
        shown = vals[0] if a.ndim == 0 else tuple(vals)
        return f"array '{name}' is {shown}; expected {'integers' if a.ndim else 'an integer'} in {lo} .. {hi}"
    return None


def _problem(arrays: Mapping[str, np.ndarray]) -> str | None:
    """The first thing wrong with a sketch file's arrays (one line), or None.

    (One function on purpose: the checks run in the order a reader of the format meets the
    fields, each returning its own message; split, the order would be spread over helpers.)"""
    if "format" not in arrays:
        return "not a pagh_mm sketch file (it has no 'format' array)"
    fmt = arrays["format"]
    if fmt.dtype.kind != "U" or fmt.shape != () or _text(fmt) != FORMAT:
        return f"not a pagh_mm sketch file (its 'format' is not {FORMAT!r})"
    if "format_version" not in arrays:
        return "array 'format_version' is missing"
    fv = arrays["format_version"]
    if fv.dtype.kind not in "iu" or fv.shape != ():
        return (f"array 'format_version' has dtype {_describe_dtype(fv)} and shape {fv.shape}, "
                "expected an integer ()")
    version = int(fv[()])
    if version > FORMAT_VERSION:
        return (f"sketch format version {version} is newer than this pagh_mm reads "
                f"({FORMAT_VERSION}); upgrade pagh_mm")
    if version < 1:
        return f"array 'format_version' is {version}; expected 1 .. {FORMAT_VERSION}"

    family = arrays.get("hash_family")
    family = _text(family) if family is not None and family.dtype.kind == "U" else None
    tabulation = family == "tabulation"
    g = arrays.get("gram")
    gram = version >= 3 and g is not None and g.shape == () and g.dtype.kind in "iu" and int(g) == 1
    r = arrays.get("decode_reps")
    decoding = version >= 4 and r is not None and r.shape == () and r.dtype.kind in "iu" and \
        int(r) >= 1
    for name, field in SCHEMA.items():
        needed = {"always": True, "v2": version >= 2, "v3": version >= 3, "v4": version >= 4,
                  "v5": version >= 5, "tabulation": tabulation,
                  "polynomial": family == "polynomial", "gram": gram,
                  "decode": decoding}[field.present]
        if needed and name not in arrays:
            why = f" ({_WHEN[field.present]})" if field.present in _WHEN else ""
            return f"array '{name}' is missing{why}"
        if not needed and name in arrays:
            if field.present == "tabulation":
                return (f"array 'hash_tables' is present but hash_family is {family!r}; only "
                        "'tabulation' has tables")
            if field.present == "polynomial":
                return (f"array 'hash_coefficients' is present but hash_family is {family!r}; "
                        "only 'polynomial' has coefficients")
            if field.present == "gram" and version >= 3:
                return "array 'diagonal' is present but gram is 0; only Gram sketches have one"
            if field.present == "decode" and version >= 4:
                return ("array 'decode_sketch' is present but decode_reps is 0; only sketches "
                        "with decoding repetitions have one")
            return f"array '{name}' does not belong in format version {version}"
    for name in sorted(arrays):
        if name not in SCHEMA:
            return f"unknown array {name!r} (not part of sketch format version {version})"

    if version >= 2:
        c = arrays["checksum"]
        if c.dtype.kind != "U" or c.shape != () or _text(c) != checksum(arrays):
            return "checksum mismatch: the file is corrupted or was edited"

    d = None
    for name, field in SCHEMA.items():
        if name not in arrays:
            continue
        a = arrays[name]
        bad = _check_dtype(name, field, a, version)
        if bad:
            return bad
        want, notes = [], []
        for s in field.shape:
            if s == "b":
                want.append(1 << int(arrays["log2b"][()]))
                notes.append("2**log2b")
            elif s == "m":
                want.append(int(arrays["shape"][0]))
                notes.append("m, the product's rows")
            elif s == "e":
                bits = max(1, (int(arrays["shape"][0]) - 1).bit_length())
                want.append(int(arrays["decode_reps"][()]) * bits)
                notes.append(f"decode_reps x {bits} row bits")
            elif s == "d":
                if d is None:
                    if a.ndim != len(field.shape) or a.shape[0] < 1:
                        return (f"array '{name}' has shape {a.shape}, expected "
                                f"{len(field.shape)} dimensions with d >= 1 repetitions first")
                    d = a.shape[0]
                else:
                    notes.append(f"d = {d} repetitions, as in 'sketch'")
                want.append(d)
            else:
                want.append(s)
        if a.shape != tuple(want):
            note = f" ({'; '.join(notes)})" if notes else ""
            return f"array '{name}' has shape {a.shape}, expected {tuple(want)}{note}"
        bad = _check_values(name, field, a, version)
        if bad:
            return bad

    if "chosen" in arrays:
        why = _text(arrays["chosen"])
        if len(why) > MAX_CHOSEN or not why.isprintable():
            return (f"array 'chosen' is not one printable line of at most {MAX_CHOSEN} "
                    f"characters ({len(why)} characters)")
    sketch = arrays["sketch"]
    bad_values = int(sketch.size - np.count_nonzero(np.isfinite(sketch)))
    if bad_values:
        return f"array 'sketch' holds {bad_values} NaN or Inf values"
    if decoding:
        if int(r) > sketch.shape[0]:
            return (f"array 'decode_reps' is {int(r)}; expected at most the sketch's "
                    f"{sketch.shape[0]} repetitions")
        if gram:
            return "decode_reps >= 1 in a Gram sketch; decoding is not available for them"
        bad_values = int(arrays["decode_sketch"].size -
                         np.count_nonzero(np.isfinite(arrays["decode_sketch"])))
        if bad_values:
            return f"array 'decode_sketch' holds {bad_values} NaN or Inf values"
    if gram:
        diag = arrays["diagonal"]
        if not np.isfinite(diag).all():
            return "array 'diagonal' holds NaN or Inf values"
        shape = tuple(int(v) for v in arrays["shape"])
        if shape[0] != shape[1] or _text(arrays["method"]) != "fwht" or \
                family not in hashing.FOUR_INDEPENDENT:
            return (f"gram = 1 needs a square product (shape {shape}), method 'fwht' and a "
                    f"4-independent hash family ({', '.join(hashing.FOUR_INDEPENDENT)}), not "
                    f"{_text(arrays['method'])!r} with {family!r}")
    even = int(np.count_nonzero((arrays["hash_a"] & np.uint64(1)) == 0))
    if even:
        return f"array 'hash_a' holds {even} even multipliers; they must all be odd"
    bad = settings_problem(_text(arrays["method"]), _text(arrays["dtype"]),
                           _text(arrays["algorithm"]), _text(arrays["stabilizer"]) or None)
    if bad:
        return bad
    params = hashing.HashParams.from_arrays(arrays)
    if not params.same_as(hashing.HashParams.draw(params.family, params.seed, params.reps)):
        extra = {"tabulation": ", hash_tables", "polynomial": ", hash_coefficients"}.get(family, "")
        return (f"hash_a, hash_c{extra} are not the parameters "
                f"hash_seed {params.seed} gives for {params.family!r}: the file was edited")
    return None


def _arrays(fields: Mapping) -> dict:
    """The arrays of a version-2 file holding ``fields`` (see :func:`write`)."""
    keys = ("sketch", "shape", "log2b", "method", "dtype", "algorithm", "stabilizer", "hash")
    missing = [k for k in keys if k not in fields]
    extra = [k for k in fields if k not in keys and
             k not in ("format_version", "diagonal", "decode_reps", "decode_sketch", "chosen")]
    if missing or extra:
        raise TypeError(f"sketch fields: missing {missing}, unknown {extra}; expected {list(keys)}")
    params = fields["hash"]
    if not isinstance(params, hashing.HashParams):
        raise TypeError(f"fields['hash'] must be a pagh_mm.hashing.HashParams, got {type(params).__name__}")
    sketch = fields["sketch"]
    if hasattr(sketch, "get") and not isinstance(sketch, np.ndarray):
        sketch = sketch.get()                                     # CuPy -> host
    try:
        shape = np.array([int(v) for v in fields["shape"]], np.int64)
        log2b = np.array(int(fields["log2b"]), np.int64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"sketch fields: shape {fields['shape']!r} and log2b {fields['log2b']!r} "
                         f"must be integers ({exc})") from None
    arrays = {
        "format": np.array(FORMAT), "format_version": np.array(FORMAT_VERSION, np.int64),
        "sketch": np.ascontiguousarray(sketch), "shape": shape, "log2b": log2b,
        "method": np.array(str(fields["method"])), "dtype": np.array(str(fields["dtype"])),
        "algorithm": np.array(str(fields["algorithm"])),
        "stabilizer": np.array(str(fields["stabilizer"] or "")), **params.to_arrays(),
    }
    diagonal = fields.get("diagonal")
    arrays["gram"] = np.array(0 if diagonal is None else 1, np.int64)
    if diagonal is not None:
        if hasattr(diagonal, "get") and not isinstance(diagonal, np.ndarray):
            diagonal = diagonal.get()
        arrays["diagonal"] = np.ascontiguousarray(diagonal, dtype=np.float64)
    bits = fields.get("decode_sketch")
    arrays["decode_reps"] = np.array(int(fields.get("decode_reps") or 0) if bits is not None
                                     else 0, np.int64)
    if bits is not None:
        if hasattr(bits, "get") and not isinstance(bits, np.ndarray):
            bits = bits.get()
        arrays["decode_sketch"] = np.ascontiguousarray(bits, dtype=np.float64)
    arrays["chosen"] = np.array(str(fields.get("chosen") or ""))
    arrays["checksum"] = np.array(checksum(arrays))
    return arrays


def write(path, fields: Mapping) -> None:
    """Write a sketch file (format version 5) atomically, replacing ``path`` if it exists.

    ``fields``: ``sketch`` (d, b) float64 array, ``shape`` (m, p), ``log2b``, ``method``,
    ``dtype`` ('fp64', 'fp32', 'fp16' or 'bf16'), ``algorithm``, ``stabilizer`` (str or
    None), ``hash`` (:class:`pagh_mm.hashing.HashParams`), for a Gram sketch only,
    ``diagonal`` (its exact diagonal), and optionally ``decode_reps`` with
    ``decode_sketch`` (the bit sketches; None or 0 for none), and ``chosen`` (why
    ``buckets="auto"`` chose the size; None or '' when given).  The arrays are checked
    exactly as :func:`read` checks them, so a file that would not load is never written:
    ``ValueError`` (``path: problem``) instead."""
    path = os.fspath(path)
    arrays = _arrays(fields)
    bad = _problem(arrays)
    if bad:
        raise SketchFileError(f"{path}: cannot write this sketch: {bad}")
    atomic_write(path, lambda f: np.savez(f, **arrays))


def read(path) -> dict:
    """Read and check a sketch file (format version 1 .. 5).

    Returns the fields :func:`write` takes (``sketch`` as a float64 NumPy array, ``shape``
    a tuple of ints, ``stabilizer`` None or a name, ``hash`` a HashParams) plus
    ``format_version`` (``chosen`` None where the file holds none, or '').  Raises
    ``ValueError`` (:class:`SketchFileError`) with one line ``path: problem`` for anything
    wrong with the file, OSError when it cannot be opened, and warns
    :class:`LegacyHashWarning` when it uses the multiply-shift family."""
    path = os.fspath(path)
    try:
        arrays = read_npz_arrays(path)
    except ValueError as exc:
        raise SketchFileError(f"{path}: not a readable .npz sketch ({exc})") from None
    bad = _problem(arrays)
    if bad:
        raise SketchFileError(f"{path}: {bad}")
    params = hashing.HashParams.from_arrays(arrays)
    if params.family in hashing.LEGACY_FAMILIES:
        warnings.warn(LegacyHashWarning(
            f"{path}: this sketch uses the hash family {params.family!r}, which is only "
            "2-universal, so for structured indices its error can exceed the stated bound "
            "(variance ||AB||_F^2 / buckets per repetition); re-compress with the default hash "
            f"({hashing.DEFAULT_FAMILY!r})"), stacklevel=2)
    return {
        "sketch": arrays["sketch"], "shape": tuple(int(v) for v in arrays["shape"]),
        "log2b": int(arrays["log2b"][()]), "method": _text(arrays["method"]),
        "dtype": _text(arrays["dtype"]), "algorithm": _text(arrays["algorithm"]),
        "stabilizer": _text(arrays["stabilizer"]) or None, "hash": params,
        "format_version": int(arrays["format_version"][()]),
        "diagonal": arrays["diagonal"] if "diagonal" in arrays else None,
        "decode_reps": int(arrays["decode_reps"][()]) if "decode_reps" in arrays else 0,
        "decode_sketch": arrays.get("decode_sketch"),
        "chosen": _text(arrays["chosen"]) or None if "chosen" in arrays else None,
    }
