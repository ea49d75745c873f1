"""``fwht bench --device cpu`` (fwht_gpu.cpubench): tiny runs, the record and the command."""
import numpy as np
import pytest
from click.testing import CliRunner

from fwht_gpu import cpu, cpubench, fwht, provenance
from fwht_gpu import dtypes as _dt
from fwht_gpu.cli import main as fwht_main

TIMES = ("time_ms", "time_min_ms", "copy_ms", "copy_min_ms", "rfft_ms", "rfft_min_ms", "gbps",
         "ratio_copy", "ratio_rfft")


def _calls(dtype):
    return ["fwht", "out", "in-place"]


def test_run_tiny_gives_a_record_of_every_case():
    lines = []
    rec = cpubench.run(single=range(4, 7), batched=(5,), batch_bytes=1 << 12, repeats=2,
                       echo=lines.append, command="test")
    assert provenance.validate(rec) is rec
    assert rec["kind"] == cpubench.KIND and rec["device"]["name"] == "cpu"
    assert rec["command"] == "test" and rec["settings"]["repeats"] == 2
    threads = cpubench.worker_counts((1, None))
    assert rec["settings"]["workers"] == threads
    want = []
    for dt in ("fp32", "fp64", "fp16", "bf16"):
        item = {"fp64": 8, "fp32": 4}.get(dt, 2)
        for kind, batch, L in [("single", 1, 4), ("single", 1, 5), ("single", 1, 6),
                               ("batched", (1 << 12) // (32 * item), 5)]:
            want += [(kind, dt, batch, L, w, c) for w in threads for c in _calls(dt)]
    rows = rec["rows"]
    assert [(r["kind"], r["dtype"], r["batch"], r["log2n"], r["workers"], r["call"])
            for r in rows] == want
    for r in rows:
        assert all(r[k] > 0 for k in TIMES), r
        assert r["bytes"] == r["batch"] * r["n"] * {"fp64": 8, "fp32": 4}.get(r["dtype"], 2)
        assert r["rfft_dtype"] == ("fp64" if r["dtype"] == "fp64" else "fp32")
        assert r["time_min_ms"] <= r["time_ms"]
        assert r["ratio_copy"] == pytest.approx(r["time_ms"] / r["copy_ms"])
        assert r["copy_call"] == dict(cpubench.CALLS)[r["call"]]
        assert r["gbps"] == pytest.approx(2 * r["bytes"] / r["time_ms"] / 1e6)
    assert cpubench.HEADER in lines
    assert len([ln for ln in lines if ln.startswith(("single", "batched"))]) == len(rows)


def test_without_fft_rows_have_no_rfft():
    rec = cpubench.run(dtypes=("fp64",), single=(3,), batched=(), workers=(1,), repeats=1,
                       fft=False, echo=lambda s: None)
    assert [r["call"] for r in rec["rows"]] == ["fwht", "out", "in-place"]
    assert not any("rfft_ms" in r for r in rec["rows"])


def test_worker_counts_resolve_and_deduplicate(monkeypatch):
    monkeypatch.setattr(cpu, "cores", lambda: 4)
    assert cpubench.worker_counts((1, None, -1, 2, 4)) == [1, 4, 2]
    with pytest.raises(ValueError):
        cpubench.worker_counts((0,))


def test_inputs_are_normal_numbers():
    for dt in ("fp16", "bf16", "fp32", "fp64"):
        x = cpubench.inputs((2, 1 << 12), dt)
        assert x.shape == (2, 1 << 12) and x.dtype == np.dtype(_dt.resolve(dt))
        tiny = float(np.finfo(np.float16 if dt == "fp16" else np.float32).tiny)
        assert (np.abs(x.astype(np.float64)) >= tiny).mean() > 0.99
        assert np.isfinite(fwht(x)).all()


def run_cli(args):
    r = CliRunner().invoke(fwht_main, [str(a) for a in args])
    return r.exit_code, r.output


def test_cli_bench_on_the_cpu(tmp_path):
    out = tmp_path / "x.json"
    args = ["bench", "--device", "cpu", "--dtype", "fp32", "--dtype", "bf16", "--min-log2n", 4,
            "--max-log2n", 5, "--no-batched", "--workers", 1, "--json", out]
    code, text = run_cli(args)
    assert code == 0, text
    assert cpubench.HEADER in text and f"wrote {out}" in text
    rec = provenance.load(out)
    assert rec["kind"] == cpubench.KIND and rec["settings"]["workers"] == [1]
    assert [(r["dtype"], r["log2n"], r["call"]) for r in rec["rows"]] == [
        (dt, L, c) for dt in ("fp32", "bf16") for L in (4, 5) for c in ("fwht", "out", "in-place")]
    code, text = run_cli(args)
    assert code == 2 and "exists; pass --force" in text
    assert run_cli(args + ["--force", "--no-fft"])[0] == 0
    assert not any("rfft_ms" in r for r in provenance.load(out)["rows"])


@pytest.mark.parametrize("extra, message", [
    (["--no-host"], "--no-host applies to the GPU benchmark only"),
    (["--variants", 20], "--variants applies to the GPU benchmark only"),
    (["--workers", 0], "workers=0"),
    (["--min-log2n", 9, "--max-log2n", 8], "--min-log2n 9 is above --max-log2n 8"),
])
def test_cli_bench_usage_errors(tmp_path, extra, message):
    code, text = run_cli(["bench", "--device", "cpu", "--json", tmp_path / "x.json"] + extra)
    assert code == 2 and message in text, text
    assert not (tmp_path / "x.json").exists()
