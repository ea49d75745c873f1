"""Both command lines end to end on real files in a temporary directory."""
import json
import os
import stat
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sps
from click.testing import CliRunner

from fwht_gpu.cli import main as fwht_main
from fwht_gpu import matrixio as io
import pagh_mm
from pagh_mm.cli import main as pagh_main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    A = (rng.integers(-3, 4, (60, 40)) * (rng.random((60, 40)) < 0.05)).astype(float)
    B = (rng.integers(-3, 4, (40, 50)) * (rng.random((40, 50)) < 0.05)).astype(float)
    paths = {}
    np.save(tmp_path / "A.npy", A)
    paths["A.npy"] = tmp_path / "A.npy"
    np.savez(tmp_path / "A.npz", A)
    paths["A.npz"] = tmp_path / "A.npz"
    sps.save_npz(tmp_path / "Asp.npz", sps.csr_matrix(A))
    paths["Asp.npz"] = tmp_path / "Asp.npz"
    scipy.io.mmwrite(tmp_path / "A.mtx", sps.coo_matrix(A))
    paths["A.mtx"] = tmp_path / "A.mtx"
    np.savetxt(tmp_path / "B.csv", B, delimiter=",")
    paths["B.csv"] = tmp_path / "B.csv"
    np.savetxt(tmp_path / "B.tsv", B, delimiter="\t")
    paths["B.tsv"] = tmp_path / "B.tsv"
    np.savetxt(tmp_path / "B.txt", B)
    paths["B.txt"] = tmp_path / "B.txt"
    return A, B, paths, tmp_path


def run(main, args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    return r.exit_code, r.output


@pytest.mark.parametrize("a", ["A.npy", "A.npz", "Asp.npz", "A.mtx"])
@pytest.mark.parametrize("b", ["B.csv", "B.tsv", "B.txt"])
def test_multiply_every_format(files, a, b):
    A, B, p, tmp = files
    out = tmp / f"C-{a}-{b}.npy"
    code, text = run(pagh_main, ["multiply", p[a], p[b], "-o", out, "-b", 1 << 15, "-q"])
    assert code == 0, text
    assert (np.load(out) == A @ B).all()


@pytest.mark.parametrize("ext", ["npy", "npz", "csv", "tsv", "txt", "mtx"])
def test_multiply_output_formats_and_force(files, ext):
    A, B, p, tmp = files
    out = tmp / f"C.{ext}"
    code, _ = run(pagh_main, ["multiply", p["A.npy"], p["B.csv"], "-o", out, "-b", 1 << 15, "-q"])
    assert code == 0
    got = io.read_matrix(out)
    got = got.toarray() if sps.issparse(got) else np.asarray(got)
    assert np.allclose(got, A @ B)
    code, text = run(pagh_main, ["multiply", p["A.npy"], p["B.csv"], "-o", out, "-q"])
    assert code == 2 and "--force" in text
    assert run(pagh_main, ["multiply", p["A.npy"], p["B.csv"], "-o", out, "-q", "--force"])[0] == 0


def test_compress_top_query(files):
    A, B, p, tmp = files
    C = A @ B
    sk = tmp / "s.npz"
    assert run(pagh_main, ["compress", p["A.npy"], p["B.csv"], "-o", sk, "-b", 1 << 15, "-d", 5, "-q"])[0] == 0
    code, text = run(pagh_main, ["top", "--sketch", sk, "-k", 5, "--output-format", "json", "-q"])
    assert code == 0
    entries = json.loads(text)
    assert len(entries) == 5 and all(C[e["i"], e["j"]] == e["estimate"] for e in entries)
    code, text = run(pagh_main, ["top", "--sketch", sk, p["A.npy"], p["B.csv"], "-k", 3, "--verify",
                                 "--output-format", "csv", "-q"])
    assert code == 0 and text.splitlines()[0] == "i,j,estimate,exact"
    for line in text.splitlines()[1:]:
        i, j, e, x = line.split(",")
        assert float(x) == C[int(i), int(j)]
    code, text = run(pagh_main, ["top", p["A.npy"], p["B.csv"], "-k", 4, "-b", 1 << 15, "-q"])
    assert code == 0 and text.split()[:3] == ["i", "j", "estimate"] and len(text.splitlines()) == 5
    i, j = np.unravel_index(np.argmax(np.abs(C)), C.shape)
    code, text = run(pagh_main, ["query", sk, f"{i},0", f"{j},0", "--reps"])
    assert code == 0
    first = text.splitlines()[0].split("\t")
    assert float(first[2]) == C[i, j] and len(first[3].split()) == 5


def test_transpose_a_covariance(files):
    _, _, p, tmp = files
    X = np.random.default_rng(1).integers(-2, 3, (30, 20)).astype(float)
    np.save(tmp / "X.npy", X)
    out = tmp / "cov.npy"
    code, _ = run(pagh_main, ["multiply", tmp / "X.npy", tmp / "X.npy", "--transpose-a", "-o", out,
                              "-b", 1 << 16, "-d", 7, "-q"])
    assert code == 0
    assert np.abs(np.load(out) - X.T @ X).max() <= 1e-9 * np.abs(X.T @ X).max() or \
        np.mean(np.load(out) == X.T @ X) > 0.99


def test_errors_exit_codes_and_no_partial_output(files):
    A, B, p, tmp = files
    out = tmp / "o.npy"
    # missing file, unknown format, bad buckets: usage errors (2)
    assert run(pagh_main, ["multiply", tmp / "nope.npy", p["B.csv"], "-o", out])[0] == 2
    assert run(pagh_main, ["multiply", p["A.npy"], p["B.csv"], "-o", tmp / "o.xyz"])[0] == 2
    code, text = run(pagh_main, ["multiply", p["A.npy"], p["B.csv"], "-o", out, "-b", 12])
    assert code == 2 and "power of two" in text
    (tmp / "A.dat").write_bytes(b"x")
    assert run(pagh_main, ["multiply", tmp / "A.dat", p["B.csv"], "-o", out])[0] == 2
    # data errors (1), one line, no traceback
    np.save(tmp / "bad.npy", np.ones((7, 40)) * np.nan)
    (tmp / "corrupt.npy").write_bytes(b"\x93NUMPY garbage")
    (tmp / "text.csv").write_text("1,2,x\n3,4,5\n")
    (tmp / "ragged.csv").write_text("1,2,3\n3,4\n")
    np.save(tmp / "A3.npy", np.ones((2, 3, 4)))
    for bad, msg in [(p["B.csv"], "inner dimensions differ"), (tmp / "bad.npy", "NaN or Inf"),
                     (tmp / "corrupt.npy", "cannot read"), (tmp / "text.csv", "non-numeric"),
                     (tmp / "ragged.csv", "non-numeric or ragged"), (tmp / "A3.npy", "3-d")]:
        code, text = run(pagh_main, ["multiply", bad, p["B.csv"], "-o", out, "-q"])
        assert code == 1, (bad, text)
        assert msg in text and "Traceback" not in text and len(text.strip().splitlines()) == 1
        assert not out.exists() and not list(tmp.glob(".tmp-*"))
    # --debug shows the traceback (the exception propagates)
    r = CliRunner().invoke(pagh_main, ["multiply", str(tmp / "bad.npy"), str(p["B.csv"]), "-o", str(out),
                                       "--debug"])
    assert r.exit_code != 0 and isinstance(r.exception, ValueError)
    # top: needs A B or --sketch
    assert run(pagh_main, ["top", "-k", 3])[0] == 2
    assert run(pagh_main, ["compress", p["A.npy"], p["B.csv"], "-o", tmp / "s.npy"])[0] == 2


def test_fwht_transform_command(files, tmp_path):
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code, text = run(fwht_main, ["transform", tmp_path / "x.npy", "-o", tmp_path / "y.npy"])
    assert code == 0, text
    import fwht_gpu
    assert (np.load(tmp_path / "y.npy") == fwht_gpu.fwht(x)).all()
    code, _ = run(fwht_main, ["transform", tmp_path / "y.npy", "-o", tmp_path / "z.csv", "--inverse",
                              "--norm", "ortho", "--axis", "0", "--dtype", "fp64"])
    assert code == 0
    want = fwht_gpu.ifwht(np.load(tmp_path / "y.npy").astype(np.float64), 0, norm="ortho")
    assert np.allclose(np.loadtxt(tmp_path / "z.csv", delimiter=","), want)
    np.save(tmp_path / "x50.npy", np.ones((3, 50)))
    code, text = run(fwht_main, ["transform", tmp_path / "x50.npy", "-o", tmp_path / "w.npy"])
    assert code == 1 and "not a power of two" in text and "pad to 56" in text
    code, text = run(fwht_main, ["transform", files[2]["A.npy"], "-o", tmp_path / "w.npy",
                                 "--order", "sequency"])     # 40 = 20 * 2: natural order only
    assert code == 1 and "natural order only" in text and not (tmp_path / "w.npy").exists()
    code, _ = run(fwht_main, ["transform", files[2]["A.npy"], "-o", tmp_path / "w.npy"])
    assert code == 0 and (np.load(tmp_path / "w.npy") == fwht_gpu.fwht(np.load(files[2]["A.npy"]))).all()
    code, _ = run(fwht_main, ["transform", tmp_path / "x.npy", "-o", tmp_path / "s.npy",
                              "--order", "dyadic"])
    assert code == 0 and (np.load(tmp_path / "s.npy") == fwht_gpu.fwht(x, order="dyadic")).all()
    code, text = run(fwht_main, ["transform", tmp_path / "x.npy", "-o", tmp_path / "y.npy"])
    assert code == 2 and "--force" in text


def test_help_version_info_demo():
    for main, name in ((fwht_main, "fwht"), (pagh_main, "pagh-mm")):
        code, text = run(main, ["--help"])
        assert code == 0 and "Usage" in text
        code, text = run(main, ["--version"])
        assert code == 0 and "0.1.0" in text and name in text
        assert run(main, ["info"])[0] == 0
    code, text = run(pagh_main, ["demo", "--workload", "planted", "-n", 256, "--planted", 8,
                                 "--device", "cpu"])
    assert code == 0 and "recall 1.000" in text
    code, text = run(pagh_main, ["demo", "--terms", 300, "--device", "cpu"])
    assert code == 0, text
    assert "certified: yes" in text and "recall of the exact top 100: 1.000" in text
    assert sum(verdict in text for verdict in ("compression wins here",       # one verdict
                                               "compression is faster in this run, by",
                                               "the exact product is faster in this run")) == 1
    assert text.startswith("device: the CPU")
    code, text = run(fwht_main, ["demo", "-n", 8, "--batch", 2, "--device", "cpu"])
    assert code == 0 and "bf16" in text


def test_console_scripts_installed():
    for exe in ("fwht", "pagh-mm"):
        r = subprocess.run([exe, "--version"], capture_output=True, text=True)
        assert r.returncode == 0 and "0.1.0" in r.stdout


# --- issue 12: sketch files, output checks, SIGTERM, the error audit ----------------------


def run_split(main, args):
    """(exit code, stdout, stderr) of a command run in-process."""
    import inspect
    # click < 8.2 mixes stderr into stdout unless told not to
    split = {"mix_stderr": False} if "mix_stderr" in inspect.signature(CliRunner).parameters else {}
    r = CliRunner(**split).invoke(main, [str(a) for a in args])
    return r.exit_code, r.stdout, r.stderr


def one_error_line(stderr):
    """The single line of a data error: 'Error: ...', no traceback."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.fixture
def sketch(files):
    A, B, p, tmp = files
    path = tmp / "s.npz"
    code, text = run(pagh_main, ["compress", p["A.npy"], p["B.csv"], "-o", path, "-b", 1 << 12, "-q"])
    assert code == 0, text
    return path


def test_query_bad_indices(sketch):
    code, out, err = run_split(pagh_main, ["query", sketch, 1000, 1])
    assert code == 1 and "row index 1000 is out of range" in one_error_line(err) and "60 rows" in err
    code, out, err = run_split(pagh_main, ["query", sketch, "0,1", "99999999999999999999999"])
    assert code == 1 and "column index 99999999999999999999999 is out of range" in one_error_line(err)
    for i, j in [("--", "-1"), ("a", "0"), ("", "0"), ("1,,2", "0"), ("1.5", "0"), ("²", "0")]:
        args = ["query", sketch, i, j] if i != "--" else ["query", sketch, "--", "-1", "0"]
        code, out, err = run_split(pagh_main, args)
        assert code == 2 and "non-negative integer" in err and "Traceback" not in err, (i, err)
    code, out, err = run_split(pagh_main, ["query", sketch, "0,1", "0,1,2"])
    assert code == 2 and "same length" in err
    code, out, err = run_split(pagh_main, ["query", sketch, "0,1,2", "3"])
    assert code == 0 and len(out.splitlines()) == 3


def test_seed_any_non_negative_integer(files):
    A, B, p, tmp = files
    code, text = run(pagh_main, ["multiply", p["A.npy"], p["B.csv"], "-o", tmp / "C.npy", "--seed", -1])
    assert code == 2 and "--seed" in text
    for seed in (2**63, 2**64 + 1, 10**30):
        out = tmp / f"C{seed}.npy"
        code, text = run(pagh_main, ["multiply", p["A.npy"], p["B.csv"], "-o", out, "-b", 1 << 15,
                                     "--seed", seed, "-q"])
        assert code == 0, text
        assert (np.load(out) == A @ B).all()
    assert run(pagh_main, ["demo", "-n", 64, "--planted", 2, "--seed", -3])[0] == 2
    assert run(fwht_main, ["demo", "-n", 3, "--seed", -3])[0] == 2


def test_hash_option(files):
    A, B, p, tmp = files
    code, text = run(pagh_main, ["multiply", "--help"])
    text = " ".join(text.split())                         # undo the help's line wrapping
    assert "multiply-add-shift" in text and "tabulation" in text and "variance bound" in text
    assert "only 2-universal" in text and "Default: multiply-add-shift" in text and "polynomial" in text
    code, text = run(pagh_main, ["multiply", p["A.npy"], p["B.csv"], "-o", tmp / "C.npy",
                                 "--hash", "multiply-shift"])
    assert code == 2 and "--hash" in text
    code, text = run(pagh_main, ["multiply", p["A.npy"], p["B.csv"], "-o", tmp / "C.npy",
                                 "--hash", "tabulation", "-b", 1 << 15, "-q"])
    assert code == 0 and (np.load(tmp / "C.npy") == A @ B).all()


@pytest.fixture
def no_compute(monkeypatch):
    """Fail the test if a command starts computing."""
    import pagh_mm

    def forbidden(*a, **k):
        raise AssertionError("the computation started before the output was checked")

    monkeypatch.setattr(pagh_mm, "compress", forbidden)
    monkeypatch.setattr("pagh_mm.bench.run", forbidden)
    monkeypatch.setattr("fwht_gpu.accuracy.study", forbidden)
    monkeypatch.setattr("fwht_gpu.fwht", forbidden)
    monkeypatch.setattr("fwht_gpu.ifwht", forbidden)


def _cannot_create_in(directory):
    try:
        with open(os.path.join(directory, ".probe-test"), "w"):
            pass
    except OSError:
        return True
    os.unlink(os.path.join(directory, ".probe-test"))
    return False


def test_outputs_are_checked_before_computing(files, no_compute):
    A, B, p, tmp = files
    (tmp / "exists.json").write_text("{}")
    (tmp / "exists.npy").write_bytes(b"")
    bad_dirs = [tmp / "nodir" / "out", p["A.npy"] / "out"]
    if os.path.isdir("/proc") and _cannot_create_in("/proc"):
        bad_dirs.append("/proc/out")
    for base in bad_dirs:
        for main, args in [
            (pagh_main, ["multiply", p["A.npy"], p["B.csv"], "-o", f"{base}.npy"]),
            (pagh_main, ["compress", p["A.npy"], p["B.csv"], "-o", f"{base}.npz"]),
            (pagh_main, ["bench", "--json", f"{base}.json", "--device", "cpu"]),
            (fwht_main, ["transform", p["A.npy"], "-o", f"{base}.npy"]),
            (fwht_main, ["bench", "--json", f"{base}.json"]),
        ]:
            code, text = run(main, args)
            assert code == 2 and str(base) in text and "Traceback" not in text, (args, text)
    for main, args in [(pagh_main, ["bench", "--json", tmp / "exists.json", "--device", "cpu"]),
                       (fwht_main, ["bench", "--json", tmp / "exists.json"]),
                       (pagh_main, ["multiply", p["A.npy"], p["B.csv"], "-o", tmp / "exists.npy"]),
                       (fwht_main, ["transform", p["A.npy"], "-o", tmp / "exists.npy"])]:
        code, text = run(main, args)
        assert code == 2 and "exists; pass --force" in text, (args, text)
    code, text = run(fwht_main, ["accuracy", "--out-dir", p["A.npy"] / "acc", "--device", "cpu"])
    assert code == 2 and "not a directory" in text
    assert not list(tmp.glob(".tmp-*"))


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root may write anywhere")
def test_unwritable_directory_is_a_usage_error(files, no_compute):
    A, B, p, tmp = files
    ro = tmp / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        code, text = run(pagh_main, ["multiply", p["A.npy"], p["B.csv"], "-o", ro / "C.npy"])
        assert code == 2 and "cannot write in" in text
    finally:
        ro.chmod(0o755)


def test_bench_json_force_and_atomic(files, monkeypatch):
    A, B, p, tmp = files
    monkeypatch.setattr("pagh_mm.bench.run", lambda **kw: {"rows": [], "sizes": list(kw["sizes"])})
    monkeypatch.setattr("pagh_mm.cpubench.run", lambda **kw: {"rows": [], "sizes": list(kw["sizes"])})
    out = tmp / "b.json"
    code, text = run(pagh_main, ["bench", "--json", out, "--device", "cpu", "--size", 64])
    assert code == 0 and json.loads(out.read_text()) == {"rows": [], "sizes": [64]}
    assert run(pagh_main, ["bench", "--json", out, "--device", "cpu"])[0] == 2
    code, text = run(pagh_main, ["bench", "--json", out, "--device", "cpu", "--size", 128, "--force"])
    assert code == 0 and json.loads(out.read_text())["sizes"] == [128]
    assert run(fwht_main, ["bench", "--min-log2n", 20, "--max-log2n", 10])[0] == 2
    code, text = run(pagh_main, ["bench", "--json", tmp / "s.json", "--device", "cpu",
                                 "--staged"])
    assert code == 2 and "--staged and --decode apply to the GPU benchmark" in text
    assert not (tmp / "s.json").exists()
    code, text = run(pagh_main, ["bench", "--json", tmp / "s.json", "--device", "cpu",
                                 "--sparse", 4096, "--per-vector", 8, "--per-vector", 16])
    assert code == 2 and "one --per-vector" in text and not (tmp / "s.json").exists()
    seen = {}
    monkeypatch.setattr("pagh_mm.cpubench.run", lambda **kw: seen.update(kw) or {"rows": []})
    code, text = run(pagh_main, ["bench", "--json", tmp / "s.json", "--device", "cpu",
                                 "--sparse", 4096, "--per-vector", 8])
    assert code == 0 and seen["scale"] == (4096,) and seen["sparse_per_vector"] == 8
    assert seen["cases"] == () and seen["planted"] == 300


def test_accuracy_out_dir_force(tmp_path):
    out = tmp_path / "new" / "acc"
    args = ["accuracy", "--min-log2n", 3, "--max-log2n", 3, "--dtype", "fp32", "--variant", "kahan",
            "--device", "cpu", "--no-plots", "--out-dir", out]
    code, text = run(fwht_main, args)
    assert code == 0 and (out / "accuracy.json").exists()
    code, text = run(fwht_main, args)
    assert code == 2 and "accuracy.json exists; pass --force" in text
    assert run(fwht_main, args + ["--force"])[0] == 0
    code, text = run(fwht_main, ["accuracy", "--min-log2n", 5, "--max-log2n", 4, "--device", "cpu"])
    assert code == 2 and "--min-log2n" in text


def test_new_outputs_get_the_umask_mode_and_force_keeps_it(files):
    A, B, p, tmp = files
    old = os.umask(0o002)
    try:
        for name in ("C.npy", "s.npz"):
            cmd = "multiply" if name.endswith(".npy") else "compress"
            code, text = run(pagh_main, [cmd, p["A.npy"], p["B.csv"], "-o", tmp / name, "-b", 1024, "-q"])
            assert code == 0, text
            assert stat.S_IMODE(os.stat(tmp / name).st_mode) == 0o664, name
            os.chmod(tmp / name, 0o640)
            code, text = run(pagh_main, [cmd, p["A.npy"], p["B.csv"], "-o", tmp / name, "-b", 1024, "-q",
                                         "--force"])
            assert code == 0 and stat.S_IMODE(os.stat(tmp / name).st_mode) == 0o640, name
    finally:
        os.umask(old)


def test_incompatible_options_are_usage_errors(files, no_compute):
    A, B, p, tmp = files
    for args in (["--method", "fft", "--dtype", "fp16"], ["--algorithm", "alman", "--stabilizer", "kahan"]):
        for cmd in (["multiply", p["A.npy"], p["B.csv"], "-o", tmp / "C.npy"],
                    ["compress", p["A.npy"], p["B.csv"], "-o", tmp / "s.npz"],
                    ["top", p["A.npy"], p["B.csv"]]):
            code, text = run(pagh_main, cmd + args)
            assert code == 2 and ("fft" in text or "stabilizer" in text), (cmd, args, text)
    code, text = run(fwht_main, ["transform", p["A.npy"], "-o", tmp / "y.npy", "--algorithm", "alman",
                                 "--stabilizer", "kahan"])
    assert code == 2 and "folklore" in text
    code, text = run(pagh_main, ["multiply", p["A.npy"], p["B.csv"], "-o", tmp / "C.npy", "-b", 2**41])
    assert code == 2 and "2**40" in text


def test_usage_errors_are_one_line_naming_the_help(files, no_compute):
    """Usage errors (a missing file, an unknown option or command, a bad value, an existing
    output) print one 'Error: ...' line naming the command's --help, exit 2, in both CLIs;
    the bare group still prints its help."""
    A, B, p, tmp = files
    (tmp / "C.npy").write_bytes(b"keep")
    for main, args, text in (
            (pagh_main, ["top", tmp / "missing.npy", p["B.csv"]], "missing.npy"),
            (pagh_main, ["query", tmp / "s.npz", "-1", "3"], "-1"),
            (pagh_main, ["bogus"], "bogus"),
            (pagh_main, ["multiply", p["A.npy"], p["B.csv"], "-o", tmp / "C.npy", "-b", "1000"],
             "1000"),
            (pagh_main, ["multiply", p["A.npy"], p["B.csv"], "-o", tmp / "C.npy"], "--force"),
            (fwht_main, ["transform", p["A.npy"], "--bogus"], "--bogus")):
        code, out, err = run_split(main, args)
        line = one_error_line(err)
        assert code == 2 and text in line and "--help')" in line and "Usage:" not in err, err
    assert (tmp / "C.npy").read_bytes() == b"keep"
    code, out, err = run_split(pagh_main, [])
    assert "Commands:" in out + err


def test_top_says_when_the_sketch_was_compressed_again(files, monkeypatch):
    """A certified query that makes an automatic sketch compress itself again with more
    buckets says so on stderr (the first line printed the first sketch's buckets)."""
    A, B, p, tmp = files
    from pagh_mm.compressed import CompressedProduct
    top_k = CompressedProduct.top_k

    def grows(self, *a, **kw):            # as a regrowth would leave it: more buckets
        out = top_k(self, *a, **kw)
        self.log2b += 1
        return out

    monkeypatch.setattr(CompressedProduct, "top_k", grows)
    code, out, err = run_split(pagh_main, ["top", p["A.npy"], p["B.csv"], "-k", 2, "-b", 64])
    assert code == 0 and "compressed again with 128 buckets (from 64)" in err, err
    monkeypatch.setattr(CompressedProduct, "top_k", top_k)
    code, out, err = run_split(pagh_main, ["top", p["A.npy"], p["B.csv"], "-k", 2, "-b", 64])
    assert code == 0 and "compressed again" not in err, err


def test_demo_planted_more_than_n():
    code, text = run(pagh_main, ["demo", "-n", 64, "--planted", 100, "--device", "cpu"])
    assert code == 2 and "--planted 100" in text and "Traceback" not in text


class _ShortOfMemory(MemoryError):
    pass


@pytest.mark.parametrize("exc,code_,text", [
    (_ShortOfMemory("The sketch needs 80.00 GiB of host memory. 3.10 GiB is available. Lower "
                    "--buckets or --reps."), 1, "Lower --buckets or --reps."),
    (IndexError("index 7 is out of bounds"), 1, "index 7"),
    (KeyError("hash_a"), 1, "'hash_a'"),
    (ValueError(""), 1, "Error: ValueError"),
    (EOFError("No data left in file"), 1, "No data left"),
    (zipfile.BadZipFile("Bad CRC-32 for file 'sketch.npy'"), 1, "Bad CRC-32"),
    (FileExistsError("C.npy exists; pass --force to overwrite it"), 2, "--force"),
])
def test_errors_are_one_line_with_the_documented_code(files, monkeypatch, exc, code_, text):
    A, B, p, tmp = files
    import pagh_mm

    def boom(*a, **k):
        raise exc

    monkeypatch.setattr(pagh_mm, "compress", boom)
    code, out, err = run_split(pagh_main, ["multiply", p["A.npy"], p["B.csv"], "-o", tmp / "C.npy"])
    assert code == code_ and text in err and "Traceback" not in err, err
    if code_ == 1:
        assert one_error_line(err) == f"Error: {exc}" if str(exc) else "Error: ValueError"
    args = ["multiply", p["A.npy"], p["B.csv"], "-o", tmp / "C.npy", "--debug"]
    if isinstance(exc, EOFError):        # click would print "Aborted!"; --debug shows the traceback
        code, out, err = run_split(pagh_main, args)
        assert code == 1 and "Traceback" in err and "EOFError" in err
    else:                                # the exception propagates
        assert CliRunner().invoke(pagh_main, [str(a) for a in args]).exception is exc


def test_every_command_takes_debug():
    for main, cmds in ((pagh_main, ["info", "demo", "bench", "multiply", "compress", "top", "query"]),
                       (fwht_main, ["info", "demo", "bench", "accuracy", "transform"])):
        for cmd in cmds:
            code, text = run(main, [cmd, "--help"])
            assert code == 0 and "--debug" in text, cmd


def _bad_sketches(sketch):
    """(name, path) of sketch files that fail validation."""
    from pagh_mm import sketchfile
    tmp = sketch.parent
    out = []
    data = sketch.read_bytes()
    (tmp / "trunc.npz").write_bytes(data[: len(data) // 2])
    out.append(("truncated", tmp / "trunc.npz", "not a readable .npz sketch"))
    (tmp / "zero.npz").write_bytes(b"")
    out.append(("empty", tmp / "zero.npz", "not a readable .npz sketch"))
    with np.load(sketch) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["method"] = np.array("dft")
    with open(tmp / "edited.npz", "wb") as f:
        np.savez(f, **arrays)
    out.append(("edited", tmp / "edited.npz", "checksum mismatch"))
    arrays["checksum"] = np.array(sketchfile.checksum(arrays))
    with open(tmp / "method.npz", "wb") as f:
        np.savez(f, **arrays)
    out.append(("method", tmp / "method.npz", "'method' is 'dft'"))
    np.savez(tmp / "matrix.npz", np.ones((3, 3)))
    out.append(("matrix", tmp / "matrix.npz", "not a pagh_mm sketch file"))
    return out


def test_sketch_files_that_fail_validation(sketch):
    """Needs CompressedProduct.save/load wired to pagh_mm.sketchfile."""
    for name, path, msg in _bad_sketches(sketch):
        for args in (["query", path, 0, 0], ["top", "--sketch", path, "-k", 2]):
            code, out, err = run_split(pagh_main, args)
            line = one_error_line(err)
            assert code == 1 and line.startswith(f"Error: {path}: ") and msg in line, (name, args, err)


def test_legacy_sketch_prints_one_warning_line(tmp_path):
    """Needs CompressedProduct.load wired to pagh_mm.sketchfile."""
    from pagh_mm import hashing, sketchfile
    path = tmp_path / "old.npz"
    sketchfile.write(path, {"sketch": np.random.default_rng(0).standard_normal((3, 64)),
                            "shape": (8, 9), "log2b": 6, "method": "fwht", "dtype": "fp64",
                            "algorithm": "folklore", "stabilizer": None,
                            "hash": hashing.HashParams.draw("multiply-shift", 5, 3)})
    for args in (["query", path, 1, 2], ["top", "--sketch", path, "-k", 2, "-q"]):
        code, out, err = run_split(pagh_main, args)
        assert code == 0, err
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"Warning: {path}: ") and "2-universal" in lines[0]
        assert "UserWarning" not in err and "LegacyHashWarning" not in err


def test_compress_writes_a_version5_sketch(sketch):
    """Needs CompressedProduct.save wired to pagh_mm.sketchfile."""
    from pagh_mm import sketchfile
    f = sketchfile.read(sketch)
    assert f["format_version"] == 5 and f["hash"].family == "multiply-add-shift"


SIGTERM_CLI = """
import sys, time
import numpy as np
import pagh_mm
marker = sys.argv[1]
if sys.argv[2] == "compute":
    def slow(*a, **k):
        open(marker, "w").close()
        time.sleep(60)
    pagh_mm.compress = slow
else:
    real_save = np.save
    def slow_save(f, a, *args, **kw):
        f.write(b"x" * (4 << 20))
        f.flush()
        open(marker, "w").close()
        time.sleep(60)
    np.save = slow_save
from pagh_mm.cli import main
main(sys.argv[3:])
"""


@pytest.mark.parametrize("stage", ["compute", "write"])
def test_sigterm_exits_143_without_temporary_files(files, stage):
    from test_files import run_until_marker
    A, B, p, tmp = files
    (tmp / "cli.py").write_text(SIGTERM_CLI)
    code, err = run_until_marker([sys.executable, "cli.py", "marker", stage, "multiply", "A.npy",
                                  "B.csv", "-o", "C.npy", "-b", "1024", "-q"], tmp / "marker", tmp)
    assert code == 143, err
    assert "Traceback" not in err and not list(tmp.glob(".tmp-*")) and not (tmp / "C.npy").exists()


def test_progress_lines_in_batch_jobs(tmp_path):
    """Not a terminal: --progress auto prints a stage's first and last lines with the time
    elapsed; never and -q print none."""
    X = np.random.default_rng(0).standard_normal((40, 30))
    np.save(tmp_path / "X.npy", X)
    args = ["top", tmp_path / "X.npy", tmp_path / "X.npy", "--transpose-a", "-k", 3]
    code, out, err = run_split(pagh_main, args)
    assert code == 0, err
    assert "inner dimension: 40/40 (100%)" in err and "elapsed" in err and "entries scanned:" in err
    for quiet in (["--progress", "never"], ["-q"]):
        code, out, err = run_split(pagh_main, args + quiet)
        assert code == 0 and "inner dimension" not in err and "entries scanned" not in err


def test_gram_sketch_file_verifies_with_its_one_matrix_file(tmp_path):
    """A sketch of X^T X (compress X X --transpose-a) records that it is a Gram sketch: top
    --sketch with X given twice verifies against X^T X without repeating --transpose-a, and
    gives the answer of the flag given again."""
    rng = np.random.default_rng(4)
    X = rng.standard_normal((300, 40))
    X[:, 7] += 3 * X[:, 30]
    np.save(tmp_path / "X.npy", X)
    sk = tmp_path / "g.npz"
    code, text = run(pagh_main, ["compress", tmp_path / "X.npy", tmp_path / "X.npy",
                                 "--transpose-a", "-o", sk, "-q"])
    assert code == 0, text
    outs = []
    for flag in ([], ["--transpose-a"]):
        code, out, err = run_split(pagh_main, ["top", "--sketch", sk, tmp_path / "X.npy",
                                               tmp_path / "X.npy", "-k", 2, "--verify",
                                               "--exclude-diagonal", "-q",
                                               "--output-format", "csv"] + flag)
        assert code == 0, err
        outs.append(out)
    assert outs[0] == outs[1] and "7" in outs[0] and "30" in outs[0]
    sized = tmp_path / "k.npz"                 # compress -k: sized for that query
    code, text = run(pagh_main, ["compress", tmp_path / "X.npy", tmp_path / "X.npy",
                                 "--transpose-a", "-o", sized, "--threshold", 50, "--seed", 1,
                                 "-q"])
    assert code == 0, text
    want = pagh_mm.compress_gram(X, threshold=50.0, seed=1).buckets
    assert pagh_mm.CompressedProduct.load(sized).buckets == want > pagh_mm.compress_gram(X, seed=1).buckets
    code, text = run(pagh_main, ["compress", tmp_path / "X.npy", tmp_path / "X.npy", "-o",
                                 tmp_path / "bad.npz", "-k", 2, "--threshold", 1.0])
    assert code == 2 and "one query" in text


def test_decoding_from_the_command_line(files):
    """--decode yes makes the bit sketches (kept by the sketch file), --search decode gives
    the scan's certified answer; bad combinations are usage errors, a sketch without bit
    sketches a one-line data error."""
    A, B, p, tmp = files
    path = tmp / "bits.npz"
    code, text = run(pagh_main, ["compress", p["Asp.npz"], p["B.csv"], "-o", path, "-b", 1 << 12,
                                 "--decode", "yes", "-q"])
    assert code == 0, text
    assert pagh_mm.CompressedProduct.load(path).bits is not None
    outs = []
    for search in ("scan", "decode"):
        code, out, err = run_split(pagh_main, ["top", "--sketch", path, p["Asp.npz"], p["B.csv"],
                                               "-k", 5, "--verify", "--search", search, "-q",
                                               "--output-format", "csv"])
        assert code == 0, err
        outs.append(out)
    assert outs[0] == outs[1]
    code, text = run(pagh_main, ["top", "--sketch", path, "-k", 5, "--search", "decode"])
    assert code == 2 and "--verify" in text
    code, text = run(pagh_main, ["compress", p["A.npy"], p["A.npy"], "--transpose-a", "-o",
                                 tmp / "g.npz", "--decode", "yes", "-q"])
    assert code == 2 and "Gram" in text
    plain = tmp / "plain.npz"
    assert run(pagh_main, ["compress", p["Asp.npz"], p["B.csv"], "-o", plain, "-b", 1 << 12,
                           "--decode", "no", "-q"])[0] == 0
    code, out, err = run_split(pagh_main, ["top", "--sketch", plain, p["Asp.npz"], p["B.csv"],
                                           "-k", 5, "--verify", "--search", "decode", "-q"])
    assert code == 1 and "decode=True" in err
    one_error_line(err)


def test_bench_gram_rows_are_checked_and_gpu_only(tmp_path):
    r = CliRunner()
    out = str(tmp_path / "b.json")
    res = r.invoke(pagh_main, ["bench", "--gram", "1024y64", "--json", out])
    assert res.exit_code == 2 and "samples x features" in res.output
    res = r.invoke(pagh_main, ["bench", "--gram", "1024x64", "--device", "cpu", "--json", out])
    assert res.exit_code == 2 and "GPU benchmark only" in res.output


def test_bench_gram_row_on_the_cpu_backend():
    """The Gram row's flow (the GPU benchmark's code, run on NumPy): certified, recall 1, the
    exact routes find the same planted pairs."""
    from pagh_mm import bench
    rec = bench.run(sizes=(), dtypes=("fp64",), gram=[(4096, 256)], gram_pairs=5, device="cpu",
                    repeats=1, echo=lambda *a: None)
    row = rec["rows"][0]
    assert row["kind"] == "gram" and row["certified"] and row["recall"] == 1.0
    assert row["gemm_fp64_recall"] == 1.0 and row["gemm_fp32_recall"] == 1.0
