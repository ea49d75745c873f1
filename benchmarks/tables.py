"""README.md's performance tables, generated from the result records in benchmarks/results/.

    python benchmarks/tables.py            # print every table
    python benchmarks/tables.py --write    # replace them in README.md
    python benchmarks/tables.py --check    # exit 1 when README.md differs from the results

In README.md each table sits between ``<!-- table:NAME -->`` and ``<!-- /table:NAME -->``;
the generated text is the markdown table, a blank line and a line naming the result files,
their device and their commit.  To show a new measurement, put its record in
``benchmarks/results/<device>/`` and point the table's entry in ``TABLES`` at it.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
README = os.path.join(ROOT, "README.md")

try:
    from fwht_gpu import files, provenance
except ImportError:                         # run from a checkout without installing it
    sys.path.insert(0, ROOT)
    from fwht_gpu import files, provenance

SINGLE = [("fp32", 20), ("fp32", 24), ("fp32", 27), ("fp32", 30), ("fp64", 27), ("fp16", 30)]
CLUSTER_DTYPES = ("fp32", "fp16")
CLUSTER_SIZES = (24, 26, 28, 30)
BATCHED_DTYPES = ("fp32", "fp16", "bf16", "fp64")
BATCHED_SIZES = (8, 10, 12, 13, 14, 15)
VARIANT_DTYPES = ("fp32", "fp16", "bf16")
VARIANT_SIZES = (20, 24, 27, 30)
VARIANT_COLUMNS = ("alman", "kahan", "neumaier", "kahan-pass", "neumaier-pass")


# --- formatting ------------------------------------------------------------------------------

def _line(cells) -> str:
    """One markdown table row (an empty cell is written ``| |``)."""
    return re.sub(r"\|  (?=\|)", "| ", "| " + " | ".join(str(c) for c in cells) + " |")


def _table(header, rows) -> list[str]:
    return [_line(header), "|" + "---|" * len(header)] + [_line(r) for r in rows]


def _ms(v: float) -> str:
    """Milliseconds to three significant digits."""
    return f"{v:.0f} ms" if v >= 1000 else f"{v:.3g} ms"


def _s(v: float) -> str:
    return "n/a" if v is None or math.isnan(v) else f"{v:.3f} s"


def _find(rows, what: str, **key) -> dict:
    for r in rows:
        if all(r.get(k) == v for k, v in key.items()):
            return r
    raise KeyError(f"no {what} row with {key} in the result files")


# --- the tables ----------------------------------------------------------------------------------

def fwht_single(records) -> list[str]:
    """Single transforms: time, against a copy and against cupy.fft.rfft."""
    rows = [r for rec in records for r in rec["rows"]]
    out = []
    for dtype, L in SINGLE:
        r = _find(rows, "fwht-bench", kind="single", dtype=dtype, log2n=L)
        s = r.get("speedup_vs_rfft")
        vs = "" if s is None else f"{s:.2f}x faster" if s >= 1 else f"{1 / s:.2f}x slower"
        out.append([dtype, f"2^{L}", r["passes"], _ms(r["time_ms"]), f"{r['ratio_copy']:.2f}",
                    f"{r['ratio_passes_copy']:.2f}", vs])
    return _table(["dtype", "n", "passes", "time", "x copy", "x (passes x copy)",
                   "vs `cupy.fft.rfft`"], out)


def fwht_clusters(records) -> list[str]:
    """Single transforms of three or more plain passes: two passes over thread-block clusters
    (the default on sm_90+) against the three passes without them, per record (device)."""
    out = []
    for rec in records:
        dev = rec["device"]["name"].replace("NVIDIA ", "").split(" ")[0]
        rows = [r for r in rec["rows"] if r["kind"] in ("single", "clusters", "plain")]
        for dtype in CLUSTER_DTYPES:
            for L in CLUSTER_SIZES:
                pair = sorted((r for r in rows if r["dtype"] == dtype and r["log2n"] == L),
                              key=lambda r: r["passes"])
                if len(pair) != 2 or pair[0]["passes"] != 2:
                    continue
                two, three = pair
                rf = two.get("speedup_vs_rfft")
                out.append([dev, dtype, f"2^{L}", _ms(two["time_ms"]), f"{two['ratio_copy']:.2f}",
                            _ms(three["time_ms"]), f"{three['time_ms'] / two['time_ms']:.2f}x",
                            "" if rf is None else f"{rf:.2f}x"])
    return _table(["GPU", "dtype", "n", "two passes (clusters)", "x copy", "three passes",
                   "two vs three", "vs `cupy.fft.rfft`"], out)


def fwht_batched(records) -> list[str]:
    """Batched rows: time over a copy per row length and dtype."""
    rows = [r for rec in records for r in rec["rows"]]
    out = []
    for L in BATCHED_SIZES:
        cells = [f"2^{L}"]
        for dtype in BATCHED_DTYPES:
            r = _find(rows, "fwht-bench", kind="batched", dtype=dtype, log2n=L)
            extra = f" ({r['passes']} passes)" if r["passes"] > 1 else ""
            cells.append(f"{r['ratio_copy']:.2f}{extra}")
        out.append(cells)
    return _table(["row length", *(d.upper() for d in BATCHED_DTYPES)], out)


def fwht_variants(records) -> list[str]:
    """Variants: kernel time relative to Folklore in the same run."""
    rows = [r for rec in records for r in rec["rows"]]
    out = []
    for dtype in VARIANT_DTYPES:
        wide = "fp64" if dtype == "fp32" else "fp32"
        for L in VARIANT_SIZES:
            cells = [dtype, f"2^{L}"]
            for v in VARIANT_COLUMNS:
                cells.append(f"{_find(rows, 'variant', dtype=dtype, log2n=L, variant=v)['ratio_folklore']:.2f}")
            r = _find(rows, "variant", dtype=dtype, log2n=L, variant=f"compute {wide}")
            cells.append(f"{r['ratio_folklore']:.2f} ({wide.upper()})")
            out.append(cells)
    return _table(["dtype", "n", "Alman-Rao", "Kahan", "Neumaier", "Kahan per pass",
                   "Neumaier per pass", "wider compute"], out)


def pagh_mm(records) -> list[str]:
    """pagh-mm bench: rows keyed by (n, dtype); a later file replaces an earlier one's row."""
    merged: dict = {}
    for rec in records:
        for r in rec["rows"]:
            merged[(r["n"], r["dtype"])] = r
    out = []
    for r in merged.values():
        g = {k: r.get(f"gemm_{k}_s") for k in ("fp64", "fp32", "fp16")}
        out.append([r["n"], r["dtype"], r["buckets"], _s(r["sketch_s"]), _s(r["topk_s"]),
                    f"{r['recall']:.3f}", f"{r['ratio_floor']:.0f}", _s(g["fp64"]), _s(g["fp32"]),
                    _s(g["fp16"]), f"{r['speedup_vs_fp64']:.2f}x / {r['speedup_vs_fp32']:.2f}x"])
    return _table(["n", "data", "buckets", "sketch", "top-k", "recall", "x floor",
                   "DGEMM + top-k", "SGEMM + top-k", "FP16 GEMM + top-k", "vs DGEMM / SGEMM"], out)


def _data(r) -> str:
    """The data's dtype, and the transforms' where the library's rule chose narrower ones."""
    t = r.get("transforms")
    return r["dtype"] if t is None or t == r["dtype"] else f"{r['dtype']} ({t} transforms)"


def pagh_mm_certified(records) -> list[str]:
    """pagh-mm bench with automatic parameters and certified top-k (session 8 on; the FP16
    screen with float64 verification from the records that have it; a later record's row of
    the same size and data replaces an earlier one's)."""
    latest = {}
    for rec in records:
        for r in rec["rows"]:
            latest[(r["n"], _data(r))] = r
    out = []
    for r in sorted(latest.values(), key=lambda r: r["n"]):
        screen = r.get("screen_s")
        out.append([r["n"], _data(r), f"{r['reps']} x {r['buckets']}", _s(r["sketch_s"]),
                    _s(r["topk_s"]), "yes" if r["certified"] else "no",
                    f"{r['certificate_overhead']:+.0%}", f"{r['recall']:.3f}",
                    _s(r["gemm_fp64_s"]), _s(r["gemm_fp32_s"]), _s(r["gemm_fp16_s"]),
                    "-" if screen is None else _s(screen),
                    f"{r['speedup_vs_fp64']:.2f}x / {r['speedup_vs_fp32']:.2f}x",
                    "-" if screen is None else f"{r['speedup_vs_screen']:.2f}x"])
    return _table(["n", "data", "reps x buckets (auto)", "sketch", "certified top-k",
                   "certified", "certificate cost", "recall", "DGEMM + top-k", "SGEMM + top-k",
                   "FP16 GEMM + top-k", "FP16 screen + verification", "vs DGEMM / SGEMM",
                   "vs FP16 screen"], out)


def pagh_mm_sparse(records) -> list[str]:
    """pagh-mm bench --sparse: sparse planted products, the scanning and the decoding flows,
    against cuSPARSE SpGEMM + top-k."""
    def buckets(r, first, final):
        return f"{first}" if final == first else f"{first} -> {final}"
    latest = {}                 # a later record's row of the same product replaces an earlier one
    for rec in records:
        for r in rec["rows"]:
            if r.get("kind") == "sparse":
                latest[(r["n"], r["per_vector"])] = r
    out = []
    for r in sorted(latest.values(), key=lambda r: (r["per_vector"], r["n"])):
        sp = _s(r["spgemm_s"]) if "spgemm_s" in r else \
            "wrong product (no error)" if "spgemm_wrong_s" in r else "out of memory"
        best = min(r["total_s"], r["total_decode_s"])
        out.append([r["n"], r["per_vector"], buckets(r, r["buckets"], r["buckets_final"]),
                    _s(r["sketch_s"]), _s(r["topk_s"]),
                    buckets(r, r.get("buckets_decode", r["buckets_final_decode"]),
                            r["buckets_final_decode"]),
                    _s(r["sketch_decode_s"]), _s(r["topk_decode_s"]),
                    f"{'yes' if r['certified'] else 'no'} / "
                    f"{'yes' if r['certified_decode'] else 'no'}",
                    f"{r['recall']:.3f} / {r['recall_decode']:.3f}",
                    "yes" if r["decode_same_answer"] else "NO",
                    f"{r['sketch_ratio_floor']:.0f}", sp,
                    f"{r['spgemm_s'] / best:.2f}x" if "spgemm_s" in r else "-"])
    return _table(["n", "non-zeros per column of A / row of B", "buckets (scan flow)", "sketch",
                   "certified top-k, scanning", "buckets with bit sketches (final)", "sketch + bits",
                   "certified top-k, decoding", "certified (scan / decode)",
                   "recall (scan / decode)", "same answer", "sketch x floor",
                   "SpGEMM + top-k", "best flow vs SpGEMM"], out)


def pagh_mm_gram(records) -> list[str]:
    """pagh-mm bench --gram: covariance screens with a tall inner dimension (a later record's
    row of the same screen replaces an earlier one)."""
    latest = {}
    for rec in records:
        for r in rec["rows"]:
            if r.get("kind") == "gram":
                latest[(r["n"], r["features"], r["dtype"])] = r
    out = []
    for r in latest.values():
        stages = r["stages_s"]
        route = "fused" if "fused" in stages else "staged"
        best = min(v for v in (r.get("gemm_fp32_s"), r.get("gemm_fp64_s"), r.get("screen_s"))
                   if v is not None and not math.isnan(v))
        grown = r.get("buckets_final", r["buckets"])
        grown = "" if grown == r["buckets"] else f" -> {grown}"
        out.append([f"{r['n']} x {r['features']}", _data(r), f"{r['buckets']}{grown} ({route})",
                    _s(r["sketch_s"]), _s(r["total_s"]), "yes" if r["certified"] else "no",
                    f"{r['recall']:.3f}", f"{r['sketch_ratio_arithmetic']:.0f}x"
                    if "sketch_ratio_arithmetic" in r else "-",
                    _s(r.get("gemm_fp64_s")), _s(r.get("gemm_fp32_s")), _s(r.get("screen_s")),
                    f"{best / r['total_s']:.2f}x"])
    return _table(["X (samples x features)", "data", "buckets (auto)", "sketch",
                   "sketch + certified top-k", "certified", "recall",
                   "sketch x transforms' arithmetic", "DGEMM X^T X + top-k",
                   "SGEMM X^T X + top-k", "FP16 screen + verification", "vs fastest exact"], out)


def pagh_mm_cpu(records) -> list[str]:
    """pagh-mm bench --device cpu: every implementation of every case, in the record's order."""
    out = []
    for rec in records:
        for r in rec["rows"]:
            if r.get("skipped"):
                continue
            peak = r.get("peak_mib")
            cm = r.get("sketch_ratios", {}).get("compmatmul-" + r["impl"].split("-")[-1]) \
                if r["impl"].startswith("ours") else None
            best = r.get("ratio_best_peer")
            out.append([r["case"], r["size"], r["impl"], _s(r["sketch_s"]), _s(r["topk_s"]),
                        _s(r["total_s"]), f"{r['recall']:.3f}" if "recall" in r else "n/a",
                        {True: "yes", False: "NO"}.get(r.get("certified"), "-"),
                        "-" if peak is None else f"{peak:.0f}",
                        "-" if cm is None else f"{cm:.3g}x",
                        "-" if best is None else f"{best:.2f}x ({r['best_peer']})"])
    return _table(["case", "size", "implementation", "first stage", "top-k", "total", "recall",
                   "certified", "peak MiB", "first stage vs compmatmul",
                   "total vs fastest other"], out)


def fwht_cpu(records) -> list[str]:
    """fwht bench --device cpu: per dtype and case (the batched rows and single 2^20 / 2^24),
    the three calls with 1 thread and all cores, time and time over its copy."""
    rows = [r for rec in records for r in rec["rows"] if not r.get("skipped")]
    threads = sorted({r["workers"] for r in rows})
    cases = [(r["kind"], r["dtype"], r["batch"], r["log2n"]) for r in rows
             if r["kind"] == "batched" or r["log2n"] in (20, 24)]
    out = []
    for kind, dtype, batch, L in dict.fromkeys(cases):
        cells = [dtype, f"{batch} x 2^{L}" if kind == "batched" else f"2^{L}"]
        for call in ("out", "in-place", "fwht"):
            for w in threads:
                r = _find(rows, "fwht-cpu", kind=kind, dtype=dtype, batch=batch, log2n=L,
                          call=call, workers=w)
                cells.append(f"{_ms(r['time_ms'])} ({r['ratio_copy']:.2f})")
        out.append(cells)
    head = ["dtype", "shape"] + [f"{c}, {w} thr" for c in ("out=", "in place", "fwht(x)")
                                 for w in threads]
    return _table(head, out)


#: name -> (renderer, result files under benchmarks/results/, in the order they are merged)
TABLES = {
    "fwht-single": (fwht_single, ["h200/fwht-bench.json"]),
    "fwht-clusters": (fwht_clusters, ["h100/session23-fwht-clusters.json",
                                      "h200/session23-cluster-rows.json"]),
    "fwht-batched": (fwht_batched, ["h200/fwht-bench.json"]),
    "fwht-variants": (fwht_variants, ["h100/fwht-variants.json"]),
    "pagh-mm": (pagh_mm, ["h100/session5-pagh-bench-after.json",
                          "h100/session5-pagh-bench-32768-r7-after.json"]),
    "pagh-mm-certified": (pagh_mm_certified, ["h200/session44-bench-dense.json",
                                              "h200/session44-bench-65536-fp32.json"]),
    "pagh-mm-sparse": (pagh_mm_sparse, ["h200/session44-bench-sparse.json",
                                        "h200/session44-bench-sparse-1048576.json"]),
    "pagh-mm-gram": (pagh_mm_gram, ["h200/session44-bench-gram-fp64.json",
                                    "h200/session44-bench-gram-fp32.json"]),
    "pagh-mm-cpu": (pagh_mm_cpu, ["cpu-xeon/session12-cpubench.json",
                                  "cpu-xeon/session14-cpubench-scale-262144.json"]),
    "fwht-cpu": (fwht_cpu, ["cpu-xeon/session12-fwht-cpubench.json"]),
}


# --- provenance line and README ------------------------------------------------------------------

def describe(rec: dict) -> str:
    """"<device>, commit <hash>" (or why there is none) of one record."""
    dev = rec["device"]
    name = dev["name"] if dev["name"] != "cpu" else f"CPU ({dev.get('cpu_model')})"
    if rec["commit"]:
        commit = f"commit {rec['commit'][:12]}" + (" with uncommitted changes" if rec["dirty"] else "")
    elif rec["provenance"] != provenance.RECORDED:
        commit = f"commit not recorded ({rec['provenance']})"
    else:
        commit = "commit unknown (not run from a git checkout)"
    return f"{name}, {commit}"


def source_line(paths, records) -> str:
    """The line under a table: which files, device and commit it comes from."""
    files = ", ".join(f"`benchmarks/results/{p}`" for p in paths)
    texts = [describe(rec) for rec in records]
    if len(set(texts)) == 1:
        what = texts[0]
    else:
        what = "; ".join(f"`{p}`: {t}" for p, t in zip(paths, texts))
    return f"<sub>Generated by `benchmarks/tables.py` from {files}: {what}.</sub>"


def render(name: str, results: str = RESULTS) -> str:
    """The text between the markers of table ``name``."""
    fn, paths = TABLES[name]
    records = [provenance.load(os.path.join(results, p)) for p in paths]
    return "\n".join([*fn(records), "", source_line(paths, records)])


def replace_tables(text: str, tables: dict) -> str:
    """``text`` with the body of every ``<!-- table:NAME -->`` block replaced by tables[NAME]."""
    for name, body in tables.items():
        pat = re.compile(rf"(<!-- table:{re.escape(name)} -->\n)(.*?)(\n<!-- /table:{re.escape(name)} -->)",
                         re.DOTALL)
        if len(pat.findall(text)) != 1:
            raise ValueError(f"README.md needs exactly one <!-- table:{name} --> ... "
                             f"<!-- /table:{name} --> block")
        text = pat.sub(lambda m, body=body: m.group(1) + body + m.group(3), text)
    return text


def main(argv=None) -> int:
    """Command line; returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="replace the tables in README.md")
    ap.add_argument("--check", action="store_true", help="exit 1 when README.md is out of date")
    ap.add_argument("--readme", default=README, help="the README to update or check")
    a = ap.parse_args(argv)
    tables = {name: render(name) for name in TABLES}
    if not (a.write or a.check):
        for name, body in tables.items():
            print(f"<!-- table:{name} -->\n{body}\n<!-- /table:{name} -->\n")
        return 0
    with open(a.readme, encoding="utf-8") as f:
        old = f.read()
    new = replace_tables(old, tables)
    if a.check:
        print(f"{a.readme}: {'up to date' if new == old else 'out of date: run with --write'}")
        return 0 if new == old else 1
    if new != old:
        files.atomic_write(a.readme, lambda f: f.write(new.encode("utf-8")))
    print(f"{a.readme}: {'updated' if new != old else 'already up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
