"""Both command lines end to end on real files in a temporary directory."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sps
from click.testing import CliRunner

from fwht_gpu.cli import main as fwht_main
from pagh_mm import io
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
    code, text = run(pagh_main, ["top", "--sketch", sk, "-k", 5, "--output-format", "json"])
    assert code == 0
    entries = json.loads(text)
    assert len(entries) == 5 and all(C[e["i"], e["j"]] == e["estimate"] for e in entries)
    code, text = run(pagh_main, ["top", "--sketch", sk, p["A.npy"], p["B.csv"], "-k", 3, "--verify",
                                 "--output-format", "csv"])
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
    code, text = run(fwht_main, ["transform", files[2]["A.npy"], "-o", tmp_path / "w.npy"])
    assert code == 1 and "not a power of two" in text
    code, text = run(fwht_main, ["transform", tmp_path / "x.npy", "-o", tmp_path / "y.npy"])
    assert code == 2 and "--force" in text


def test_help_version_info_demo():
    for main, name in ((fwht_main, "fwht"), (pagh_main, "pagh-mm")):
        code, text = run(main, ["--help"])
        assert code == 0 and "Usage" in text
        code, text = run(main, ["--version"])
        assert code == 0 and "0.1.0" in text and name in text
        assert run(main, ["info"])[0] == 0
    code, text = run(pagh_main, ["demo", "-n", 256, "--planted", 8, "--device", "cpu"])
    assert code == 0 and "recall 1.000" in text
    code, text = run(fwht_main, ["demo", "-n", 8, "--batch", 2, "--device", "cpu"])
    assert code == 0 and "bf16" in text


def test_console_scripts_installed():
    for exe in ("fwht", "pagh-mm"):
        r = subprocess.run([exe, "--version"], capture_output=True, text=True)
        assert r.returncode == 0 and "0.1.0" in r.stdout


@pytest.mark.parametrize("name", ["sketch_error_by_dtype", "fwht_vs_fft", "covariance_screening"])
def test_examples_small(name, tmp_path):
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", f"{name}.py"), "--small",
                        "--out-dir", str(tmp_path), "--cpu"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / f"{name}.png").stat().st_size > 5000
    assert "wrote" in r.stdout
