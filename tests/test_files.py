"""Sketch files (pagh_mm.sketchfile) against an adversarial corpus, and atomic writes
(fwht_gpu.files.atomic_write): modes, fsync, cleanup on errors and on SIGTERM."""
import os
import signal
import stat
import subprocess
import sys
import time
import warnings
import zipfile

import numpy as np
import pytest

from fwht_gpu import matrixio as io
from pagh_mm import hashing, sketchfile
from pagh_mm.sketchfile import LegacyHashWarning

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fields(family="multiply-add-shift", seed=3, d=5, log2b=7, **over):
    f = {"sketch": np.random.default_rng(1).standard_normal((d, 1 << log2b)), "shape": (10, 20),
         "log2b": log2b, "method": "fwht", "dtype": "fp64", "algorithm": "folklore",
         "stabilizer": None, "hash": hashing.HashParams.draw(family, seed, d)}
    f.update(over)
    return f


def arrays_of(path):
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def save_arrays(path, arrays, recompute=True):
    """Write raw arrays as an .npz (the checksum recomputed unless told not to)."""
    arrays = dict(arrays)
    if recompute and "checksum" in arrays:
        arrays["checksum"] = np.array(sketchfile.checksum(arrays))
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def same(a, b):
    return (np.array_equal(a["sketch"], b["sketch"]) and a["hash"] == b["hash"]
            and all(a[k] == b[k] for k in ("shape", "log2b", "method", "dtype", "algorithm",
                                            "stabilizer")))


def one_error(path):
    """read(path) must raise one ValueError whose single line starts with the path."""
    with pytest.raises(ValueError) as info:
        sketchfile.read(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: ") and "\n" not in msg, msg
    return msg


@pytest.fixture
def valid(tmp_path):
    path = tmp_path / "s.npz"
    sketchfile.write(path, fields())
    return path, arrays_of(path)


def test_round_trip_and_layout(valid):
    path, arrays = valid
    got = sketchfile.read(path)
    assert same(got, fields()) and got["format_version"] == 5 and got["stabilizer"] is None
    assert got["decode_reps"] == 0 and got["decode_sketch"] is None
    assert set(arrays) == set(sketchfile.SCHEMA) - {"hash_tables", "hash_coefficients", "diagonal",
                                                    "decode_sketch"}
    assert int(arrays["gram"]) == 0 and got["diagonal"] is None
    assert str(arrays["hash_seed"]) == "3" and arrays["hash_seed"].dtype.kind == "U"
    assert str(arrays["checksum"]) == sketchfile.checksum(arrays)
    assert len(str(arrays["checksum"])) == 64


def test_the_automatic_rules_reason_round_trips_and_version4_files_load(tmp_path, valid):
    """Version 5 keeps why buckets="auto" chose the size ('' when given: None on reading);
    a version-4 file (no 'chosen') loads with None."""
    why = ("auto: one-scan certificate for top-300 at ||AB||_F ~ 2.576e+04 (estimated before "
           "compressing)")
    sketchfile.write(tmp_path / "auto.npz", fields(chosen=why))
    assert sketchfile.read(tmp_path / "auto.npz")["chosen"] == why
    assert sketchfile.read(valid[0])["chosen"] is None
    v4 = {k: v for k, v in valid[1].items() if k != "chosen"}
    v4["format_version"] = np.array(4)
    save_arrays(tmp_path / "v4.npz", v4)
    got = sketchfile.read(tmp_path / "v4.npz")
    assert got["format_version"] == 4 and got["chosen"] is None and same(got, fields())
    with pytest.raises(ValueError, match="not one printable line"):
        sketchfile.write(tmp_path / "bad.npz", fields(chosen="a\nb"))
    assert not (tmp_path / "bad.npz").exists()


@pytest.mark.parametrize("family,seed", [("tabulation", 0), ("multiply-add-shift", 2**64 + 5),
                                         ("tabulation", 10**40)])
def test_round_trip_families_and_huge_seeds(tmp_path, family, seed):
    f = fields(family, seed, d=3, method="fft", dtype="fp32", stabilizer=None)
    sketchfile.write(tmp_path / "s.npz", f)
    got = sketchfile.read(tmp_path / "s.npz")
    assert same(got, f) and got["hash"].seed == seed


def test_version1_files_load_with_identical_contents(tmp_path, valid):
    _, arrays = valid
    v1 = {k: v for k, v in arrays.items()
          if k not in ("checksum", "gram", "decode_reps", "chosen")}
    v1["format_version"] = np.array(1)
    v1["hash_seed"] = np.array(3, np.int64)
    save_arrays(tmp_path / "v1.npz", v1)
    a, b = sketchfile.read(tmp_path / "v1.npz"), sketchfile.read(valid[0])
    assert a["format_version"] == 1 and b["format_version"] == 5 and same(a, b)
    v1["hash_seed"] = np.array(-3, np.int64)                  # negative seeds never were valid
    save_arrays(tmp_path / "neg.npz", v1)
    assert "non-negative" in one_error(tmp_path / "neg.npz")


def test_legacy_family_loads_and_warns_every_time(tmp_path):
    f = fields("multiply-shift", 7)
    path = tmp_path / "old.npz"
    sketchfile.write(path, f)
    for _ in range(2):                   # once per load, not once per call site
        with pytest.warns(LegacyHashWarning) as rec:
            got = sketchfile.read(path)
        assert len(rec) == 1 and same(got, f)
        msg = str(rec[0].message)
        assert msg.startswith(f"{path}: ") and "2-universal" in msg and "re-compress" in msg
        assert "multiply-add-shift" in msg and "\n" not in msg
    assert issubclass(LegacyHashWarning, UserWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sketchfile.write(tmp_path / "new.npz", fields())
        sketchfile.read(tmp_path / "new.npz")              # a current family: no warning


def _drop(name):
    return lambda a: {k: v for k, v in a.items() if k != name}


def _set(name, value):
    return lambda a: {**a, name: np.asarray(value) if not isinstance(value, np.ndarray) else value}


def _sketch_with(value):
    def f(a):
        s = a["sketch"].copy()
        s[2, 5] = value
        return {**a, "sketch": s}
    return f


def _even_a(a):
    h = a["hash_a"].copy()
    h[1, 2] ^= np.uint64(1)
    return {**a, "hash_a": h}


def _other_c(a):
    c = a["hash_c"].copy()
    c[0, 0] ^= np.uint64(1 << 40)
    return {**a, "hash_c": c}


# (id, edit of the arrays, text the one-line error must contain); checksums recomputed, so
# each edit reaches the check that names it.
EDITS = [(f"missing-{n}", _drop(n), f"array '{n}' is missing")
         for n in sketchfile.SCHEMA
         if n not in ("format", "hash_tables", "hash_coefficients", "diagonal",
                      "decode_sketch")] + [
    ("missing-format", _drop("format"), "not a pagh_mm sketch file"),
    ("format-other", _set("format", "numpy.savez"), "not a pagh_mm sketch file"),
    ("newer-version", _set("format_version", 6), "upgrade pagh_mm"),
    ("version-0", _set("format_version", 0), "'format_version' is 0"),
    ("version-text", _set("format_version", "2"), "'format_version' has dtype text"),
    ("sketch-float32", lambda a: {**a, "sketch": a["sketch"].astype(np.float32)},
     "array 'sketch' has dtype float32, expected float64"),
    ("sketch-big-endian", lambda a: {**a, "sketch": a["sketch"].astype(">f8")}, "expected float64"),
    ("sketch-shape", lambda a: {**a, "sketch": a["sketch"][:, :100]},
     "array 'sketch' has shape (5, 100), expected (5, 128) (2**log2b)"),
    ("sketch-1d", lambda a: {**a, "sketch": a["sketch"].ravel()}, "array 'sketch' has shape (640,)"),
    ("sketch-no-reps", lambda a: {**a, "sketch": a["sketch"][:0]}, "d >= 1"),
    ("sketch-nan", _sketch_with(np.nan), "1 NaN or Inf"),
    ("sketch-inf", _sketch_with(-np.inf), "1 NaN or Inf"),
    ("log2b-mismatch", _set("log2b", 8), "expected (5, 256) (2**log2b)"),
    ("log2b-0", _set("log2b", 0), "'log2b' is 0; expected an integer in 1 .. 40"),
    ("log2b-huge", _set("log2b", 10**6), "'log2b' is 1000000"),
    ("log2b-float", _set("log2b", 7.0), "'log2b' has dtype float64, expected an integer"),
    ("log2b-array", _set("log2b", [7]), "'log2b' has shape (1,), expected ()"),
    ("shape-3", _set("shape", np.array([10, 20, 1])), "'shape' has shape (3,), expected (2,)"),
    ("shape-negative", _set("shape", np.array([10, -1])), "'shape' is (10, -1)"),
    ("shape-2**32", _set("shape", np.array([10, 2**32])), "0 .. 4294967295"),
    ("shape-float", _set("shape", np.array([10.0, 20.0])), "'shape' has dtype float64"),
    ("method-unknown", _set("method", "dft"), "'method' is 'dft'; expected one of 'fwht', 'fft'"),
    ("method-bytes", _set("method", np.array(b"fwht")), "'method' has dtype |S4, expected a text"),
    ("dtype-unknown", _set("dtype", "float64"), "'dtype' is 'float64'"),
    ("fft-fp16", lambda a: {**a, "method": np.array("fft"), "dtype": np.array("fp16")},
     "method 'fft' with dtype 'fp16'"),
    ("algorithm-unknown", _set("algorithm", "strassen"), "'algorithm' is 'strassen'"),
    ("stabilizer-unknown", _set("stabilizer", "none"), "'stabilizer' is 'none'"),
    ("stabilizer-alman", lambda a: {**a, "algorithm": np.array("alman"),
                                    "stabilizer": np.array("kahan")},
     "stabilizer 'kahan' with algorithm 'alman'"),
    ("family-unknown", _set("hash_family", "md5"), "'hash_family' is 'md5'"),
    ("family-tabulation-no-tables", _set("hash_family", "tabulation"),
     "array 'hash_tables' is missing (hash_family 'tabulation' needs it)"),
    ("tables-without-tabulation",
     lambda a: {**a, "hash_tables": np.zeros((5, 4, 4, 256), np.uint64)},
     "'hash_tables' is present but hash_family is 'multiply-add-shift'"),
    ("seed-negative-text", _set("hash_seed", "-3"), "'hash_seed' is '-3'"),
    ("seed-not-digits", _set("hash_seed", "3.0"), "non-negative integer"),
    ("seed-int-in-v2", _set("hash_seed", np.array(3, np.int64)), "'hash_seed' has dtype int64"),
    ("seed-other", _set("hash_seed", "4"), "are not the parameters hash_seed 4 gives"),
    ("hash_a-int64", lambda a: {**a, "hash_a": a["hash_a"].astype(np.int64)},
     "'hash_a' has dtype int64, expected uint64"),
    ("hash_a-d-mismatch", lambda a: {**a, "hash_a": a["hash_a"][:4]},
     "'hash_a' has shape (4, 4), expected (5, 4) (d = 5 repetitions, as in 'sketch')"),
    ("hash_c-shape", lambda a: {**a, "hash_c": a["hash_c"][:, :3]}, "'hash_c' has shape (5, 3)"),
    ("hash_a-even", _even_a, "1 even multipliers"),
    ("hash_c-edited", _other_c, "the file was edited"),
    ("extra-array", _set("comment", "hello"), "unknown array 'comment'"),
    ("checksum-in-v1", lambda a: {**a, "format_version": np.array(1)},
     "'checksum' does not belong in format version 1"),
    ("chosen-in-v4", _set("format_version", 4), "'chosen' does not belong in format version 4"),
    ("chosen-int", _set("chosen", 3), "array 'chosen' has dtype int64, expected a text string"),
    ("chosen-two-lines", _set("chosen", "auto: one\ntwo"),
     "array 'chosen' is not one printable line of at most 4096 characters (13 characters)"),
    ("chosen-too-long", _set("chosen", "a" * 4097), "(4097 characters)"),
]


@pytest.mark.parametrize("edit,expect", [e[1:] for e in EDITS], ids=[e[0] for e in EDITS])
def test_each_edit_is_one_error_line(tmp_path, valid, edit, expect):
    path = tmp_path / "bad.npz"
    save_arrays(path, edit(valid[1]))
    assert expect in one_error(path)


def _bits_fields():
    # m = 10: 4 row bits; one decoding repetition
    return fields(decode_reps=1, decode_sketch=np.random.default_rng(2).standard_normal((4, 128)))


DECODE_EDITS = [
    ("missing", _drop("decode_sketch"), "array 'decode_sketch' is missing (decode_reps >= 1"),
    ("shape", lambda a: {**a, "decode_sketch": a["decode_sketch"][:3]},
     "'decode_sketch' has shape (3, 128), expected (4, 128) (decode_reps x 4 row bits; 2**log2b)"),
    ("reps-0", _set("decode_reps", 0), "'decode_sketch' is present but decode_reps is 0"),
    ("reps-above-d", lambda a: {**a, "decode_reps": np.array(6),
                                "decode_sketch": np.zeros((24, 128))},
     "'decode_reps' is 6; expected at most the sketch's 5 repetitions"),
    ("nan", lambda a: {**a, "decode_sketch": np.where(np.arange(128) == 3, np.nan,
                                                      a["decode_sketch"])},
     "'decode_sketch' holds 4 NaN or Inf"),
    ("in-v3", _set("format_version", 3), "'decode_reps' does not belong in format version 3"),
]


@pytest.mark.parametrize("edit,expect", [e[1:] for e in DECODE_EDITS],
                         ids=[e[0] for e in DECODE_EDITS])
def test_bit_sketch_files(tmp_path, edit, expect):
    path = tmp_path / "bits.npz"
    sketchfile.write(path, _bits_fields())
    got = sketchfile.read(path)
    assert got["decode_reps"] == 1 and np.array_equal(got["decode_sketch"],
                                                      _bits_fields()["decode_sketch"])
    save_arrays(tmp_path / "bad.npz", edit(arrays_of(path)))
    assert expect in one_error(tmp_path / "bad.npz")


def test_tabulation_file_without_tables(tmp_path):
    sketchfile.write(tmp_path / "t.npz", fields("tabulation", 1))
    arrays = arrays_of(tmp_path / "t.npz")
    save_arrays(tmp_path / "bad.npz", _drop("hash_tables")(arrays))
    assert "array 'hash_tables' is missing" in one_error(tmp_path / "bad.npz")
    t = arrays["hash_tables"].copy()
    t[0, 0, 0, 0] += np.uint64(1)
    save_arrays(tmp_path / "bad2.npz", {**arrays, "hash_tables": t})
    assert "hash_tables are not the parameters" in one_error(tmp_path / "bad2.npz")


def test_edits_without_a_new_checksum(tmp_path, valid):
    for i, edit in enumerate([_set("method", "fft"), _sketch_with(0.5), _set("hash_seed", "4"),
                              _set("shape", np.array([11, 20])), _set("checksum", "0" * 64)]):
        path = tmp_path / f"e{i}.npz"
        save_arrays(path, edit(valid[1]), recompute=False)
        assert "checksum mismatch: the file is corrupted or was edited" in one_error(path)


def test_bit_flips_anywhere_never_pass_silently(tmp_path, valid):
    data = valid[0].read_bytes()
    want = sketchfile.read(valid[0])
    path = tmp_path / "flip.npz"
    errors = loads = 0
    for off in range(0, len(data), 7):
        for bit in (0, 3, 7):
            b = bytearray(data)
            b[off] ^= 1 << bit
            path.write_bytes(bytes(b))
            try:
                got = sketchfile.read(path)
            except ValueError as exc:
                assert str(exc).startswith(f"{path}: ") and "\n" not in str(exc), str(exc)
                errors += 1
            else:        # a flip in zip metadata nobody reads (timestamps, attributes...)
                assert same(got, want)
                loads += 1
    # (each array's zip entry has fields nobody reads: version 5's 'chosen' took the share of
    # silent loads from below a ninth to 11.5%)
    assert errors > 7 * loads


def test_unreadable_files(tmp_path, valid):
    data = valid[0].read_bytes()
    cases = {"empty.npz": b"", "text.npz": b"hello, world\n"}
    for n in (1, 22, 100, len(data) // 2, len(data) - 1):
        cases[f"trunc{n}.npz"] = data[:n]
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        assert "not a readable .npz sketch" in one_error(tmp_path / name)
    np.save(tmp_path / "array.npy", np.ones(3))
    assert "not a zip archive" in one_error(tmp_path / "array.npy")
    # an object array (pickled data) is refused before anything is unpickled
    arrays = dict(valid[1])
    with open(tmp_path / "obj.npz", "wb") as f:
        np.savez(f, **{**arrays, "method": np.array(["fwht", None], dtype=object)})
    assert "pickled" in one_error(tmp_path / "obj.npz")
    # a member that is not an .npy array, and one stored twice
    with zipfile.ZipFile(tmp_path / "notes.npz", "w") as z:
        z.writestr("format.npy", _npy(np.array(sketchfile.FORMAT)))
        z.writestr("README.txt", "hello")
    assert "'README.txt' is not an array" in one_error(tmp_path / "notes.npz")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # zipfile warns about the duplicate name
        with zipfile.ZipFile(tmp_path / "twice.npz", "w") as z:
            z.writestr("format.npy", _npy(np.array(sketchfile.FORMAT)))
            z.writestr("format.npy", _npy(np.array(sketchfile.FORMAT)))
    assert "stored twice" in one_error(tmp_path / "twice.npz")


def _npy(a, shape=None):
    import io as _io
    buf = _io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.lib.format.dtype_to_descr(a.dtype),
                                               "fortran_order": False,
                                               "shape": a.shape if shape is None else shape})
    buf.write(a.tobytes())
    return buf.getvalue()


def test_huge_claimed_shape_is_refused_before_allocating(tmp_path, valid):
    arrays = valid[1]
    with zipfile.ZipFile(tmp_path / "huge.npz", "w") as z:
        for k, v in arrays.items():
            z.writestr(k + ".npy", _npy(v, (10**12, 128) if k == "sketch" else None))
    msg = one_error(tmp_path / "huge.npz")
    assert "'sketch'" in msg and "claims shape (1000000000000, 128)" in msg


def test_missing_file_and_directory_are_oserrors(tmp_path):
    with pytest.raises(FileNotFoundError):
        sketchfile.read(tmp_path / "nope.npz")
    with pytest.raises(IsADirectoryError):
        sketchfile.read(tmp_path)


@pytest.mark.parametrize("over,expect", [
    ({"sketch": np.zeros((5, 100))}, "expected (5, 128) (2**log2b)"),
    ({"method": "fft", "dtype": "bf16"}, "method 'fft' with dtype 'bf16'"),
    ({"algorithm": "alman", "stabilizer": "neumaier"}, "stabilizer 'neumaier'"),
    ({"dtype": "float64"}, "'dtype' is 'float64'"),
    ({"sketch": np.full((5, 128), np.nan)}, "640 NaN or Inf"),
    ({"shape": (-1, 3)}, "'shape' is (-1, 3)"),
])
def test_write_refuses_what_read_would_refuse(tmp_path, over, expect):
    path = tmp_path / "w.npz"
    with pytest.raises(ValueError) as info:
        sketchfile.write(path, fields(**over))
    assert str(info.value).startswith(f"{path}: cannot write this sketch: ") and expect in str(info.value)
    assert not path.exists() and not list(tmp_path.glob(".tmp-*"))
    with pytest.raises(TypeError):
        sketchfile.write(path, {k: v for k, v in fields().items() if k != "hash"})


def test_write_and_read_accept_round_trip_dicts(tmp_path, valid):
    got = sketchfile.read(valid[0])
    sketchfile.write(tmp_path / "again.npz", got)           # format_version is ignored
    assert arrays_of(tmp_path / "again.npz")["checksum"] == valid[1]["checksum"]


# --- atomic writes ------------------------------------------------------------------


@pytest.fixture
def umask002():
    old = os.umask(0o002)
    yield
    os.umask(old)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_new_files_get_the_umask_mode_and_replaced_files_keep_theirs(tmp_path, umask002):
    M = np.ones((3, 4))
    io.write_matrix(tmp_path / "m.npy", M)
    sketchfile.write(tmp_path / "s.npz", fields())
    io.write_json(tmp_path / "r.json", {"a": 1})
    for name in ("m.npy", "s.npz", "r.json"):
        assert mode(tmp_path / name) == 0o664, name
    os.chmod(tmp_path / "m.npy", 0o640)
    os.chmod(tmp_path / "s.npz", 0o604)
    io.write_matrix(tmp_path / "m.npy", 2 * M, force=True)
    sketchfile.write(tmp_path / "s.npz", fields(seed=4))
    assert mode(tmp_path / "m.npy") == 0o640 and mode(tmp_path / "s.npz") == 0o604
    assert (np.load(tmp_path / "m.npy") == 2).all() and sketchfile.read(tmp_path / "s.npz")["hash"].seed == 4
    assert not list(tmp_path.glob(".tmp-*"))


def test_file_and_directory_are_fsynced(tmp_path, monkeypatch):
    synced = []
    real = os.fsync

    def fsync(fd):
        synced.append(os.path.realpath(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self/fd")
                      else fd)
        real(fd)

    monkeypatch.setattr(io.os, "fsync", fsync)
    io.atomic_write(tmp_path / "f.bin", lambda f: f.write(b"abc"))
    assert len(synced) == 2
    if os.path.exists("/proc/self/fd"):
        assert os.path.basename(synced[0]).startswith(".tmp-") and synced[1] == str(tmp_path.resolve())


def test_failed_write_leaves_nothing_and_keeps_the_old_file(tmp_path):
    (tmp_path / "f.bin").write_bytes(b"old")

    def fail(f):
        f.write(b"x" * 1000)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        io.atomic_write(tmp_path / "f.bin", fail)
    assert (tmp_path / "f.bin").read_bytes() == b"old" and os.listdir(tmp_path) == ["f.bin"]
    with pytest.raises(OSError) as info:
        io.atomic_write(tmp_path / "nodir" / "f.bin", lambda f: None)
    assert str(info.value).startswith(str(tmp_path / "nodir" / "f.bin"))


def test_sigterm_handler_is_restored(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    seen = []
    io.atomic_write(tmp_path / "f.bin", lambda f: seen.append(signal.getsignal(signal.SIGTERM)))
    assert signal.getsignal(signal.SIGTERM) is before
    if before is signal.SIG_DFL:
        assert callable(seen[0]) and seen[0] is not signal.SIG_DFL


SLOW_WRITE = """
from fwht_gpu import matrixio as io
import sys, time
def slow(f):
    f.write(b"x" * (4 << 20))
    f.flush()
    open(sys.argv[2], "w").close()
    time.sleep(60)
io.atomic_write(sys.argv[1], slow)
"""


def run_until_marker(args, marker, cwd, timeout=60):
    """Start a subprocess, wait for ``marker`` to appear, send SIGTERM; its exit status."""
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t0 = time.monotonic()
    while not os.path.exists(marker):
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read().decode()[-2000:])
        assert time.monotonic() - t0 < timeout, "the subprocess never reached the marker"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, err.decode()


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="POSIX signals")
def test_sigterm_during_a_write_removes_the_temporary(tmp_path):
    (tmp_path / "slow.py").write_text(SLOW_WRITE)
    (tmp_path / "out.bin").write_bytes(b"old")
    code, err = run_until_marker([sys.executable, "slow.py", "out.bin", "marker"],
                                 tmp_path / "marker", tmp_path)
    assert code == 143, err
    assert not list(tmp_path.glob(".tmp-*")) and (tmp_path / "out.bin").read_bytes() == b"old"
