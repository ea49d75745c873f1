"""The examples end to end at --small size, on the CPU, in a temporary directory.

Each example prints tables and writes NAME.png and NAME.json; the JSON holds the printed
tables' headers and every plotted series with the table column it was drawn from.  These
tests run each example once (as a user would: ``python examples/NAME.py --small`` from
another directory, so the default output folder is used), then check that

* the outputs exist where the user is, a real image of reasonable size, and nothing new
  appeared in the source tree;
* every plotted value agrees with the number printed in the table, to the printed
  precision (the table is parsed from stdout, not taken from the JSON);
* the example's own claims hold (certificates, recall, rounding by precision, zeros printed
  as zeros), and the co-occurrence pairs' labels and counts are right (checked against a
  corpus rebuilt here);
* an existing output is never replaced without --force, and the default output folder is
  never the source tree.
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES_DIR = os.path.join(ROOT, "examples")
EXAMPLES = ["fwht_vs_fft", "sketch_error_by_dtype", "covariance_screening", "cooccurrence_screening",
            "beyond_one_device"]
OUT = "pagh_mm_examples"            # the examples' default output folder
#: one pytest-xdist worker runs this module (``--dist loadgroup``): its module fixture runs
#: the examples once, and one test looks for an example's scratch folder in the temp directory
pytestmark = pytest.mark.xdist_group("examples")


def run_example(name, cwd, *extra, timeout=300):
    env = dict(os.environ)
    env.pop("PAGH_MM_EXAMPLES_SMALL", None)
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return subprocess.run([sys.executable, os.path.join(EXAMPLES_DIR, f"{name}.py"), "--small",
                           "--cpu", *map(str, extra)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def source_files():
    """Every file under the source folders an example could write to (bytecode aside)."""
    out = set()
    for folder in ("examples", "pagh_mm", "fwht_gpu"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, folder)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            out.update(os.path.join(dirpath, f) for f in filenames)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{name: (completed process, output folder, record)}: each example run once."""
    before = source_files()
    out = {}
    for name in EXAMPLES:
        cwd = tmp_path_factory.mktemp(name)
        r = run_example(name, cwd)
        folder = cwd / OUT
        rec = None
        if r.returncode == 0 and (folder / f"{name}.json").exists():
            rec = json.loads((folder / f"{name}.json").read_text())
        out[name] = (r, folder, rec)
    out["_new_source_files"] = source_files() - before
    return out


# --- parsing what was printed --------------------------------------------------------------

NUMBER = re.compile(r"[-+]?(\d+)(?:\.(\d*))?(?:[eE]([-+]?\d+))?")


def half_unit(text: str) -> float:
    """Half a unit in the last printed digit of a number as printed."""
    m = NUMBER.fullmatch(text)
    assert m, f"not a number: {text!r}"
    return 0.5 * 10.0 ** (int(m.group(3) or 0) - len(m.group(2) or ""))


def printed_tables(stdout: str, rec: dict) -> dict:
    """{table title: [{column: printed cell}]} parsed from stdout, located by the header
    line the record names."""
    lines = stdout.splitlines()
    out = {}
    for t in rec["tables"]:
        at = [i for i, ln in enumerate(lines) if ln == t["header"]]
        assert len(at) == 1, f"header of {t['title']!r} printed {len(at)} times"
        rows = []
        for q in range(len(t["rows"])):
            cells = lines[at[0] + 1 + q].split()
            assert len(cells) == len(t["columns"]), lines[at[0] + 1 + q]
            rows.append(dict(zip(t["columns"], cells)))
        out[t["title"]] = rows
    return out


def same(printed: str, value) -> bool:
    if isinstance(value, str):
        return printed == value
    return abs(float(printed) - value) <= half_unit(printed) * (1 + 1e-9)


def check_plotted_equals_printed(stdout: str, rec: dict) -> int:
    """Every plotted point against the printed table; returns how many were checked."""
    tables = printed_tables(stdout, rec)
    checked = 0
    assert rec["series"], "nothing plotted"
    for s in rec["series"]:
        rows = tables[s["table"]]
        assert len(s["x"]) == len(s["y"]) > 0
        for x, y in zip(s["x"], s["y"]):
            cand = [r for r in rows if all(r[c] == str(v) for c, v in s["match"].items())]
            if s["x_column"] is not None:
                cand = [r for r in cand if same(r[s["x_column"]], x)]
            assert len(cand) == 1, f"{s['label']}: no single printed row for x={x!r} ({len(cand)})"
            text = cand[0][s["y_column"]]
            if y == 0:
                assert float(text) == 0, f"{s['label']} at {x}: plotted 0, printed {text}"
            else:
                assert same(text, y), f"{s['label']} at {x}: plotted {y!r}, printed {text}"
            checked += 1
    return checked


def check_png(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 700 and height >= 300, (width, height)
    assert len(data) > 20_000
    import matplotlib.image
    img = matplotlib.image.imread(str(path))
    colours = np.unique((img[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 50                # drawn on, not a blank canvas


# --- the tests -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", EXAMPLES)
def test_example_outputs_match_what_was_printed(runs, name):
    r, folder, rec = runs[name]
    assert r.returncode == 0, r.stderr[-3000:]
    assert rec is not None and rec["example"] == name
    check_png(folder / f"{name}.png")
    assert f"wrote {folder / (name + '.png')}" in r.stdout
    assert sorted(os.listdir(folder)) == [f"{name}.json", f"{name}.png"]   # no temporary left
    assert check_plotted_equals_printed(r.stdout, rec) >= 6
    assert rec["device"]["name"] == "cpu" and rec["settings"]["small"] is True


def test_nothing_written_into_the_source_tree(runs):
    assert runs["_new_source_files"] == set()


def test_beyond_one_device_story(runs):
    """Every route certifies the planted pairs; the file and dask routes (X made a chunk at a
    time) give the memory route's bits wherever they chose the same buckets."""
    r, _, rec = runs["beyond_one_device"]
    assert r.returncode == 0, r.stderr[-3000:]
    rows = printed_tables(r.stdout, rec)["three routes by sample count N (CPU, p = 256)"]
    routes = {row["route"] for row in rows}
    assert {"memory", "file"} <= routes
    assert all(row["certified"] == "yes" and row["recall"] == "1.00" for row in rows)
    for row in rows:
        if row["route"] != "memory":
            assert row["same_bits"] == "yes"
    assert len(rows) == 3 * len(routes)
    assert not any("pagh_mm_beyond_" in f for f in os.listdir(tempfile.gettempdir()))


def test_sketch_error_by_dtype_story(runs):
    r, _, rec = runs["sketch_error_by_dtype"]
    assert r.returncode == 0, r.stderr[-3000:]
    rows = printed_tables(r.stdout, rec)["error per entry by bucket count and transform dtype"]
    by_b = {}
    for row in rows:
        by_b.setdefault(int(row["buckets"]), {})[row["dtype"]] = row
    assert len(by_b) >= 3
    for b, d in by_b.items():
        assert d["fp64"]["rounding_rms"] == "0"             # the reference, printed as zero
        rounding = [float(d[t]["rounding_rms"]) for t in ("fp32", "fp16", "bf16")]
        assert 0 < rounding[0] < rounding[1] < rounding[2]  # 24, 11, 8 bits of significand
        sketching = float(d["fp64"]["sketching_rms"])
        for t in ("fp32", "fp16", "bf16"):
            want = "rounding" if float(d[t]["rounding_rms"]) > sketching else "sketching"
            assert d[t]["dominant"] == want
        bound, est = float(d["fp64"]["noise_bound"]), float(d["fp64"]["noise_est"])
        assert abs(est - bound) < 0.2 * bound              # sk.noise() estimates the bound
        assert sketching < bound                           # the median beats one repetition
    small_b, large_b = min(by_b), max(by_b)
    assert by_b[small_b]["bf16"]["dominant"] == "sketching"
    assert by_b[large_b]["bf16"]["dominant"] == "rounding"  # once b >> m p
    # the zero is drawn as zero: the FP64 rounding series holds exact zeros
    fp64 = [s for s in rec["series"] if s["y_column"] == "rounding_rms" and s["match"] == {"dtype": "fp64"}]
    assert fp64 and all(v == 0 for v in fp64[0]["y"])


def test_fwht_vs_fft_story(runs):
    r, _, rec = runs["fwht_vs_fft"]
    assert r.returncode == 0, r.stderr[-3000:]
    rows = printed_tables(r.stdout, rec)["error and time by inner dimension n and convolution"]
    err = {(row["n"], row["method"]): float(row["rel_frobenius_err"]) for row in rows}
    for n in {row["n"] for row in rows}:
        f, g = err[n, "fwht"], err[n, "fft"]
        assert 0 < f < 1 and 0 < g < 1 and max(f, g) / min(f, g) < 1.5   # same variance bound


def test_covariance_screening_story(runs):
    r, _, rec = runs["covariance_screening"]
    assert r.returncode == 0, r.stderr[-3000:]
    tables = printed_tables(r.stdout, rec)
    rows = tables[rec["tables"][0]["title"]]
    assert len(rows) == 3
    for row in rows:
        assert row["certified"] == "yes" and float(row["recall"]) == 1.0
        assert int(row["grown_to"]) >= int(row["buckets"])
        e, de = float(row["exact_s"]), half_unit(row["exact_s"])      # the ratio printed is
        t, dt = float(row["sketch_s"]), half_unit(row["sketch_s"])    # that of the times printed
        q, dq = float(row["exact/sketch"]), half_unit(row["exact/sketch"])
        assert (e - de) / (t + dt) - dq <= q <= (e + de) / (t - dt) + dq
        assert abs(float(row["sketch_s"]) - float(row["compress_s"]) - float(row["query_s"])) <= 0.0015
    pairs = tables[rec["tables"][1]["title"]]
    assert len(pairs) == len(rec["planted"]) and all(p["planted"] == "yes" for p in pairs)
    # the verdict names the winner of the times measured (the record's unrounded times, which
    # the table prints rounded: two times that print alike may still differ)
    for row, run in zip(rows, rec["runs"]):
        for col, key in (("exact_s", "exact"), ("sketch_s", "sketch")):
            assert abs(float(row[col]) - run[key]) <= half_unit(row[col]) * 1.0001
    sketch_wins = [run["sketch"] < run["exact"] for run in rec["runs"]]
    if not any(sketch_wins):
        assert "the exact product is faster at every N here" in r.stdout
    elif all(sketch_wins):
        assert "the sketch wins at every N here" in r.stdout
    else:
        won = [str(run["N"]) for run, w in zip(rec["runs"], sketch_wins) if w]
        assert f"the sketch wins at N = {', '.join(won)} " in r.stdout


def test_cooccurrence_labels_and_counts(runs):
    r, _, rec = runs["cooccurrence_screening"]
    assert r.returncode == 0, r.stderr[-3000:]
    tables = printed_tables(r.stdout, rec)
    pairs = tables[rec["tables"][0]["title"]]
    routes = {row["route"]: row for row in tables[rec["tables"][1]["title"]]}
    assert routes["sketch"]["certified"] == "yes" and float(routes["sketch"]["recall"]) == 1.0
    assert "certified yes" in r.stdout
    # labels are identifiers, not indices, and the counts are right: rebuild the corpus here
    from pagh_mm import corpus
    desc = rec["corpus"]
    c = corpus.cooccurrence(max_terms=desc["max_terms"], min_df=desc["min_df"],
                            lines_per_doc=desc["lines_per_doc"], roots=desc["roots"])
    assert c.X.shape == (desc["docs"], desc["terms"])
    index = {t: i for i, t in enumerate(c.terms)}
    XT = c.X.T.tocsr()
    counts = []
    for row in pairs:
        for t in (row["term_a"], row["term_b"]):
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]+", t), t
        i, j = index[row["term_a"]], index[row["term_b"]]
        both = XT[i].multiply(XT[j]).sum()
        assert int(row["docs_both"]) == both
        assert int(row["docs_a"]) == XT[i].sum() and int(row["docs_b"]) == XT[j].sum()
        counts.append(both)
    assert counts == sorted(counts, reverse=True) and len(counts) == rec["settings"]["pairs"]
    # and no pair left out has a larger count than the last one printed (the exact top pairs)
    C = (c.X.T @ c.X).tocoo()
    off = C.row < C.col
    assert np.sort(C.data[off])[::-1][len(counts) - 1] == counts[-1]


def test_never_replaces_outputs_without_force(runs, tmp_path):
    name = "fwht_vs_fft"
    out = tmp_path / "a" / "b"                     # created, parents too
    r = run_example(name, tmp_path, "--out-dir", out)
    assert r.returncode == 0, r.stderr[-3000:]
    png = (out / f"{name}.png").read_bytes()
    r = run_example(name, tmp_path, "--out-dir", out)
    assert r.returncode == 2 and "--force" in r.stderr and r.stdout == ""   # before computing
    assert (out / f"{name}.png").read_bytes() == png
    r = run_example(name, tmp_path, "--out-dir", out, "--force")
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(os.listdir(out)) == [f"{name}.json", f"{name}.png"]


def test_default_output_folder_is_never_the_source_tree():
    target = os.path.join(EXAMPLES_DIR, OUT)
    existed = os.path.exists(target)
    try:
        r = run_example("fwht_vs_fft", EXAMPLES_DIR)
        assert r.returncode == 2 and "source tree" in r.stderr and r.stdout == ""
        assert os.path.exists(target) == existed
    finally:
        if not existed and os.path.exists(target):
            shutil.rmtree(target)
